// `lnverify fold MODEL.json -o OUT.json [--mode inference|training] [--json REPORT]`:
// rewrites every LayerNorm foldable in the mode into an RMSNorm, centering the terms that
// feed it, and writes the rewritten model atomically (never over its own input).
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "reports/audit_report.h"

namespace lnv::cli {
namespace {

namespace fs = std::filesystem;

// True when both paths name the same file (existing or not), through links and `..`.
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

Action setup(CLI::App& sub) {
  struct State {
    std::string model, out, mode = "inference", json;
  };
  auto st = std::make_shared<State>();
  sub.add_option("MODEL", st->model, "model.json to rewrite")->required();
  sub.add_option("-o,--output", st->out, "where to write the rewritten model.json")->required();
  sub.add_option("--mode", st->mode, "inference (center weights in place) or training "
                                     "(keep the stored weights, mark cbwc)")
      ->check(CLI::IsMember({"inference", "training"}));
  sub.add_option("--json", st->json, "also write the audit report of the fold as JSON");
  return [st]() -> int {
    if (same_file(st->model, st->out))
      throw ModelError(st->out, "refusing to overwrite the input model; choose another -o path");
    const Mode mode = st->mode == "training" ? Mode::training : Mode::inference;
    const Graph g = load_model(st->model);
    const FoldPlan plan = detect_foldable(g, mode);
    const Graph folded = apply_fold(g, plan);
    save_model(folded, st->out);
    if (!st->json.empty())
      write_file_atomically(st->json, report::audit_json(g, plan).dump(2) + "\n");
    std::cout << report::audit_summary(g, plan) << "\n"
              << "wrote " << st->out << ": " << plan.fold.size() << " LayerNorm"
              << (plan.fold.size() == 1 ? "" : "s") << " -> RMSNorm, " << plan.center.size()
              << " term" << (plan.center.size() == 1 ? "" : "s") << " centered (" << st->mode
              << ")\n";
    return kOk;
  };
}

const bool kRegistered = register_command(
    {"fold", "rewrite the foldable LayerNorms into RMSNorm and write the model", setup});

}  // namespace
}  // namespace lnv::cli
