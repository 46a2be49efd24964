// The in-memory model: docs/spec/format.md v1 as typed C++ data.
//
// A Graph is built by the loader (core/model_json.h), by generators and builders, or by
// the rewrite. `finalize()` validates it (names, references, arity, acyclicity, shapes,
// finite param values) and fills the derived fields; everything downstream (evaluators,
// analysis, rewrite, engines) takes a finalized Graph.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ops.h"
#include "core/shape.h"

namespace lnv {

enum class DType { float_, index };

struct Input {
  std::string name;
  Shape shape;
  DType dtype = DType::float_;
  int64_t range = 0;  // index inputs: ids in [0, range)
};

struct InitSpec {
  std::string dist = "normal";  // "normal" | "uniform"
  double mean = 0.0, std = 1.0;
  double low = 0.0, high = 1.0;
};

struct FileSpec {
  std::string path;  // as written in the model file, relative to the model's directory
  std::string key;
};

enum class ParamSource { data, init, file };

// Where the values of a param not read yet come from (an `init` param's seeded draws, an
// ONNX initializer's bytes in its file): read() returns them, row-major, or throws
// ModelError naming the param's source (the initializer, the file) when they cannot be
// read or are not finite. Implementations outside core keep their format's headers to
// themselves.
class ValueSource {
 public:
  virtual ~ValueSource() = default;
  virtual std::vector<double> read() const = 0;
};

struct Param {
  std::string name;
  Shape shape;
  std::vector<double> values;  // always materialized (row-major), finite
  ParamSource source = ParamSource::data;  // how it is written back on save
  InitSpec init;
  FileSpec file;
  // Non-empty: the effective value is `values` centered over these (normalized) axes.
  // Set by the inference rewrite so that the exact evaluators center in their own
  // precision; saving materializes the centered values in double (and drops this).
  Axes center_axes;
  // Non-empty: before any centering, the values are multiplied along axis `scale_axis` by
  // these factors (one per index of that axis): a LayerScale γ that the inference rewrite
  // moved into a producer's weight or bias (docs/spec/semantics.md, "LayerScale"), kept
  // apart so that the exact evaluators multiply in their own precision; saving
  // materializes the product. `scale_param` names γ's param.
  std::vector<double> scale;
  int64_t scale_axis = 0;
  std::string scale_param;
  // Set by the loader for a `file` param: param_fingerprint() of it as read (0: none).
  // While the fingerprint still matches, save_model writes the param by reference to its
  // file without re-reading the file; otherwise (or at 0) it compares with the file.
  uint64_t file_fingerprint = 0;
  // Set by load_model with LoadOptions::defer_file_values for a `file` param: `values`
  // stays empty (the file's header, shape and the finiteness of the stored data were
  // checked on load; nothing was converted). Unchanged, such a param is saved by reference;
  // centered, save_model streams it from the file. Everything that needs the values
  // (evaluators, effective_values, param_fingerprint) throws InternalError on it;
  // materialize_values() (core/model_json.h) reads them and clears the flag.
  // With `lazy` set (LoadOptions::defer_values, an ONNX import with deferred values) the
  // param may be of any source: materialize_values reads `lazy` instead of a file.
  bool values_deferred = false;
  std::shared_ptr<const ValueSource> lazy;
  // The significand bits of the float type the values are stored in (53: double, the
  // default and a model.json's inline data; a safetensors F32 file or an ONNX FLOAT
  // initializer 24, F16 11, BF16 8). `equiv` allows what rounding weights to it can cause.
  int stored_bits = 53;
};

// The norm inside an `rnn` (a LayerNorm over H, or an RMSNorm after a rewrite).
struct RnnNorm {
  Op kind = Op::layer_norm;  // layer_norm | rms_norm
  double eps = 1e-5;
  std::string weight, bias;  // param names, empty when absent
};

struct Node {
  std::string name;
  Op op = Op::add;
  std::vector<std::string> inputs;

  // Params named by attributes (empty string: absent).
  std::string weight, bias;                    // linear, conv*, embedding, norms; rnn bias
  std::string weight_ih, weight_hh;            // rnn
  std::string wq, wk, wv, wo, bq, bk, bv, bo;  // attention
  bool cbwc = false;

  Axes axes;              // mean, max, center, layer_norm, rms_norm (as written)
  bool keepdims = false;  // mean, max
  double eps = 1e-5;      // layer_norm, rms_norm
  double factor = 1.0;    // scale
  double p = 0.0;         // dropout
  double alpha = 0.2, beta = 0.5;  // hard_sigmoid: max(0, min(1, alpha x + beta))
  // clip: min(max(x, min), max); absent (infinite) bounds are not written
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  int64_t axis = 0;       // softmax, concat (as written, may be negative)
  std::vector<int64_t> perm;  // transpose
  // slice (with `axes`): ONNX Slice's starts, ends and steps (empty steps: all 1)
  std::vector<int64_t> starts, ends, steps;
  // reshape target (one entry may be -1); opaque: its output shape; expand: the shape its
  // input is broadcast with (ONNX Expand)
  Shape shape;
  // pad: ONNX's pads (every axis' begin count, then every axis' end count) and fill value
  std::vector<int64_t> pads;
  double value = 0.0;
  // where, softmax: the constant condition (0 or 1 per element, row-major) and its shape
  std::vector<int64_t> condition;
  Shape condition_shape;
  // conv: one entry (applies to every spatial axis) or one per spatial axis.
  std::vector<int64_t> stride{1}, padding{0}, dilation{1};
  int64_t groups = 1;
  int64_t heads = 1;  // attention
  bool causal = false;
  bool transpose_b = false;  // matmul
  std::string activation = "tanh";  // rnn
  std::optional<RnnNorm> norm;      // rnn
  // lstm, gru (docs/spec/format.md): ONNX's attributes
  std::string initial_h, initial_c;      // params [D, N, H], empty: zeros
  std::string direction = "forward";     // forward | reverse | bidirectional
  std::vector<int64_t> sequence_lens;    // one length per batch entry; empty: all T
  std::string output = "y";              // y | y_h | y_c (lstm)
  bool linear_before_reset = false;      // gru
  std::string op_type;              // opaque: the source op's name ("TopK", "com.microsoft.Foo")

  // Every (attribute name, param name) this node references, in a fixed order.
  std::vector<std::pair<std::string, std::string>> param_attrs() const;
};

// Where a name points.
struct ValueRef {
  enum class Kind : uint8_t { input, param, node } kind = Kind::node;
  int32_t index = -1;
  bool operator==(const ValueRef&) const = default;
};

class Graph {
 public:
  // --- the model, as in docs/spec/format.md ---
  std::string name;
  uint64_t seed = 0;
  // `meta`, free-form, as compact JSON text ("" when absent): parsed only where it is read,
  // so that this header does without nlohmann/json.hpp.
  std::string meta;
  std::vector<Input> inputs;
  std::vector<Param> params;
  std::vector<Node> nodes;  // in file order
  std::vector<std::string> outputs;
  std::string base_dir;  // directory of the model file, for `file` params ("" = cwd)
  // Producers whose weights the model's source file holds inside a fused op (an ONNX
  // Runtime Attention's packed projections): the file has no Gemm or MatMul of their own,
  // so a moved bias does not go into them (plan_bias_moves). Set by the ONNX importer; not
  // part of model.json.
  std::vector<std::string> fused_producers;
  // Norms the source file computes inside a fused op that the fold keeps, with the norm's
  // bias as its own input (ONNX Runtime's EmbedLayerNormalization): their bias stays
  // (plan_bias_moves). Set by the ONNX importer; not part of model.json.
  std::vector<std::string> fused_norms;

  // Validates the graph and fills the derived fields below. Throws ModelError naming
  // the JSON path ("/nodes/3/inputs/1") or the node.
  void finalize();
  bool finalized() const { return finalized_; }

  // --- derived by finalize() ---
  const ValueRef& ref(const std::string& name) const;  // throws ModelError if unknown
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  int param_index(const std::string& name) const;  // -1 for "" ; throws if not a param
  int node_index(const std::string& name) const;   // throws if not a node
  const Shape& shape_of(const ValueRef& r) const;
  const Shape& shape_of(const std::string& name) const { return shape_of(ref(name)); }

  std::vector<int32_t> order;                       // node indices, topological
  std::vector<std::vector<ValueRef>> node_inputs;   // per node, its inputs resolved
  std::vector<Shape> node_shapes;                   // per node, inferred output shape
  std::vector<ValueRef> output_refs;                // per graph output
  std::vector<std::vector<int32_t>> consumers;      // per node: nodes reading it

 private:
  bool finalized_ = false;
  std::unordered_map<std::string, ValueRef> index_;
};

// Shape rule of one node given its resolved input shapes (core/shape_infer.cpp). Throws
// ModelError naming the node and what was expected.
Shape infer_shape(const Graph& g, const Node& node, const std::vector<Shape>& input_shapes);

// CBWC (docs/spec/format.md, `cbwc`): the axis of a param attribute's own shape that indexes
// the producer's output features — axis 0 of a linear/conv weight and bias, of an rnn's
// weight_ih/weight_hh/bias and of an attention's wo/bo; axis 1 of an embedding table —
// or -1 for an attribute CBWC leaves alone. Does not look at `cbwc` itself.
int64_t cbwc_attr_axis(Op op, const std::string& attr);

// A matmul's CBWC centers its param operand: b (operand 1) over its last axis (the
// second-last with transpose_b) when b is a param, else a (operand 0) over its
// second-last axis. Throws ModelError when neither operand is a param.
struct MatmulCentering {
  int operand = -1;
  int64_t axis = -1;
};
MatmulCentering cbwc_matmul_operand(const Graph& g, int32_t node);

// A slice (ONNX semantics) per input axis: the first index taken, the step between taken
// indices and how many are taken. An axis the slice does not name takes all of it.
struct SliceAxis {
  int64_t start = 0, step = 1, count = 0;
  bool whole(int64_t dim) const { return start == 0 && step == 1 && count == dim; }
};
// The layout of slice node `n` on an input of shape `in`: negative starts and ends count
// from the end, then starts and ends are clamped to the axis (ONNX Slice). Throws
// ModelError at `where` for mismatched lists, a repeated axis, a zero step or a slice
// that takes no element.
std::vector<SliceAxis> slice_layout(const Node& n, const Shape& in, const std::string& where);

// A constant-mode pad per input axis: how many `value` elements go before and after it.
struct PadAxis {
  int64_t before = 0, after = 0;
  bool none() const { return before == 0 && after == 0; }
};
// The layout of pad node `n` on an input of shape `in` (ONNX's pads: every axis' begin
// count, then every axis' end count). Throws ModelError at `where` for a list that is not
// 2 entries per axis, a negative entry, an entry above 2^31 or a non-finite value.
std::vector<PadAxis> pad_layout(const Node& n, const Shape& in, const std::string& where);

// Checks a where node's condition: `condition_shape` is a shape of at most 2^31 elements and
// `condition` holds one 0 or 1 per element. Throws ModelError at `where`.
void check_where_condition(const Node& n, const std::string& where);
// Whether softmax node `n` has a mask (a condition: the positions it keeps; the others get
// probability 0, as an additive mask of -inf gives them).
inline bool is_masked_softmax(const Node& n) {
  return n.op == Op::softmax && !(n.condition.empty() && n.condition_shape.empty());
}

// Effective value of a param: its values, multiplied by `scale` along `scale_axis` and
// then centered over `center_axes`, each when set.
std::vector<double> effective_values(const Param& p);
// A param's values multiplied by its `scale` (its values when it has none).
std::vector<double> scaled_values(const Param& p);

}  // namespace lnv
