// `lnverify diff OLD.json NEW.json [--junit FILE]`: the regression gate of docs/ci.md on
// two audit reports (`lnverify audit --json`) of one model, without running the analysis:
// one line per LN that changed and a summary; exit 1 when an LN that folded in OLD no
// longer does, an LN appeared or disappeared, or a "no" changed its reason; 0 otherwise
// (new folds are improvements); 2 when either file is not an audit report, or they are
// of different models.
#include <iostream>

#include "cli/command.h"
#include "cli/output_paths.h"
#include "cli/report_files.h"
#include "core/error.h"
#include "core/file_io.h"
#include "reports/audit_diff.h"
#include "reports/junit.h"

namespace lnv::cli {
namespace {

Action setup(CLI::App& sub) {
  struct State {
    std::string before, after, junit;
  };
  auto st = std::make_shared<State>();
  sub.add_option("OLD", st->before, "the baseline audit report")->required();
  sub.add_option("NEW", st->after, "the audit report to judge against it")->required();
  sub.add_option("--junit", st->junit, "also write JUnit XML to FILE: one test case per LN and mode");
  return [st]() -> int {
    for (const std::string* in : {&st->before, &st->after})
      if (!st->junit.empty() && same_file(*in, st->junit))
        throw ModelError("--junit", "'" + st->junit + "' is an input report; choose another path");
    const nlohmann::json after = read_json_report(st->after);
    const report::AuditDiff diff =
        report::diff_audits(read_json_report(st->before), after, st->before, st->after);
    std::cout << report::to_text(diff);
    if (!st->junit.empty())
      write_file_atomically(st->junit, report::junit_xml({report::audit_junit(after, &diff)}));
    return diff.regressed() ? kCheckFails : kOk;
  };
}

const bool kRegistered = register_command(
    {"diff", "compare two audit reports of a model: exit 1 on a regression (CI gate)", setup});

}  // namespace
}  // namespace lnv::cli
