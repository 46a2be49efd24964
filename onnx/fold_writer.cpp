// write_folded_onnx (onnx/fold_writer.h): the fold of the imported graph carried back onto
// the original ModelProto.
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
//   reader's ONNX node (a Gemm or a MatMul) adds R0(beta) = W·beta: inference stores it in
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
#include "onnx/fold_writer.h"

#include <onnx/checker.h>
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

#include <nlohmann/json.hpp>

#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "core/shape.h"
#include "core/stream_center.h"
#include "onnx/float_formats.h"
#include "onnx/newer_opsets.h"
#include "onnx/shape_inference.h"
#include "onnx/spellings.h"
#include "onnx/wire_format.h"

namespace lnv::onnx_import {
namespace {

namespace fs = std::filesystem;
namespace ox = ::onnx;

// The one node `--rms-op` writes for an RMSNorm (onnx/ops.def, LNV_ONNX_RMS_FUSED);
// nullptr for the decomposed spelling.
const char* fused_rms_op(RmsOp r) {
  switch (r) {
#define LNV_ONNX_RMS_FUSED(rms_op, OnnxOp) case RmsOp::rms_op: return #OnnxOp;
#include "onnx/ops.def"
    case RmsOp::decomposed: break;
  }
  return nullptr;
}

constexpr int64_t kRmsOpset = 23;    // RMSNormalization's opset
constexpr int64_t kKnownOpset = 17;  // the newest opset ONNX 1.12's own registry knows
constexpr size_t kSideAlign = 64;    // offsets of tensors in the side file

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }


ox::ModelProto parse_model(const fs::path& path) {
  const std::string bytes = read_onnx_bytes(path);
  ox::ModelProto mp;
  if (!mp.ParseFromString(bytes))
    throw ModelError(path.string(), "not an ONNX model: the bytes do not parse as a ModelProto");
  return mp;
}

// The model without the raw_data of its main-graph initializers of `min_bytes` or more:
// each says external data at its raw_data's place in the file itself, and `in_file`
// records it by name (strip_raw_data). Only those tensors' headers are read.
ox::ModelProto parse_model_leaving_data(const fs::path& path, uint64_t min_bytes,
                                        std::map<std::string, StoredData>& in_file) {
  const MappedFile mapped(path);
  const std::optional<std::string> stripped =
      strip_raw_data(mapped, path.filename().string(), in_file, min_bytes);
  const std::string_view bytes = stripped ? std::string_view(*stripped)
                                          : std::string_view(mapped.data(), mapped.size());
  ox::ModelProto mp;
  if (!mp.ParseFromArray(bytes.data(), int(bytes.size())))
    throw ModelError(path.string(), "not an ONNX model: the bytes do not parse as a ModelProto");
  return mp;
}

std::string external_key(const ox::TensorProto& t, const std::string& key) {
  for (const auto& kv : t.external_data())
    if (kv.key() == key) return kv.value();
  return "";
}

bool is_external(const ox::TensorProto& t) { return t.data_location() == ox::TensorProto::EXTERNAL; }

size_t elem_bytes(int32_t type) {
  switch (type) {
    case ox::TensorProto::FLOAT: return 4;
    case ox::TensorProto::DOUBLE: return 8;
    case ox::TensorProto::FLOAT16:
    case ox::TensorProto::BFLOAT16: return 2;
    default: return 0;
  }
}

int64_t numel_of(const ox::TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims()) n *= d;
  return n;
}

// The values of float tensor `t` (raw, typed fields or external data beside the model).
std::vector<double> decode_floats(const ox::TensorProto& t, const fs::path& model_dir) {
  const std::string where = "initializer " + in_quotes(t.name());
  const size_t width = elem_bytes(t.data_type());
  if (width == 0) throw ModelError(where, "is not a float tensor");
  const int64_t n = numel_of(t);
  std::string raw;
  if (is_external(t)) {
    const std::string off = external_key(t, "offset");
    std::ifstream in(model_dir / external_key(t, "location"), std::ios::binary);
    raw.assign(size_t(n) * width, '\0');
    in.seekg(off.empty() ? 0 : std::stoll(off));
    in.read(raw.data(), std::streamsize(raw.size()));
    if (!in) throw ModelError(where, "its external data cannot be read");
  } else if (t.has_raw_data()) {
    raw = t.raw_data();
  }
  std::vector<double> v(static_cast<size_t>(n));
  if (!raw.empty() || n == 0) {
    if (raw.size() != size_t(n) * width) throw ModelError(where, "raw data of the wrong length");
    for (int64_t k = 0; k < n; ++k) {
      const char* p = raw.data() + k * int64_t(width);
      if (width == 4) { float f; std::memcpy(&f, p, 4); v[k] = f; }
      else if (width == 8) { std::memcpy(&v[k], p, 8); }
      else {
        uint16_t h; std::memcpy(&h, p, 2);
        v[k] = t.data_type() == ox::TensorProto::FLOAT16 ? half_bits_to_double(h)
                                                         : bfloat16_bits_to_double(h);
      }
    }
    return v;
  }
  for (int64_t k = 0; k < n; ++k) {
    if (t.data_type() == ox::TensorProto::FLOAT) v[k] = t.float_data(int(k));
    else if (t.data_type() == ox::TensorProto::DOUBLE) v[k] = t.double_data(int(k));
    else {
      const auto h = uint16_t(t.int32_data(int(k)));
      v[k] = t.data_type() == ox::TensorProto::FLOAT16 ? half_bits_to_double(h)
                                                       : bfloat16_bits_to_double(h);
    }
  }
  return v;
}

// `values` rounded to `type` and laid out little-endian.
std::string encode_floats(const std::vector<double>& values, int32_t type) {
  const size_t width = elem_bytes(type);
  std::string out(values.size() * width, '\0');
  for (size_t k = 0; k < values.size(); ++k) {
    char* p = out.data() + k * width;
    if (type == ox::TensorProto::FLOAT) { const float f = float(values[k]); std::memcpy(p, &f, 4); }
    else if (type == ox::TensorProto::DOUBLE) std::memcpy(p, &values[k], 8);
    else {
      const uint16_t h = type == ox::TensorProto::FLOAT16 ? double_to_half_bits(values[k])
                                                          : double_to_bfloat16_bits(values[k]);
      std::memcpy(p, &h, 2);
    }
  }
  return out;
}

// `v` (row-major, `shape`) centered over `axes`, or zeroed.
std::vector<double> centered_values(std::vector<double> v, const Shape& shape, const Axes& axes,
                                    bool remove) {
  if (remove) {
    std::fill(v.begin(), v.end(), 0.0);
    return v;
  }
  Param p;
  p.shape = shape;
  p.values = std::move(v);
  p.center_axes = axes;
  return effective_values(p);
}

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
             const FoldWriteOptions& options)
      : source_(source), g_(original), f_(folded), out_(out), options_(options),
        model_dir_(source.parent_path().empty() ? fs::path(".") : source.parent_path()),
        mp_(parse_model_leaving_data(source, options.stream_min_bytes, in_file_)) {
    const nlohmann::json meta = nlohmann::json::parse(f_.meta.empty() ? "{}" : f_.meta);
    if (!meta.contains("onnx"))
      throw InternalError("write_folded_onnx: the graph was not imported from ONNX");
    for (const auto& [lnv_name, file_name] : meta.at("onnx").at("renamed").items())
      renamed_[lnv_name] = file_name.get<std::string>();
    for (const auto& [lnv_name, nodes] : meta.at("onnx").at("norms").items())
      norms_[lnv_name] = nodes.get<std::vector<std::string>>();
    for (const std::string& n : folded_norms) folded_norms_.insert(n);
    index_graph();
  }

  FoldWriteSummary run() {
    refuse_overwrites();
    prepare_opset();
    center_params();
    replace_layer_scales();
    move_biases();
    replace_norms();
    write();
    return summary_;
  }

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

  bool in_file(const ox::TensorProto& t) const {
    return is_external(t) && in_file_.count(t.name()) &&
           external_key(t, "location") == source_.filename().string();
  }

  std::string file_name(const std::string& lnv_name) const {
    auto it = renamed_.find(lnv_name);
    if (it != renamed_.end()) return it->second;
    // A moved bias' nodes (moved_bias_own) are named after their reader.
    for (const std::string& suffix : {moved_bias_own(""), moved_bias_image("") + ".row", moved_bias_image("")})
      if (lnv_name.size() > suffix.size() &&
          lnv_name.compare(lnv_name.size() - suffix.size(), suffix.size(), suffix) == 0)
        return file_name(lnv_name.substr(0, lnv_name.size() - suffix.size())) + suffix;
    return lnv_name;
  }

  std::string fresh(const std::string& base) { return names_.fresh(base); }

  void index_graph() {
    const auto& g = mp_.graph();
    for (int i = 0; i < g.initializer_size(); ++i) {
      initializer_[g.initializer(i).name()] = i;
      names_.take(g.initializer(i).name());
    }
    for (const auto& v : g.input()) names_.take(v.name());
    std::set<fs::path> files;
    for (const auto& t : g.initializer())
      if (is_external(t) && !in_file(t)) files.insert(model_dir_ / external_key(t, "location"));
    input_data_files_.assign(files.begin(), files.end());
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      names_.take(n.name());
      for (const auto& o : n.output()) {
        producer_[o] = i;
        names_.take(o);
      }
      for (int k = 0; k < n.input_size(); ++k)
        if (!n.input(k).empty()) readers_[n.input(k)].push_back({i, k});
    }
  }

  bool is_graph_output(const std::string& v) const {
    for (const auto& o : mp_.graph().output())
      if (o.name() == v) return true;
    return false;
  }

  std::string node_label(int i) const {
    const auto& n = mp_.graph().node(i);
    return "node " + in_quotes(n.name().empty() ? "#" + std::to_string(i) : n.name()) + " (" +
           n.op_type() + ")";
  }

  // --- paths -------------------------------------------------------------------------

  std::vector<fs::path> input_data_files() const { return input_data_files_; }

  static bool same_path(const fs::path& a, const fs::path& b) {
    std::error_code ec;
    if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
    return fs::weakly_canonical(fs::absolute(a), ec) == fs::weakly_canonical(fs::absolute(b), ec);
  }

  fs::path side_path() const { return fs::path(out_.string() + ".data"); }
  bool out_beside_input() const {
    const fs::path od = out_.parent_path().empty() ? fs::path(".") : out_.parent_path();
    return same_path(od, model_dir_);
  }

  void refuse_overwrites() const {
    if (same_path(out_, source_))
      throw ModelError(out_.string(), "refusing to overwrite the input model; choose another -o path");
    for (const fs::path& f : input_data_files()) {
      if (same_path(out_, f))
        throw ModelError(out_.string(), "refusing to overwrite the external data file " +
                                            f.string() + " the input model reads; choose another -o path");
      if (same_path(side_path(), f))
        throw ModelError(side_path().string(), "the output's data file would overwrite the "
                                               "external data file the input model reads; choose another -o path");
    }
    if (same_path(side_path(), source_))
      throw ModelError(side_path().string(), "the output's data file would overwrite the input model");
  }

  // --- opset --------------------------------------------------------------------------

  int64_t default_opset() const {
    for (const auto& o : mp_.opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
    return 0;
  }

  // onnx23 on an older model: raise the default-domain opset to 23 when every op of the
  // graph means the same there. Between the model's opset and 17 (ONNX 1.12's registry
  // knows both schemas) an op is refused when its signature changed: an input renamed,
  // moved or added as required, or an attribute dropped (Split's `split`, Squeeze's `axes`,
  // Slice's and Clip's attributes becoming inputs); a change of the types only (bfloat16)
  // or an added optional attribute keeps its meaning. Softmax, LogSoftmax and Hardmax
  // changed meaning at 13 without a signature change (one axis instead of a 2-D
  // coercion). From 18 to 23 only the reductions' `axes` (an attribute before 18, an
  // input from 18) matter to a float graph: those attributes move into int64 initializers.
  static bool same_meaning(const std::string& op, int64_t opset) {
    static const std::set<std::string> axis_semantics = {"Softmax", "LogSoftmax", "Hardmax"};
    if (axis_semantics.count(op) && opset < 13) return false;
    const auto* from = ox::OpSchemaRegistry::Schema(op, int(std::min(opset, kKnownOpset)), "");
    const auto* to = ox::OpSchemaRegistry::Schema(op, int(kKnownOpset), "");
    if (!from || !to || from->SinceVersion() == to->SinceVersion()) return true;
    const bool reduction = op.rfind("Reduce", 0) == 0;
    const auto& a = from->inputs();
    const auto& b = to->inputs();
    for (size_t k = 0; k < b.size(); ++k) {
      if (k < a.size() && a[k].GetName() != b[k].GetName()) return false;
      if (k >= a.size() && b[k].GetOption() == ox::OpSchema::Single &&
          !(reduction && b[k].GetName() == "axes"))
        return false;
    }
    if (a.size() > b.size()) return false;
    for (const auto& [name, attr] : from->attributes())
      if (!to->attributes().count(name) && !(reduction && name == "axes")) return false;
    return true;
  }

  void prepare_opset() {
    if (options_.rms_op != RmsOp::onnx23) return;
    const int64_t opset = default_opset();
    if (opset >= kRmsOpset) return;
    if (options_.keep_opset)
      throw ModelError(source_.string(), "--rms-op onnx23 needs opset 23 (RMSNormalization); the "
                                         "model imports opset " + std::to_string(opset) +
                                         " and --keep-opset forbids raising it");
    std::set<std::string> changed;
    for (const auto& n : mp_.graph().node()) {
      if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
      if (!same_meaning(n.op_type(), opset)) changed.insert(n.op_type());
      for (const auto& a : n.attribute())
        if (a.type() == ox::AttributeProto::GRAPH || a.type() == ox::AttributeProto::GRAPHS)
          changed.insert(n.op_type() + " (a subgraph)");
    }
    if (!changed.empty()) {
      std::string list;
      for (const auto& c : changed) list += (list.empty() ? "" : ", ") + c;
      throw ModelError(source_.string(), "--rms-op onnx23 raises the opset from " +
                                             std::to_string(opset) + " to 23, where these ops "
                                             "are defined differently: " + list +
                                             "; use --rms-op decomposed or ort");
    }
    for (auto& n : *mp_.mutable_graph()->mutable_node()) move_reduce_axes(n);
    for (auto& o : *mp_.mutable_opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx") o.set_version(kRmsOpset);
  }

  void move_reduce_axes(ox::NodeProto& n) {
    static const std::set<std::string> reductions = {
        "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ReduceSum"};
    if (!reductions.count(n.op_type())) return;
    auto* attrs = n.mutable_attribute();
    for (int k = 0; k < attrs->size(); ++k) {
      if (attrs->Get(k).name() != "axes") continue;
      std::vector<int64_t> axes(attrs->Get(k).ints().begin(), attrs->Get(k).ints().end());
      attrs->DeleteSubrange(k, 1);
      n.add_input(int64_initializer((n.name().empty() ? n.output(0) : n.name()) + "/axes", axes));
      return;
    }
  }

  std::string int64_initializer(const std::string& base, const std::vector<int64_t>& values) {
    ox::TensorProto t;
    t.set_name(fresh(base));
    t.set_data_type(ox::TensorProto::INT64);
    t.add_dims(int64_t(values.size()));
    for (int64_t v : values) t.add_int64_data(v);
    new_initializers_.push_back(t);
    return t.name();
  }

  // A new float initializer: inline when small or when the input keeps no external data,
  // else in the side file.
  std::string float_initializer(const std::string& base, const Shape& dims,
                                const std::vector<double>& values, int32_t type,
                                bool was_external = false) {
    ox::TensorProto t;
    t.set_name(fresh(base));
    t.set_data_type(type);
    for (int64_t d : dims) t.add_dims(d);
    store(t, values, was_external);
    new_initializers_.push_back(std::move(t));
    ++summary_.centered_copies;
    return new_initializers_.back().name();
  }

  bool uses_external_data() const { return !input_data_files_.empty(); }

  // A new initializer holding `src` (dims `dims`) centered as `c` says over `shape`.
  std::string centered_initializer(const std::string& base, const Shape& dims,
                                   const ox::TensorProto& src, const Shape& shape, const Centering& c) {
    ox::TensorProto t;
    t.set_name(fresh(base));
    t.set_data_type(src.data_type());
    for (int64_t d : dims) t.add_dims(d);
    if (!c.scale.empty()) store_scaled_centered(t, src, shape, c, is_external(src));
    else store_centered(t, src, shape, c.axes, c.remove, is_external(src));
    new_initializers_.push_back(std::move(t));
    ++summary_.centered_copies;
    return new_initializers_.back().name();
  }

  // The values of float initializer `src` (row-major, `shape`) centered over `axes`, or
  // zeroed, as the data of `t` (of src's type). An external float32 `src` is streamed
  // chunk by chunk from its data file into the side file (stream_centered: the same
  // arithmetic as centered_values, rounded once to float); others are centered in memory.
  void store_centered(ox::TensorProto& t, const ox::TensorProto& src, const Shape& shape,
                      const Axes& axes, bool remove, bool was_external = false) {
    const int64_t n = numel_of(src);
    const size_t width = elem_bytes(src.data_type());
    const size_t nbytes = size_t(n) * width;
    if (remove) {
      store_bytes(t, nbytes, [nbytes](const ByteSink& sink) {
        const std::string zeros(std::min<size_t>(nbytes, size_t{1} << 20), '\0');
        for (size_t done = 0; done < nbytes; done += zeros.size())
          sink(zeros.data(), std::min(zeros.size(), nbytes - done));
      }, was_external);
      return;
    }
    if (!is_external(src) || src.data_type() != ox::TensorProto::FLOAT ||
        std::endian::native != std::endian::little) {
      store(t, centered_values(decode_floats(src, model_dir_), shape, axes, false), was_external);
      return;
    }
    const std::string where = "initializer " + in_quotes(src.name());
    const fs::path data = model_dir_ / external_key(src, "location");
    const std::string off = external_key(src, "offset");
    const int64_t base = off.empty() ? 0 : std::stoll(off);
    store_bytes(t, nbytes, [data, base, where, shape, axes, n](const ByteSink& sink) {
      std::ifstream in(data, std::ios::binary);
      auto read = [&](uint64_t done, uint64_t count, float* dst) {
        in.seekg(base + int64_t(done * 4));
        in.read(reinterpret_cast<char*>(dst), std::streamsize(count * 4));
        if (!in) throw ModelError(where, "its external data cannot be read");
      };
      auto append = [&](const float* v, uint64_t count) {
        sink(reinterpret_cast<const char*>(v), count * 4);
      };
      stream_centered<float, float>(shape, axes, uint64_t(n), read, append, where);
    }, was_external);
  }

  // The values of float initializer `src` (row-major, `shape`) multiplied by a LayerScale
  // and centered, as `c` says, as the data of `t` (in memory).
  void store_scaled_centered(ox::TensorProto& t, const ox::TensorProto& src, const Shape& shape,
                             const Centering& c, bool was_external = false) {
    Param p;
    p.name = src.name();
    p.shape = shape;
    p.values = decode_floats(src, model_dir_);
    p.scale = c.scale;
    p.scale_axis = c.scale_axis;
    p.center_axes = c.axes;
    store(t, effective_values(p), was_external);
  }

  // `values` as the data of `t` (see store_bytes).
  void store(ox::TensorProto& t, const std::vector<double>& values, bool was_external = false) {
    auto bytes = std::make_shared<const std::string>(encode_floats(values, t.data_type()));
    store_bytes(t, bytes->size(), [bytes](const ByteSink& sink) { sink(bytes->data(), bytes->size()); },
                was_external);
  }

  // The `nbytes` bytes `emit` hands to its sink, in order, as the data of `t`: in the side
  // file when the input keeps external data and the tensor was external or is 1 KiB or
  // more (streamed: never held whole); inline otherwise, streamed into the output by
  // write() when of options_.stream_min_bytes or more. `emit` owns what it reads.
  void store_bytes(ox::TensorProto& t, size_t nbytes, const std::function<void(const ByteSink&)>& emit,
                   bool was_external) {
    was_external = was_external || is_external(t);
    t.clear_raw_data();
    t.clear_float_data();
    t.clear_double_data();
    t.clear_int32_data();
    t.clear_external_data();
    t.clear_data_location();
    if (!uses_external_data() || (!was_external && nbytes < 1024)) {
      if (nbytes >= options_.stream_min_bytes) {
        streamed_[t.name()] = {nbytes, emit, 0};
        return;
      }
      std::string bytes;
      bytes.reserve(nbytes);
      emit([&](const char* b, size_t n) { bytes.append(b, n); });
      if (bytes.size() != nbytes) throw InternalError("store_bytes: " + t.name() + ": wrong byte count");
      t.set_raw_data(std::move(bytes));
      return;
    }
    if (!side_) side_ = std::make_unique<AtomicFileWriter>(side_path().string());
    const size_t offset = (side_size_ + kSideAlign - 1) / kSideAlign * kSideAlign;
    side_->write(std::string(offset - side_size_, '\0'));
    size_t written = 0;
    emit([&](const char* b, size_t n) {
      side_->write(std::string_view(b, n));
      written += n;
    });
    if (written != nbytes) throw InternalError("store_bytes: " + t.name() + ": wrong byte count");
    side_size_ = offset + nbytes;
    t.set_data_location(ox::TensorProto::EXTERNAL);
    auto add = [&](const char* key, const std::string& value) {
      auto* kv = t.add_external_data();
      kv->set_key(key);
      kv->set_value(value);
    };
    add("location", side_path().filename().string());
    add("offset", std::to_string(offset));
    add("length", std::to_string(nbytes));
  }

  // --- centered params ------------------------------------------------------------------

  static bool all_zero(const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return x == 0.0; });
  }

  // The param `p` of the fold differs from the original: how it is centered.
  std::optional<Centering> change_of(const Param& p) const {
    if (!p.center_axes.empty())
      return Centering{p.center_axes, false, p.scale, p.scale_axis, p.scale_param};
    if (!g_.names.count(p.name)) return Centering{{}, true, {}, 0, {}};  // an untied copy, zeroed
    if (!p.values_deferred && all_zero(p.values) && !g_.zero.count(p.name))
      return Centering{{}, true, {}, 0, {}};
    return std::nullopt;
  }

  // The original param a param of the fold derives from ("<p>.centered", ".centered.2").
  std::string origin_param(const std::string& name) const {
    if (g_.names.count(name)) return name;
    const size_t at = name.rfind(".centered");
    if (at == std::string::npos) throw InternalError("write_folded_onnx: unknown param " + name);
    return name.substr(0, at);
  }

  // The ONNX node inputs reading `value` on behalf of lnv node `lnv_node`.
  std::vector<Slot> slots_of(const std::string& lnv_node, const std::string& value) const {
    std::vector<std::string> names;
    if (auto it = norms_.find(lnv_node); it != norms_.end()) names = it->second;
    std::vector<Slot> out;
    const std::string want = file_name(lnv_node);
    auto it = readers_.find(value);
    if (it == readers_.end()) return out;
    for (const Slot& s : it->second) {
      const auto& n = mp_.graph().node(s.node);
      const std::string label = n.name().empty() ? n.output(0) : n.name();
      const bool listed = std::find(names.begin(), names.end(), n.name().empty() ? "#" : n.name()) != names.end();
      const bool named = want == label || want.rfind(label + ".", 0) == 0 || want.rfind(label + ":", 0) == 0;
      if (listed || (names.empty() && named)) out.push_back(s);
    }
    return out;
  }

  void center_params() {
    // Training reads inferred shapes: inferred once, on the graph before any rewiring.
    if (training()) inferred("");
    // Per ONNX value (an initializer, or a constant the import folded): the readers that
    // want each centering, and the fold's param holding it.
    struct Want {
      std::string value;
      std::map<Slot, std::string> slots;  // reader -> fold param
    };
    std::map<std::string, Want> wants;
    std::map<std::string, Centering> centering;  // fold param -> its centering
    std::map<std::string, std::vector<std::pair<std::string, std::string>>> uses;  // param -> (node, attr)
    for (const lnv::Node& n : f_.nodes) {
      for (const auto& [attr, p] : n.param_attrs()) uses[p].push_back({n.name, attr});
      for (const std::string& in : n.inputs)
        if (f_.has(in) && f_.ref(in).kind == ValueRef::Kind::param) uses[in].push_back({n.name, in});
    }
    for (const Param& p : f_.params) {
      const auto c = change_of(p);
      if (!c) continue;
      centering[p.name] = *c;
      const std::string value = file_name(origin_param(p.name));
      for (const auto& [node, attr] : uses[p.name]) {
        if (folded_norms_.count(node)) continue;  // the norm's own params: replace_norms
        const auto slots = slots_of(node, value);
        if (slots.empty())
          throw ModelError(source_.string(), "the fold centers " + in_quotes(value) + " as read by " +
                                                 in_quotes(file_name(node)) + ", and no ONNX node "
                                                 "input maps to that use");
        for (const Slot& s : slots) {
          wants[value].value = value;
          wants[value].slots[s] = p.name;
        }
      }
    }
    uint64_t done = 0;
    for (const auto& [value, want] : wants) {
      report_progress(options_.progress, "center weights", "initializers", done++, wants.size());
      if (initializer_.count(value)) center_initializer(value, want.slots, centering);
      else center_lookup(value, want.slots, centering);
    }
    report_progress(options_.progress, "center weights", "initializers", done, wants.size());
  }

  int32_t type_of_initializer(const std::string& name) const {
    return mp_.graph().initializer(initializer_.at(name)).data_type();
  }

  void center_initializer(const std::string& value, const std::map<Slot, std::string>& slots,
                          const std::map<std::string, Centering>& centering) {
    std::set<std::string> params;
    for (const auto& [s, p] : slots) params.insert(p);
    // A folded norm's nodes are removed, but its replacement reads a param the fold left
    // unchanged under the stored name (norm_param): such a value is not centered in place.
    bool every_reader = !read_as_stored_by_a_norm(value);
    for (const Slot& s : readers_.at(value))
      if (!removed_by_norm(s.node)) every_reader = every_reader && slots.count(s);
    if (training()) {
      for (const std::string& p : params) {
        const Param& fp = f_.params[f_.param_index(p)];
        const Centering& c = centering.at(p);
        std::vector<Slot> at_table;
        for (const auto& [s, q] : slots) {
          if (q != p) continue;
          if (c.remove || !center_rows_gathered(s, fp, c.axes)) at_table.push_back(s);
        }
        if (at_table.empty()) continue;
        const std::string name = center_in_graph(value, fp, c, at_table.front().node);
        for (const Slot& s : at_table) mp_.mutable_graph()->mutable_node(s.node)->set_input(s.input, name);
      }
      return;
    }
    auto& proto = *mp_.mutable_graph()->mutable_initializer(initializer_.at(value));
    const ox::TensorProto src = proto;  // where the data is read from (external: no data copied)
    for (const std::string& p : params) {
      const Param& fp = f_.params[f_.param_index(p)];
      const Centering& c = centering.at(p);
      if (every_reader && params.size() == 1) {
        if (!c.scale.empty()) store_scaled_centered(proto, src, fp.shape, c);
        else store_centered(proto, src, fp.shape, c.axes, c.remove);
        ++summary_.centered_in_place;
        changed_in_place_.insert(value);
        return;
      }
      const Shape dims(proto.dims().begin(), proto.dims().end());
      const std::string name = centered_initializer(value + ".centered", dims, src, fp.shape, c);
      for (const auto& [s, q] : slots)
        if (q == p) mp_.mutable_graph()->mutable_node(s.node)->set_input(s.input, name);
    }
  }

  // A constant folded from a chain of lookups/broadcasts over an initializer: the table is
  // centered over the same trailing axes.
  void center_lookup(const std::string& value, const std::map<Slot, std::string>& slots,
                     const std::map<std::string, Centering>& centering) {
    std::set<std::string> params;
    for (const auto& [s, p] : slots) params.insert(p);
    const std::string where = source_.string() + ": the fold centers the constant " + in_quotes(value);
    if (params.size() != 1 || readers_.at(value).size() != slots.size())
      throw ModelError(where, "whose readers want different centerings; the ONNX writer cannot "
                              "split a folded constant");
    const Param& fp = f_.params[f_.param_index(*params.begin())];
    const Centering& c = centering.at(*params.begin());
    if (!c.scale.empty())
      throw ModelError(where, "which a LayerScale scales; the ONNX writer moves a LayerScale only "
                              "into initializers");
    if (training()) return center_lookup_result(value, slots, fp, c);
    const int64_t rank = int64_t(fp.shape.size());
    const int64_t k = c.remove ? 0 : int64_t(c.axes.size());
    for (size_t j = 0; j < c.axes.size(); ++j)
      if (c.axes[j] != rank - k + int64_t(j))
        throw ModelError(where, "over axes that are not trailing; the ONNX writer cannot center it");
    // Slice too: it keeps or drops whole entries along its axes; one that cuts a centered
    // axis changes its dim, which the dims check below refuses (a reversal keeps the mean).
    static const std::set<std::string> chain_ops = {"Gather", "Expand", "Reshape", "Unsqueeze",
                                                    "Squeeze", "Identity", "Slice"};
    std::string v = value;
    int first = -1;
    while (!initializer_.count(v)) {
      auto it = producer_.find(v);
      if (it == producer_.end()) throw ModelError(where, "which no node computes");
      const auto& n = mp_.graph().node(it->second);
      if (!chain_ops.count(n.op_type()) || (!n.domain().empty() && n.domain() != "ai.onnx"))
        throw ModelError(where, "computed by " + node_label(it->second) + "; the ONNX writer "
                                "centers only tables read through Gather, Slice, Expand, "
                                "Reshape, Unsqueeze, Squeeze or Identity");
      for (const auto& a : n.attribute())
        if (n.op_type() == "Gather" && a.name() == "axis" && a.i() != 0)
          throw ModelError(where, "read by " + node_label(it->second) + " along axis " +
                                  std::to_string(a.i()) + " (the writer follows axis 0 only)");
      if (v != value && readers_.at(v).size() != 1)
        throw ModelError(where, "whose lookup chain is shared at " + in_quotes(v));
      first = it->second;
      v = n.input(0);
    }
    const auto& table = mp_.graph().initializer(initializer_.at(v));
    const Shape dims(table.dims().begin(), table.dims().end());
    const int64_t trank = int64_t(dims.size());
    if (trank <= k || (k > 0 && !std::equal(dims.end() - k, dims.end(), fp.shape.end() - k)))
      throw ModelError(where, "whose centered axes do not keep the dims of the table " + in_quotes(v));
    Axes axes;
    for (int64_t j = trank - k; j < trank; ++j) axes.push_back(j);
    const Centering wanted{axes, c.remove, {}, 0, {}};
    if (readers_.at(v).size() == 1) {
      const ox::TensorProto src = table;
      store_centered(*mp_.mutable_graph()->mutable_initializer(initializer_.at(v)), src, dims, axes, c.remove);
      ++summary_.centered_in_place;
      changed_in_place_.insert(v);
    } else {
      const std::string name = centered_initializer(v + ".centered", dims, table, dims, wanted);
      mp_.mutable_graph()->mutable_node(first)->set_input(0, name);
    }
  }

  // --- LayerScale ----------------------------------------------------------------------

  // Each Mul by a γ that the fold moved into weights (a param of the fold names it as its
  // scale_param; the lnv node reading it became `scale` by 1): replaced by an Identity of
  // its other input, under the same node name and output.
  void replace_layer_scales() {
    std::set<std::string> gammas;
    for (const Param& p : f_.params)
      if (!p.scale_param.empty()) gammas.insert(p.scale_param);
    for (const std::string& gamma : gammas) {
      const std::string value = file_name(gamma);
      bool found = false;
      for (const lnv::Node& n : f_.nodes) {
        if (n.op != Op::scale || n.factor != 1.0) continue;
        for (const Slot& s : slots_of(n.name, value)) {
          const auto& mul = mp_.graph().node(s.node);
          if (mul.op_type() != "Mul" || mul.input_size() != 2 || removed_.count(s.node)) continue;
          ox::NodeProto id;
          id.set_name(mul.name());
          id.set_doc_string(mul.doc_string());
          id.set_op_type("Identity");
          id.add_input(mul.input(1 - s.input));
          id.add_output(mul.output(0));
          inserted_[s.node].push_back(std::move(id));
          removed_.insert(s.node);
          found = true;
        }
      }
      if (!found)
        throw ModelError(source_.string(), "the fold moves the LayerScale " + in_quotes(value) +
                                               " into weights, and no ONNX Mul reading it maps to "
                                               "the folded node");
    }
  }

  // --- moved biases -------------------------------------------------------------------

  // The effective values of the fold's param `name` (centered as the fold says).
  std::vector<double> fold_values(const std::string& name) const {
    Param p = f_.params[f_.param_index(name)];
    if (p.values_deferred) materialize_values(p, model_dir_.string());
    return effective_values(p);
  }

  // The ONNX node (a Gemm or a MatMul) computing lnv node `reader`; -1 when none.
  int reader_node(const std::string& reader) const {
    const std::string want = file_name(reader);
    int prefix = -1;
    for (int i = 0; i < mp_.graph().node_size(); ++i) {
      const auto& n = mp_.graph().node(i);
      if (n.op_type() != "Gemm" && n.op_type() != "MatMul") continue;
      if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
      const std::string label = n.name().empty() ? n.output(0) : n.name();
      if (want == label) return i;
      if (want.rfind(label + ".", 0) == 0 || want.rfind(label + ":", 0) == 0) prefix = i;
    }
    return prefix;
  }

  // R0(beta) of a moved bias, from the fold's values: W·beta (linear) or beta·B (matmul).
  std::vector<double> moved_term(const lnv::Node& image, const std::string& beta) const {
    const std::vector<double> b = fold_values(beta);
    const bool linear = image.op == Op::linear;
    const std::string wname = linear ? image.weight : image.inputs[1];
    const Shape& ws = f_.params[f_.param_index(wname)].shape;
    const std::vector<double> w = fold_values(wname);
    // W as [out, in]: a linear's weight, a transposed matmul's B; else B is [in, out].
    const bool out_first = linear || image.transpose_b;
    const int64_t out = out_first ? ws[0] : ws[1], in = out_first ? ws[1] : ws[0];
    std::vector<double> v(size_t(out), 0.0);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) v[o] += w[out_first ? o * in + i : i * out + o] * b[i];
    return v;
  }

  // The lnv node the file's node `i` maps to (by name), or nullptr.
  const lnv::Node* fold_node_of(int i) const {
    const auto& n = mp_.graph().node(i);
    const std::string label = n.name().empty() ? n.output(0) : n.name();
    for (const auto& [lnv_name, file] : renamed_)
      if (file == label && f_.has(lnv_name) && f_.ref(lnv_name).kind == ValueRef::Kind::node)
        return &f_.nodes[f_.ref(lnv_name).index];
    if (f_.has(label) && f_.ref(label).kind == ValueRef::Kind::node) return &f_.nodes[f_.ref(label).index];
    return nullptr;
  }

  // Input `k` of node `i` holds `values` (its bias plus the moved term): stored over the
  // initializer it reads when no other node reads it, else in a copy "<init>.moved".
  void store_bias(int i, int k, const std::vector<double>& values) {
    const std::string cur = mp_.graph().node(i).input(k);
    const bool own = initializer_.count(cur) && readers_.count(cur) && readers_.at(cur).size() == 1 &&
                     !is_graph_output(cur);
    if (own) {
      auto& proto = *mp_.mutable_graph()->mutable_initializer(initializer_.at(cur));
      store(proto, values);
      if (changed_in_place_.insert(cur).second) ++summary_.moved_in_place;
      return;
    }
    for (auto& t : new_initializers_)
      if (t.name() == cur) {  // a centered copy this writer made for this reader
        store(t, values);
        return;
      }
    const auto& src = mp_.graph().initializer(initializer_.at(cur));
    const Shape dims(src.dims().begin(), src.dims().end());
    mp_.mutable_graph()->mutable_node(i)->set_input(k, float_initializer(cur + ".moved", dims, values, src.data_type()));
  }

  // Whether input `k` of node `i` is a float initializer (or a copy this writer made) of
  // `count` elements that broadcasts along the rows: a bias the moved term can join.
  bool bias_input(int i, int k, int64_t count) const {
    const auto& n = mp_.graph().node(i);
    if (k >= n.input_size() || n.input(k).empty()) return false;
    const ox::TensorProto* t = nullptr;
    if (auto it = initializer_.find(n.input(k)); it != initializer_.end()) t = &mp_.graph().initializer(it->second);
    for (const auto& c : new_initializers_)
      if (c.name() == n.input(k)) t = &c;
    if (!t || elem_bytes(t->data_type()) == 0 || numel_of(*t) != count || t->dims_size() == 0) return false;
    return t->dims(t->dims_size() - 1) == count;
  }

  void move_biases() {
    for (const std::string& reader : moved_bias_readers(f_)) {
      const lnv::Node& own = f_.nodes[f_.node_index(moved_bias_own(reader))];
      const lnv::Node& image = f_.nodes[f_.node_index(moved_bias_image(reader))];
      const std::string beta = image.op == Op::linear
                                   ? image.inputs[0]
                                   : f_.nodes[f_.node_index(image.inputs[0])].inputs[0];
      const int i = reader_node(reader);
      if (i < 0)
        throw ModelError(source_.string(), "the fold moves the bias " + in_quotes(file_name(beta)) +
                                               " into " + in_quotes(file_name(reader)) +
                                               ", which is no Gemm or MatMul node of the file");
      if (training()) {
        move_bias_in_graph(i, image, beta);
        continue;
      }
      std::vector<double> v = moved_term(image, beta);
      const int64_t out = int64_t(v.size());
      const auto& n = mp_.graph().node(i);
      // A Gemm computes alpha·A·B + beta·C, the lnv reader A·B: the term joins scaled.
      const double alpha = gemm_attr(n, "alpha"), gemm_beta = gemm_attr(n, "beta");
      if (alpha != 1.0)
        for (double& x : v) x *= alpha;
      auto plus = [&](std::vector<double> b) {
        for (int64_t o = 0; o < int64_t(b.size()); ++o) b[o] += v[o % out];
        return b;
      };
      if (n.op_type() == "Gemm" && !own.bias.empty() && bias_input(i, 2, out)) {
        store_bias(i, 2, plus(fold_values(own.bias)));
      } else if (n.op_type() == "Gemm" && n.input_size() < 3 && gemm_beta != 0.0) {
        for (double& x : v) x /= gemm_beta;
        mp_.mutable_graph()->mutable_node(i)->add_input(
            float_initializer(file_name(reader) + "/moved_bias", {out}, v, float_type_of(n.output(0), nullptr)));
      } else if (const auto add = bias_add_after(i, out)) {
        const lnv::Node* fa = fold_node_of(add->first);
        const std::string& bp = fa ? fa->inputs[add->second] : std::string();
        if (!fa || !f_.has(bp) || f_.ref(bp).kind != ValueRef::Kind::param)
          add_after(i, float_initializer(file_name(reader) + "/moved_bias", {out}, v,
                                         float_type_of(n.output(0), nullptr)));
        else
          store_bias(add->first, add->second, plus(fold_values(bp)));
      } else {
        add_after(i, float_initializer(file_name(reader) + "/moved_bias", {out}, v,
                                       float_type_of(n.output(0), nullptr)));
      }
    }
  }

  static double gemm_attr(const ox::NodeProto& n, const char* name) {
    if (n.op_type() != "Gemm") return 1.0;
    for (const auto& a : n.attribute())
      if (a.name() == name) return a.f();
    return 1.0;
  }

  // The Add (node, input) that alone reads node i's output and adds a bias initializer of
  // `count` elements to it; nullopt when there is none.
  std::optional<std::pair<int, int>> bias_add_after(int i, int64_t count) const {
    const std::string y = mp_.graph().node(i).output(0);
    auto it = readers_.find(y);
    if (it == readers_.end() || it->second.size() != 1 || is_graph_output(y)) return std::nullopt;
    const Slot s = it->second.front();
    const auto& a = mp_.graph().node(s.node);
    if (a.op_type() != "Add" || (!a.domain().empty() && a.domain() != "ai.onnx")) return std::nullopt;
    const int k = 1 - s.input;
    if (!bias_input(s.node, k, count)) return std::nullopt;
    return std::make_pair(s.node, k);
  }

  // Node i's output y becomes Add(y', term): the node writes y', the Add placed after it y.
  void add_after(int i, const std::string& term) {
    auto& n = *mp_.mutable_graph()->mutable_node(i);
    const std::string y = n.output(0);
    const std::string own = fresh(y + ".own");
    n.set_output(0, own);
    declare_like(own, y);
    inserted_[i + 1].push_back(make_node((n.name().empty() ? y : n.name()) + "/moved_bias", "Add", {own, term}, y));
  }

  // Training: R0(beta) computed before node i from the stored beta and the weight node i
  // reads (as centered in the graph): MatMul(W, beta) for a weight stored [out, in] (a
  // transB Gemm's), MatMul(beta, B) for one stored [in, out]; ops on two initializers that
  // the importer would fold into a constant (Transpose, Mul) are avoided, so W and beta
  // stay parameters. It joins the bias the reader adds (Add(b, R0) read in place of b),
  // else an Add after the reader.
  void move_bias_in_graph(int i, const lnv::Node& image, const std::string& beta) {
    const std::string b = file_name(beta);
    const Shape& bs = f_.params[f_.param_index(beta)].shape;
    if (!initializer_.count(b) ||
        Shape(mp_.graph().initializer(initializer_.at(b)).dims().begin(),
              mp_.graph().initializer(initializer_.at(b)).dims().end()) != bs)
      throw ModelError(source_.string(), "--mode training: the fold moves the bias " + in_quotes(b) +
                                             ", which the file does not store as an initializer of "
                                             "shape " + to_string(bs) + "; the training writer adds "
                                             "no parameters");
    const auto& n = mp_.graph().node(i);
    const std::string base = (n.name().empty() ? n.output(0) : n.name()) + "/moved_bias";
    if (gemm_attr(n, "alpha") != 1.0)
      throw ModelError(source_.string(), "--mode training: the fold moves the bias " + in_quotes(b) +
                                             " into " + node_label(i) + ", whose alpha is not 1");
    const std::string w = n.input(1);
    bool out_first = image.transpose_b;
    if (n.op_type() == "Gemm") {
      out_first = false;
      for (const auto& a : n.attribute())
        if (a.name() == "transB") out_first = a.i() != 0;
    }
    auto& at = inserted_[i];
    const std::string term = fresh(base + "/MatMul_output_0");
    at.push_back(make_node(base, "MatMul", out_first ? std::vector<std::string>{w, b}
                                                     : std::vector<std::string>{b, w}, term));
    const int64_t out = f_.node_shapes[f_.node_index(image.name)].back();
    std::optional<std::pair<int, int>> joins;
    if (n.op_type() == "Gemm" && bias_input(i, 2, out)) joins = std::make_pair(i, 2);
    else joins = bias_add_after(i, out);
    if (!joins) return add_after(i, term);
    const std::string biased = fresh(base + "/Add_output_0");
    at.push_back(make_node(base, "Add", {mp_.graph().node(joins->first).input(joins->second), term}, biased));
    mp_.mutable_graph()->mutable_node(joins->first)->set_input(joins->second, biased);
  }

  // --- centering in the graph (training) -----------------------------------------------

  bool training() const { return options_.mode == Mode::training; }

  // The use of initializer `init` that the fold's param `p` stands for, centered as `c`:
  // the value computed from `init` by nodes placed before node `before`.
  std::string center_in_graph(const std::string& init, const Param& p, const Centering& c, int before) {
    const auto& t = mp_.graph().initializer(initializer_.at(init));
    const Shape dims(t.dims().begin(), t.dims().end());
    if (dims != p.shape)
      throw ModelError(source_.string(), "--mode training: the fold centers " + in_quotes(init) +
                                             " as a tensor of shape " + to_string(p.shape) +
                                             ", and the file stores it as " + to_string(dims) +
                                             "; the training writer centers initializers as stored");
    if (!c.scale.empty()) return center_nodes(scale_in_graph(init, c, before), c.axes, false, before, dims, t.data_type());
    return center_nodes(init, c.axes, c.remove, before);
  }

  // Mul(W, Reshape(γ, dims with γ's size on the scale axis and 1 elsewhere)) before node
  // `before`: a LayerScale moved into W, computed from the stored W and γ.
  std::string scale_in_graph(const std::string& init, const Centering& c, int before) {
    const std::string gamma = file_name(c.scale_param);
    if (!initializer_.count(gamma))
      throw ModelError(source_.string(), "--mode training: the fold moves the LayerScale " +
                                             in_quotes(gamma) + " into " + in_quotes(init) +
                                             ", and the file does not store it as an initializer");
    const auto& t = mp_.graph().initializer(initializer_.at(init));
    std::vector<int64_t> dims(size_t(t.dims_size()), 1);
    dims.at(size_t(c.scale_axis)) = int64_t(c.scale.size());
    const std::string base = init + "/layer_scale";
    const std::string shaped = fresh(gamma + ".along_" + init);
    const std::string out = fresh(init + ".scaled");
    auto& at = inserted_[before];
    at.push_back(make_node(base, "Reshape", {gamma, int64_initializer(base + "/shape", dims)}, shaped));
    at.push_back(make_node(base, "Mul", {init, shaped}, out));
    return out;
  }

  // An embedding lookup Gather(W, ids) (axis 0) of a table centered along its other axes:
  // centering commutes with taking rows, so the gathered rows are centered after the
  // Gather, which keeps it a lookup of the stored table. False when `s` is no such read.
  bool center_rows_gathered(const Slot& s, const Param& p, const Axes& axes) {
    const auto& n = mp_.graph().node(s.node);
    if (n.op_type() != "Gather" || (!n.domain().empty() && n.domain() != "ai.onnx") || s.input != 0)
      return false;
    for (const auto& a : n.attribute())
      if (a.name() == "axis" && a.i() != 0) return false;
    if (std::find(axes.begin(), axes.end(), 0) != axes.end()) return false;
    const std::string rows = n.output(0);
    const auto info = inferred(rows);
    if (!info || !info->type().tensor_type().has_shape() || is_graph_output(rows)) return false;
    const int64_t rank = info->type().tensor_type().shape().dim_size();
    const int64_t shift = rank - int64_t(p.shape.size());
    if (shift < 0) return false;
    Axes out_axes;
    for (int64_t a : axes) out_axes.push_back(a + shift);
    const std::vector<Slot> row_readers = readers_.count(rows) ? readers_.at(rows) : std::vector<Slot>{};
    const std::string centered = center_value(rows, out_axes, s.node + 1, *info);
    for (const Slot& r : row_readers) mp_.mutable_graph()->mutable_node(r.node)->set_input(r.input, centered);
    return true;
  }

  // The lookup's result `value` (every reader of which wants `c`), centered where it is
  // read: the chain stays a lookup of the stored table.
  void center_lookup_result(const std::string& value, const std::map<Slot, std::string>& slots,
                            const Param& p, const Centering& c) {
    Axes axes = c.axes;
    if (c.remove) {
      axes.clear();
      for (size_t a = 0; a < p.shape.size(); ++a)
        if (p.shape[a] == 1) axes.push_back(int64_t(a));
      if (axes.empty() && !p.shape.empty())
        throw ModelError(source_.string(), "--mode training: the fold zeroes the constant " +
                                               in_quotes(value) + " (shape " + to_string(p.shape) +
                                               "), which has no axis of size 1 to compute the "
                                               "zeros over in the graph");
    }
    ox::ValueInfoProto like;
    if (const auto v = inferred(value)) like = *v;
    const std::string centered = center_value(value, axes, slots.begin()->first.node, like, c.remove);
    for (const auto& [s, q] : slots) mp_.mutable_graph()->mutable_node(s.node)->set_input(s.input, centered);
  }

  // Sub(W, ReduceMean(W, axes, keepdims=1)) before node `before`; for a removed term the
  // axes are W's size-1 axes (all of a scalar's), so the difference is W minus itself.
  std::string center_nodes(const std::string& init, Axes axes, bool remove, int before) {
    const auto& t = mp_.graph().initializer(initializer_.at(init));
    return center_nodes(init, std::move(axes), remove, before, Shape(t.dims().begin(), t.dims().end()),
                        t.data_type());
  }
  // The same for a value `init` of dims `dims` and element type `type`.
  std::string center_nodes(const std::string& init, Axes axes, bool remove, int before,
                           const Shape& dims, int32_t type) {
    if (remove) {
      axes.clear();
      for (size_t a = 0; a < dims.size(); ++a)
        if (dims[a] == 1) axes.push_back(int64_t(a));
      if (axes.empty() && !dims.empty())
        throw ModelError(source_.string(), "--mode training: the fold zeroes " + in_quotes(init) +
                                               " (shape " + to_string(dims) + "), which has no "
                                               "axis of size 1 to compute the zeros over in the graph");
    }
    ox::ValueInfoProto info;
    auto* tt = info.mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
    return center_value(init, axes, before, info, remove);
  }

  // Sub(v, ReduceMean(v, axes, keepdims=1)) ("<v>.centered", or "<v>.zero" when it is v
  // minus itself) by nodes placed before node `before`, declared with the type and shape
  // of `like`.
  std::string center_value(const std::string& v, const Axes& axes, int before,
                           ox::ValueInfoProto like, bool remove = false) {
    const std::string base = v + (remove ? "/zero" : "/center");
    const std::string mean = fresh(v + ".mean");
    const std::string out = fresh(v + (remove ? ".zero" : ".centered"));
    auto& at = inserted_[before];
    at.push_back(reduce_mean(base, v, {axes.begin(), axes.end()}, mean));
    at.push_back(make_node(base, "Sub", {v, mean}, out));
    if (like.type().has_tensor_type()) {
      like.set_name(out);
      like.clear_doc_string();
      *mp_.mutable_graph()->add_value_info() = std::move(like);
    }
    ++summary_.centered_in_graph;
    return out;
  }

  // --- norms ---------------------------------------------------------------------------

  bool removed_by_norm(int node) const { return norm_nodes_.count(node) != 0; }

  // Whether a folded norm's RMSNorm reads initializer `value` as stored: its weight or bias,
  // unchanged by the fold (norm_param).
  bool read_as_stored_by_a_norm(const std::string& value) const {
    for (const std::string& norm : folded_norms_) {
      const lnv::Node& fn = f_.nodes[f_.node_index(norm)];
      for (const std::string* p : {&fn.weight, &fn.bias})
        if (!p->empty() && file_name(*p) == value && !change_of(f_.params[f_.param_index(*p)]))
          return true;
    }
    return false;
  }
  std::set<int> norm_nodes_;  // filled before center_params by collect_norm_nodes

  int node_by_label(const std::string& label) const {
    for (int i = 0; i < mp_.graph().node_size(); ++i)
      if (mp_.graph().node(i).name() == label) return i;
    return -1;
  }

  std::vector<int> norm_node_indices(const std::string& norm) const {
    std::vector<int> out;
    auto it = norms_.find(norm);
    if (it == norms_.end())
      throw ModelError(source_.string(), "the fold swaps " + in_quotes(norm) + ", which meta.onnx.norms "
                                                                          "does not list");
    for (const std::string& label : it->second) {
      const int i = node_by_label(label);
      if (i < 0)
        throw ModelError(source_.string(), "norm " + in_quotes(norm) + ": its node " + in_quotes(label) +
                                               " is not a named node of the file; the ONNX writer "
                                               "needs named norm nodes");
      out.push_back(i);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 public:
  void collect_norm_nodes() {
    for (const std::string& norm : folded_norms_)
      for (int i : norm_node_indices(norm)) norm_nodes_.insert(i);
  }

 private:
  // ONNX shape inference's type and shape of `value` in the original graph (symbolic dims
  // kept), run once on a copy without the large initializers' data.
  std::optional<ox::ValueInfoProto> inferred(const std::string& value) {
    if (!inferred_) {
      ox::ModelProto copy = mp_;
      for (auto& t : *copy.mutable_graph()->mutable_initializer())
        if (numel_of(t) > 4096) {
          t.clear_raw_data();
          t.clear_float_data();
          t.clear_external_data();
          t.clear_data_location();
        }
      try {
        infer_onnx_shapes(copy, InferenceCheck::lenient);
      } catch (const std::exception&) {
        // Types and shapes stay unknown; the writer falls back to the weight's type.
      }
      inferred_.emplace();
      for (const auto* list : {&copy.graph().input(), &copy.graph().value_info(), &copy.graph().output()})
        for (const auto& v : *list) inferred_->emplace(v.name(), v);
    }
    auto it = inferred_->find(value);
    if (it == inferred_->end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::map<std::string, ox::ValueInfoProto>> inferred_;

  int32_t float_type_of(const std::string& value, const Param* weight) {
    if (const auto v = inferred(value); v && v->type().has_tensor_type() && v->type().tensor_type().elem_type())
      return v->type().tensor_type().elem_type();
    if (weight) {
      const std::string init = file_name(origin_param(weight->name));
      if (initializer_.count(init)) return type_of_initializer(init);
    }
    return ox::TensorProto::FLOAT;
  }

  // A value the RMSNorm computes before its last node has the shape and type of x: said in
  // value_info, for tools whose shape inference does not know ONNX Runtime's op.
  void declare_like(const std::string& value, const std::string& x) {
    if (auto v = inferred(x); v && v->type().has_tensor_type()) {
      v->set_name(value);
      v->clear_doc_string();
      *mp_.mutable_graph()->add_value_info() = *v;
    }
  }

  ox::NodeProto make_node(const std::string& base, const std::string& op,
                          std::vector<std::string> inputs, const std::string& output) {
    ox::NodeProto n;
    n.set_name(fresh(base + "/" + op));
    n.set_op_type(op);
    for (auto& i : inputs) n.add_input(i);
    n.add_output(output);
    return n;
  }

  // ReduceMean(input) over `axes` (all of them when empty), keepdims 1: the axes an
  // attribute below opset 18, an int64 initializer input from 18.
  ox::NodeProto reduce_mean(const std::string& base, const std::string& input,
                            const std::vector<int64_t>& axes, const std::string& output) {
    ox::NodeProto n = make_node(base, "ReduceMean", {input}, output);
    if (!axes.empty() && default_opset() >= 18) {
      n.add_input(int64_initializer(base + "/axes", axes));
    } else if (!axes.empty()) {
      auto* a = n.add_attribute();
      a->set_name("axes");
      a->set_type(ox::AttributeProto::INTS);
      for (int64_t v : axes) a->add_ints(v);
    }
    auto* keep = n.add_attribute();
    keep->set_name("keepdims");
    keep->set_type(ox::AttributeProto::INT);
    keep->set_i(1);
    return n;
  }

  // The param of the norm, as an initializer name: the original's when unchanged and of the
  // same dims, else a new one.
  std::string norm_param(const std::string& base, const char* what, const Param& p, int32_t type,
                         int at) {
    const auto change = change_of(p);
    if (!change) {
      const std::string init = file_name(p.name);
      if (initializer_.count(init)) {
        const auto& t = mp_.graph().initializer(initializer_.at(init));
        if (Shape(t.dims().begin(), t.dims().end()) == p.shape && t.data_type() == type) return init;
      }
    }
    if (training()) {
      const std::string init = file_name(origin_param(p.name));
      if (!initializer_.count(init) || type_of_initializer(init) != type)
        throw ModelError(source_.string(), "--mode training: the RMSNorm at " + in_quotes(base) +
                                               " reads its " + what + " " + in_quotes(init) +
                                               ", which the file does not store as an initializer "
                                               "of the norm's type; the training writer adds no "
                                               "parameters");
      if (change) return center_in_graph(init, p, *change, at);
      // Stored with other dims of the same values ([1, C] for [C]): reshaped in the graph.
      const std::string out = fresh(init + ".reshaped");
      const std::vector<int64_t> dims(p.shape.begin(), p.shape.end());
      inserted_[at].push_back(make_node(base, "Reshape", {init, int64_initializer(base + "/" + what + "_shape", dims)}, out));
      return out;
    }
    if (p.values_deferred) {  // a norm param the fold changed, still in the file
      Param loaded = p;
      materialize_values(loaded, model_dir_.string());
      return float_initializer(base + "/" + what, p.shape, effective_values(loaded), type);
    }
    return float_initializer(base + "/" + what, p.shape, effective_values(p), type);
  }

  void replace_norms() {
    for (const std::string& norm : folded_norms_) {
      const std::vector<int> nodes = norm_node_indices(norm);
      const std::set<int> in_norm(nodes.begin(), nodes.end());
      const lnv::Node& fn = f_.nodes[f_.node_index(norm)];
      if (fn.op != Op::rms_norm) throw InternalError("write_folded_onnx: " + norm + " is not folded");
      const auto& first = mp_.graph().node(nodes.front());
      const int last = nodes.back();
      if (first.op_type() == "EmbedLayerNormalization" && first.domain() == "com.microsoft") {
        replace_embed_norm(norm, nodes.front(), fn);
        continue;
      }
      if (first.op_type() == "SkipLayerNormalization" && first.domain() == "com.microsoft") {
        replace_skip_norm(norm, nodes.front(), fn);
        continue;
      }
      std::string x = first.input(0);
      const std::string y = mp_.graph().node(last).output(0);
      // A centering pushed through a Transpose (the importer's absorb_centering): the norm
      // reads x transposed as that Transpose does.
      std::vector<ox::NodeProto> transposed;
      for (int i : nodes)
        if (mp_.graph().node(i).op_type() == "Transpose" && mp_.graph().node(i).domain().empty()) {
          ox::NodeProto t = mp_.graph().node(i);
          t.set_input(0, x);
          x = fresh(x + ".transposed");
          t.set_output(0, x);
          transposed.push_back(t);
          declare_like(x, mp_.graph().node(i).output(0));  // the shape of the centered one
        }
      // A node some other output of which is read stays (LayerNormalization's Mean or
      // InvStdDev); its Y output is then renamed out of the way.
      for (int i : nodes) {
        auto& n = *mp_.mutable_graph()->mutable_node(i);
        bool other_read = false;
        for (const auto& o : n.output()) {
          if (o == y || o.empty()) continue;
          if (is_graph_output(o)) other_read = true;
          if (auto it = readers_.find(o); it != readers_.end())
            for (const Slot& s : it->second) other_read = other_read || !in_norm.count(s.node);
        }
        if (!other_read) {
          removed_.insert(i);
          continue;
        }
        for (int k = 0; k < n.output_size(); ++k)
          if (n.output(k) == y) n.set_output(k, fresh(y + ".unused"));
      }
      const int64_t rank = int64_t(f_.node_shapes[f_.node_index(norm)].size());
      const Axes axes = normalize_axes(fn.axes, rank, norm);
      const int64_t k = int64_t(axes.size());
      const Param* weight = fn.weight.empty() ? nullptr : &f_.params[f_.param_index(fn.weight)];
      const Param* bias = fn.bias.empty() ? nullptr : &f_.params[f_.param_index(fn.bias)];
      // Axes that are not trailing (a channel norm of NCHW, as ONNX Runtime's transpose
      // optimizer leaves one): only the decomposed spelling of a norm without affine params,
      // whose ReduceMean names its axes.
      std::vector<int64_t> written;
      for (int64_t j = 0; j < k; ++j) {
        written.push_back(axes[j] - rank);
        if (axes[j] != rank - k + j && (weight || bias || options_.rms_op != RmsOp::decomposed))
          throw ModelError(source_.string(), "norm " + in_quotes(norm) + " normalizes axes that are "
                                             "not trailing; the ONNX writer spells it only decomposed "
                                             "(--rms-op decomposed) and without a weight or bias");
      }
      const int32_t type = float_type_of(x, weight);
      const std::string base = file_name(norm) + "/RMS";
      if (options_.rms_op == RmsOp::ort_skip && k == 1 && weight && transposed.empty() &&
          (type == ox::TensorProto::FLOAT || type == ox::TensorProto::FLOAT16)) {
        const int64_t features = f_.node_shapes[f_.node_index(norm)].back();
        if (const auto skip = residual_add(x, features)) {
          std::vector<ox::NodeProto> rms = skip_rms_nodes(base, *skip, x, y, fn.eps, weight, bias, type);
          auto& at = inserted_[skip->add];
          at.insert(at.end(), rms.begin(), rms.end());
          ++summary_.norms;
          continue;
        }
      }
      std::vector<ox::NodeProto> rms = rms_nodes(base, x, y, written, fn.eps, weight, bias, type, last);
      rms.insert(rms.begin(), transposed.begin(), transposed.end());
      auto& before_last = inserted_[last];  // after the nodes centering its params (training)
      before_last.insert(before_last.end(), rms.begin(), rms.end());
      ++summary_.norms;
    }
  }

  // com.microsoft.SkipLayerNormalization (input + skip + bias, then a LayerNorm over the last
  // axis) folded: ONNX Runtime's SkipSimplifiedLayerNormalization of the same input, skip and
  // bias with the folded scale, a bias (beta) as a separate Add; the sum output (3) keeps its
  // name. The node stays fused, in any --rms-op.
  void replace_skip_norm(const std::string& norm, int i, const lnv::Node& fn) {
    const ox::NodeProto n = mp_.graph().node(i);
    for (int k = 1; k < 3 && k < n.output_size(); ++k)
      if (!n.output(k).empty() && (readers_.count(n.output(k)) || is_graph_output(n.output(k))))
        throw InternalError("write_folded_onnx: " + norm + " reads a statistic of a fused skip norm");
    if (fn.weight.empty()) throw InternalError("write_folded_onnx: " + norm + " has no scale");
    const Param& weight = f_.params[f_.param_index(fn.weight)];
    const Param* bias = fn.bias.empty() ? nullptr : &f_.params[f_.param_index(fn.bias)];
    const int32_t type = float_type_of(n.input(0), &weight);
    const std::string base = file_name(norm) + "/RMS";
    const std::string y = n.output(0);
    const std::string normed = bias ? fresh(base + "/normed_output_0") : y;
    std::vector<std::string> inputs = {n.input(0), n.input(1), norm_param(base, "weight", weight, type, i)};
    if (n.input_size() > 4 && !n.input(4).empty()) inputs.push_back(n.input(4));
    ox::NodeProto r = make_node(base, "SkipSimplifiedLayerNormalization", inputs, normed);
    r.set_domain("com.microsoft");
    if (n.output_size() > 3 && !n.output(3).empty()) {
      r.add_output("");
      r.add_output("");
      r.add_output(n.output(3));
    }
    auto* e = r.add_attribute();
    e->set_name("epsilon");
    e->set_type(ox::AttributeProto::FLOAT);
    e->set_f(float(fn.eps));
    std::vector<ox::NodeProto> out = {r};
    if (bias) {
      declare_like(normed, n.input(0));
      out.push_back(make_node(base, "Add", {normed, norm_param(base, "bias", *bias, type, i)}, y));
    }
    removed_.insert(i);
    auto& at = inserted_[i];
    at.insert(at.end(), out.begin(), out.end());
    ++summary_.norms;
  }

  // com.microsoft.EmbedLayerNormalization folded: the same node over its centered tables
  // (center_params centers them as the lookups' producers: in place, or in the graph in
  // training). The sum of centered rows has mean zero, so the node's LayerNorm of it is the
  // RMSNorm of the fold, and it stays one fused kernel with its mask_index output
  // (docs/spec/decisions.md, "A folded EmbedLayerNormalization stays one node"). Its gamma
  // and beta are the folded norm's, in any --rms-op.
  void replace_embed_norm(const std::string& norm, int i, const lnv::Node& fn) {
    auto& n = *mp_.mutable_graph()->mutable_node(i);
    if (fn.weight.empty() || fn.bias.empty())
      throw InternalError("write_folded_onnx: " + norm + " has no gamma or beta");
    const Param& gamma = f_.params[f_.param_index(fn.weight)];
    const Param& beta = f_.params[f_.param_index(fn.bias)];
    const int32_t type = float_type_of(n.input(2), &gamma);
    const std::string base = file_name(norm) + "/RMS";
    n.set_input(5, norm_param(base, "gamma", gamma, type, i));
    n.set_input(6, norm_param(base, "beta", beta, type, i));
    ++summary_.norms;
  }

  // --- the residual add fused into the RMSNorm (--rms-op ort-skip) ------------------------

  // x = Add(input, skip) (or Add(input, Add(skip, bias)) with a 1-D constant bias of the
  // features, the formats ONNX Runtime's SkipLayerNormFusion takes for LayerNormalization).
  struct ResidualAdd {
    int add = -1, bias_add = -1;
    std::string input, skip, bias;
  };

  bool same_shape(const std::string& a, const std::string& b) {
    const auto va = inferred(a), vb = inferred(b);
    if (!va || !vb || !va->type().tensor_type().has_shape() || !vb->type().tensor_type().has_shape())
      return false;
    const auto& sa = va->type().tensor_type().shape();
    const auto& sb = vb->type().tensor_type().shape();
    if (sa.dim_size() != sb.dim_size() || sa.dim_size() < 2 || sa.dim_size() > 3) return false;
    for (int d = 0; d < sa.dim_size(); ++d) {
      const auto &da = sa.dim(d), &db = sb.dim(d);
      const bool values = da.has_dim_value() && db.has_dim_value() && da.dim_value() == db.dim_value();
      const bool params = da.has_dim_param() && db.has_dim_param() && da.dim_param() == db.dim_param();
      if (!values && !params) return false;
    }
    return true;
  }

  // Where ONNX's shape inference leaves a shape open (a Reshape to a computed shape): the
  // imported Add of node i adds two operands of its own shape at the bound dims.
  bool same_shape_bound(int i) const {
    const lnv::Node* a = fold_node_of(i);
    if (!a || a->op != Op::add || a->inputs.size() != 2) return false;
    const Shape& out = f_.node_shapes[f_.node_index(a->name)];
    return out.size() >= 2 && out.size() <= 3 && f_.shape_of(a->inputs[0]) == out &&
           f_.shape_of(a->inputs[1]) == out;
  }

  bool is_default_add(int i) const {
    const auto& n = mp_.graph().node(i);
    return n.op_type() == "Add" && (n.domain().empty() || n.domain() == "ai.onnx") &&
           n.input_size() == 2 && n.output_size() == 1;
  }

  // The residual Add that computes norm input `x`, with both addends of x's shape; nullopt
  // when x is no such Add's output (or another norm took that Add).
  std::optional<ResidualAdd> residual_add(const std::string& x, int64_t features) {
    auto it = producer_.find(x);
    if (it == producer_.end() || removed_.count(it->second) || !is_default_add(it->second))
      return std::nullopt;
    const auto& n = mp_.graph().node(it->second);
    if (!(same_shape(n.input(0), x) && same_shape(n.input(1), x)) && !same_shape_bound(it->second))
      return std::nullopt;
    ResidualAdd r{it->second, -1, n.input(0), n.input(1), ""};
    for (int k : {1, 0}) {
      const std::string v = n.input(k);
      auto p = producer_.find(v);
      if (p == producer_.end() || removed_.count(p->second) || !is_default_add(p->second) ||
          readers_.at(v).size() != 1 || is_graph_output(v))
        continue;
      const auto& b = mp_.graph().node(p->second);
      for (int j : {1, 0}) {
        const ox::TensorProto* t = initializer_of(b.input(j));
        if (!t || t->dims_size() != 1 || t->dims(0) != features) continue;
        r.bias = b.input(j);
        (k == 0 ? r.input : r.skip) = b.input(1 - j);
        r.bias_add = p->second;
        break;
      }
      if (r.bias_add >= 0) break;
    }
    removed_.insert(r.add);
    if (r.bias_add >= 0) removed_.insert(r.bias_add);
    return r;
  }

  // The initializer (original or one this writer added) named `name`, or nullptr.
  const ox::TensorProto* initializer_of(const std::string& name) const {
    if (auto it = initializer_.find(name); it != initializer_.end()) return &mp_.graph().initializer(it->second);
    for (const auto& t : new_initializers_)
      if (t.name() == name) return &t;
    return nullptr;
  }

  // SkipSimplifiedLayerNormalization(input, skip, weight[, bias]) writing the RMSNorm and,
  // as its fourth output, the sum x when another node or the graph reads it; then the
  // norm's own bias as an Add when it kept one.
  std::vector<ox::NodeProto> skip_rms_nodes(const std::string& base, const ResidualAdd& r,
                                            const std::string& x, const std::string& y, double eps,
                                            const Param* weight, const Param* bias, int32_t type) {
    bool sum_read = is_graph_output(x);
    for (const Slot& s : readers_.count(x) ? readers_.at(x) : std::vector<Slot>{})
      sum_read = sum_read || !removed_by_norm(s.node);
    const std::string normed = bias ? fresh(base + "/normed_output_0") : y;
    std::vector<std::string> inputs{r.input, r.skip, norm_param(base, "weight", *weight, type, r.add)};
    if (!r.bias.empty()) inputs.push_back(r.bias);
    ox::NodeProto n = make_node(base, "SkipSimplifiedLayerNormalization", inputs, normed);
    n.set_domain("com.microsoft");
    if (sum_read) {
      n.add_output("");
      n.add_output("");
      n.add_output(x);
    }
    auto* e = n.add_attribute();
    e->set_name("epsilon");
    e->set_type(ox::AttributeProto::FLOAT);
    e->set_f(float(eps));
    ensure_ms_opset();
    // ONNX's shape inference does not know the com.microsoft op: its outputs are declared.
    declare_like(normed, x);
    std::vector<ox::NodeProto> out{n};
    if (bias) {
      out.push_back(make_node(base, "Add", {normed, norm_param(base, "bias", *bias, type, r.add)}, y));
    }
    ++summary_.skip_fused;
    return out;
  }

  void ensure_ms_opset() {
    for (const auto& o : mp_.opset_import())
      if (o.domain() == "com.microsoft") return;
    auto* o = mp_.add_opset_import();
    o->set_domain("com.microsoft");
    o->set_version(1);
  }

  std::vector<ox::NodeProto> rms_nodes(const std::string& base, const std::string& x,
                                       const std::string& y, const std::vector<int64_t>& axes,
                                       double eps, const Param* weight, const Param* bias,
                                       int32_t type, int at) {
    std::vector<ox::NodeProto> out;
    auto value = [&](const char* what) { return fresh(base + "/" + what + "_output_0"); };
    const std::string normed = bias ? value("normed") : y;
    const int64_t k = int64_t(axes.size());
    if (options_.rms_op == RmsOp::decomposed) {
      // Pow(x, 2), not Mul(x, x): ONNX Runtime's SimplifiedLayerNormFusion matches
      // Pow -> ReduceMean -> Add -> Sqrt -> Div(x, .) -> Mul(scale) and runs one fused
      // kernel (docs/onnx.md, "Which --rms-op").
      // A half-precision norm takes its mean square in float32 (as LayerNormalization's
      // stash_type 1 does): epsilon keeps its float value, which float16 cannot hold
      // (1e-5f would be stored as 1.0014e-5), and x^2 cannot overflow.
      const bool half = type == ox::TensorProto::FLOAT16 || type == ox::TensorProto::BFLOAT16;
      const int32_t stat = half ? int32_t(ox::TensorProto::FLOAT) : type;
      auto cast = [&](const std::string& in, int32_t to) {
        const std::string o = value("Cast");
        ox::NodeProto c = make_node(base, "Cast", {in}, o);
        auto* a = c.add_attribute();
        a->set_name("to");
        a->set_type(ox::AttributeProto::INT);
        a->set_i(to);
        out.push_back(c);
        return o;
      };
      const std::string xs = half ? cast(x, stat) : x;
      const char* pow = onnx_op_of(RmsStep::square);
      const char* add = onnx_op_of(RmsStep::plus_eps);
      const char* root = onnx_op_of(RmsStep::root);
      const char* div = onnx_op_of(RmsStep::normalize);
      const std::string sq = value(pow), ms = value(onnx_op_of(RmsStep::mean_square)), ve = value(add),
                        sd = value(root);
      const std::string scaled = weight ? value(div) : normed;
      out.push_back(make_node(base, pow, {xs, float_initializer(base + "/two", {}, {2.0}, stat)}, sq));
      out.push_back(reduce_mean(base, sq, axes, ms));
      out.push_back(make_node(base, add, {ms, float_initializer(base + "/epsilon", {}, {eps}, stat)}, ve));
      out.push_back(make_node(base, root, {ve}, sd));
      out.push_back(make_node(base, div, {x, half ? cast(sd, type) : sd}, scaled));
      if (weight)
        out.push_back(make_node(base, onnx_op_of(RmsStep::weight),
                                {scaled, norm_param(base, "weight", *weight, type, at)}, normed));
    } else {
      if (!weight)
        throw ModelError(source_.string(), "a norm without a weight needs --rms-op decomposed "
                                           "(the fused ops take a scale)");
      ox::NodeProto n = make_node(base, fused_rms_op(options_.rms_op),
                                  {x, norm_param(base, "weight", *weight, type, at)}, normed);
      auto* a = n.add_attribute();
      a->set_name("axis");
      a->set_type(ox::AttributeProto::INT);
      a->set_i(-k);
      auto* e = n.add_attribute();
      e->set_name("epsilon");
      e->set_type(ox::AttributeProto::FLOAT);
      e->set_f(float(eps));
      auto* s = n.add_attribute();
      s->set_name("stash_type");
      s->set_type(ox::AttributeProto::INT);
      s->set_i(1);
      out.push_back(n);
    }
    if (bias) {
      if (options_.rms_op == RmsOp::ort || options_.rms_op == RmsOp::ort_skip) declare_like(normed, x);
      out.push_back(make_node(base, onnx_op_of(RmsStep::bias), {normed, norm_param(base, "bias", *bias, type, at)}, y));
    }
    return out;
  }

  // --- writing --------------------------------------------------------------------------

  void write() {
    auto* g = mp_.mutable_graph();
    google::protobuf::RepeatedPtrField<ox::NodeProto> nodes;
    for (int i = 0; i < g->node_size(); ++i) {
      if (auto it = inserted_.find(i); it != inserted_.end())
        for (auto& n : it->second) *nodes.Add() = n;
      if (!removed_.count(i)) *nodes.Add() = g->node(i);
    }
    if (auto it = inserted_.find(g->node_size()); it != inserted_.end())
      for (auto& n : it->second) *nodes.Add() = n;  // after the last node (training)
    g->mutable_node()->Swap(&nodes);
    drop_norm_constants();
    for (auto& t : new_initializers_) *g->add_initializer() = std::move(t);

    std::vector<std::unique_ptr<AtomicFileWriter>> files;
    // External data the output keeps referencing: beside the input it is read in place;
    // elsewhere each file is copied beside the output under the same name.
    if (!out_beside_input()) {
      const fs::path od = out_.parent_path().empty() ? fs::path(".") : out_.parent_path();
      Copied copied;
      for (const fs::path& f : input_data_files()) copied.total += file_size_of(f);
      for (const fs::path& f : input_data_files()) {
        const fs::path to = od / f.lexically_relative(model_dir_);
        if (same_path(to, out_) || same_path(to, side_path()))
          throw ModelError(to.string(), "the copy of the input's external data would overwrite "
                                        "the output; choose another -o path");
        fs::create_directories(to.parent_path());
        files.push_back(std::make_unique<AtomicFileWriter>(to.string()));
        copy_into(f, *files.back(), copied);
        summary_.copied_files.push_back(to.string());
      }
    }
    if (side_) {
      files.push_back(std::move(side_));
      summary_.side_file = side_path().string();
    }
    files.push_back(std::make_unique<AtomicFileWriter>(out_.string()));
    write_model(*files.back());
    std::vector<AtomicFileWriter*> all;
    for (auto& f : files) all.push_back(f.get());
    for (AtomicFileWriter* w : options_.commit_with) all.push_back(w);
    report_progress(options_.progress, "commit files", "", 0, 0);
    commit_together(all, options_.sync);
  }

  // The model into `to`: the ModelProto without the data of the streamed initializers
  // (the in_file_ ones the fold left as they were join streamed_ as copies), and that data
  // written in its place as it is read (splice_raw_data: the same bytes SerializeToString
  // gives for the model holding it).
  void write_model(AtomicFileWriter& to) {
    for (auto& t : *mp_.mutable_graph()->mutable_initializer()) {
      if (!in_file(t)) continue;
      const StoredData& at = in_file_.at(t.name());
      streamed_[t.name()] = {uint64_t(at.length), {}, at.offset};
      t.clear_external_data();
      t.clear_data_location();
    }
    std::string model;
    if (!mp_.SerializeToString(&model))
      throw ModelError(out_.string(), "the folded model cannot be serialized (over 2 GiB?)");
    std::map<std::string, uint64_t> sizes;
    for (const auto& [name, s] : streamed_) sizes[name] = s.size;
    const SplicedMessage spliced = splice_raw_data(model, sizes);
    if (spliced.size >= (uint64_t{2} << 30))
      throw ModelError(out_.string(), "the folded model would be 2 GiB or more, over protobuf's "
                                      "limit for one message");
    // In chunks, so that a large single-file model shows its progress.
    constexpr size_t kChunk = size_t(1) << 24;
    uint64_t done = 0;
    auto sink = [&](const char* b, size_t n) {
      for (size_t at = 0; at < n; at += kChunk) {
        report_progress(options_.progress, "write model", "bytes", done, spliced.size);
        const size_t len = std::min(kChunk, n - at);
        to.write(std::string_view(b + at, len));
        done += len;
      }
    };
    for (const SplicedPiece& p : spliced.pieces) {
      if (p.tensor.empty()) {
        sink(p.bytes.data(), p.bytes.size());
        continue;
      }
      const uint64_t before = done;
      const Streamed& s = streamed_.at(p.tensor);
      if (s.emit) {
        s.emit(sink);
      } else {
        to.append_from(source_.string(), s.offset, s.size);
        done += s.size;
      }
      if (done - before != p.size)
        throw InternalError("write_folded_onnx: " + p.tensor + ": wrong byte count");
    }
    report_progress(options_.progress, "write model", "bytes", done, spliced.size);
  }

  // Initializers that only the replaced norms' nodes read (their eps, exponent, axes)
  // would be left unused: they go with the nodes.
  void drop_norm_constants() {
    std::set<std::string> read_by_new;
    for (const auto& [at, nodes] : inserted_)
      for (const auto& n : nodes) read_by_new.insert(n.input().begin(), n.input().end());
    auto* inits = mp_.mutable_graph()->mutable_initializer();
    google::protobuf::RepeatedPtrField<ox::TensorProto> kept;
    for (auto& t : *inits) {
      bool dead = !is_graph_output(t.name()) && readers_.count(t.name()) &&
                  !read_by_new.count(t.name());
      if (dead)
        for (const Slot& s : readers_.at(t.name())) dead = dead && removed_.count(s.node);
      for (const auto& v : mp_.graph().input()) dead = dead && v.name() != t.name();
      if (!dead) *kept.Add() = std::move(t);
      else ++summary_.dropped;
    }
    inits->Swap(&kept);
  }

  // Bytes of external data copied so far, of all the files to copy.
  struct Copied {
    uint64_t done = 0, total = 0;
  };

  static uint64_t file_size_of(const fs::path& f) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    return ec ? 0 : uint64_t(size);
  }

  void copy_into(const fs::path& from, AtomicFileWriter& to, Copied& copied) const {
    std::ifstream in(from, std::ios::binary);
    if (!in) throw ModelError(from.string(), "cannot open the external data file");
    std::string buf(size_t(1) << 22, '\0');
    while (in) {
      report_progress(options_.progress, "copy external data", "bytes", copied.done,
                      std::max(copied.total, copied.done));
      in.read(buf.data(), std::streamsize(buf.size()));
      const auto got = in.gcount();
      if (got > 0) to.write(std::string_view(buf.data(), size_t(got)));
      copied.done += uint64_t(std::max<std::streamsize>(got, 0));
    }
    report_progress(options_.progress, "copy external data", "bytes", copied.done,
                    std::max(copied.total, copied.done));
  }
};

}  // namespace

ImportedParams imported_params(const lnv::Graph& original) {
  ImportedParams out;
  for (const Param& p : original.params) {
    out.names.insert(p.name);
    if (!p.values_deferred && std::all_of(p.values.begin(), p.values.end(), [](double x) { return x == 0.0; }))
      out.zero.insert(p.name);
  }
  return out;
}

FoldWriteSummary write_folded_onnx(const fs::path& source, const ImportedParams& original,
                                   const lnv::Graph& folded,
                                   const std::vector<std::string>& folded_norms,
                                   const fs::path& out, const FoldWriteOptions& options) {
  report_progress(options.progress, "parse model", "", 0, 0);
  FoldWriter w(source, original, folded, folded_norms, out, options);
  w.collect_norm_nodes();
  return w.run();
}

std::vector<fs::path> external_data_files(const fs::path& path) {
  std::map<std::string, StoredData> in_file;
  const ox::ModelProto mp = parse_model_leaving_data(path, kLeaveInFileBytes, in_file);
  const fs::path dir = fs::absolute(path).parent_path();
  std::set<fs::path> files;
  for (const auto& t : mp.graph().initializer())
    if (is_external(t) && !in_file.count(t.name())) files.insert((dir / external_key(t, "location")).lexically_normal());
  return {files.begin(), files.end()};
}

void check_onnx_file(const fs::path& path) {
  const std::string file = path.string();
  ox::ModelProto mp = parse_model(path);
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  try {
    if (!mp.ir_version()) throw ox::checker::ValidationError("the model has no ir_version");
    std::unordered_map<std::string, int> opsets;
    for (const auto& o : mp.opset_import()) opsets[o.domain()] = int(o.version());
    ox::checker::CheckerContext ctx;
    ctx.set_ir_version(int(mp.ir_version()));
    ctx.set_opset_imports(opsets);
    ctx.set_schema_registry(newer_opset_registry());
    ctx.set_model_dir(dir.string());
    ox::checker::LexicalScopeContext lex;
    ox::checker::check_graph(mp.graph(), ctx, lex);
    if (ctx.get_ir_version() >= 8) ox::checker::check_model_local_functions(mp, ctx, lex);
    // full_check: strict shape inference (type checks, errors thrown).
    infer_onnx_shapes(mp, InferenceCheck::strict);
  } catch (const std::exception& e) {
    throw ModelError(file, e.what());
  }
}

}  // namespace lnv::onnx_import
