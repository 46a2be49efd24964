// Properties over random model graphs: the analysis' verdicts agree with exact (256-bit)
// evaluation in both modes — every foldable LN folds exactly (outputs, and in training
// gradients), every "not foldable" is tight, the whole plan is exact.
//
// The default suite runs kCases cases per property (a few seconds); RC_PARAMS overrides
// it (RC_PARAMS="max_success=10000", or "seed=..." to replay a failure), and the long
// campaign is `lnverify fuzz --cases 100000`.
// Each case is tagged (RC_TAG) with the rules it exercised; each property then asserts,
// from its own cases, that both verdicts occurred for every rule (producer kind for "yes",
// breaking op for "no"), so the tests hold alone, filtered or shuffled.
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "tests/rc_default_seed.h"

#include "checkers/equivalence.h"
#include "core/analysis/fold_plan.h"
#include "core/model_json.h"
#include "generators/random_graph.h"

namespace lnv {
namespace {

// Which rules a case exercised: "yes:<producer op>" for the kinds of terms centered by
// foldable LNs, "no:<op>" for the ops that break non-foldable ones, and "has <tag>" for the
// op kinds and features the graph contains (gen::graph_tags).
std::string term_kind(const Graph& g, const CenterTerm& t) {
  if (t.kind == CenterTerm::Kind::param) return "param";
  return std::string(op_name(g.nodes[g.node_index(t.node)].op));
}

// A tag as RapidCheck prints and counts it: the text itself (a std::string would be
// shown quoted).
struct Rule {
  std::string text;
};
void showValue(const Rule& r, std::ostream& os) { os << r.text; }

std::set<std::string> rules_of(const Graph& g, const FoldPlan& plan) {
  const int m = static_cast<int>(plan.mode);
  std::set<std::string> rules;
  for (const LnVerdict& v : plan.layer_norms) {
    if (v.foldable[m]) {
      for (const CenterTerm& t : v.terms) rules.insert("yes:" + term_kind(g, t));
      if (v.terms.empty()) rules.insert("yes:nothing centered (dead or zero-mean input)");
    } else if (!v.conflicts[m].empty()) {
      rules.insert("no:conflicts with the plan");
    } else if (!v.path[m].empty() && g.has(v.path[m].front()) &&
               g.ref(v.path[m].front()).kind == ValueRef::Kind::node) {
      rules.insert("no:" + std::string(op_name(g.nodes[g.node_index(v.path[m].front())].op)));
    } else {
      rules.insert("no:" + (v.opaque ? std::string("opaque") : std::string("other")));
    }
  }
  // Where the plan's fold puts each folded norm's bias (docs/spec/semantics.md, "Moving the
  // bias"): the plan_exact check then proves the move.
  for (const LnVerdict& v : plan.layer_norms) {
    if (v.bias.moves && !v.bias.readers.empty()) rules.insert("bias: moves into readers");
    if (v.bias.moves && !v.bias.residual.empty()) rules.insert("bias: moves through a residual add");
    if (!v.bias.kept.empty()) rules.insert("bias: kept");
  }
  for (const std::string& tag : gen::graph_tags(g)) rules.insert("has " + tag);
  return rules;
}

void verdicts_agree_with_exact_evaluation(Mode mode) {
  gen::GenConfig cfg;
  cfg.max_nodes = 24;
  cfg.max_steps = 12;
  const Graph g = *gen::gen_graph(cfg).as("graph");
  check::CheckOptions opt;
  opt.mode = mode;
  opt.trials = 2;
  opt.drift = false;
  const report::CheckReport rep = check::check_model(g, opt);
  for (const std::string& rule : rules_of(g, detect_foldable(g, mode))) RC_TAG(Rule{rule});
  RC_TAG(Rule{rep.layer_norms == 0              ? "no LN"
              : rep.foldable == rep.layer_norms ? "all LNs foldable"
              : rep.foldable == 0               ? "no LN foldable"
                                                : "some LNs foldable"});
  if (rep.outcome() != report::Outcome::holds) {
    // LNV_PROPERTY_DUMP=DIR keeps the failing model (the last one written is the shrunk
    // counterexample) for `lnverify check` / `lnverify audit` and for tests/regressions/.
    if (const char* dir = std::getenv("LNV_PROPERTY_DUMP"))
      save_model(g, std::string(dir) + "/" + std::string(mode_name(mode)) + ".model.json");
    RC_FAIL(report::to_text(rep));
  }
}

constexpr int kCases = 1000;

// Runs `property` as RC_GTEST_PROP would, with kCases cases unless RC_PARAMS sets
// max_success, and returns how many passing cases carried each tag.
std::map<std::string, int> check_property(void (*property)()) {
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  if (params.maxSuccess == rc::detail::TestParams().maxSuccess) params.maxSuccess = kCases;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(info->test_suite_name()) + "/" + info->name();
  metadata.description = info->name();
  const auto result = rc::detail::checkTestable(property, metadata, params);
  rc::detail::SuccessResult success;
  if (!result.match(success)) {
    std::ostringstream os;
    rc::detail::printResultMessage(result, os);
    ADD_FAILURE() << os.str();
    return {};
  }
  // The distribution counts each combination of tags; a case has many, so count each tag.
  std::map<std::string, int> cases_with;
  for (const auto& [tags, n] : success.distribution)
    for (const std::string& tag : tags) cases_with[tag] += n;
  std::cout << "OK, passed " << success.numSuccess << " tests\n";
  for (const auto& [tag, n] : cases_with) std::cout << "  " << tag << ": " << n << "\n";
  return cases_with;
}

// Both verdicts occurred, for every producer kind and for some breaking op.
void expect_every_rule(std::map<std::string, int> cases_with, Mode mode) {
  const std::string m(mode_name(mode));
  // "mul": a LayerScale (docs/spec/semantics.md, "LayerScale").
  for (const char* producer : {"linear", "matmul", "embedding", "conv1d", "conv2d", "rnn",
                               "attention", "mul", "param"})
    EXPECT_GT(cases_with[std::string("yes:") + producer], 0)
        << m << ": no foldable LN via " << producer;
  // A folded norm's bias moved into its readers, and through a residual add, each proved
  // by plan_exact.
  for (const char* bias : {"bias: moves into readers", "bias: moves through a residual add"})
    EXPECT_GT(cases_with[bias], 0) << m << ": no case where the " << bias;
  int no = 0;
  for (const auto& [rule, n] : cases_with) no += rule.rfind("no:", 0) == 0 ? n : 0;
  EXPECT_GT(no, 0) << m << ": no LN judged not foldable";
}

TEST(Properties, InferenceVerdictsAgreeWithExactEvaluation) {
  std::map<std::string, int> cases_with =
      check_property([] { verdicts_agree_with_exact_evaluation(Mode::inference); });
  if (HasFailure()) return;
  expect_every_rule(cases_with, Mode::inference);
}

TEST(Properties, TrainingVerdictsAgreeWithExactEvaluation) {
  std::map<std::string, int> cases_with =
      check_property([] { verdicts_agree_with_exact_evaluation(Mode::training); });
  if (HasFailure()) return;
  expect_every_rule(cases_with, Mode::training);
  EXPECT_GT(cases_with["no:dropout"], 0) << "training-mode dropout never broke a fold";
}

}  // namespace
}  // namespace lnv
