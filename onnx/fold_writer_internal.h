// Private to the fold writer of onnx/fold_writer.h (its files onnx/fold_writer.cpp and
// onnx/fold_write_*.cpp; includes ONNX's protobuf types): the FoldWriter that carries the fold of
// the imported graph back onto the original ModelProto, and the protobuf helpers its files
// share. Each section of the class is defined in its own file:
//   fold_writer.cpp                the driver: construction, the graph's index, run(), the
//                                  paths it refuses, and the public functions of fold_writer.h
//   fold_write_opset.cpp           the opset: raised to 23 for --rms-op onnx23
//   fold_write_initializers.cpp    new initializers, and centered or copied data stored
//   fold_write_centering.cpp       centered params mapped back to initializers (inference)
//   fold_write_layer_scale.cpp     folded LayerScales
//   fold_write_biases.cpp          moved norm biases
//   fold_write_training.cpp        centering computed by new nodes (training)
//   fold_write_norms.cpp           each folded norm replaced by an RMSNorm as --rms-op spells it
//   fold_write_output.cpp          writing the model, its side file and copied external data
//
// What changes, found by comparing the imported graph with its fold:
// - a param the fold centered (Param::center_axes) or zeroed (a removed term), or an untied
//   copy "<param>.centered": its uses are mapped back to the ONNX node inputs that read the
//   param's initializer (lnv node names are the file's, plus a ".suffix" for expanded nodes;
//   a norm's through meta.onnx.norms). When every reader of the initializer wants the same
//   centering, its data is replaced under its name; otherwise a centered copy is added and
//   only the readers that want it are rewired.
// - a centered constant the importer folded out of a lookup (GPT-2's wpe[positions], a
//   class token expanded by batch): the file has no initializer for it, and its value holds
//   only at the bound dims. Centering commutes with the Gather (axis 0), Slice, Expand,
//   Reshape, Unsqueeze, Squeeze or Identity chain that made it when the centered axes are trailing
//   and keep their dims, so the table at the chain's start is centered instead.
// - each folded norm: the ONNX nodes meta.onnx.norms lists are replaced, where the last of
//   them stood, by an RMSNorm spelled as --rms-op says, reading the first node's input and
//   writing the last node's output.
// - each moved bias (moved_bias_readers: a folded norm whose bias its readers take): the
//   reader's ONNX node (a Gemm or a MatMul) adds R0(beta) = W·beta (beta itself for a
//   producer a residual add sums with the norm): inference stores it in
//   the bias it adds anyway (the Gemm's C, the initializer of the Add after a MatMul; in
//   place when only that node reads it, else in a copy), or in a new bias (a Gemm's new C,
//   an Add after a MatMul: a tied head); training computes it in the graph from the stored
//   beta and W and adds it to that bias (or after the reader).
// - training (FoldWriteOptions::mode): no initializer changes. Every use the inference
//   writer would point at centered data (in place or a copy; a norm's changed param; a
//   lookup table) reads instead "<W>.centered" = Sub(W, ReduceMean(W, axes, keepdims=1)),
//   or for a removed term "<W>.zero", the same Sub over W's size-1 axes (W minus itself,
//   so W stays a parameter of the graph), computed by new nodes placed before the first
//   reader.
// - a folded LayerScale (docs/spec/semantics.md, "LayerScale"): its producer's weight and
//   biases carry γ (Param::scale): inference stores C·diag(γ)·W, training computes
//   Sub(Mul(W, γ'), ReduceMean(...)) from the stored W and γ (γ' γ reshaped along W's
//   feature axis); the Mul by γ becomes an Identity with the same output, and γ's
//   initializer goes when nothing reads it any more.
#pragma once

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "core/shape.h"
#include "core/stream_center.h"
#include "onnx/float_formats.h"
#include "onnx/fold_writer.h"
#include "onnx/spellings.h"
#include "onnx/wire_format.h"

namespace lnv::onnx_import::fold_write {

namespace fs = std::filesystem;
namespace ox = ::onnx;

const char* fused_rms_op(RmsOp r);

constexpr int64_t kRmsOpset = 23;    // RMSNormalization's opset
constexpr int64_t kKnownOpset = 17;  // the newest opset ONNX 1.12's own registry knows
constexpr size_t kSideAlign = 64;    // offsets of tensors in the side file

std::string in_quotes(const std::string& s);

ox::ModelProto parse_model(const fs::path& path);

ox::ModelProto parse_model_leaving_data(const fs::path& path, uint64_t min_bytes,
                                        std::map<std::string, StoredData>& in_file);

std::string external_key(const ox::TensorProto& t, const std::string& key);

bool is_external(const ox::TensorProto& t);

size_t elem_bytes(int32_t type);

int64_t numel_of(const ox::TensorProto& t);

std::vector<double> decode_floats(const ox::TensorProto& t, const fs::path& model_dir);

std::string encode_floats(const std::vector<double>& values, int32_t type);

std::vector<double> centered_values(std::vector<double> v, const Shape& shape, const Axes& axes,
                                    bool remove);

// What one centered use wants: the param of the fold it reads.
struct Centering {
  Axes axes;
  bool remove = false;
  // A LayerScale moved into the weight: multiplied by `scale` along `scale_axis` first,
  // `scale_param` naming γ (Param::scale).
  std::vector<double> scale;
  int64_t scale_axis = 0;
  std::string scale_param;
  bool operator==(const Centering&) const = default;
};

struct Slot {
  int node;  // index into the original graph's nodes
  int input;
  bool operator<(const Slot& o) const { return std::tie(node, input) < std::tie(o.node, o.input); }
};

class FoldWriter {
 public:
  FoldWriter(const fs::path& source, const ImportedParams& original, const lnv::Graph& folded,
             const std::vector<std::string>& folded_norms, const fs::path& out,
             const FoldWriteOptions& options);
  FoldWriteSummary run();

 private:
  fs::path source_;
  const ImportedParams& g_;
  const lnv::Graph& f_;
  fs::path out_;
  FoldWriteOptions options_;
  fs::path model_dir_;
  // Initializers of a single-file input whose raw_data stays in the input (by name: offset
  // and length there); mp_ holds each as external data at the input's own name.
  std::map<std::string, StoredData> in_file_;
  ox::ModelProto mp_;
  FoldWriteSummary summary_;
  std::map<std::string, std::string> renamed_;
  std::map<std::string, std::vector<std::string>> norms_;
  std::set<std::string> folded_norms_;
  UniqueNames names_;  // every value and node name of the graph, for fresh()
  std::unordered_map<std::string, int> producer_;
  std::unordered_map<std::string, std::vector<Slot>> readers_;
  std::unordered_map<std::string, int> initializer_;
  std::set<int> removed_;  // nodes of replaced norms
  std::set<std::string> changed_in_place_;  // initializers whose data was replaced
  std::map<int, std::vector<ox::NodeProto>> inserted_;  // new nodes, placed before node k
  std::vector<ox::TensorProto> new_initializers_;
  // The side file, written as each tensor is centered (never held whole in memory).
  std::unique_ptr<AtomicFileWriter> side_;
  size_t side_size_ = 0;
  std::vector<fs::path> input_data_files_;
  // The data of inline initializers that write() streams into the output (by name): an
  // in_file_ tensor copied, or a centered one computed chunk by chunk as it is written.
  using ByteSink = std::function<void(const char*, size_t)>;
  struct Streamed {
    uint64_t size = 0;
    std::function<void(const ByteSink&)> emit;  // owns what it reads; empty: a copy
    int64_t offset = 0;  // a copy: of the input's bytes at offset .. offset + size
  };
  std::map<std::string, Streamed> streamed_;
  bool in_file(const ox::TensorProto& t) const;
  std::string file_name(const std::string& lnv_name) const;
  std::string fresh(const std::string& base);
  void index_graph();
  bool is_graph_output(const std::string& v) const;
  std::string node_label(int i) const;

  // --- paths -------------------------------------------------------------------------
  std::vector<fs::path> input_data_files() const;
  static bool same_path(const fs::path& a, const fs::path& b);
  fs::path side_path() const;
  bool out_beside_input() const;
  void refuse_overwrites() const;

  // --- opset --------------------------------------------------------------------------
  int64_t default_opset() const;
  static bool same_meaning(const std::string& op, int64_t opset);
  void prepare_opset();
  void move_reduce_axes(ox::NodeProto& n);

  // --- new initializers and stored data ---------------------------------------------
  std::string int64_initializer(const std::string& base, const std::vector<int64_t>& values);
  std::string float_initializer(const std::string& base, const Shape& dims,
                                const std::vector<double>& values, int32_t type,
                                bool was_external = false);
  bool uses_external_data() const;
  std::string centered_initializer(const std::string& base, const Shape& dims,
                                   const ox::TensorProto& src, const Shape& shape, const Centering& c);
  void store_centered(ox::TensorProto& t, const ox::TensorProto& src, const Shape& shape,
                      const Axes& axes, bool remove, bool was_external = false);
  void store_scaled_centered(ox::TensorProto& t, const ox::TensorProto& src, const Shape& shape,
                             const Centering& c, bool was_external = false);
  void store(ox::TensorProto& t, const std::vector<double>& values, bool was_external = false);
  void store_bytes(ox::TensorProto& t, size_t nbytes, const std::function<void(const ByteSink&)>& emit,
                   bool was_external);

  // --- centered params ------------------------------------------------------------------
  static bool all_zero(const std::vector<double>& v);
  std::optional<Centering> change_of(const Param& p) const;
  std::string origin_param(const std::string& name) const;
  std::vector<Slot> slots_of(const std::string& lnv_node, const std::string& value) const;
  void center_params();
  int32_t type_of_initializer(const std::string& name) const;
  void center_initializer(const std::string& value, const std::map<Slot, std::string>& slots,
                          const std::map<std::string, Centering>& centering);
  void center_lookup(const std::string& value, const std::map<Slot, std::string>& slots,
                     const std::map<std::string, Centering>& centering);

  // --- LayerScale ----------------------------------------------------------------------
  void replace_layer_scales();

  // --- moved biases -------------------------------------------------------------------
  std::vector<double> fold_values(const std::string& name) const;
  int reader_node(const std::string& reader) const;
  std::string moved_beta(const lnv::Node& image) const;
  std::vector<double> moved_term(const lnv::Node& image, const std::string& beta) const;
  const lnv::Node* fold_node_of(int i) const;
  void store_bias(int i, int k, const std::vector<double>& values);
  bool bias_input(int i, int k, int64_t count) const;
  void move_biases();
  static double gemm_attr(const ox::NodeProto& n, const char* name);
  std::optional<std::pair<int, int>> bias_add_after(int i, int64_t count) const;
  void add_after(int i, const std::string& term);
  void move_bias_in_graph(int i, const lnv::Node& image, const std::string& beta);

  // --- centering in the graph (training) -----------------------------------------------
  bool training() const;
  std::string center_in_graph(const std::string& init, const Param& p, const Centering& c, int before);
  std::string scale_in_graph(const std::string& init, const Centering& c, int before);
  bool center_rows_gathered(const Slot& s, const Param& p, const Axes& axes);
  void center_lookup_result(const std::string& value, const std::map<Slot, std::string>& slots,
                            const Param& p, const Centering& c);
  std::string center_nodes(const std::string& init, Axes axes, bool remove, int before);
  std::string center_nodes(const std::string& init, Axes axes, bool remove, int before,
                           const Shape& dims, int32_t type);
  std::string center_value(const std::string& v, const Axes& axes, int before,
                           ox::ValueInfoProto like, bool remove = false);

  // --- norms ---------------------------------------------------------------------------
  bool removed_by_norm(int node) const;
  bool read_as_stored_by_a_norm(const std::string& value) const;
  std::set<int> norm_nodes_;  // filled before center_params by collect_norm_nodes
  int node_by_label(const std::string& label) const;
  std::vector<int> norm_node_indices(const std::string& norm) const;

 public:
  void collect_norm_nodes();

 private:
  std::optional<ox::ValueInfoProto> inferred(const std::string& value);
  std::optional<std::map<std::string, ox::ValueInfoProto>> inferred_;
  int32_t float_type_of(const std::string& value, const Param* weight);
  void declare_like(const std::string& value, const std::string& x);
  ox::NodeProto make_node(const std::string& base, const std::string& op,
                          std::vector<std::string> inputs, const std::string& output);
  ox::NodeProto reduce_mean(const std::string& base, const std::string& input,
                            const std::vector<int64_t>& axes, const std::string& output);
  std::string norm_param(const std::string& base, const char* what, const Param& p, int32_t type,
                         int at);
  void replace_norms();
  void replace_skip_norm(const std::string& norm, int i, const lnv::Node& fn);
  void replace_embed_norm(const std::string& norm, int i, const lnv::Node& fn);

  // --- the residual add fused into the RMSNorm (--rms-op ort-skip) ------------------------
  // x = Add(input, skip) (or Add(input, Add(skip, bias)) with a 1-D constant bias of the
  // features, the formats ONNX Runtime's SkipLayerNormFusion takes for LayerNormalization).
  struct ResidualAdd {
    int add = -1, bias_add = -1;
    std::string input, skip, bias;
  };
  bool same_shape(const std::string& a, const std::string& b);
  bool same_shape_bound(int i) const;
  bool is_default_add(int i) const;
  std::optional<ResidualAdd> residual_add(const std::string& x, int64_t features);
  const ox::TensorProto* initializer_of(const std::string& name) const;
  std::vector<ox::NodeProto> skip_rms_nodes(const std::string& base, const ResidualAdd& r,
                                            const std::string& x, const std::string& y, double eps,
                                            const Param* weight, const Param* bias, int32_t type);
  void ensure_ms_opset();
  std::vector<ox::NodeProto> rms_nodes(const std::string& base, const std::string& x,
                                       const std::string& y, const std::vector<int64_t>& axes,
                                       double eps, const Param* weight, const Param* bias,
                                       int32_t type, int at);

  // --- writing --------------------------------------------------------------------------
  void write();
  void write_model(AtomicFileWriter& to);
  void drop_norm_constants();
  // Bytes of external data copied so far, of all the files to copy.
  struct Copied {
    uint64_t done = 0, total = 0;
  };
  static uint64_t file_size_of(const fs::path& f);
  void copy_into(const fs::path& from, AtomicFileWriter& to, Copied& copied) const;
};

}  // namespace lnv::onnx_import::fold_write
