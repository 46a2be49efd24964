// Counterexamples found by the fuzzer, shrunk and kept (tests/regressions/*.model.json),
// one test each. Each states what it expects in `meta.expect`: "holds" (every check must
// hold in both modes: the analysis was, or is, wrong on it), or "known_limitation" (the
// tightness check of `meta.layer_norm` fails for the reason in `meta.why`, nothing else
// does). `meta.why` explains the mathematics; `meta.found_by` how to find it again.
#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "checkers/equivalence.h"
#include "core/analysis/fold_plan.h"
#include "core/model_json.h"

namespace lnv {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> regression_files() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(LNV_SOURCE_DIR) / "tests" / "regressions"))
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

class Regression : public ::testing::TestWithParam<std::string> {};

TEST_P(Regression, MeetsItsExpectation) {
  const Graph g = load_model(GetParam());
  const nlohmann::json meta = parse_meta(g);
  const std::string expect = meta.at("expect").get<std::string>();
  for (Mode mode : {Mode::inference, Mode::training}) {
    check::CheckOptions opt;
    opt.mode = mode;
    const report::CheckReport rep = check::check_model(g, opt);
    SCOPED_TRACE(std::string(mode_name(mode)) + ": " + meta.at("why").get<std::string>() +
                 "\n" + report::to_text(rep));
    if (meta.contains("conflicts")) {
      // A "no" relative to the plan: exactly these LNs are kept for these folded ones.
      const FoldPlan plan = detect_foldable(g, mode);
      for (const LnVerdict& v : plan.layer_norms) {
        std::vector<std::string> want;
        if (meta["conflicts"].contains(v.name))
          want = meta["conflicts"][v.name].get<std::vector<std::string>>();
        EXPECT_EQ(v.conflicts[static_cast<int>(mode)], want) << v.name;
        EXPECT_EQ(v.foldable[static_cast<int>(mode)], want.empty()) << v.name;
      }
    }
    if (expect == "holds") {
      EXPECT_EQ(rep.outcome(), report::Outcome::holds);
      continue;
    }
    ASSERT_EQ(expect, "known_limitation");
    for (const report::CheckResult& r : rep.results) {
      const bool limited = r.kind == "ln_tight" && r.subject == meta.at("layer_norm");
      EXPECT_EQ(r.outcome, limited ? report::Outcome::fails : report::Outcome::holds)
          << r.kind << " " << r.subject;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fuzzer, Regression, ::testing::ValuesIn(regression_files()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string stem = fs::path(info.param).stem().stem().string();
                           std::replace(stem.begin(), stem.end(), '-', '_');
                           return stem;
                         });

}  // namespace
}  // namespace lnv
