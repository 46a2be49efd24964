// JUnit XML (the Ant/Jenkins `junit-10.xsd` dialect CI systems read; the schema kept in
// docs/spec/schemas/junit.xsd) for audit, check and fuzz results (docs/ci.md).
//
// What a test case is, per command:
//   audit  one per LN and mode, "<LN> [inference]": a "yes" passes; a "no" is skipped
//          with its reason (not a failure: a model may keep LNs); with a baseline, a
//          regression (audit_diff.h) is a failure, an improvement passes
//   check  one per check, "<kind> <subject>": holds passes, fails is a failure,
//          inconclusive an error, each carrying the detail
//   equiv  one per compared quantity, "output 'y'" or "gradient of input 'x'": equal
//          passes, different is a failure with the size of the difference,
//          inconclusive an error
//   fuzz   one per case, "case <seed>": fails is a failure, inconclusive is skipped (it
//          does not fail the campaign either)
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "reports/audit_diff.h"
#include "reports/check_report.h"
#include "reports/equiv_report.h"

namespace lnv::report {

struct JunitCase {
  enum class Result { passed, failure, error, skipped };
  std::string classname, name;
  Result result = Result::passed;
  std::string message;  // failure, error, skipped: one line
  std::string text;     // failure, error: the details; passed: system-out
  double seconds = 0;
};

struct JunitSuite {
  std::string name;
  std::vector<JunitCase> cases;
  double seconds = 0;
};

// <testsuites> with one <testsuite> each; counts are computed from the cases.
std::string junit_xml(const std::vector<JunitSuite>& suites);

// The suites of JUnit XML that junit_xml wrote (its dialect only: suites, test cases and
// their results, text unescaped), so that shards' files can be merged
// (reports/shard_merge.h). Throws lnv::ModelError naming `file` and the byte where the
// text is not that dialect.
std::vector<JunitSuite> read_junit_xml(const std::string& xml, const std::string& file);

// `audit` is an audit report (audit_json); `diff`, when given, its comparison with a baseline.
JunitSuite audit_junit(const nlohmann::json& audit, const AuditDiff* diff);
JunitSuite check_junit(const CheckReport& r);
JunitSuite equiv_junit(const EquivReport& r);

}  // namespace lnv::report
