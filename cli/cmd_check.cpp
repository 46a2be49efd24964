// `lnverify check MODEL.json [--mode inference|training] [--bits N] [--trials K] [--seed S]
// [--json F]`: proves the analysis' verdicts on a model by exact evaluation
// (checkers/equivalence.h): every foldable LN folds exactly, every "not foldable" is
// tight, the whole plan is exact (and in training mode, gradients too).
//
// Exit codes (cli/command.h): 0 every check holds, 1 a check fails (printed: which LN or
// output, the trial's run seed, the first node where original and rewrite part), 2 bad
// input, 3 inconclusive.
#include <fstream>
#include <iostream>

#include "checkers/equivalence.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/model_json.h"
#include "reports/check_report.h"

namespace lnv::cli {
namespace {

Action setup(CLI::App& sub) {
  struct State {
    std::string model, mode = "inference", json;
    check::CheckOptions opt;
  };
  auto st = std::make_shared<State>();
  sub.add_option("MODEL", st->model, "model.json to check")->required();
  sub.add_option("--mode", st->mode, "inference (default) or training")
      ->check(CLI::IsMember({"inference", "training"}));
  sub.add_option("--bits", st->opt.bits, "MPFR precision of the evaluations (default 256)")
      ->check(CLI::Range(24u, 8192u));
  sub.add_option("--trials", st->opt.trials, "random inputs and dropout masks (default 3)")
      ->check(CLI::Range(1, 1000));
  sub.add_option("--seed", st->opt.seed, "run seed of trial 0; trial k uses seed + k");
  sub.add_option("--forced-folds", st->opt.max_forced_folds,
                 "forced folds tried per LN judged not foldable (default 64)")
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--json", st->json, "also write the report as JSON to this file");
  return [st]() -> int {
    // load -> detect -> rewrite -> evaluate both -> compare -> report
    const Graph g = load_model(st->model);
    st->opt.mode = st->mode == "training" ? Mode::training : Mode::inference;
    st->opt.model_name = st->model;
    const report::CheckReport rep = check::check_model(g, st->opt);
    std::cout << report::to_text(rep);
    if (!st->json.empty()) {
      std::ofstream out(st->json);
      if (!out) throw ModelError(st->json, "cannot write the JSON report");
      out << nlohmann::json(rep).dump(2) << "\n";
    }
    switch (rep.outcome()) {
      case report::Outcome::holds: return kOk;
      case report::Outcome::fails: return kCheckFails;
      case report::Outcome::inconclusive: return kInconclusive;
    }
    return kInternal;
  };
}

const bool kRegistered = register_command(
    {"check", "prove the verdicts and the rewrite of a model by exact evaluation", setup});

}  // namespace
}  // namespace lnv::cli
