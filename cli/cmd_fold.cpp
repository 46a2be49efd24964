// `lnverify fold MODEL.json -o OUT.json [--mode inference|training] [--json REPORT]
//                [--weights FILE | --inline] [--weights-dtype source|f32|f64] [--timings]
//                [--no-fsync]`:
// rewrites every LayerNorm foldable in the mode into an RMSNorm, centering the terms that
// feed it, and writes the rewritten model atomically (never over its own input).
//
// `lnverify fold MODEL.onnx -o FOLDED.onnx [--mode inference|training]
//                [--rms-op decomposed|ort|ort-skip|onnx23] [--keep-opset]`
// writes the fold onto the original ONNX file instead (onnx/fold_writer.h): inference
// stores centered initializers, training keeps every initializer and centers in the graph.
//
// Where the weights go: when the input has `file` params or a param of at least
// kLargeParam values (or --weights is given), params that must be written out (centered,
// or inline `data`) with at least kMinFileNumel values go into a safetensors side file
// (default: OUT with the extension .safetensors) and the rest stays inline; unchanged
// `file` params are referenced, not copied. --inline writes every value into OUT.
// The side file's dtype: `source` (default) is F32 when every param of at least
// kMinFileNumel values is a `file` param stored in F32/F16/BF16 and F64 otherwise; F32
// rounds each (double-)centered value to the nearest float, F64 is exact.
//
// The input is loaded with its `file` params deferred (header, shape and finiteness of the
// stored data checked; nothing converted to double): unchanged ones are referenced and
// centered ones are streamed from the input's file into the side file. The model, the side
// file and the --json report are written all or nothing (on an error none is changed) and
// fsync'ed before being renamed into place unless --no-fsync; none of them may name the
// input model, a file it reads, or another of them.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/terminal.h"
#include "cli/model_input.h"
#include "cli/output_paths.h"
#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "core/safetensors.h"
#include "reports/audit_report.h"
#ifdef LNV_HAVE_ONNX
#include "onnx/fold_writer.h"
#endif

namespace lnv::cli {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kLargeParam = 65536;   // a param this large makes a side file worth it
constexpr int64_t kMinFileNumel = 1024;  // smaller written-out params stay inline

// Whether the input's weights are all 32-bit or narrower floats (see the file comment).
bool narrow_source(const Graph& g) {
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers;
  bool any = false;
  for (const Param& p : g.params) {
    if (numel(p.shape) < kMinFileNumel) continue;
    if (p.source != ParamSource::file) return false;
    const std::string path = param_file(g, p);
    auto it = readers.find(path);
    if (it == readers.end()) it = readers.emplace(path, std::make_unique<SafetensorsReader>(path)).first;
    const std::string dt = it->second->dtype(p.file.key);
    if (dt != "F32" && dt != "F16" && dt != "BF16") return false;
    any = true;
  }
  return any;
}

struct State {
  std::string model, out, mode = "inference", json, weights, dtype = "source", rms_op;
  bool inline_values = false, timings = false, no_fsync = false, keep_opset = false;
  bool dtype_given = false;  // --weights-dtype on the command line
  std::vector<std::string> dims;
};

bool is_onnx_output(const std::string& out) {
  return out.size() > 5 && out.compare(out.size() - 5, 5, ".onnx") == 0;
}

// The seconds of each step, printed to stderr with --timings.
class Laps {
 public:
  void lap(const char* what) {
    const auto t = Clock::now();
    times_.emplace_back(what, std::chrono::duration<double>(t - t0_).count());
    t0_ = t;
  }
  void print(bool timings) const {
    if (!timings) return;
    std::cerr << "timings:";
    for (const auto& [what, sec] : times_) std::cerr << " " << what << " " << sec << " s";
    std::cerr << "\n";
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point t0_ = Clock::now();
  std::vector<std::pair<const char*, double>> times_;
};

// No output may name the input model or another output.
void refuse_overwrites(const State& st) {
  if (same_file(st.model, st.out))
    throw ModelError(st.out, "refusing to overwrite the input model; choose another -o path");
  if (!st.json.empty() && (same_file(st.json, st.model) || same_file(st.json, st.out)))
    throw ModelError(st.json, "the report would overwrite a model file; choose another --json path");
}

// `fold MODEL.onnx -o FOLDED.onnx`: the original ONNX graph with the folded norms replaced
// and the centered initializers rewritten (onnx/fold_writer.h).
int fold_to_onnx(const State& st, Mode mode) {
#ifdef LNV_HAVE_ONNX
  if (!is_onnx_input(st.model))
    throw ModelError(st.out, "an ONNX output needs an ONNX model (this one is a model.json); "
                             "use -o OUT.json");
  if (!st.weights.empty() || st.inline_values || st.dtype_given)
    throw ModelError(!st.weights.empty() ? "--weights" : st.inline_values ? "--inline" : "--weights-dtype",
                     "applies to a model.json output; an ONNX output keeps its weights as the "
                     "input does (docs/onnx.md, \"ONNX out\")");
  Laps laps;
  // The weights stay in the file: the writer reads each initializer it centers from
  // there, one at a time, and copies the others' bytes (or leaves them in external data).
  LoadOptions load;
  load.defer_values = true;
  Graph g = load_input(st.model, st.dims, load);
  laps.lap("load");
  const FoldPlan plan = detect_foldable(g, mode);
  laps.lap("detect");
  // The writer reads where each centered value goes from the plan applied as in inference;
  // in training it computes those values in the graph instead of storing them.
  FoldPlan as_stored = plan;
  as_stored.mode = Mode::inference;
  std::optional<AtomicFileWriter> report_file;
  onnx_import::FoldWriteOptions options;
  options.mode = mode;
  options.rms_op = st.rms_op == "ort"        ? onnx_import::RmsOp::ort
                   : st.rms_op == "ort-skip" ? onnx_import::RmsOp::ort_skip
                   : st.rms_op == "onnx23"   ? onnx_import::RmsOp::onnx23
                                           : onnx_import::RmsOp::decomposed;
  options.keep_opset = st.keep_opset;
  options.sync = !st.no_fsync;
  if (!st.json.empty()) {
    report_file.emplace(st.json);
    report_file->write(report::audit_json(g, plan).dump(2) + "\n");
    options.commit_with.push_back(&*report_file);
  }
  const std::string summary = report::audit_summary(g, plan);
  const auto imported = onnx_import::imported_params(g);
  const Graph folded = apply_fold(std::move(g), as_stored);  // in place: no copy of the weights
  laps.lap("fold");
  onnx_import::FoldWriteSummary w;
  {
    StepProgress progress;  // erased before the summary is printed
    options.progress = progress.callback();
    w = onnx_import::write_folded_onnx(st.model, imported, folded, plan.fold, st.out, options);
  }
  laps.lap("write");
  std::cout << summary << "\n"
            << "wrote " << st.out << ": " << w.norms << " LayerNorm" << (w.norms == 1 ? "" : "s")
            << " -> RMSNorm (" << (st.rms_op.empty() ? "decomposed" : st.rms_op) << "), ";
  if (mode == Mode::training)
    std::cout << w.centered_in_graph << " value" << (w.centered_in_graph == 1 ? "" : "s")
              << " centered in the graph, every initializer kept (training)\n";
  else
    std::cout << w.centered_in_place << " initializer" << (w.centered_in_place == 1 ? "" : "s")
              << " centered in place, " << w.centered_copies << " new\n";
  if (!w.side_file.empty()) std::cout << "data: " << w.side_file << "\n";
  for (const std::string& f : w.copied_files) std::cout << "copied: " << f << "\n";
  laps.print(st.timings);
  return kOk;
#else
  (void)mode;
  throw ModelError(st.out, "this lnverify was built without ONNX support (LNV_WITH_ONNX=OFF)");
#endif
}

// An ONNX model's external data is read as it is imported: no output may replace it.
void refuse_overwriting_external_data([[maybe_unused]] const State& st) {
#ifdef LNV_HAVE_ONNX
  if (!is_onnx_input(st.model)) return;
  for (const auto& f : onnx_import::external_data_files(st.model))
    for (const std::string* out : {&st.out, &st.json, &st.weights})
      if (!out->empty() && same_file(*out, f.string()))
        throw ModelError(*out, "refusing to overwrite the external data file " + f.string() +
                                   " the input model reads; choose another path");
#endif
}

// Where the weights of the model.json output go (see the file comment): the side file,
// checked against every file the fold reads or writes, and its dtype.
void choose_side_file(const State& st, const Graph& g, SaveOptions& options) {
  bool side = !st.weights.empty();
  for (const Param& p : g.params)
    side = side || p.source == ParamSource::file || numel(p.shape) >= kLargeParam;
  if (!side || st.inline_values) return;
  const fs::path out_dir = fs::absolute(fs::path(st.out)).parent_path();
  const fs::path file = st.weights.empty()
                            ? out_dir / fs::path(st.out).filename().replace_extension(".safetensors")
                            : fs::absolute(st.weights);
  const std::string file_str = file.lexically_normal().string();
  for (const Param& p : g.params)
    if (p.source == ParamSource::file && same_file(param_file(g, p), file_str))
      throw ModelError(file_str, "refusing to overwrite a weights file the input model reads "
                                 "(param '" + p.name + "'); choose --weights or another -o");
  if (same_file(file_str, st.out) || same_file(file_str, st.model))
    throw ModelError(file_str, "the weights file would overwrite a model file; choose --weights");
  if (!st.json.empty() && same_file(st.json, file_str))
    throw ModelError(st.json, "the report would overwrite the weights file; choose another --json path");
  options.weights_file = file.lexically_normal().lexically_relative(out_dir).generic_string();
  options.min_file_numel = kMinFileNumel;
  const bool f32 = st.dtype == "f32" || (st.dtype == "source" && narrow_source(g));
  options.weights_dtype = f32 ? SafetensorsDType::f32 : SafetensorsDType::f64;
}

// `fold MODEL -o OUT.json`: the folded model.json, its large weights in a side file.
int fold_to_json(const State& st, Mode mode) {
  if (!st.rms_op.empty() || st.keep_opset)
    throw ModelError(st.rms_op.empty() ? "--keep-opset" : "--rms-op",
                     "applies to an ONNX output (-o FOLDED.onnx from an ONNX model)");
  Laps laps;
  refuse_overwriting_external_data(st);
  // File params stay deferred: the fold reads structure only, and save_model streams
  // the params it centers from the input's file.
  LoadOptions load;
  load.defer_file_values = true;
  Graph g = load_input(st.model, st.dims, load);
  laps.lap("load");
  refuse_input_as_output("--json", st.json, st.model, g);
  const FoldPlan plan = detect_foldable(g, mode);
  laps.lap("detect");

  SaveOptions options;
  options.sync = !st.no_fsync;
  choose_side_file(st, g, options);
  // The reports read the original graph, so they are made before it is rewritten in place.
  const std::string report = st.json.empty() ? "" : report::audit_json(g, plan).dump(2) + "\n";
  const std::string summary = report::audit_summary(g, plan);
  laps.lap("report");
  const Graph folded = apply_fold(std::move(g), plan);
  laps.lap("fold");
  // The report is committed with the model: on any error neither is written.
  std::optional<AtomicFileWriter> report_file;
  if (!st.json.empty()) {
    report_file.emplace(st.json);
    report_file->write(report);
    options.commit_with.push_back(&*report_file);
  }
  {
    StepProgress progress;  // erased before the summary is printed
    options.progress = progress.callback();
    save_model(folded, st.out, options);
  }
  laps.lap("save");
  if (!quiet()) std::cout << summary << "\n";
  std::cout << "wrote " << st.out << ": " << plan.fold.size() << " LayerNorm"
            << (plan.fold.size() == 1 ? "" : "s") << " -> RMSNorm, " << plan.center.size()
            << " term" << (plan.center.size() == 1 ? "" : "s") << " centered (" << st.mode
            << ")\n";
  if (!options.weights_file.empty() && !quiet())
    std::cout << "weights: " << options.weights_file << " ("
              << (options.weights_dtype == SafetensorsDType::f32 ? "F32" : "F64")
              << "), unchanged file params referenced\n";
  laps.print(st.timings);
  return kOk;
}

Action setup(CLI::App& sub) {
  auto st = std::make_shared<State>();
  add_model_input(sub, st->model, st->dims, "the model to rewrite (model.json or .onnx)");
  sub.add_option("-o,--output", st->out, "where to write the rewritten model: model.json, or FOLDED.onnx for an ONNX model")->required();
  sub.add_option("--mode", st->mode, "inference (center weights in place) or training "
                                     "(keep the stored weights: cbwc marks, or for an ONNX "
                                     "output centering nodes in the graph)")
      ->check(CLI::IsMember({"inference", "training"}));
  sub.add_option("--json", st->json, "also write the audit report of the fold as JSON");
  auto* weights = sub.add_option("--weights", st->weights,
                                 "safetensors side file for written-out weights (default: "
                                 "OUT with .safetensors, when the input has file params or "
                                 "params of 65536+ values)");
  sub.add_flag("--inline", st->inline_values, "write every value inline into OUT (no side file)")
      ->excludes(weights);
  auto* dtype = sub.add_option("--weights-dtype", st->dtype,
                 "side file dtype: source (F32 when the input's large params are all "
                 "F32/F16/BF16 files, else F64), f32 (nearest float) or f64 (exact)")
      ->check(CLI::IsMember({"source", "f32", "f64"}));
  sub.add_option("--rms-op", st->rms_op,
                 "ONNX output (-o X.onnx): how an RMSNorm is spelled: decomposed (standard ops, "
                 "the default), ort (ONNX Runtime's SimplifiedLayerNormalization), ort-skip "
                 "(ort, with a residual Add before the norm fused: "
                 "com.microsoft.SkipSimplifiedLayerNormalization) or onnx23 "
                 "(RMSNormalization, raising the opset to 23)")
      ->check(CLI::IsMember({"decomposed", "ort", "ort-skip", "onnx23"}));
  sub.add_flag("--keep-opset", st->keep_opset,
               "ONNX output: never raise the model's opset (--rms-op onnx23 on an older model "
               "is then an error)");
  sub.add_flag("--timings", st->timings, "print the seconds of load, detect, fold and save to stderr");
  sub.add_flag("--no-fsync", st->no_fsync,
               "do not flush the written files to disk before renaming them into place "
               "(faster; a crash soon after may leave an empty or partial file)");
  return [st, dtype]() -> int {
    st->dtype_given = dtype->count() > 0;
    refuse_overwrites(*st);
    const Mode mode = st->mode == "training" ? Mode::training : Mode::inference;
    return is_onnx_output(st->out) ? fold_to_onnx(*st, mode) : fold_to_json(*st, mode);
  };
}

const bool kRegistered = register_command(
    {"fold", "rewrite the foldable LayerNorms into RMSNorm and write the model", setup});

}  // namespace
}  // namespace lnv::cli
