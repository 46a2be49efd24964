// Writing model.json: each param kept as it was read (`init`, `file`) or written out
// (`data`, or tensors of a weights file), and the model and its weights committed
// together (model_to_json, model_to_text, save_model of core/model_json.h).
#include <algorithm>
#include <bit>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "core/model_json_internal.h"
#include "core/safetensors.h"
#include "core/stream_center.h"

namespace lnv {
namespace {

using namespace model_format;
using nlohmann::json;
namespace fs = std::filesystem;

// The path of `file` (relative to `from_dir`) as seen from `to_dir`.
std::string rebase_path(const std::string& file, const std::string& from_dir,
                        const std::string& to_dir) {
  const fs::path f(file);
  if (f.is_absolute()) return f.lexically_normal().generic_string();
  const fs::path src = (fs::absolute(from_dir.empty() ? "." : from_dir) / f).lexically_normal();
  const fs::path dst = fs::absolute(to_dir.empty() ? "." : to_dir).lexically_normal();
  const fs::path rel = src.lexically_relative(dst);
  return rel.empty() ? src.generic_string() : rel.generic_string();
}

// Streams deferred param `p` from `file` into `out`: its stored values, centered over
// p.center_axes when set (stream_centered: only a chunk of the tensor is in memory at a
// time). `In` is the element type the chunks are read as: float for F32 data (read as
// stored, widened in the arithmetic), double for other dtypes (converted on read).
template <class In>
void stream_typed(const SafetensorsReader& file, const SafetensorsSpan& span, const Param& p,
                  SafetensorsDType out_dtype, SafetensorsWriter& out) {
  auto read = [&](uint64_t done, uint64_t n, In* dst) {
    if constexpr (std::is_same_v<In, float>)
      file.read_raw(span, done, n, reinterpret_cast<char*>(dst));
    else
      file.read_values(span, done, n, dst);
  };
  auto append = [&](const auto* values, uint64_t n) { out.append(values, n); };
  const std::string what = "param '" + p.name + "'";
  if (out_dtype == SafetensorsDType::f32)
    stream_centered<In, float>(p.shape, p.center_axes, span.count, read, append, what);
  else
    stream_centered<In, double>(p.shape, p.center_axes, span.count, read, append, what);
}

void stream_param(const SafetensorsReader& file, const Param& p, SafetensorsDType out_dtype,
                  SafetensorsWriter& out) {
  const SafetensorsSpan span = loaded_span(file, p);
  if (std::endian::native == std::endian::little && span.dtype == "F32")
    stream_typed<float>(file, span, p, out_dtype, out);
  else
    stream_typed<double>(file, span, p, out_dtype, out);
}

// Whether the files params came from still hold exactly their values. Each file's header
// is parsed once.
class FileCheck {
 public:
  explicit FileCheck(std::string base_dir) : base_dir_(std::move(base_dir)) {}

  bool matches(const Param& p) {
    try {
      const SafetensorsTensor t = reader(p).read(p.file.key);
      return t.shape == p.shape && t.values == p.values;
    } catch (const ModelError&) {
      return false;
    }
  }

  // The (cached) reader of the file a `file` param reads.
  const SafetensorsReader& reader(const Param& p) {
    const std::string path = (fs::path(base_dir_) / p.file.path).lexically_normal().string();
    auto it = readers_.find(path);
    if (it == readers_.end())
      it = readers_.emplace(path, std::make_unique<SafetensorsReader>(path)).first;
    return *it->second;
  }

 private:
  std::string base_dir_;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers_;
};

// A deferred param written into the weights file: read from its file while writing.
struct StreamedTensor {
  const SafetensorsReader* source = nullptr;
  const Param* param = nullptr;
};

// Where values that are written out (not init, not an unchanged file) go: inline `data`,
// or, for a save with a weights file, tensors of that file (materialized values, or
// deferred params streamed from their file).
struct WeightsSink {
  std::string path_in_json;   // as written in `file.path` (relative to the model's dir)
  std::string resolved;       // absolute, normalized
  int64_t min_numel = 0;
  SafetensorsDType dtype = SafetensorsDType::f64;
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, StreamedTensor> streamed;
};

// The path a `file` param reads, absolute and normalized.
std::string resolved_file(const std::string& file, const std::string& base_dir) {
  const fs::path f(file);
  if (f.is_absolute()) return f.lexically_normal().string();
  return (fs::absolute(base_dir.empty() ? "." : base_dir) / f).lexically_normal().string();
}

json param_json(const Graph& g, const Param& p, size_t index, const std::string& out_dir,
                FileCheck& files, WeightsSink* sink) {
  const bool raw = p.center_axes.empty() && p.scale.empty();
  if (p.values_deferred && (p.lazy || !p.scale.empty()) && !(raw && p.source == ParamSource::init)) {
    Param loaded = p;
    materialize_values(loaded, g.base_dir);
    return param_json(g, loaded, index, out_dir, files, sink);
  }
  json o = json::object();
  o["name"] = p.name;
  o["shape"] = p.shape;
  // A param read from the file being rewritten must be written into it again.
  const bool reads_sink = sink && p.source == ParamSource::file &&
                          resolved_file(p.file.path, g.base_dir) == sink->resolved;
  if (raw && p.source == ParamSource::init &&
      (p.values_deferred ||  // never drawn, so never changed
       init_values(p.init, numel(p.shape), g.seed, p.name) == p.values)) {
    json init = {{"dist", p.init.dist}};
    if (p.init.dist == "normal") {
      if (p.init.mean != 0.0) init["mean"] = p.init.mean;
      init["std"] = p.init.std;
    } else {
      init["low"] = p.init.low;
      init["high"] = p.init.high;
    }
    o["init"] = std::move(init);
  } else if (raw && p.source == ParamSource::file && !reads_sink &&
             (p.values_deferred ||  // never loaded, so never changed
              (p.file_fingerprint != 0 ? param_fingerprint(p) == p.file_fingerprint
                                       : files.matches(p)))) {
    o["file"] = {{"path", rebase_path(p.file.path, g.base_dir, out_dir)}, {"key", p.file.key}};
  } else if (p.values_deferred && sink && (numel(p.shape) >= sink->min_numel || reads_sink)) {
    LNV_INTERNAL_ASSERT(p.values.empty(), "deferred param '" + p.name + "' holds values");
    sink->streamed[p.name] = {&files.reader(p), &p};
    o["file"] = {{"path", sink->path_in_json}, {"key", p.name}};
  } else if (p.values_deferred) {
    Param loaded = p;
    materialize_from(files.reader(p), loaded);
    std::vector<double> values = effective_values(loaded);
    check_finite(values, "/params/" + std::to_string(index), p.name, "");
    o["data"] = std::move(values);
  } else {
    std::vector<double> values = effective_values(p);
    check_finite(values, "/params/" + std::to_string(index), p.name, "");
    if (sink && (numel(p.shape) >= sink->min_numel || reads_sink)) {
      sink->tensors[p.name] = {p.shape, std::move(values), sink->dtype};
      o["file"] = {{"path", sink->path_in_json}, {"key", p.name}};
    } else {
      o["data"] = std::move(values);
    }
  }
  return o;
}

json input_json(const Input& in) {
  json o = {{"name", in.name}, {"shape", in.shape}};
  o["dtype"] = in.dtype == DType::index ? "index" : "float";
  if (in.dtype == DType::index) o["range"] = in.range;
  return o;
}

json build_model_json(const Graph& g, const std::string& out_dir, WeightsSink* sink,
                      FileCheck& files, const ProgressFn& progress = {}) {
  json j = json::object();
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["name"] = g.name;
  j["seed"] = g.seed;
  if (!g.meta.empty()) j["meta"] = parse_meta(g);
  j["inputs"] = json::array();
  for (const Input& in : g.inputs) j["inputs"].push_back(input_json(in));
  j["params"] = json::array();
  for (size_t i = 0; i < g.params.size(); ++i) {
    report_progress(progress, "encode params", "params", i, g.params.size());
    j["params"].push_back(param_json(g, g.params[i], i, out_dir, files, sink));
  }
  report_progress(progress, "encode params", "params", g.params.size(), g.params.size());
  j["nodes"] = json::array();
  for (const Node& n : g.nodes) j["nodes"].push_back(node_to_json(n));
  j["outputs"] = g.outputs;
  return j;
}

}  // namespace

nlohmann::json parse_meta(const Graph& g) {
  return g.meta.empty() ? json() : json::parse(g.meta);
}

nlohmann::json model_to_json(const Graph& g, const std::string& out_dir) {
  FileCheck files(g.base_dir);
  return build_model_json(g, out_dir, nullptr, files);
}

std::string model_to_text(const Graph& g, const std::string& out_dir) {
  FileCheck files(g.base_dir);
  return json_to_text(build_model_json(g, out_dir, nullptr, files));
}

void save_model(const Graph& g, const std::string& path, const SaveOptions& options) {
  const std::string out_dir = fs::path(path).parent_path().string();
  FileCheck files(g.base_dir);
  std::optional<WeightsSink> sink;
  if (!options.weights_file.empty()) {
    sink.emplace();
    sink->path_in_json = fs::path(options.weights_file).generic_string();
    sink->resolved = resolved_file(options.weights_file, out_dir);
    sink->min_numel = options.min_file_numel;
    sink->dtype = options.weights_dtype;
  }
  const ProgressFn& progress = options.progress;
  const std::string text =
      json_to_text(build_model_json(g, out_dir, sink ? &*sink : nullptr, files, progress), progress);
  // Every file is written to a temporary file first and renamed into place only when all
  // are complete, the weights before the model (so that the model never points at
  // tensors that are not there yet): a failure leaves no file changed.
  std::vector<AtomicFileWriter*> commit_order;
  std::optional<SafetensorsWriter> weights;
  if (sink && (!sink->tensors.empty() || !sink->streamed.empty())) {
    std::vector<SafetensorsWriter::Tensor> layout;  // sorted by key (names are unique)
    for (const auto& [key, t] : sink->tensors) layout.push_back({key, t.shape, t.dtype});
    for (const auto& [key, t] : sink->streamed) layout.push_back({key, t.param->shape, sink->dtype});
    std::sort(layout.begin(), layout.end(),
              [](const auto& a, const auto& b) { return a.key < b.key; });
    weights.emplace(sink->resolved, layout, /*finite_only=*/true);
    uint64_t done = 0, total = 0;  // bytes of tensor data
    auto bytes_of = [](const SafetensorsWriter::Tensor& t, uint64_t count) {
      return count * (t.dtype == SafetensorsDType::f32 ? 4 : 8);
    };
    for (const SafetensorsWriter::Tensor& t : layout) total += bytes_of(t, uint64_t(numel(t.shape)));
    report_progress(progress, "write weights", "bytes", done, total);
    for (const SafetensorsWriter::Tensor& t : layout) {
      if (auto it = sink->tensors.find(t.key); it != sink->tensors.end()) {
        // In chunks, so that a large tensor shows its progress.
        constexpr size_t kChunk = size_t(1) << 20;
        const std::vector<double>& v = it->second.values;
        for (size_t at = 0; at < v.size(); at += kChunk) {
          const size_t n = std::min(kChunk, v.size() - at);
          weights->append(v.data() + at, n);
          done += bytes_of(t, n);
          report_progress(progress, "write weights", "bytes", done, total);
        }
      } else {
        const StreamedTensor& st = sink->streamed.at(t.key);
        stream_param(*st.source, *st.param, t.dtype, *weights);
        done += bytes_of(t, uint64_t(numel(t.shape)));
        report_progress(progress, "write weights", "bytes", done, total);
      }
    }
    commit_order.push_back(&weights->finish());
  }
  commit_order.insert(commit_order.end(), options.commit_with.begin(), options.commit_with.end());
  AtomicFileWriter model(path);
  constexpr size_t kChunk = size_t(1) << 24;  // a large inline model shows its progress
  for (size_t at = 0; at < text.size(); at += kChunk) {
    report_progress(progress, "write model", "bytes", at, text.size());
    model.write(std::string_view(text).substr(at, kChunk));
  }
  report_progress(progress, "write model", "bytes", text.size(), text.size());
  commit_order.push_back(&model);
  report_progress(progress, "commit files", "", 0, 0);
  commit_together(commit_order, options.sync);
}

}  // namespace lnv
