// The golden models: every tests/golden/*.json states in `meta.expect` the verdict a
// person derived by hand from docs/spec/semantics.md for each of its LayerNorms (with the one-line
// argument in `meta.why`). This test holds detect_foldable to those verdicts in both modes,
// then proves them by exact evaluation at 256 bits:
//   - the rewrite of the plan agrees with the original model (outputs; gradients with
//     respect to the inputs, and in training also to every original param) on several
//     seeds, to far below double precision;
//   - every LayerNorm judged not foldable, forced to fold with each subset of its candidate
//     terms centered, changes the outputs by far more than rounding (the "no" is tight).
// Each model is its own test case; each prints one summary line.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/eval/evaluator.h"
#include "core/model_json.h"

namespace lnv {
namespace {

using eval::Mpfr;

constexpr unsigned kBits = 256;
constexpr uint64_t kSeeds[] = {1, 2, 3};
// An exact rewrite differs only by rounding, about 2^-(256-20) relative; a wrong fold by
// a visible amount. The two bounds leave forty orders of magnitude between them.
constexpr double kAgreeBound = 1e-60;
constexpr double kDifferBound = 1e-20;
constexpr size_t kMaxForcedSubsets = 16;
constexpr Mode kModes[] = {Mode::inference, Mode::training};

// tests/golden/*.json, then the shipped examples/*.json (which state their verdicts too).
std::vector<std::string> golden_files() {
  std::vector<std::string> all;
  const std::filesystem::path root(LNV_SOURCE_DIR);
  for (const auto& dir : {root / "tests" / "golden", root / "examples"}) {
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      if (entry.path().extension() == ".json") files.push_back(entry.path().string());
    std::sort(files.begin(), files.end());
    all.insert(all.end(), files.begin(), files.end());
  }
  return all;
}

Mpfr largest_magnitude(const Tensor<Mpfr>& a) {
  Mpfr m = 0;
  for (const Mpfr& v : a.data)
    if (abs(v) > m) m = abs(v);
  return m;
}

// max |a - b| over the largest |a|, |b| of the tensor, or over `floor` when that is
// larger. Gradients use the largest gradient of the model as the floor: a gradient that
// is zero in exact arithmetic (a param the LN absorbs) is rounding noise on both sides,
// and its relative difference alone would be meaningless.
double relative_difference(const Tensor<Mpfr>& a, const Tensor<Mpfr>& b,
                           const Mpfr& floor = Mpfr(0)) {
  if (a.shape != b.shape) return std::numeric_limits<double>::infinity();
  Mpfr diff = 0;
  for (size_t i = 0; i < a.data.size(); ++i)
    if (abs(a.data[i] - b.data[i]) > diff) diff = abs(a.data[i] - b.data[i]);
  Mpfr scale = max(floor, max(largest_magnitude(a), largest_magnitude(b)));
  if (scale == 0) return 0.0;
  return Mpfr(diff / scale).convert_to<double>();
}

template <class Named>
int index_of(const std::vector<Named>& items, const std::string& name) {
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].name == name) return static_cast<int>(i);
  return -1;
}

int index_of(const std::vector<std::string>& names, const std::string& name) {
  auto it = std::find(names.begin(), names.end(), name);
  return it == names.end() ? -1 : static_cast<int>(it - names.begin());
}

// The original model evaluated once per (mode, seed): every rewrite is compared with it.
struct Baseline {
  eval::RunOptions opt;
  std::vector<Tensor<Mpfr>> inputs;
  eval::Evaluation<Mpfr> ev;
  eval::Gradients<Mpfr> gr;
};

Baseline baseline(const Graph& g, Mode mode, uint64_t seed) {
  Baseline b;
  b.opt = eval::RunOptions{mode, seed};
  b.inputs = eval::random_inputs<Mpfr>(g, seed);
  b.ev = eval::evaluate(g, b.inputs, b.opt);
  b.gr = eval::gradients(g, b.ev, b.opt);
  return b;
}

// How far a rewrite `rw` of `g` is from it on one seed: outputs, and (optionally)
// gradients with respect to every float input of g and, in training, every param of g,
// matched by name.
struct Difference {
  double outputs = 0.0;
  double gradients = 0.0;
  std::string worst_gradient;  // the param whose gradient differs most (training)
};

Difference compare(const Graph& g, const Baseline& base, const Graph& rw, bool with_gradients) {
  std::vector<Tensor<Mpfr>> rw_inputs(rw.inputs.size());
  for (size_t i = 0; i < rw.inputs.size(); ++i) {
    int k = index_of(g.inputs, rw.inputs[i].name);
    LNV_INTERNAL_ASSERT(k >= 0, "the rewrite has an input the model lacks: " + rw.inputs[i].name);
    rw_inputs[i] = base.inputs[k];
  }
  const eval::Evaluation<Mpfr> rw_ev = eval::evaluate(rw, rw_inputs, base.opt);

  Difference d;
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    int k = index_of(rw.outputs, g.outputs[o]);
    LNV_INTERNAL_ASSERT(k >= 0, "the rewrite lost output " + g.outputs[o]);
    d.outputs = std::max(d.outputs, relative_difference(base.ev.outputs[o], rw_ev.outputs[k]));
  }
  if (!with_gradients) return d;

  const eval::Gradients<Mpfr> rw_gr = eval::gradients(rw, rw_ev, base.opt);
  const bool training = base.opt.mode == Mode::training;
  Mpfr floor = 0;
  for (const Tensor<Mpfr>& t : base.gr.inputs) floor = max(floor, largest_magnitude(t));
  if (training)
    for (const Tensor<Mpfr>& t : base.gr.params) floor = max(floor, largest_magnitude(t));
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    if (g.inputs[i].dtype != DType::float_) continue;
    int k = index_of(rw.inputs, g.inputs[i].name);
    d.gradients = std::max(
        d.gradients, relative_difference(base.gr.inputs[i], rw_gr.inputs[k], floor));
  }
  if (training) {
    for (size_t p = 0; p < g.params.size(); ++p) {
      int k = index_of(rw.params, g.params[p].name);
      LNV_INTERNAL_ASSERT(k >= 0, "the training rewrite lost param " + g.params[p].name);
      const double r = relative_difference(base.gr.params[p], rw_gr.params[k], floor);
      if (r > d.gradients) {
        d.gradients = r;
        d.worst_gradient = g.params[p].name;
      }
    }
  }
  return d;
}

std::string describe(const std::vector<CenterTerm>& terms) {
  std::string s = "{";
  for (const CenterTerm& t : terms) {
    if (s.size() > 1) s += ", ";
    s += t.kind == CenterTerm::Kind::producer ? t.node : t.param + "@" + t.node;
  }
  return s + "}";
}

// The subsets of `terms` a forced fold tries: all of them when there are few, else the
// first kMaxForcedSubsets - 1 in binary order and the full set.
std::vector<std::vector<CenterTerm>> forced_subsets(const std::vector<CenterTerm>& terms) {
  const size_t n = terms.size();
  std::vector<uint64_t> masks;
  if (n < 64 && (uint64_t{1} << n) <= kMaxForcedSubsets) {
    for (uint64_t m = 0; m < (uint64_t{1} << n); ++m) masks.push_back(m);
  } else {
    for (uint64_t m = 0; m + 1 < kMaxForcedSubsets; ++m) masks.push_back(m);
    masks.push_back(n < 64 ? (uint64_t{1} << n) - 1 : ~uint64_t{0});
  }
  std::vector<std::vector<CenterTerm>> subsets;
  for (uint64_t m : masks) {
    std::vector<CenterTerm> s;
    for (size_t i = 0; i < n && i < 64; ++i)
      if (m >> i & 1) s.push_back(terms[i]);
    subsets.push_back(std::move(s));
  }
  return subsets;
}

std::vector<std::string> reason_mentions(const nlohmann::json& expect, Mode mode) {
  std::vector<std::string> out;
  for (const std::string& key : {std::string("reason_mentions"),
                                 "reason_mentions_" + std::string(mode_name(mode))})
    if (expect.contains(key))
      for (const auto& s : expect.at(key)) out.push_back(s.get<std::string>());
  return out;
}

// Totals over the whole suite, printed once at the end.
struct SuiteTotals {
  int models = 0;
  int layer_norms = 0;
  double worst_agreement = 0.0;                                    // max over folds
  double weakest_forced = std::numeric_limits<double>::infinity();  // min over forced folds
  int forced_attempts = 0;
};
SuiteTotals totals;

class Golden : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { eval::set_mpfr_bits(kBits); }
  static void TearDownTestSuite() {
    std::printf(
        "[golden] suite: %d models, %d LayerNorms | folded: max rel diff %.2e (bound %.0e) | "
        "forced: min rel diff %.2e over %d attempts (bound %.0e)\n",
        totals.models, totals.layer_norms, totals.worst_agreement, kAgreeBound,
        totals.weakest_forced, totals.forced_attempts, kDifferBound);
  }
};

TEST_P(Golden, VerdictsMatchAndAreProvedExactly) {
  const auto start = std::chrono::steady_clock::now();
  const Graph g = load_model(GetParam());
  const nlohmann::json meta = parse_meta(g);
  ASSERT_TRUE(meta.is_object()) << "a golden model states its expectations in meta";
  ASSERT_TRUE(meta.contains("rule") && meta.contains("why") && meta.contains("expect"))
      << "meta needs rule, why and expect";
  const nlohmann::json& expect = meta.at("expect");
  const std::string why = meta.at("why").get<std::string>();

  double worst_agreement = 0.0;
  double weakest_forced = std::numeric_limits<double>::infinity();
  int forced_attempts = 0;
  size_t foldable[2] = {0, 0};
  size_t ln_count = 0;
  const bool has_opaque = std::any_of(g.nodes.begin(), g.nodes.end(),
                                      [](const Node& n) { return n.op == Op::opaque; });

  for (Mode mode : kModes) {
    const int m = static_cast<int>(mode);
    const FoldPlan plan = detect_foldable(g, mode);
    ASSERT_EQ(plan.mode, mode);
    ln_count = plan.layer_norms.size();

    // 1. The verdicts, in both modes (each plan states both), and the reasons.
    ASSERT_EQ(plan.layer_norms.size(), expect.size())
        << "meta.expect must name every LayerNorm of the model";
    std::vector<std::string> want_fold;
    for (const LnVerdict& v : plan.layer_norms) {
      ASSERT_TRUE(expect.contains(v.name)) << "no expectation for LayerNorm '" << v.name << "'";
      const nlohmann::json& e = expect.at(v.name);
      for (Mode other : kModes) {
        const int o = static_cast<int>(other);
        const bool want = e.at(std::string(mode_name(other))).get<bool>();
        EXPECT_EQ(v.foldable[o], want)
            << "'" << v.name << "' in " << mode_name(other) << " (plan for " << mode_name(mode)
            << "); analysis reason: \"" << v.reason[o] << "\"; hand derivation: " << why;
        if (!want && v.foldable[o] == want) {
          for (const std::string& s : reason_mentions(e, other)) {
            EXPECT_NE(v.reason[o].find(s), std::string::npos)
                << "the reason for '" << v.name << "' in " << mode_name(other)
                << " should name '" << s << "': \"" << v.reason[o] << "\"";
          }
        }
      }
      if (v.foldable[m]) want_fold.push_back(v.name);
      // Where the plan's fold puts the norm's bias (meta.expect.<ln>.bias: "moves", "kept"
      // or "none"), and what the reason for keeping it names.
      if (e.contains("bias") && v.foldable[m]) {
        const std::string fate = v.bias.moves ? "moves" : v.bias.kept.empty() ? "none" : "kept";
        EXPECT_EQ(fate, e.at("bias").get<std::string>())
            << "the bias of '" << v.name << "' in " << mode_name(mode) << " (kept: \""
            << v.bias.kept << "\")";
        if (e.contains("bias_kept_mentions")) {
          for (const auto& s : e.at("bias_kept_mentions"))
            EXPECT_NE(v.bias.kept.find(s.get<std::string>()), std::string::npos)
                << "why '" << v.name << "' keeps its bias should name " << s << ": \""
                << v.bias.kept << "\"";
        }
      }
    }
    foldable[m] = want_fold.size();
    std::vector<std::string> folded = plan.fold;
    std::sort(folded.begin(), folded.end());
    std::sort(want_fold.begin(), want_fold.end());
    EXPECT_EQ(folded, want_fold) << "the plan folds exactly the LNs foldable in "
                                 << mode_name(mode);

    // An opaque op cannot be evaluated: its verdicts are held to the hand derivation only,
    // and evaluating the model is refused with an error naming the op.
    if (has_opaque) {
      try {
        (void)baseline(g, mode, kSeeds[0]);
        ADD_FAILURE() << "a model with an opaque op was evaluated";
      } catch (const NotEvaluableError& e) {
        EXPECT_NE(std::string(e.what()).find("cannot evaluate op"), std::string::npos)
            << e.what();
      }
      continue;
    }

    // 2. The plan's rewrite is exact.
    std::vector<Baseline> bases;
    for (uint64_t seed : kSeeds) bases.push_back(baseline(g, mode, seed));
    const Graph rewritten = apply_fold(g, plan);
    for (const Baseline& base : bases) {
      const uint64_t seed = base.opt.seed;
      const Difference d = compare(g, base, rewritten, /*with_gradients=*/true);
      EXPECT_LT(d.outputs, kAgreeBound) << mode_name(mode) << " seed " << seed << ": outputs";
      EXPECT_LT(d.gradients, kAgreeBound) << mode_name(mode) << " seed " << seed
                                          << ": gradients (worst: '" << d.worst_gradient << "')";
      worst_agreement = std::max({worst_agreement, d.outputs, d.gradients});
    }

    // 3. Every "not foldable" is tight: no subset of its terms folds it exactly.
    for (const LnVerdict& v : plan.layer_norms) {
      if (v.foldable[m]) continue;
      for (const std::vector<CenterTerm>& subset : forced_subsets(v.terms)) {
        FoldPlan forced;
        forced.mode = mode;
        forced.layer_norms = plan.layer_norms;
        forced.fold = {v.name};
        forced.center = subset;
        double largest = 0.0;  // over the seeds; one seed that shows the change is enough
        try {
          const Graph rw = apply_fold(g, forced);
          for (const Baseline& base : bases) {
            largest = std::max(largest, compare(g, base, rw, false).outputs);
            if (largest > kDifferBound) break;
          }
        } catch (const std::exception& e) {
          ADD_FAILURE() << "forcing '" << v.name << "' with " << describe(subset)
                        << " threw: " << e.what();
          continue;
        }
        EXPECT_GT(largest, kDifferBound)
            << "forcing '" << v.name << "' in " << mode_name(mode) << " with "
            << describe(subset) << " centered kept the outputs (rel diff " << largest
            << "): the verdict 'not foldable' is wrong";
        weakest_forced = std::min(weakest_forced, largest);
        ++forced_attempts;
      }
    }
  }

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char forced[64] = "none to force";
  if (has_opaque)
    std::snprintf(forced, sizeof forced, "not evaluable (opaque op): verdicts only");
  else if (forced_attempts > 0)
    std::snprintf(forced, sizeof forced, "min rel diff %.1e (%d tries)", weakest_forced,
                  forced_attempts);
  std::printf(
      "[golden] %-28s %zu LN | foldable inference %zu, training %zu | folded: max rel diff "
      "%.1e | forced: %s | %.2f s\n",
      g.name.c_str(), ln_count, foldable[0], foldable[1], worst_agreement, forced, seconds);
  ++totals.models;
  totals.layer_norms += static_cast<int>(ln_count);
  totals.worst_agreement = std::max(totals.worst_agreement, worst_agreement);
  totals.weakest_forced = std::min(totals.weakest_forced, weakest_forced);
  totals.forced_attempts += forced_attempts;
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  const std::filesystem::path path(info.param);
  std::string name = path.stem().string();
  if (path.parent_path().filename() == "examples") name = "example_" + name;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Models, Golden, ::testing::ValuesIn(golden_files()), test_name);

}  // namespace
}  // namespace lnv
