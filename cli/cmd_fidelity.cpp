// `lnverify fidelity MODEL.json [--mode inference|training] [--trials N] [--trials64 M]
// [--seed S] [--threads T] [--json F]`: folds the model and measures, with the LibTorch
// engine, how closely the fold reproduces the original at real sizes (torch/fidelity.h):
// float32 differences and top-1 agreement, float64 outputs (and gradients in training).
//
// Exit codes: 0 when the float64 differences are within --tol (default 1e-9), 1 when
// not (the fold is wrong), 2 bad input. Only with LibTorch (LNV_WITH_TORCH): lnverify
// reads the options and runs lnverify-torch (cli/torch_helper.h), which measures.
#if defined(LNV_HAVE_TORCH) || defined(LNV_TORCH_HELPER)

#include <iostream>

#include "cli/command.h"
#include "cli/fidelity_run.h"
#include "cli/model_input.h"
#include "cli/torch_helper.h"

#ifdef LNV_HAVE_TORCH
#include "cli/output_paths.h"
#include "cli/terminal.h"
#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "torch/engine.h"
#include "torch/fidelity.h"
#endif

namespace lnv::cli {

#ifdef LNV_HAVE_TORCH
int run_fidelity(const FidelityArgs& a) {
  if (a.threads > 0) torch_engine::set_threads(a.threads);
  // Weights stay in their source until each engine reads them (torch/engine.h), so the
  // model and its fold hold no second copy in double.
  LoadOptions load;
  load.defer_values = true;
  const Graph g = load_input(a.model, a.dims, load);
  refuse_input_as_output("--json", a.json, a.model, g);
  torch_engine::FidelityOptions opt;
  opt.mode = a.mode;
  opt.trials = a.trials;
  opt.trials_f64 = a.trials64;
  opt.seed = a.seed;
  const Graph folded = apply_fold(g, detect_foldable(g, a.mode));
  Progress progress("fidelity", "trials");
  opt.progress = progress.callback();
  const torch_engine::FidelityReport rep = torch_engine::measure_fidelity(g, folded, opt);
  progress.clear();
  std::cout << torch_engine::to_text(rep);
  if (!a.json.empty()) write_file_atomically(a.json, nlohmann::json(rep).dump(2) + "\n");
  const bool exact = rep.f64_output_rel <= a.tol && rep.f64_grad_rel <= a.tol;
  if (!exact) std::cout << "FAIL: float64 differences exceed --tol " << a.tol << "\n";
  return exact ? kOk : kCheckFails;
}
#else
int run_fidelity(const FidelityArgs&) { exec_torch_helper("fidelity"); }
#endif

namespace {

Action setup(CLI::App& sub) {
  auto st = std::make_shared<FidelityArgs>();
  auto mode = std::make_shared<std::string>("inference");
  add_model_input(sub, st->model, st->dims, "the model to run (model.json or .onnx)");
  sub.add_option("--mode", *mode, "the fold and the runs: inference (default) or training")
      ->check(CLI::IsMember({"inference", "training"}));
  sub.add_option("--trials", st->trials, "float32 random inputs (default 16)")
      ->check(CLI::Range(1, 100000));
  sub.add_option("--trials64", st->trials64, "float64 random inputs (default 2)")
      ->check(CLI::Range(0, 1000));
  sub.add_option("--seed", st->seed, "run seed of trial 0; trial k uses seed + k")
      ->check(seed_range());
  sub.add_option("--tol", st->tol, "float64 relative difference allowed (default 1e-9)")
      ->check(positive_finite());
  sub.add_option("--threads", st->threads, "LibTorch intra-op threads (default: its own)")
      ->check(CLI::Range(1, 1024));
  sub.add_option("--json", st->json, "also write the report as JSON to this file");
  return [st, mode]() -> int {
    st->mode = *mode == "training" ? Mode::training : Mode::inference;
    return run_fidelity(*st);
  };
}

const bool kRegistered = register_command(
    {"fidelity", "measure a fold's float32/float64 fidelity at real size (LibTorch engine)",
     setup});

}  // namespace
}  // namespace lnv::cli

#endif  // LNV_HAVE_TORCH || LNV_TORCH_HELPER
