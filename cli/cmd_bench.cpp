// `lnverify bench [MODEL.json] [--zoo NAME] [--seq T,...] [--threads N] [--repeats R]
// [--json F]`: which BLAS and how many threads LibTorch runs with; the norm kernel table
// (torch/kernel_bench.h); and, given a model, the original against its inference fold on
// the LibTorch engine (torch/model_bench.h). Timings are printed, never asserted.
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "cli/command.h"
#include "cli/model_input.h"
#include "cli/output_paths.h"
#include "cli/report_outputs.h"
#include "cli/terminal.h"
#include "cli/torch_helper.h"
#include "core/error.h"

#if LNV_HAVE_TORCH
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/model_json.h"
#include "generators/architectures.h"
#include "reports/bench_report.h"
#include "reports/html_report.h"
#include "torch/blas_info.h"
#include "torch/kernel_bench.h"
#include "torch/model_bench.h"
#endif

namespace lnv::cli {
namespace {

struct Options {
  std::string model, zoo, json_path, clock = "wall";
  std::vector<std::string> dims;  // --dim NAME=VALUE of an ONNX model
  std::vector<int64_t> seqs;
  int64_t layers = 0, hidden = 0, heads = 0, vocab = 0, batch = 0;
  int threads = 0, repeats = 7;
  std::optional<int> kernel_repeats;  // the kernel bench's own default unless given
  bool skip_kernels = false;
  ReportOutputs reports;  // --html only
};

#if LNV_HAVE_TORCH

// The zoo options a model was built with, from the `meta.zoo` the zoo writes.
zoo::ArchOptions options_from_meta(const Graph& g, const std::string& where) {
  const nlohmann::json meta = parse_meta(g);
  const auto zit = meta.is_object() ? meta.find("zoo") : meta.end();
  if (!meta.is_object() || zit == meta.end())
    throw ModelError(where, "--seq needs a model written by `lnverify zoo` (meta.zoo), or "
                            "--zoo NAME");
  zoo::ArchOptions o;
  const nlohmann::json& sizes = zit->at("sizes");
  auto take = [&](const char* key, std::optional<int64_t>& field) {
    if (sizes.contains(key)) field = sizes.at(key).get<int64_t>();
  };
  take("layers", o.layers);
  take("hidden", o.hidden);
  take("heads", o.heads);
  take("seq", o.seq);
  take("vocab", o.vocab);
  take("batch", o.batch);
  take("image", o.image);
  take("patch", o.patch);
  take("window", o.window);
  take("classes", o.classes);
  if (sizes.contains("depths")) o.depths = sizes.at("depths").get<std::vector<int64_t>>();
  if (sizes.contains("dropout")) o.dropout = sizes.at("dropout").get<double>();
  o.seed = g.seed;
  return o;
}

// The models to time: the file as it is, or the architecture rebuilt at each --seq.
std::vector<Graph> models_to_bench(const Options& st) {
  std::vector<Graph> out;
  if (st.model.empty() && st.zoo.empty()) return out;
  std::string arch = st.zoo;
  zoo::ArchOptions o;
  if (!st.model.empty()) {
    Graph g = load_input(st.model, st.dims);
    refuse_input_as_output("--json", st.json_path, st.model, g);
    prepare_report_outputs(st.reports, st.model, &g);
    if (st.seqs.empty()) {
      out.push_back(std::move(g));
      return out;
    }
    o = options_from_meta(g, st.model);
    arch = parse_meta(g).at("zoo").at("architecture").get<std::string>();
  }
  auto set = [](int64_t v, std::optional<int64_t>& field) {
    if (v > 0) field = v;
  };
  set(st.layers, o.layers);
  set(st.hidden, o.hidden);
  set(st.heads, o.heads);
  set(st.vocab, o.vocab);
  set(st.batch, o.batch);
  if (st.seqs.empty()) {
    out.push_back(zoo::build_architecture(arch, o));
    return out;
  }
  for (int64_t seq : st.seqs) {
    o.seq = seq;
    out.push_back(zoo::build_architecture(arch, o));
  }
  return out;
}

int run_bench(const Options& st) {
  using namespace lnv::torch;
  if (st.clock != "wall" && st.clock != "cpu")
    throw ModelError("bench/--clock", "expected wall or cpu, got '" + st.clock + "'");
  const Clock clock = st.clock == "cpu" ? Clock::cpu : Clock::wall;
  if (st.threads < 0) throw ModelError("bench/--threads", "expected a positive count");
  if (st.repeats < 1 || (st.kernel_repeats && *st.kernel_repeats < 1))
    throw ModelError("bench/--repeats", "expected at least 1 repeat");
  for (int64_t s : st.seqs)
    if (s < 1) throw ModelError("bench/--seq", "sequence lengths must be positive");
  // Load and build first, so bad input fails before minutes of timing.
  const std::vector<Graph> models = models_to_bench(st);
  prepare_report_outputs(st.reports, st.model, nullptr);

  const int default_threads = at::get_num_threads();
  const int threads = st.threads > 0 ? st.threads
                                     : int(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);  // also OpenMP's count, which our kernels use
  reuse_freed_memory();

  const BlasInfo blas = detect_blas();
  std::cout << describe(blas) << "\n";
  std::cerr << blas_warning(blas);
  const report::BenchSetup setup{blas_kind_name(blas.kind), blas.library_path, blas.loaded_as,
                                 blas.config, blas.blas_threads, threads, default_threads, st.clock};
  std::cout << report::bench_threads_line(setup) << "\n\n";
  nlohmann::json report = report::bench_json(setup);

  if (!st.skip_kernels) {
    KernelBenchOptions ko;
    if (st.kernel_repeats) ko.repeats = *st.kernel_repeats;
    ko.clock = clock;
    Progress progress("kernels", "shapes");
    ko.progress = progress.callback();
    const auto table = bench_norm_kernels(default_kernel_shapes(), ko);
    progress.clear();
    std::cout << "norm kernels, float32, " << ko.repeats << " interleaved samples each:\n"
              << format_kernel_table(table);
    report["kernels"] = table;
  }

  for (const Graph& g : models) {
    ModelBenchOptions mo;
    mo.repeats = st.repeats;
    mo.clock = clock;
    Progress progress("model " + g.name, "forward pairs");
    mo.progress = progress.callback();
    const ModelBenchResult r = bench_model(g, mo);
    progress.clear();
    std::cout << format_model_bench(r) << "\n";
    report["models"].push_back(r);
  }

  if (!st.json_path.empty()) write_file_atomically(st.json_path, report.dump(2) + "\n");
  write_report_outputs(st.reports, nullptr, nullptr, "lnverify bench",
                       {report::html_bench_section(report)});
  return kOk;
}

#else

// lnverify-torch times (cli/torch_helper.h); this build only read the options.
int run_bench(const Options&) { exec_torch_helper("bench"); }

#endif

Action setup(CLI::App& sub) {
  auto st = std::make_shared<Options>();
  sub.add_option("MODEL", st->model, "model to time, original against folded (model.json or .onnx)");
  sub.add_option("--dim", st->dims, "ONNX models: bind a symbolic input dim, NAME=VALUE (repeatable; a dim left free is bound to 1)");
  sub.add_option("--zoo", st->zoo, "time a zoo architecture (gpt2, bert, ...) built in memory");
  sub.add_option("--seq", st->seqs,
                 "sequence lengths, e.g. 128,512 (with --zoo, or a model `lnverify zoo` wrote)")
      ->delimiter(',')
      ->check(positive_count());
  // Sizes, counts and repeats are refused when not positive while the command line is
  // read, before any model is built or LibTorch is needed.
  sub.add_option("--layers", st->layers, "zoo size override")->check(positive_count());
  sub.add_option("--hidden", st->hidden, "zoo size override")->check(positive_count());
  sub.add_option("--heads", st->heads, "zoo size override")->check(positive_count());
  sub.add_option("--vocab", st->vocab, "zoo size override")->check(positive_count());
  sub.add_option("--batch", st->batch, "zoo size override")->check(positive_count());
  sub.add_option("--threads", st->threads,
                 "ATen/OpenMP threads (default: the hardware's count)")
      ->check(positive_count());
  sub.add_option("--repeats", st->repeats, "timed forwards per model variant (default 7)")
      ->check(positive_count());
  sub.add_option("--kernel-repeats", st->kernel_repeats,
                 "interleaved rounds per kernel and shape (default 21)")
      ->check(positive_count());
  sub.add_option("--clock", st->clock,
                 "wall (default) or cpu: process CPU time, steadier on a loaded machine");
  sub.add_flag("--no-kernels", st->skip_kernels, "skip the kernel table");
  sub.add_option("--json", st->json_path, "also write every sample as JSON here");
  add_report_outputs(sub, st->reports, false);
  return [st]() -> int { return run_bench(*st); };
}

const bool kRegistered = register_command(
    {"bench", "time the norm kernels and a model against its fold (LibTorch)", setup});

}  // namespace
}  // namespace lnv::cli
