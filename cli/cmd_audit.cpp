// `lnverify audit MODEL.json [--json FILE] [--baseline OLD.json] [--junit FILE]
// [--format text|markdown]` (also plain `lnverify MODEL.json`): which LayerNorms can
// become RMSNorm exactly, in inference and in training, and why not.
//
// With --baseline (an audit report of the same model) it is the regression gate of
// docs/ci.md: the LNs that changed are printed after the report, one line each, and the
// exit code is 1 when an LN that folded no longer does, an LN appeared or disappeared, or
// a "no" changed its reason (reports/audit_diff.h); new folds are improvements, exit 0.
#include <iostream>
#include <optional>

#include "cli/command.h"
#include "cli/model_input.h"
#include "cli/output_paths.h"
#include "cli/report_outputs.h"
#include "cli/terminal.h"
#include "cli/report_files.h"
#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "reports/audit_diff.h"
#include "reports/audit_report.h"
#include "reports/junit.h"

namespace lnv::cli {
namespace {

Action setup(CLI::App& sub) {
  struct State {
    std::string model, json, baseline, junit, format = "text";
    std::vector<std::string> dims;
    ReportOutputs reports;
  };
  auto st = std::make_shared<State>();
  add_model_input(sub, st->model, st->dims, "the model to audit (model.json or .onnx)");
  sub.add_option("--json", st->json, "also write the report as JSON to FILE ('-': stdout)");
  add_report_outputs(sub, st->reports, true);
  sub.add_option("--baseline", st->baseline,
                 "an audit report (--json) of this model to compare with: exit 1 on a "
                 "regression (docs/ci.md)");
  sub.add_option("--junit", st->junit, "also write JUnit XML to FILE: one test case per LN and mode");
  add_format_option(sub, st->format);
  return [st]() -> int {
    if (st->json == "-" && st->format != "text")
      throw ModelError("--format", "--json - already writes the report to stdout");
    // The analysis reads structure only: no param's values are read.
    LoadOptions load;
    load.defer_values = true;
    const Graph g = load_input(st->model, st->dims, load);
    if (st->json != "-") refuse_input_as_output("--json", st->json, st->model, g);
    refuse_input_as_output("--junit", st->junit, st->model, g);
    for (const std::string* out : {&st->json, &st->junit})
      if (!st->baseline.empty() && !out->empty() && *out != "-" && same_file(st->baseline, *out))
        throw ModelError("--baseline", "'" + st->baseline + "' is also an output; the report would replace it");
    prepare_report_outputs(st->reports, st->model, &g);
    // load -> detect -> report -> compare with the baseline -> write
    const FoldPlan plan = detect_foldable(g, Mode::inference);
    const nlohmann::json audit = report::audit_json(g, plan);
    std::optional<report::AuditDiff> diff;
    if (!st->baseline.empty())
      diff = report::diff_audits(read_json_report(st->baseline), audit, st->baseline, st->model);
    const std::string json = audit.dump(2) + "\n";
    if (st->json == "-")
      std::cout << json;
    else if (st->format == "markdown")
      std::cout << report::audit_markdown(g, plan);
    else if (quiet())
      std::cout << report::audit_summary(g, plan) << "\n";
    else
      std::cout << report::audit_text(g, plan, {stdout_paint(), verbose()});
    if (diff) (st->json == "-" ? std::cerr : std::cout) << report::to_text(*diff);
    if (!st->json.empty() && st->json != "-") write_file_atomically(st->json, json);
    if (!st->junit.empty())
      write_file_atomically(st->junit, report::junit_xml({report::audit_junit(audit, diff ? &*diff : nullptr)}));
    write_report_outputs(st->reports, &g, &plan, "lnverify audit: " + g.name, {});
    return diff && diff->regressed() ? kCheckFails : kOk;
  };
}

const bool kRegistered = register_command(
    {"audit", "list every LayerNorm, whether it folds into RMSNorm exactly, and why not", setup});

}  // namespace
}  // namespace lnv::cli
