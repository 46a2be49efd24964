// The regression gate (reports/audit_diff.h) on hand-made audit reports: every kind of
// change, which of them fail the gate, the baselines it refuses; and the JUnit writer
// (reports/junit.h): test cases per LN and mode, counts, escaping.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "reports/audit_diff.h"
#include "reports/junit.h"

namespace lnv::report {
namespace {

nlohmann::json ln(const std::string& name, bool inference, bool training,
                  const std::string& why_inference = "", const std::string& why_training = "") {
  return {{"name", name},
          {"foldable", {{"inference", inference}, {"training", training}}},
          {"reasons", {{"inference", inference ? "" : why_inference},
                       {"training", training ? "" : why_training}}}};
}

nlohmann::json audit(const std::string& model, std::vector<nlohmann::json> lns) {
  return {{"format", "lnverify.report"}, {"version", 1}, {"model", model}, {"layer_norms", lns}};
}

const LnDiff& entry(const AuditDiff& d, const std::string& name) {
  for (const LnDiff& l : d.layer_norms)
    if (l.name == name) return l;
  throw std::runtime_error("no " + name);
}

TEST(AuditDiff, SameReportsPass) {
  const nlohmann::json a = audit("m", {ln("a", true, false, "", "dropout"), ln("b", false, false, "relu", "relu")});
  const AuditDiff d = diff_audits(a, a, "old.json", "new.json");
  EXPECT_FALSE(d.regressed());
  EXPECT_EQ(d.count(Change::same), 2u);
  EXPECT_NE(to_text(d).find("0 regression(s)"), std::string::npos);
}

TEST(AuditDiff, EveryKindOfChange) {
  const nlohmann::json before = audit("m", {ln("lost", true, true), ln("gained", false, false, "relu", "relu"),
                                            ln("why", false, true, "relu"), ln("gone", true, true),
                                            ln("mixed", true, false, "", "dropout")});
  const nlohmann::json after = audit("m", {ln("lost", false, true, "gelu"), ln("gained", true, false, "", "relu"),
                                           ln("why", false, true, "gelu"), ln("new", true, true),
                                           ln("mixed", false, true, "relu")});
  const AuditDiff d = diff_audits(before, after, "old.json", "new.json");
  EXPECT_EQ(entry(d, "lost").change(0), Change::regressed);
  EXPECT_EQ(entry(d, "lost").change(1), Change::same);
  EXPECT_EQ(entry(d, "gained").change(), Change::improved);
  EXPECT_EQ(entry(d, "gained").change(1), Change::same);
  EXPECT_EQ(entry(d, "why").change(), Change::reason_changed);  // "no" for another reason
  EXPECT_EQ(entry(d, "gone").change(), Change::disappeared);
  EXPECT_EQ(entry(d, "new").change(), Change::appeared);
  EXPECT_EQ(entry(d, "mixed").change(), Change::regressed);  // a regression outweighs a gain
  EXPECT_TRUE(d.regressed());
  const std::string text = to_text(d);
  EXPECT_NE(text.find("REGRESSION  lost: inference yes -> no (gelu)"), std::string::npos) << text;
  EXPECT_NE(text.find("REGRESSION  gone: in the baseline"), std::string::npos) << text;
  EXPECT_NE(text.find("REGRESSION  new: not in the baseline"), std::string::npos) << text;
  EXPECT_NE(text.find("reason was \"relu\", is \"gelu\""), std::string::npos) << text;
}

TEST(AuditDiff, OnlyImprovementsPass) {
  const nlohmann::json before = audit("m", {ln("a", false, false, "relu", "relu")});
  const nlohmann::json after = audit("m", {ln("a", true, true)});
  const AuditDiff d = diff_audits(before, after, "old.json", "new.json");
  EXPECT_FALSE(d.regressed());
  EXPECT_EQ(d.count(Change::improved), 1u);
  EXPECT_NE(to_text(d).find("improvement a: inference no -> yes; training no -> yes"), std::string::npos)
      << to_text(d);
}

TEST(AuditDiff, RefusesWhatIsNotABaseline) {
  const nlohmann::json good = audit("m", {ln("a", true, true)});
  auto message = [&](const nlohmann::json& baseline) {
    try {
      diff_audits(baseline, good, "old.json", "new.json");
    } catch (const ModelError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  nlohmann::json check = good;
  check["format"] = "lnverify.check";
  EXPECT_NE(message(check).find("old.json: /format: not an lnverify audit report"), std::string::npos)
      << message(check);
  EXPECT_NE(message(audit("other", {})).find("old.json: /model: the baseline audits model 'other', not 'm'"),
            std::string::npos);
  nlohmann::json v2 = good;
  v2["version"] = 2;
  EXPECT_NE(message(v2).find("/version"), std::string::npos);
  nlohmann::json bad_type = good;
  bad_type["layer_norms"][0]["foldable"]["training"] = "yes";
  EXPECT_NE(message(bad_type).find("old.json: /layer_norms/0/foldable/training: expected a boolean"),
            std::string::npos)
      << message(bad_type);
  nlohmann::json missing = good;
  missing["layer_norms"][0].erase("reasons");
  EXPECT_NE(message(missing).find("/layer_norms/0/reasons: missing"), std::string::npos) << message(missing);
  EXPECT_NE(message(nlohmann::json::array()).find("not an lnverify audit report"), std::string::npos);
}

size_t occurrences(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(Junit, AuditCasesWithoutAndWithABaseline) {
  const nlohmann::json before = audit("m", {ln("a", true, true), ln("b", false, false, "relu <x>", "relu <x>")});
  const nlohmann::json after = audit("m", {ln("a", false, true, "gelu & co"), ln("b", false, false, "relu <x>", "relu <x>")});
  const std::string plain = junit_xml({audit_junit(after, nullptr)});
  EXPECT_NE(plain.find("tests=\"4\" failures=\"0\" errors=\"0\" skipped=\"3\""), std::string::npos) << plain;
  EXPECT_NE(plain.find("name=\"a [training]\""), std::string::npos);
  EXPECT_NE(plain.find("<skipped message=\"not foldable: gelu &amp; co\"/>"), std::string::npos) << plain;
  const AuditDiff d = diff_audits(before, after, "old.json", "new.json");
  const std::string gated = junit_xml({audit_junit(after, &d)});
  EXPECT_NE(gated.find("tests=\"4\" failures=\"1\" errors=\"0\" skipped=\"2\""), std::string::npos) << gated;
  EXPECT_NE(gated.find("<failure message=\"no longer folds: gelu &amp; co\" type=\"failure\">"), std::string::npos)
      << gated;
  EXPECT_NE(gated.find("relu &lt;x&gt;"), std::string::npos);
  EXPECT_EQ(occurrences(gated, "<testcase "), 4u);
}

TEST(Junit, CheckCasesCarryTheOutcome) {
  CheckReport r;
  r.model = "m\"q";
  r.results.push_back({"ln_exact", "a", Outcome::holds, "", 1e-78, 1e-79, 1e-56, 257, 1, {}, {}, {}});
  r.results.push_back({"ln_tight", "b", Outcome::fails, "judged not foldable, but ...", 0, 0, 1e-56, 257, 4, {}, {}, {}});
  r.results.push_back({"plan_exact", "plan", Outcome::inconclusive, "a value is not finite\x01", 0, 0, 0, 257, 1, {}, {}, {}});
  const std::string xml = junit_xml({check_junit(r)});
  EXPECT_NE(xml.find("tests=\"3\" failures=\"1\" errors=\"1\" skipped=\"0\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("name=\"ln_tight b\""), std::string::npos);
  EXPECT_NE(xml.find("<failure message=\"fails: judged not foldable, but ...\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<error message=\"inconclusive: a value is not finite\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("m&quot;q"), std::string::npos);
  EXPECT_EQ(xml.find('\x01'), std::string::npos);  // XML cannot carry it
}

}  // namespace
}  // namespace lnv::report
