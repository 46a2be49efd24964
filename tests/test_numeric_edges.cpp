// Numerical edge cases of the check (checkers/equivalence.h) and the evaluators: eps = 0 on
// an all-zero row, weights of magnitude 1e+-30, non-finite values reaching an evaluator, a
// weight that is already column-centered, a non-foldable LN whose forced fold is exact
// only for the model's own weights, and a precision too low for the rounding bound.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "checkers/equivalence.h"
#include "core/analysis/fold_plan.h"
#include "core/eval/evaluator.h"
#include "core/model_json.h"

namespace lnv {
namespace {

using nlohmann::json;

// x [2, 3, 4] -> linear (W [4, 4], b [4]) -> mul by g (when given) -> layer_norm. g holds
// 4 values per feature, stored as [3, 4] (the same row for each token): a factor of a shape
// that varies along the tokens too is no LayerScale (docs/spec/semantics.md), so the
// structure alone makes the LN not foldable, whatever g's values.
json linear_ln(const json& w, const json& b, double eps, const json& g = nullptr) {
  json m = {{"format", "lnverify.model"},
            {"version", 1},
            {"name", "edge"},
            {"inputs", {{{"name", "x"}, {"shape", {2, 3, 4}}}}},
            {"params",
             {{{"name", "W"}, {"shape", {4, 4}}, {"data", w}},
              {{"name", "b"}, {"shape", {4}}, {"data", b}}}},
            {"nodes", {{{"name", "fc"}, {"op", "linear"}, {"inputs", {"x"}}, {"weight", "W"},
                        {"bias", "b"}}}},
            {"outputs", {"ln"}}};
  std::string into = "fc";
  if (!g.is_null()) {
    json rows = json::array();
    for (int t = 0; t < 3; ++t)
      for (const json& v : g) rows.push_back(v);
    m["params"].push_back({{"name", "g"}, {"shape", {3, 4}}, {"data", rows}});
    m["nodes"].push_back({{"name", "mul_g"}, {"op", "mul"}, {"inputs", {"fc", "g"}}});
    into = "mul_g";
  }
  m["nodes"].push_back({{"name", "ln"}, {"op", "layer_norm"}, {"inputs", {into}},
                        {"axes", {-1}}, {"eps", eps}});
  return m;
}

json scaled(const json& a, double s) {
  json out = json::array();
  for (const json& v : a) out.push_back(v.get<double>() * s);
  return out;
}

const json kW = {0.5, -0.3, 0.8, 0.1, -0.7, 0.2, 0.4, -0.6, 0.9, 0.3, -0.2, 0.5, 0.1, -0.8, 0.6, 0.7};
const json kB = {0.1, -0.2, 0.3, 0.05};

check::CheckOptions options(unsigned bits = 256) {
  check::CheckOptions o;
  o.bits = bits;
  o.trials = 2;
  o.seed = 11;
  return o;
}

const report::CheckResult& result(const report::CheckReport& rep, const std::string& kind) {
  for (const report::CheckResult& r : rep.results)
    if (r.kind == kind) return r;
  throw std::runtime_error("no " + kind + " result");
}

// eps = 0 on a row that is all zero (W and b zero): 0 / sqrt(0) is NaN in the original and
// the fold alike. The check reports the non-finite value; it never calls them equal.
TEST(NumericEdges, EpsZeroOnAllZeroRowIsInconclusiveNotHolds) {
  const Graph g = parse_model(linear_ln(scaled(kW, 0.0), scaled(kB, 0.0), 0.0), "");
  const auto ev = eval::evaluate(g, eval::random_inputs<double>(g, 1), {});
  EXPECT_TRUE(std::isnan(ev.outputs[0].data[0]));
  const report::CheckReport rep = check::check_model(g, options());
  EXPECT_EQ(rep.outcome(), report::Outcome::inconclusive);
  EXPECT_NE(result(rep, "ln_exact").detail.find("not finite"), std::string::npos);
}

// The same graph with eps > 0 is an ordinary zero row: the LN outputs 0 and the fold holds.
TEST(NumericEdges, PositiveEpsOnAllZeroRowHolds) {
  const Graph g = parse_model(linear_ln(scaled(kW, 0.0), scaled(kB, 0.0), 1e-5), "");
  EXPECT_EQ(check::check_model(g, options()).outcome(), report::Outcome::holds);
}

// Weights of magnitude 1e30 and 1e-30: the bound scales with the values, so the fold of a
// foldable LN is proven exact at both ends and a non-foldable one is still told apart.
TEST(NumericEdges, HugeAndTinyWeightsKeepTheirVerdicts) {
  for (double s : {1e30, 1e-30}) {
    SCOPED_TRACE(s);
    const Graph fold = parse_model(linear_ln(scaled(kW, s), scaled(kB, s), 1e-5), "");
    const report::CheckReport rep = check::check_model(fold, options());
    EXPECT_EQ(result(rep, "ln_exact").outcome, report::Outcome::holds);
    EXPECT_EQ(rep.outcome(), report::Outcome::holds);
    const Graph no = parse_model(
        linear_ln(scaled(kW, s), scaled(kB, s), 1e-5, json{1.5, 0.5, 2.0, 1.0}), "");
    const report::CheckReport rep2 = check::check_model(no, options());
    EXPECT_EQ(result(rep2, "ln_tight").outcome, report::Outcome::holds);
  }
}

// A NaN or infinity reaching the double evaluator is in its outputs for the caller to see:
// 1e300 * 1e300 overflows in double (not at MPFR's exponent range).
TEST(NumericEdges, OverflowReachesDoubleOutputsAsInfinity) {
  const Graph g = parse_model(linear_ln(scaled(kW, 1e300), scaled(kB, 1e300), 1e-5), "");
  eval::RunOptions ro;
  ro.seed = 3;
  auto inputs = eval::random_inputs<double>(g, 3);
  for (double& v : inputs[0].data) v *= 1e300;
  const auto ev = eval::evaluate(g, inputs, ro);
  bool non_finite = false;
  for (double v : ev.nodes[0].data) non_finite = non_finite || !std::isfinite(v);
  EXPECT_TRUE(non_finite);
}

// W whose columns already sum to zero over the output features: the LN is foldable, the
// fold leaves W as it is (to rounding), and the check holds.
TEST(NumericEdges, AlreadyColumnCenteredWeightFoldsToItself) {
  json w = kW, b = kB;
  for (int j = 0; j < 4; ++j) {
    double mean = 0;
    for (int i = 0; i < 4; ++i) mean += w[i * 4 + j].get<double>() / 4;
    for (int i = 0; i < 4; ++i) w[i * 4 + j] = w[i * 4 + j].get<double>() - mean;
  }
  double mb = 0;
  for (const json& v : b) mb += v.get<double>() / 4;
  for (json& v : b) v = v.get<double>() - mb;
  const Graph g = parse_model(linear_ln(w, b, 1e-5), "");
  const FoldPlan plan = detect_foldable(g, Mode::inference);
  ASSERT_EQ(plan.fold.size(), 1u);
  const Graph folded = apply_fold(g, plan);
  const std::vector<double> before = effective_values(g.params[g.param_index("W")]);
  const std::vector<double> after = effective_values(folded.params[folded.param_index("W")]);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(after[i], before[i], 1e-15);
  EXPECT_EQ(check::check_model(g, options()).outcome(), report::Outcome::holds);
}

// g constant (2 everywhere) makes mean(g * centered fc) zero for these weights only:
// the LN stays "not foldable" (structure), and the check says the forced fold agrees by
// coincidence of the weights instead of calling the verdict not tight.
TEST(NumericEdges, CoincidentalZeroMeanKeepsStructuralVerdict) {
  const Graph g = parse_model(linear_ln(kW, kB, 1e-5, json{2.0, 2.0, 2.0, 2.0}), "");
  const FoldPlan plan = detect_foldable(g, Mode::inference);
  EXPECT_TRUE(plan.fold.empty());
  const report::CheckReport rep = check::check_model(g, options());
  const report::CheckResult& tight = result(rep, "ln_tight");
  EXPECT_EQ(tight.outcome, report::Outcome::holds);
  EXPECT_NE(tight.detail.find("by coincidence"), std::string::npos) << tight.detail;
  EXPECT_EQ(rep.outcome(), report::Outcome::holds);
}

// At 24 bits the rounding bound is about as large as the values: "within the bound" then
// proves nothing, so the exactness checks are inconclusive, never "holds".
TEST(NumericEdges, PrecisionTooLowForTheBoundIsInconclusive) {
  const Graph g = parse_model(linear_ln(kW, kB, 1e-5), "");
  const report::CheckReport rep = check::check_model(g, options(24));
  EXPECT_EQ(result(rep, "ln_exact").outcome, report::Outcome::inconclusive);
  EXPECT_NE(result(rep, "ln_exact").detail.find("--bits"), std::string::npos);
  EXPECT_EQ(rep.outcome(), report::Outcome::inconclusive);
  // At the default precision the same model holds.
  EXPECT_EQ(check::check_model(g, options()).outcome(), report::Outcome::holds);
}

}  // namespace
}  // namespace lnv
