// Counterexamples found by the fuzzer, shrunk and kept (tests/regressions/*.model.json).
// Each states what it expects in `meta.expect`: "holds" (every check must hold in both
// modes: the analysis was, or is, wrong on it), or "known_limitation" (the tightness check
// of `meta.layer_norm` fails for a reason described in `meta.why`, and nothing else does).
#include <filesystem>

#include <gtest/gtest.h>

#include "checkers/equivalence.h"
#include "core/model_json.h"

namespace lnv {
namespace {

namespace fs = std::filesystem;

TEST(Regressions, EveryShrunkCounterexampleMeetsItsExpectation) {
  const fs::path dir = fs::path(LNV_SOURCE_DIR) / "tests" / "regressions";
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    const Graph g = load_model(entry.path().string());
    const std::string expect = g.meta.at("expect").get<std::string>();
    for (Mode mode : {Mode::inference, Mode::training}) {
      check::CheckOptions opt;
      opt.mode = mode;
      const report::CheckReport rep = check::check_model(g, opt);
      SCOPED_TRACE(entry.path().filename().string() + " (" + std::string(mode_name(mode)) +
                   "): " + g.meta.at("why").get<std::string>() + "\n" + report::to_text(rep));
      if (expect == "holds") {
        EXPECT_EQ(rep.outcome(), report::Outcome::holds);
        continue;
      }
      ASSERT_EQ(expect, "known_limitation");
      for (const report::CheckResult& r : rep.results) {
        const bool limited = r.kind == "ln_tight" && r.subject == g.meta.at("layer_norm");
        EXPECT_EQ(r.outcome, limited ? report::Outcome::fails : report::Outcome::holds)
            << r.kind << " " << r.subject;
      }
    }
  }
  EXPECT_GT(files, 0);
}

}  // namespace
}  // namespace lnv
