// write_folded_onnx (onnx/fold_writer.h): the fold of the imported graph carried back onto
// the original ModelProto by the FoldWriter of onnx/fold_writer_internal.h, which says what
// changes and which file does each part. Here: the protobuf helpers its files share, its
// construction, its index of the graph, the order of its passes (run) and the paths it
// refuses to overwrite; and the public functions of onnx/fold_writer.h.
#include "onnx/fold_writer.h"

#include <nlohmann/json.hpp>

#include "onnx/fold_writer_internal.h"
#include "onnx/onnx_checker.h"

namespace lnv::onnx_import {
namespace fold_write {

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

FoldWriter::FoldWriter(const fs::path& source, const ImportedParams& original, const lnv::Graph& folded,
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

FoldWriteSummary FoldWriter::run() {
  refuse_overwrites();
  prepare_opset();
  center_params();
  replace_layer_scales();
  move_biases();
  replace_norms();
  write();
  return summary_;
}

bool FoldWriter::in_file(const ox::TensorProto& t) const {
  return is_external(t) && in_file_.count(t.name()) &&
         external_key(t, "location") == source_.filename().string();
}

std::string FoldWriter::file_name(const std::string& lnv_name) const {
  auto it = renamed_.find(lnv_name);
  if (it != renamed_.end()) return it->second;
  // A moved bias' nodes (moved_bias_own) are named after their reader.
  for (const std::string& suffix : {moved_bias_own(""), moved_bias_image("") + ".row", moved_bias_image("")})
    if (lnv_name.size() > suffix.size() &&
        lnv_name.compare(lnv_name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return file_name(lnv_name.substr(0, lnv_name.size() - suffix.size())) + suffix;
  return lnv_name;
}

std::string FoldWriter::fresh(const std::string& base) { return names_.fresh(base); }

void FoldWriter::index_graph() {
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

bool FoldWriter::is_graph_output(const std::string& v) const {
  for (const auto& o : mp_.graph().output())
    if (o.name() == v) return true;
  return false;
}

std::string FoldWriter::node_label(int i) const {
  const auto& n = mp_.graph().node(i);
  return "node " + in_quotes(n.name().empty() ? "#" + std::to_string(i) : n.name()) + " (" +
         n.op_type() + ")";
}

std::vector<fs::path> FoldWriter::input_data_files() const { return input_data_files_; }

bool FoldWriter::same_path(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(fs::absolute(a), ec) == fs::weakly_canonical(fs::absolute(b), ec);
}

fs::path FoldWriter::side_path() const { return fs::path(out_.string() + ".data"); }

bool FoldWriter::out_beside_input() const {
  const fs::path od = out_.parent_path().empty() ? fs::path(".") : out_.parent_path();
  return same_path(od, model_dir_);
}

void FoldWriter::refuse_overwrites() const {
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

}  // namespace fold_write

namespace fs = std::filesystem;
namespace ox = ::onnx;
using fold_write::FoldWriter;
using fold_write::external_key;
using fold_write::is_external;
using fold_write::parse_model;
using fold_write::parse_model_leaving_data;

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
  ox::ModelProto mp = parse_model(path);
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  check_onnx_model(mp, dir, path.string(), OnnxCheck::full);
}

}  // namespace lnv::onnx_import
