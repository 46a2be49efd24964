// `lnverify audit MODEL.json [--json FILE]` (also plain `lnverify MODEL.json`): which
// LayerNorms can become RMSNorm exactly, in inference and in training, and why not.
#include <fstream>
#include <iostream>

#include "cli/command.h"
#include "cli/model_input.h"
#include "cli/output_paths.h"
#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "reports/audit_report.h"

namespace lnv::cli {
namespace {

Action setup(CLI::App& sub) {
  struct State {
    std::string model, json;
    std::vector<std::string> dims;
  };
  auto st = std::make_shared<State>();
  add_model_input(sub, st->model, st->dims, "the model to audit (model.json or .onnx)");
  sub.add_option("--json", st->json, "also write the report as JSON to FILE ('-': stdout)");
  return [st]() -> int {
    // The analysis reads structure only: no param's values are read.
    LoadOptions load;
    load.defer_values = true;
    const Graph g = load_input(st->model, st->dims, load);
    if (st->json != "-") refuse_input_as_output("--json", st->json, st->model, g);
    const FoldPlan plan = detect_foldable(g, Mode::inference);
    const std::string report = report::audit_json(g, plan).dump(2) + "\n";
    if (st->json == "-") {
      std::cout << report;
      return kOk;
    }
    std::cout << report::audit_text(g, plan);
    if (!st->json.empty()) write_file_atomically(st->json, report);
    return kOk;
  };
}

const bool kRegistered = register_command(
    {"audit", "list every LayerNorm, whether it folds into RMSNorm exactly, and why not", setup});

}  // namespace
}  // namespace lnv::cli
