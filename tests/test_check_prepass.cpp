// The double pre-pass of `check` (docs/verification.md, "Settling a difference in
// double") does not weaken the proof: its bounds enclose the exact (MPFR) values on random
// graphs, it never settles a near miss, and with it a check reports what it reports
// measuring every forced fold in MPFR.
#include <cmath>
#include <string>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/rc_default_seed.h"

#include "checkers/equivalence.h"
#include "core/eval/bounded.h"
#include "core/eval/evaluator.h"
#include "core/model_json.h"
#include "generators/random_graph.h"

namespace lnv {
namespace {

using eval::Bounded;
using eval::Mpfr;

// Tensors of Bounded values from double tensors of the same values (exact).
std::vector<Tensor<Bounded>> exact_copy(const std::vector<Tensor<double>>& ts) {
  std::vector<Tensor<Bounded>> out;
  for (const Tensor<double>& t : ts) {
    Tensor<Bounded> b(t.shape);
    for (size_t i = 0; i < t.data.size(); ++i) b.data[i] = Bounded(t.data[i]);
    out.push_back(std::move(b));
  }
  return out;
}

// Every bounded value lies within its bound of the 256-bit value; returns how many
// elements were compared, or -1 (with a message) at the first that does not.
int64_t enclosed(const std::vector<Tensor<Bounded>>& b, const std::vector<Tensor<Mpfr>>& m,
                 const std::string& what, std::string& message) {
  int64_t n = 0;
  for (size_t t = 0; t < b.size(); ++t)
    for (size_t i = 0; i < b[t].data.size(); ++i, ++n) {
      const Bounded& x = b[t].data[i];
      const double distance = Mpfr(abs(Mpfr(x.v) - m[t].data[i])).convert_to<double>();
      if (!(distance <= x.e)) {
        message = what + " " + std::to_string(t) + "[" + std::to_string(i) + "]: double " +
                  std::to_string(x.v) + " is " + std::to_string(distance) +
                  " from the exact value, beyond its bound " + std::to_string(x.e);
        return -1;
      }
    }
  return n;
}

// The bounds hold on every generated graph, forward values in both modes and gradients in
// training, whenever the evaluation had no uncertain branch.
RC_GTEST_PROP(CheckPrepass, BoundsEncloseTheExactValues, ()) {
  gen::GenConfig cfg;
  cfg.max_nodes = 24;
  const Graph g = *gen::gen_graph(cfg);
  for (const std::string& tag : gen::graph_tags(g)) RC_TAG(tag);
  for (Mode mode : {Mode::inference, Mode::training}) {
    const eval::RunOptions ro{mode, 7};
    const auto inputs = eval::random_inputs<double>(g, 7);
    const eval::Evaluation<Mpfr> exact = eval::evaluate(g, eval::random_inputs<Mpfr>(g, 7), ro);
    eval::reset_uncertain_branches();
    const eval::Evaluation<Bounded> b = eval::evaluate(g, exact_copy(inputs), ro);
    std::optional<eval::Gradients<Bounded>> bg;
    if (mode == Mode::training) bg = eval::gradients(g, b, ro);
    const bool usable = !eval::uncertain_branches();
    RC_CLASSIFY(usable, std::string(mode_name(mode)) + ": no uncertain branch");
    RC_CLASSIFY(!usable, std::string(mode_name(mode)) + ": an uncertain branch");
    if (!usable) continue;
    std::string message;
    RC_ASSERT(enclosed(b.nodes, exact.nodes, "node", message) >= 0);
    if (mode == Mode::training) {
      const eval::Gradients<Mpfr> eg = eval::gradients(g, exact, ro);
      RC_ASSERT(enclosed(bg->params, eg.params, "param gradient", message) >= 0);
      // (index inputs have empty gradients; both sides alike)
      RC_ASSERT(enclosed(bg->inputs, eg.inputs, "input gradient", message) >= 0);
    }
    if (!message.empty()) RC_FAIL(message);
  }
}

TEST(CheckPrepass, BoundsCoverCancellationAndTranscendentals) {
  // 1 + 2^-60 - 1: double loses the 2^-60 entirely; the bound must cover it.
  const Bounded one_plus = Bounded(1.0) + Bounded(0x1p-60);
  const Bounded diff = one_plus - Bounded(1.0);
  EXPECT_EQ(diff.v, 0.0);
  EXPECT_GE(diff.e, 0x1p-60);
  // exp, tanh, erf, sqrt and a division carry at least the rounding of their result.
  for (const Bounded& r : {exp(Bounded(1.3)), tanh(Bounded(0.4)), erf(Bounded(0.9)),
                           sqrt(Bounded(2.0)), Bounded(1.0) / Bounded(3.0)})
    EXPECT_GE(r.e, 0x1p-54 * std::fabs(r.v));
  // A comparison the bounds cannot decide is flagged; one they decide is not.
  eval::reset_uncertain_branches();
  EXPECT_FALSE(diff > Bounded(0x1p-40));
  EXPECT_FALSE(eval::uncertain_branches());
  EXPECT_FALSE(diff > Bounded(0.0));
  EXPECT_TRUE(eval::uncertain_branches());
}

// x -> h = linear(x); a = h + q * x -> ln with the param q = [factor]: not foldable (an
// input reaches the LN uncentered), and centering h misses by about `factor` relative: a
// hand-made near miss.
Graph near_miss(double factor) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "format": "lnverify.model", "version": 1, "name": "near_miss",
    "inputs": [{"name": "x", "shape": [2, 3, 6], "dtype": "float"}],
    "params": [{"name": "W", "shape": [6, 6], "init": {"dist": "normal", "std": 0.5}},
               {"name": "q", "shape": [1], "data": [0]}],
    "nodes": [{"name": "h", "op": "linear", "inputs": ["x"], "weight": "W"},
              {"name": "s", "op": "mul", "inputs": ["x", "q"]},
              {"name": "a", "op": "add", "inputs": ["h", "s"]},
              {"name": "ln", "op": "layer_norm", "inputs": ["a"], "axes": [-1]}],
    "outputs": ["ln"]})");
  j["params"][1]["data"][0] = factor;
  return parse_model(j, "");
}

const report::CheckResult& result(const report::CheckReport& r, const std::string& kind) {
  for (const report::CheckResult& c : r.results)
    if (c.kind == kind) return c;
  throw std::runtime_error("no " + kind);
}

// A forced fold that misses by 1e-30 or 1e-60 relative is never settled in double (which
// cannot see it) and is still found different, by MPFR, at the precision where the
// difference is stable; the fold that misses by a lot is settled in double. The report is
// the one measuring both folds in MPFR gives.
TEST(CheckPrepass, NearMissIsMeasuredExactly) {
  for (double factor : {1e-30, 1e-60}) {
    SCOPED_TRACE("factor " + std::to_string(factor));
    const Graph g = near_miss(factor);
    check::CheckCounters counters;
    check::CheckOptions opt;
    opt.counters = &counters;
    const report::CheckReport fast = check::check_model(g, opt);
    const report::CheckResult& tight = result(fast, "ln_tight");
    EXPECT_EQ(tight.outcome, report::Outcome::holds) << report::to_text(fast);
    EXPECT_EQ(tight.attempts, 2);  // centering nothing, centering h
    EXPECT_EQ(counters.settled_in_double, 1);
    EXPECT_EQ(counters.measured_exactly, 1);
    // The reported (weakest) fold is the near miss, measured in MPFR.
    EXPECT_GT(tight.max_rel, factor * 1e-3);
    EXPECT_LT(tight.max_rel, factor * 1e3);
    EXPECT_GT(tight.max_abs, tight.bound);

    check::CheckOptions reference;
    reference.double_prepass = false;
    const report::CheckReport exact = check::check_model(g, reference);
    EXPECT_EQ(nlohmann::json(fast).dump(), nlohmann::json(exact).dump());
  }
}

// An analysis that wrongly calls the near miss foldable is caught: the fold differs by
// 1e-30 or 1e-60 relative, invisible in double, and the check fails at full precision.
TEST(CheckPrepass, NearMissWronglyFoldedFails) {
  for (double factor : {1e-30, 1e-60}) {
    SCOPED_TRACE("factor " + std::to_string(factor));
    const Graph g = near_miss(factor);
    const check::Detector wrong = [](const Graph& h, Mode m) {
      FoldPlan p = detect_foldable(h, m);
      CenterTerm t;
      t.node = "h";
      for (LnVerdict& v : p.layer_norms) {
        v.foldable = {true, true};
        v.terms = {t};
        v.conflicts = {};
      }
      p.fold = {"ln"};
      p.center = {t};
      return p;
    };
    check::CheckOptions opt;
    const report::CheckReport r = check::check_model(g, opt, wrong);
    const report::CheckResult& exact = result(r, "ln_exact");
    EXPECT_EQ(exact.outcome, report::Outcome::fails) << report::to_text(r);
    EXPECT_GT(exact.max_rel, factor * 1e-3);
    EXPECT_EQ(r.outcome(), report::Outcome::fails);
  }
}

// Several near misses side by side, x -> h_i = linear(x); a_i = h_i + q_i * x -> ln_i, with
// q_i = factors[i]: LN i's forced fold misses by about factors[i] relative.
Graph near_misses(const std::vector<double>& factors) {
  nlohmann::json j = {{"format", "lnverify.model"}, {"version", 1}, {"name", "near_misses"}};
  j["inputs"] = nlohmann::json::parse(R"([{"name": "x", "shape": [2, 3, 6], "dtype": "float"}])");
  j["params"] = nlohmann::json::array();
  j["nodes"] = nlohmann::json::array();
  j["outputs"] = nlohmann::json::array();
  for (size_t i = 0; i < factors.size(); ++i) {
    const std::string k = std::to_string(i);
    j["params"].push_back({{"name", "W" + k}, {"shape", {6, 6}}, {"init", {{"dist", "normal"}, {"std", 0.5}}}});
    j["params"].push_back({{"name", "q" + k}, {"shape", {1}}, {"data", {factors[i]}}});
    j["nodes"].push_back({{"name", "h" + k}, {"op", "linear"}, {"inputs", {"x"}}, {"weight", "W" + k}});
    j["nodes"].push_back({{"name", "s" + k}, {"op", "mul"}, {"inputs", {"x", "q" + k}}});
    j["nodes"].push_back({{"name", "a" + k}, {"op", "add"}, {"inputs", {"h" + k, "s" + k}}});
    j["nodes"].push_back({{"name", "ln" + k}, {"op", "layer_norm"}, {"inputs", {"a" + k}}, {"axes", {-1}}});
    j["outputs"].push_back("ln" + k);
  }
  return parse_model(j, "");
}

// The checks run on threads give the report and the counters one thread gives, also when
// checks raise the precision side by side (a near miss at 1e-60 is measured again at twice
// the bits, and a wrongly folded one is judged at twice the bits), in both modes.
TEST(CheckPrepass, ThreadsGiveTheOneThreadReport) {
  const Graph g = near_misses({1e-60, 1e-30, 1e-60, 0.0, 1e-60, 1e-10});
  const check::Detector wrong = [](const Graph& h, Mode m) {
    FoldPlan p = detect_foldable(h, m);
    p.fold.clear();
    p.center.clear();
    for (size_t i = 0; i < p.layer_norms.size(); i += 2) {  // every other LN wrongly folded
      LnVerdict& v = p.layer_norms[i];
      CenterTerm t;
      t.node = "h" + v.name.substr(2);
      v.foldable = {true, true};
      v.terms = {t};
      v.conflicts = {};
      p.fold.push_back(v.name);
      p.center.push_back(t);
    }
    return p;
  };
  for (const Mode mode : {Mode::inference, Mode::training})
    for (const check::Detector& detect : {check::real_detector(), wrong}) {
      check::CheckCounters one_counters;
      check::CheckOptions one;
      one.mode = mode;
      one.counters = &one_counters;
      const std::string expected = nlohmann::json(check::check_model(g, one, detect)).dump();
      for (int jobs : {2, 3, 8}) {
        SCOPED_TRACE(std::string(mode_name(mode)) + ", jobs " + std::to_string(jobs));
        check::CheckCounters counters;
        check::CheckOptions opt = one;
        opt.jobs = jobs;
        opt.counters = &counters;
        EXPECT_EQ(nlohmann::json(check::check_model(g, opt, detect)).dump(), expected);
        EXPECT_EQ(counters.settled_in_double, one_counters.settled_in_double);
        EXPECT_EQ(counters.measured_exactly, one_counters.measured_exactly);
      }
    }
}

}  // namespace
}  // namespace lnv
