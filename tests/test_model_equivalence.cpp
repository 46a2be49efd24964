// `lnverify equiv`'s library (checkers/model_equivalence.h) and the agreement rule it
// shares with `check` (checkers/agreement.h): the three outcomes of judge_agreement on
// measured differences, differences below double resolution kept in the error
// statistics, a model against its exact rewrite, a perturbed weight, training mode with
// shared dropout masks and input gradients, inputs matched by name, and the mismatches.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "checkers/agreement.h"
#include "checkers/model_equivalence.h"
#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/eval/evaluator.h"
#include "core/model_json.h"
#include "reports/error_stats.h"

namespace lnv {
namespace {

using check::Agreement;
using check::judge_agreement;
using check::Measured;
using nlohmann::json;
using report::Outcome;

// --- judge_agreement ---------------------------------------------------------------------

// A measure returning `first` at the first call and `second` after, counting calls.
struct Scripted {
  Measured first, second;
  int calls = 0;
  Measured operator()() { return calls++ == 0 ? first : second; }
};

Measured measured(double max_abs, double bound = 1e-50, double scale = 1.0) {
  return {true, max_abs, bound, scale, max_abs / bound};
}

TEST(JudgeAgreement, WithinTheBoundHoldsWithoutRemeasuring) {
  Scripted s{measured(1e-60), measured(1.0)};
  const Agreement a = judge_agreement(256, "A or B", std::ref(s));
  EXPECT_EQ(a.outcome, Outcome::holds);
  EXPECT_FALSE(a.remeasured);
  EXPECT_EQ(s.calls, 1);
}

TEST(JudgeAgreement, AStableDifferenceFailsAtTwiceThePrecision) {
  Scripted s{measured(1e-3), measured(0.9e-3, 1e-120)};
  const unsigned bits = eval::mpfr_bits();
  const Agreement a = judge_agreement(256, "A or B", std::ref(s));
  EXPECT_EQ(a.outcome, Outcome::fails);
  EXPECT_EQ(s.calls, 2);
  EXPECT_EQ(eval::mpfr_bits(), bits) << "the precision is restored";
}

TEST(JudgeAgreement, ADifferenceThatVanishesWithPrecisionIsRounding) {
  Scripted s{measured(1e-45), measured(1e-130, 1e-120)};
  const Agreement a = judge_agreement(256, "A or B", std::ref(s));
  EXPECT_EQ(a.outcome, Outcome::holds);
  EXPECT_TRUE(a.remeasured);
  EXPECT_GT(a.bits, 500u);
  EXPECT_NE(a.detail.find("within it at"), std::string::npos) << a.detail;
}

TEST(JudgeAgreement, ShrinkingWithoutVanishingIsInconclusive) {
  Scripted s{measured(1e-45), measured(1e-47, 1e-120)};
  EXPECT_EQ(judge_agreement(256, "A or B", std::ref(s)).outcome, Outcome::inconclusive);
}

TEST(JudgeAgreement, NonFiniteOrCoarseBoundsAreInconclusive) {
  Scripted nan{{false, 0, 1e-50, 1, 0}, measured(0)};
  const Agreement a = judge_agreement(256, "A or B", std::ref(nan));
  EXPECT_EQ(a.outcome, Outcome::inconclusive);
  EXPECT_EQ(a.detail, "a value of A or B is not finite");
  Scripted coarse{measured(0, 1e-3, 1.0), measured(0)};
  EXPECT_EQ(judge_agreement(24, "A or B", std::ref(coarse)).outcome, Outcome::inconclusive);
}

TEST(ErrorAccumulator, KeepsDifferencesBelowDoubleResolution) {
  report::ErrorAccumulator acc;
  acc.add(0.5, 0.5, 1e-70);  // two MPFR values 1e-70 apart round to one double
  acc.add(0.5, 0.5);
  const report::ErrorStats s = acc.stats("output 'y'", 1e-56, 257);
  EXPECT_EQ(s.elements, 2);
  EXPECT_DOUBLE_EQ(s.max_abs, 1e-70);
  EXPECT_DOUBLE_EQ(s.max_rel, 2e-70);
}

// --- equiv_models ------------------------------------------------------------------------

// x [2, 3, 4] and s [2, 3, 4] -> linear -> add s -> dropout `d` -> layer_norm -> output y.
json two_inputs(const std::string& dropout = "d", double p = 0.25, bool swap_inputs = false) {
  json inputs = {{{"name", "x"}, {"shape", {2, 3, 4}}}, {{"name", "s"}, {"shape", {2, 3, 4}}}};
  if (swap_inputs) std::swap(inputs[0], inputs[1]);
  return {{"format", "lnverify.model"},
          {"version", 1},
          {"name", "two_inputs"},
          {"seed", 3},
          {"inputs", inputs},
          {"params",
           {{{"name", "W"}, {"shape", {4, 4}}, {"init", {{"dist", "normal"}, {"std", 0.5}}}},
            {{"name", "b"}, {"shape", {4}}, {"init", {{"dist", "normal"}, {"std", 0.5}}}}}},
          {"nodes",
           {{{"name", "fc"}, {"op", "linear"}, {"inputs", {"x"}}, {"weight", "W"}, {"bias", "b"}},
            {{"name", "sum"}, {"op", "add"}, {"inputs", {"fc", "s"}}},
            {{"name", dropout}, {"op", "dropout"}, {"inputs", {"sum"}}, {"p", p}},
            {{"name", "ln"}, {"op", "layer_norm"}, {"inputs", {dropout}}, {"axes", {-1}}}}},
          {"outputs", {"ln"}}};
}

Graph gpt2() { return load_model(std::string(LNV_SOURCE_DIR) + "/examples/gpt2_tiny.json"); }

check::EquivOptions options(Mode mode = Mode::inference, bool grad = false) {
  check::EquivOptions o;
  o.mode = mode;
  o.grad = grad;
  o.trials = 2;
  o.strict = true;
  return o;
}

TEST(EquivModels, AModelEqualsItsExactRewrite) {
  const Graph g = gpt2();
  const Graph folded = apply_fold(g, detect_foldable(g, Mode::inference));
  const report::EquivReport r = check::equiv_models(g, folded, options());
  ASSERT_EQ(r.quantities.size(), 1u);
  const report::EquivQuantity& q = r.quantities[0];
  EXPECT_EQ(q.outcome, Outcome::holds) << q.detail;
  EXPECT_FALSE(q.up_to_weight_storage);
  EXPECT_GT(q.stats.max_abs, 0.0) << "the fold rounds differently at 257 bits";
  EXPECT_LE(q.stats.max_abs, q.stats.bound);
  EXPECT_EQ(q.stats.elements, 2 * 2 * 8 * 64);
}

TEST(EquivModels, APerturbedWeightIsDifferentWithItsWorstElement) {
  const Graph g = gpt2();
  Graph h = g;
  h.params[static_cast<size_t>(h.param_index("ln_f.bias"))].values[5] += 1e-6;
  const report::EquivReport r = check::equiv_models(g, h, options());
  EXPECT_EQ(r.outcome(), Outcome::fails);
  const report::EquivQuantity& q = r.quantities[0];
  ASSERT_TRUE(q.worst.has_value());
  // One bias entry of the last norm moves each logit by 1e-6 times a tied-head weight.
  EXPECT_GT(q.stats.max_abs, 1e-8);
  EXPECT_LT(q.stats.max_abs, 1e-5);
  EXPECT_NEAR(std::fabs(q.worst->a - q.worst->b), q.stats.max_abs, 1e-12);
  EXPECT_EQ(q.worst->seed, static_cast<uint64_t>(q.worst->trial));
  EXPECT_NE(q.detail.find("output 'logits' differs by up to"), std::string::npos) << q.detail;
}

// The weight-storage allowance: a weight one double apart is equal up to storage (and
// different with --strict); two models storing the same weights get no allowance, so a
// structural change smaller than the allowance (a norm's eps) is different.
TEST(EquivModels, WeightStorageAllowanceOnlyWhereWeightsDiffer) {
  const Graph g = gpt2();
  check::EquivOptions lenient = options();
  lenient.strict = false;
  Graph ulp = g;
  double& w = ulp.params[static_cast<size_t>(ulp.param_index("h1.mlp.proj.weight"))].values[7];
  w = std::nextafter(w, 1.0);
  const report::EquivReport r = check::equiv_models(g, ulp, lenient);
  EXPECT_EQ(r.outcome(), Outcome::holds) << r.quantities[0].detail;
  EXPECT_TRUE(r.quantities[0].up_to_weight_storage);
  EXPECT_GT(r.quantities[0].storage_bound, r.quantities[0].stats.max_abs);
  EXPECT_EQ(check::equiv_models(g, ulp, options()).outcome(), Outcome::fails) << "--strict";

  Graph eps = g;
  eps.nodes[static_cast<size_t>(eps.node_index("ln_f"))].eps *= 1.0001;
  const report::EquivReport e = check::equiv_models(g, eps, lenient);
  EXPECT_EQ(e.outcome(), Outcome::fails);
  EXPECT_LT(e.quantities[0].stats.max_abs, 1e-6) << "far below the allowance it is not given";
  EXPECT_EQ(e.quantities[0].storage_bound, 0.0);
  EXPECT_NE(e.quantities[0].detail.find("both models store the same weights"), std::string::npos)
      << e.quantities[0].detail;
}

// The measured allowance is a function of the seed (the perturbation streams are the
// params' names under each trial's run seed): the same seed gives the same allowance to
// the bit, another seed another one; --strict measures none.
TEST(EquivModels, WeightStorageAllowanceIsDeterministicInTheSeed) {
  const Graph g = gpt2();
  Graph ulp = g;
  double& w = ulp.params[static_cast<size_t>(ulp.param_index("h1.mlp.proj.weight"))].values[7];
  w = std::nextafter(w, 1.0);
  check::EquivOptions lenient = options();
  lenient.strict = false;
  lenient.trials = 1;
  const double first = check::equiv_models(g, ulp, lenient).quantities[0].storage_bound;
  EXPECT_GT(first, 0.0);
  EXPECT_EQ(check::equiv_models(g, ulp, lenient).quantities[0].storage_bound, first);
  lenient.seed = 7;
  EXPECT_NE(check::equiv_models(g, ulp, lenient).quantities[0].storage_bound, first);
  check::EquivOptions strict = options();
  strict.trials = 1;
  const report::EquivReport s = check::equiv_models(g, ulp, strict);
  EXPECT_EQ(s.weight_bits, 0u);
  EXPECT_EQ(s.weight_storage, "none (--strict)");
  EXPECT_EQ(s.quantities[0].storage_bound, 0.0);
}

TEST(EquivModels, InputsAreMatchedByNameNotOrder) {
  const Graph a = parse_model(two_inputs(), "");
  const Graph b = parse_model(two_inputs("d", 0.25, true), "");
  check::require_same_interface(a, "a", b, "b", Mode::training);
  const report::EquivReport r = check::equiv_models(a, b, options(Mode::training, true));
  EXPECT_EQ(r.outcome(), Outcome::holds);
  ASSERT_EQ(r.quantities.size(), 3u);  // y, and the gradients of x and s
  EXPECT_EQ(r.quantities[1].stats.quantity, "gradient of input 'x'");
  EXPECT_EQ(r.quantities[2].stats.quantity, "gradient of input 's'");
  EXPECT_EQ(r.dropouts, std::vector<std::string>{"d"});
}

TEST(EquivModels, TrainingModeMasksDependOnTheDropoutRatio) {
  const Graph a = parse_model(two_inputs("d", 0.25), "");
  const Graph b = parse_model(two_inputs("d", 0.5), "");
  EXPECT_EQ(check::equiv_models(a, b, options(Mode::training, true)).outcome(), Outcome::fails);
  EXPECT_EQ(check::equiv_models(a, b, options(Mode::inference)).outcome(), Outcome::holds)
      << "dropout is the identity in inference";
}

// --grad-params: a training fold (cbwc, the stored params kept) of a model with two
// outputs has the same gradient with respect to every param; the outputs stay paired in
// order; a param stored under another name in B is not compared; a param perturbed in B
// gives a different gradient.
TEST(EquivModels, ParamGradientsOfATrainingFoldAreEqual) {
  const Graph g = load_model(std::string(LNV_SOURCE_DIR) + "/tests/golden/center_absorbs.json");
  ASSERT_EQ(g.outputs.size(), 2u);
  const Graph train = apply_fold(g, detect_foldable(g, Mode::training));
  check::EquivOptions o = options(Mode::training, true);
  o.grad_params = true;
  const report::EquivReport r = check::equiv_models(g, train, o);
  EXPECT_EQ(r.outcome(), Outcome::holds);
  ASSERT_EQ(r.quantities.size(), 2 + 1 + g.params.size());  // outputs, x, every param
  EXPECT_EQ(r.quantities[0].stats.quantity, "output 'ln'");
  EXPECT_EQ(r.quantities[1].stats.quantity, "output 'th'");
  EXPECT_EQ(r.quantities[3].stats.quantity, "gradient of param '" + g.params[0].name + "'");
  EXPECT_EQ(r.quantities[3].shape, g.params[0].shape);

  Graph renamed = train;
  ASSERT_EQ(g.params[0].name, "fc.weight");
  renamed.params[0].name = "fc.weight.other";
  renamed.nodes[static_cast<size_t>(renamed.node_index("fc"))].weight = "fc.weight.other";
  renamed.finalize();
  EXPECT_EQ(check::equiv_models(g, renamed, o).quantities.size(), 2 + 1 + g.params.size() - 1);

  Graph perturbed = train;
  for (double& v : perturbed.params[static_cast<size_t>(perturbed.param_index("ln.weight"))].values) v *= 1.5;
  const report::EquivReport p = check::equiv_models(g, perturbed, o);
  bool param_gradient_differs = false;
  for (const auto& q : p.quantities)
    param_gradient_differs = param_gradient_differs || (q.outcome == Outcome::fails &&
                                                        q.stats.quantity.rfind("gradient of param", 0) == 0);
  EXPECT_TRUE(param_gradient_differs);
}

std::string mismatch(const Graph& a, const Graph& b, Mode mode = Mode::inference) {
  try {
    check::require_same_interface(a, "A", b, "B", mode);
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}

TEST(RequireSameInterface, NamesWhatDoesNotMatch) {
  const Graph a = parse_model(two_inputs(), "");
  json renamed = two_inputs();
  renamed["inputs"][1]["name"] = "t";
  renamed["nodes"][1]["inputs"][1] = "t";
  EXPECT_EQ(mismatch(a, parse_model(renamed, "")),
            "input 's': A has this input, B does not: equiv compares models with the same "
            "inputs by name");
  json reshaped = two_inputs();
  reshaped["inputs"][0]["shape"] = {2, 2, 4};
  reshaped["inputs"][1]["shape"] = {2, 2, 4};
  EXPECT_EQ(mismatch(a, parse_model(reshaped, "")), "input 'x': A has shape [2, 3, 4], B [2, 2, 4]");
  json output = two_inputs();
  output["outputs"] = {"sum"};
  EXPECT_EQ(mismatch(a, parse_model(output, "")),
            "output 'ln': A has this output, B does not: equiv compares models with the same "
            "outputs by name");
  const Graph other_dropout = parse_model(two_inputs("drop"), "");
  EXPECT_EQ(mismatch(a, other_dropout), "") << "inference pairs no dropouts";
  EXPECT_NE(mismatch(a, other_dropout, Mode::training).find("dropout 'd': A has this dropout"),
            std::string::npos);
}

}  // namespace
}  // namespace lnv
