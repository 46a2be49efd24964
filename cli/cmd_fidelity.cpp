// `lnverify fidelity MODEL.json [--mode inference|training] [--trials N] [--trials64 M]
// [--seed S] [--threads T] [--json F]`: folds the model and measures, with the LibTorch
// engine, how closely the fold reproduces the original at real sizes (torch/fidelity.h):
// float32 differences and top-1 agreement, float64 outputs (and gradients in training).
//
// Exit codes: 0 when the float64 differences are within --tol (default 1e-9), 1 when
// not (the fold is wrong), 2 bad input. Only with LibTorch (LNV_WITH_TORCH).
#ifdef LNV_HAVE_TORCH

#include <fstream>
#include <iostream>

#include "cli/command.h"
#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/model_json.h"
#include "torch/engine.h"
#include "torch/fidelity.h"

namespace lnv::cli {
namespace {

Action setup(CLI::App& sub) {
  struct State {
    std::string model, mode = "inference", json;
    torch_engine::FidelityOptions opt;
    double tol = 1e-9;
    int threads = 0;
  };
  auto st = std::make_shared<State>();
  sub.add_option("MODEL", st->model, "model.json")->required();
  sub.add_option("--mode", st->mode, "the fold and the runs: inference (default) or training")
      ->check(CLI::IsMember({"inference", "training"}));
  sub.add_option("--trials", st->opt.trials, "float32 random inputs (default 16)")
      ->check(CLI::Range(1, 100000));
  sub.add_option("--trials64", st->opt.trials_f64, "float64 random inputs (default 2)")
      ->check(CLI::Range(0, 1000));
  sub.add_option("--seed", st->opt.seed, "run seed of trial 0; trial k uses seed + k");
  sub.add_option("--tol", st->tol, "float64 relative difference allowed (default 1e-9)");
  sub.add_option("--threads", st->threads, "LibTorch intra-op threads (default: its own)");
  sub.add_option("--json", st->json, "also write the report as JSON to this file");
  return [st]() -> int {
    if (st->threads > 0) torch_engine::set_threads(st->threads);
    const Graph g = load_model(st->model);
    st->opt.mode = st->mode == "training" ? Mode::training : Mode::inference;
    const Graph folded = apply_fold(g, detect_foldable(g, st->opt.mode));
    const torch_engine::FidelityReport rep = torch_engine::measure_fidelity(g, folded, st->opt);
    std::cout << torch_engine::to_text(rep);
    if (!st->json.empty()) {
      std::ofstream out(st->json);
      if (!out) throw ModelError(st->json, "cannot write the JSON report");
      out << nlohmann::json(rep).dump(2) << "\n";
    }
    const bool exact = rep.f64_output_rel <= st->tol && rep.f64_grad_rel <= st->tol;
    if (!exact) std::cout << "FAIL: float64 differences exceed --tol " << st->tol << "\n";
    return exact ? kOk : kCheckFails;
  };
}

const bool kRegistered = register_command(
    {"fidelity", "measure a fold's float32/float64 fidelity at real size (LibTorch engine)",
     setup});

}  // namespace
}  // namespace lnv::cli

#endif  // LNV_HAVE_TORCH
