// Focused tests of the analysis rules (docs/spec/semantics.md, "Foldability"),
// each on a small graph built in code: the verdicts in both modes, what gets
// centered, and that a "no" names the node that breaks it.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "tests/eval_test_graphs.h"

namespace lnv {
namespace {

using testing::GraphBuilder;

LnVerdict verdict(const FoldPlan& plan, const std::string& name) {
  for (const LnVerdict& v : plan.layer_norms)
    if (v.name == name) return v;
  throw std::runtime_error("no LN named " + name);
}

bool has_producer(const LnVerdict& v, const std::string& node) {
  return std::any_of(v.terms.begin(), v.terms.end(), [&](const CenterTerm& t) {
    return t.kind == CenterTerm::Kind::producer && t.node == node;
  });
}

bool mentions(const std::string& reason, const std::string& node) {
  return reason.find("`" + node + "`") != std::string::npos;
}

// x [2, 3, 8] -> fc (linear 8 -> 8); the caller continues from "fc".
GraphBuilder linear_start(const std::string& name = "fc") {
  GraphBuilder b;
  b.input("x", {2, 3, 8}).param(name + ".w", {8, 8}).param(name + ".b", {8});
  Node& n = b.node(name, Op::linear, {"x"});
  n.weight = name + ".w";
  n.bias = name + ".b";
  return b;
}

Node& layer_norm(GraphBuilder& b, const std::string& name, const std::string& in,
                 Axes axes = {-1}) {
  Node& n = b.node(name, Op::layer_norm, {in});
  n.axes = std::move(axes);
  return n;
}

TEST(AnalysisRules, LinearIntoLayerNormFoldsInBothModes) {
  GraphBuilder b = linear_start();
  layer_norm(b, "ln", "fc");
  const FoldPlan plan = detect_foldable(b.build({"ln"}), Mode::inference);
  const LnVerdict& v = verdict(plan, "ln");
  EXPECT_TRUE(v.foldable[0]);
  EXPECT_TRUE(v.foldable[1]);
  EXPECT_TRUE(has_producer(v, "fc"));
  EXPECT_EQ(plan.fold, std::vector<std::string>{"ln"});
}

TEST(AnalysisRules, GraphInputIsOpaque) {
  GraphBuilder b;
  b.input("x", {2, 8});
  layer_norm(b, "ln", "x");
  const LnVerdict& v = verdict(detect_foldable(b.build({"ln"}), Mode::inference), "ln");
  EXPECT_FALSE(v.foldable[0]);
  EXPECT_TRUE(v.opaque);
  EXPECT_TRUE(mentions(v.reason[0], "x")) << v.reason[0];
}

TEST(AnalysisRules, CancelledAtomsDoNotSurvive) {
  // ln1: x - mean(x) is zero-mean by construction; ln2: (fc + x) - x keeps only fc.
  GraphBuilder b = linear_start();
  Node& m = b.node("m", Op::mean, {"x"});
  m.axes = {-1};
  m.keepdims = true;
  b.node("c", Op::sub, {"x", "m"});
  layer_norm(b, "ln1", "c");
  b.node("s", Op::add, {"fc", "x"});
  b.node("d", Op::sub, {"s", "x"});
  layer_norm(b, "ln2", "d");
  const FoldPlan plan = detect_foldable(b.build({"ln1", "ln2"}), Mode::inference);
  const LnVerdict& v1 = verdict(plan, "ln1");
  EXPECT_TRUE(v1.foldable[0]);
  EXPECT_TRUE(v1.terms.empty());
  const LnVerdict& v2 = verdict(plan, "ln2");
  EXPECT_TRUE(v2.foldable[0]) << v2.reason[0];
  ASSERT_EQ(v2.terms.size(), 1u);
  EXPECT_TRUE(has_producer(v2, "fc"));
}

TEST(AnalysisRules, ScaleByZeroRemovesAnOpaqueAtom) {
  GraphBuilder b = linear_start();
  Node& z = b.node("z", Op::scale, {"x"});
  z.factor = 0.0;
  b.node("s", Op::add, {"fc", "z"});
  layer_norm(b, "ln", "s");
  const LnVerdict& v = verdict(detect_foldable(b.build({"ln"}), Mode::inference), "ln");
  EXPECT_TRUE(v.foldable[0]) << v.reason[0];
}

TEST(AnalysisRules, TransposeAndWholeBlockReshapeKeepTheFeatureAxis) {
  // fc [2,3,8] -> reshape [2,3,2,4] -> transpose(0,2,1,3)... back -> LN over the features.
  GraphBuilder b = linear_start();
  Node& r1 = b.node("r1", Op::reshape, {"fc"});
  r1.shape = {6, 8};
  Node& t = b.node("t", Op::transpose, {"r1"});
  t.perm = {1, 0};
  Node& t2 = b.node("t2", Op::transpose, {"t"});
  t2.perm = {1, 0};
  layer_norm(b, "ln", "t2");
  // The same features split into heads: a per-head LN is not a whole-feature mean.
  Node& heads = b.node("heads", Op::reshape, {"fc"});
  heads.shape = {2, 3, 2, 4};
  layer_norm(b, "ln_head", "heads");
  // Features moved to the front: the LN over axis 0 of the transpose is over them.
  Node& front = b.node("front", Op::transpose, {"fc"});
  front.perm = {2, 0, 1};
  layer_norm(b, "ln_front", "front", {0});
  const FoldPlan plan = detect_foldable(b.build({"ln", "ln_head", "ln_front"}), Mode::inference);
  EXPECT_TRUE(verdict(plan, "ln").foldable[0]) << verdict(plan, "ln").reason[0];
  EXPECT_TRUE(verdict(plan, "ln_front").foldable[0]) << verdict(plan, "ln_front").reason[0];
  const LnVerdict& vh = verdict(plan, "ln_head");
  EXPECT_FALSE(vh.foldable[0]);
  EXPECT_TRUE(mentions(vh.reason[0], "heads")) << vh.reason[0];
}

TEST(AnalysisRules, DeadBranchesDoNotMatter) {
  GraphBuilder b = linear_start();
  layer_norm(b, "ln", "fc");
  b.node("act", Op::gelu, {"fc"});  // reaches no output
  const LnVerdict& v = verdict(detect_foldable(b.build({"ln"}), Mode::inference), "ln");
  EXPECT_TRUE(v.foldable[0]) << v.reason[0];
}

TEST(AnalysisRules, ShiftIntoALiveNonlinearityBreaks) {
  GraphBuilder b = linear_start();
  layer_norm(b, "ln", "fc");
  b.node("act", Op::gelu, {"fc"});
  const LnVerdict& v = verdict(detect_foldable(b.build({"ln", "act"}), Mode::inference), "ln");
  EXPECT_FALSE(v.foldable[0]);
  EXPECT_FALSE(v.foldable[1]);
  EXPECT_TRUE(mentions(v.reason[0], "act")) << v.reason[0];
  ASSERT_FALSE(v.path[0].empty());
  EXPECT_EQ(v.path[0].front(), "act");
  EXPECT_EQ(v.path[0].back(), "ln");
}

TEST(AnalysisRules, CenteredTermReachingAnOutputBreaks) {
  GraphBuilder b = linear_start();
  layer_norm(b, "ln", "fc");
  const LnVerdict& v = verdict(detect_foldable(b.build({"ln", "fc"}), Mode::inference), "ln");
  EXPECT_FALSE(v.foldable[0]);
  EXPECT_TRUE(mentions(v.reason[0], "fc")) << v.reason[0];
}

TEST(AnalysisRules, MaxOverTheShiftAxisPassesTheShift) {
  // softmax-like: e = exp(fc - max_f(fc)) is unchanged by centering fc.
  GraphBuilder b = linear_start();
  layer_norm(b, "ln", "fc");
  Node& mx = b.node("mx", Op::max, {"fc"});
  mx.axes = {-1};
  mx.keepdims = true;
  b.node("d", Op::sub, {"fc", "mx"});
  b.node("e", Op::exp, {"d"});
  const LnVerdict& v = verdict(detect_foldable(b.build({"ln", "e"}), Mode::inference), "ln");
  EXPECT_TRUE(v.foldable[0]) << v.reason[0];
}

TEST(AnalysisRules, MaxOverAnotherAxisBreaks) {
  GraphBuilder b = linear_start();
  layer_norm(b, "ln", "fc");
  Node& mx = b.node("pool", Op::max, {"fc"});
  mx.axes = {1};  // over tokens: the shift varies along them
  const LnVerdict& v = verdict(detect_foldable(b.build({"ln", "pool"}), Mode::inference), "ln");
  EXPECT_FALSE(v.foldable[0]);
  EXPECT_TRUE(mentions(v.reason[0], "pool")) << v.reason[0];
}

TEST(AnalysisRules, GroupedConvIsNotFoldableAndTheReasonSaysWhatWouldHelp) {
  GraphBuilder b;
  b.input("x", {2, 4, 6}).param("cw", {4, 2, 3}).param("dw", {4, 4, 3});
  Node& c = b.node("conv", Op::conv1d, {"x"});
  c.weight = "cw";
  c.groups = 2;
  Node& t = b.node("t", Op::transpose, {"conv"});
  t.perm = {0, 2, 1};
  layer_norm(b, "ln", "t");
  Node& d = b.node("dense", Op::conv1d, {"x"});
  d.weight = "dw";
  Node& t2 = b.node("t2", Op::transpose, {"dense"});
  t2.perm = {0, 2, 1};
  layer_norm(b, "ln_dense", "t2");
  const FoldPlan plan = detect_foldable(b.build({"ln", "ln_dense"}), Mode::inference);
  const LnVerdict& v = verdict(plan, "ln");
  EXPECT_FALSE(v.foldable[0]);
  EXPECT_TRUE(mentions(v.reason[0], "conv")) << v.reason[0];
  EXPECT_NE(v.reason[0].find("groups=2"), std::string::npos) << v.reason[0];
  EXPECT_NE(v.reason[0].find("dense"), std::string::npos) << v.reason[0];
  EXPECT_TRUE(verdict(plan, "ln_dense").foldable[0]) << verdict(plan, "ln_dense").reason[0];
}

TEST(AnalysisRules, ConcatAlongTheFeatureAxis) {
  GraphBuilder b = linear_start("fa");
  b.param("fb.w", {8, 8});
  Node& fb = b.node("fb", Op::linear, {"x"});
  fb.weight = "fb.w";
  Node& cat = b.node("cat", Op::concat, {"fa", "fb"});
  cat.axis = -1;
  layer_norm(b, "ln", "cat");
  Node& same = b.node("same", Op::concat, {"fa", "fa"});
  same.axis = -1;
  layer_norm(b, "ln_same", "same");
  Node& tok = b.node("tok", Op::concat, {"fa", "fb"});
  tok.axis = 1;
  layer_norm(b, "ln_tok", "tok");
  const FoldPlan plan = detect_foldable(b.build({"ln", "ln_same", "ln_tok"}), Mode::inference);
  const LnVerdict& v = verdict(plan, "ln");
  EXPECT_FALSE(v.foldable[0]);
  EXPECT_TRUE(mentions(v.reason[0], "cat")) << v.reason[0];
  EXPECT_TRUE(has_producer(v, "fa"));
  EXPECT_TRUE(has_producer(v, "fb"));
  // fa's shift varies along the feature axis of `cat`, so its other uses break too.
  EXPECT_FALSE(verdict(plan, "ln_same").foldable[0]);
  EXPECT_FALSE(verdict(plan, "ln_tok").foldable[0]);
}

TEST(AnalysisRules, ConcatOfOneValueWithItselfKeepsTheShiftConstant) {
  GraphBuilder b = linear_start();
  Node& same = b.node("same", Op::concat, {"fc", "fc"});
  same.axis = -1;
  layer_norm(b, "ln", "same");
  const LnVerdict& v = verdict(detect_foldable(b.build({"ln"}), Mode::inference), "ln");
  EXPECT_TRUE(v.foldable[0]) << v.reason[0];
}

// x -> fc -> d; ln_a = LN(d); cat = concat(d, part) along the features; ln_out = LN(cat)
// with affine. `part` is built from d by the caller.
GraphBuilder concat_of_parts(const std::function<void(GraphBuilder&)>& part) {
  GraphBuilder b = linear_start();
  b.node("d", Op::dropout, {"fc"}).p = 0.0;
  layer_norm(b, "ln_a", "d");
  b.param("g.w", {8, 8}).param("out.g", {16}).param("out.b", {16});
  part(b);
  Node& cat = b.node("cat", Op::concat, {"d", "part"});
  cat.axis = -1;
  Node& out = layer_norm(b, "ln_out", "cat");
  out.weight = "out.g";
  out.bias = "out.b";
  return b;
}

TEST(AnalysisRules, ConcatOfPartsCarryingTheSameShiftKeepsItConstant) {
  // part = d - g(ln_a(d)): ln_a absorbs fc's shift, so both parts carry the same shift.
  GraphBuilder b = concat_of_parts([](GraphBuilder& b) {
    b.node("g", Op::linear, {"ln_a"}).weight = "g.w";
    b.node("part", Op::sub, {"d", "g"});
  });
  const FoldPlan plan = detect_foldable(b.build({"ln_out"}), Mode::inference);
  const LnVerdict& v = verdict(plan, "ln_a");
  EXPECT_TRUE(v.foldable[0]) << v.reason[0];
  EXPECT_TRUE(has_producer(v, "fc"));
  // ln_out's own mean keeps g, whose shift lands on one part only.
  const LnVerdict& out = verdict(plan, "ln_out");
  EXPECT_FALSE(out.foldable[0]);
  EXPECT_TRUE(mentions(out.reason[0], "g")) << out.reason[0];
}

TEST(AnalysisRules, ConcatOfPartsCarryingDifferentShiftsBreaks) {
  // part = d - g(d): the second part's shift is δ - W δ, not fc's δ.
  GraphBuilder b = concat_of_parts([](GraphBuilder& b) {
    b.node("g", Op::linear, {"d"}).weight = "g.w";
    b.node("part", Op::sub, {"d", "g"});
  });
  const LnVerdict v =
      verdict(detect_foldable(b.build({"ln_out", "ln_a"}), Mode::inference), "ln_a");
  EXPECT_FALSE(v.foldable[0]);
  EXPECT_TRUE(mentions(v.reason[0], "ln_out")) << v.reason[0];
  // part = g(ln_a(d)) - d carries -δ: the parts differ too.
  GraphBuilder neg = concat_of_parts([](GraphBuilder& b) {
    b.node("g", Op::linear, {"ln_a"}).weight = "g.w";
    b.node("part", Op::sub, {"g", "d"});
  });
  const LnVerdict w =
      verdict(detect_foldable(neg.build({"ln_out"}), Mode::inference), "ln_a");
  EXPECT_FALSE(w.foldable[0]);
  EXPECT_TRUE(mentions(w.reason[0], "ln_out")) << w.reason[0];
}

TEST(AnalysisRules, PerFeatureParamIsALayerScalePerTokenFactorKeeps) {
  GraphBuilder b = linear_start();
  b.param("gamma", {8});
  b.node("m", Op::mul, {"fc", "gamma"});
  layer_norm(b, "ln", "m");
  const LnVerdict& v = verdict(detect_foldable(b.build({"ln"}), Mode::inference), "ln");
  EXPECT_TRUE(v.foldable[0]) << v.reason[0];
  EXPECT_TRUE(v.foldable[1]) << v.reason[1];
  EXPECT_TRUE(has_producer(v, "m"));
  EXPECT_FALSE(has_producer(v, "fc"));

  GraphBuilder b2 = linear_start();
  b2.param("tokw", {3, 1});
  b2.node("m", Op::mul, {"fc", "tokw"});
  layer_norm(b2, "ln", "m");
  const LnVerdict& v2 = verdict(detect_foldable(b2.build({"ln"}), Mode::inference), "ln");
  EXPECT_TRUE(v2.foldable[0]) << v2.reason[0];
}

// A per-feature factor that is not a LayerScale: its reason names the mul and the part of
// the LayerScale rule it misses, never that no centering exists.
TEST(AnalysisRules, PerFeatureFactorsOutsideTheLayerScaleRuleBreakWithAPreciseReason) {
  auto reason_of = [](GraphBuilder& b) {
    layer_norm(b, "ln", "m");
    const LnVerdict v = verdict(detect_foldable(b.build({"ln", "fc"}), Mode::inference), "ln");
    EXPECT_FALSE(v.foldable[0]);
    EXPECT_TRUE(mentions(v.reason[0], "m")) << v.reason[0];
    EXPECT_EQ(v.reason[0].find("no centering makes"), std::string::npos) << v.reason[0];
    return v.reason[0];
  };
  GraphBuilder shared = linear_start();  // fc is also a graph output
  shared.param("gamma", {8});
  shared.node("m", Op::mul, {"fc", "gamma"});
  EXPECT_NE(reason_of(shared).find("LayerScale"), std::string::npos);

  GraphBuilder two_axes = linear_start();  // γ varies along the tokens too
  two_axes.param("gamma", {3, 8});
  two_axes.node("m", Op::mul, {"fc", "gamma"});
  EXPECT_NE(reason_of(two_axes).find("LayerScale"), std::string::npos);

  GraphBuilder gate = linear_start();  // a factor computed from the input
  gate.node("s", Op::sigmoid, {"x"});
  gate.node("m", Op::mul, {"fc", "s"});
  EXPECT_NE(reason_of(gate).find("computed from the input"), std::string::npos);
}

// The LayerScale fold: inference moves γ into the producer's weight and the chain's bias
// and makes the mul an identity; training centers γ ⊙ z in the graph under the mul's name.
TEST(AnalysisRules, LayerScaleRewriteMovesGammaIntoTheWeightsOrCentersInTheGraph) {
  GraphBuilder b;
  b.input("x", {2, 3, 5}).param("W", {5, 8}).param("bias", {8}).param("gamma", {8});
  b.node("mm", Op::matmul, {"x", "W"});
  b.node("mb", Op::add, {"bias", "mm"});
  b.node("m", Op::mul, {"gamma", "mb"});
  layer_norm(b, "ln", "m");
  const Graph g = b.build({"ln"});
  const std::vector<double> gamma = g.params[g.param_index("gamma")].values;

  const FoldPlan plan = detect_foldable(g, Mode::inference);
  ASSERT_EQ(plan.fold, std::vector<std::string>{"ln"});
  const Graph fi = apply_fold(g, plan);
  const Param& w = fi.params[fi.param_index("W")];
  EXPECT_EQ(w.scale, gamma);
  EXPECT_EQ(w.scale_axis, 1);
  EXPECT_EQ(w.center_axes, Axes{1});
  const Param& bias = fi.params[fi.param_index("bias")];
  EXPECT_EQ(bias.scale, gamma);
  EXPECT_EQ(bias.center_axes, Axes{0});
  const Node& m = fi.nodes[fi.node_index("m")];
  EXPECT_EQ(m.op, Op::scale);
  EXPECT_EQ(m.factor, 1.0);
  EXPECT_EQ(m.inputs, std::vector<std::string>{"mb"});
  // The effective weight is C·(W·diag(γ)): every row sums to zero.
  const std::vector<double> eff = effective_values(w);
  for (int r = 0; r < 5; ++r) {
    double sum = 0.0;
    for (int c = 0; c < 8; ++c) sum += eff[size_t(r * 8 + c)];
    EXPECT_NEAR(sum, 0.0, 1e-12);
  }

  FoldPlan training = detect_foldable(g, Mode::training);
  const Graph ft = apply_fold(g, training);
  EXPECT_TRUE(ft.params[ft.param_index("W")].scale.empty());
  const Node& c = ft.nodes[ft.node_index("m")];
  EXPECT_EQ(c.op, Op::center);
  EXPECT_EQ(c.axes, Axes{2});
  EXPECT_EQ(c.inputs, std::vector<std::string>{"m.unscaled"});
  EXPECT_EQ(ft.nodes[ft.node_index("m.unscaled")].op, Op::mul);
}

// mean_T(center_F(x·γ)) = γ·mean_T(x) - mean_F(γ·mean_T(x)): the two parts average the
// same atom over the tokens but only the second then averages over the features, so they
// do not cancel (tests/regressions/center_then_norm_over_other_axis).
TEST(AnalysisRules, CenterOverFeaturesDoesNotZeroTheMeanOverTokensOfAProduct) {
  GraphBuilder b;
  b.input("x", {2, 3, 8}).param("gamma", {8});
  b.node("m", Op::mul, {"x", "gamma"});
  b.node("c", Op::center, {"m"}).axes = {-1};
  layer_norm(b, "ln_tokens", "c", {1});
  layer_norm(b, "ln_features", "c", {-1});
  layer_norm(b, "ln_both", "c", {1, 2});
  const FoldPlan plan = detect_foldable(b.build({"ln_tokens", "ln_features", "ln_both"}),
                                        Mode::inference);
  const LnVerdict& tokens = verdict(plan, "ln_tokens");
  EXPECT_FALSE(tokens.foldable[0]);
  EXPECT_FALSE(tokens.foldable[1]);
  EXPECT_TRUE(mentions(tokens.reason[0], "x")) << tokens.reason[0];
  EXPECT_TRUE(verdict(plan, "ln_features").foldable[0]);
  EXPECT_TRUE(verdict(plan, "ln_both").foldable[0]);
}

TEST(AnalysisRules, GateComputedFromAShiftedValueBreaks) {
  GraphBuilder b = linear_start();
  b.param("fo.w", {8, 8});
  layer_norm(b, "ln", "fc");
  b.node("gate", Op::sigmoid, {"fc"});
  Node& other = b.node("other", Op::linear, {"x"});
  other.weight = "fo.w";
  b.node("gated", Op::mul, {"other", "gate"});
  const LnVerdict& v = verdict(detect_foldable(b.build({"ln", "gated"}), Mode::inference), "ln");
  EXPECT_FALSE(v.foldable[0]);
  EXPECT_TRUE(mentions(v.reason[0], "gate")) << v.reason[0];
}

TEST(AnalysisRules, TrainingDropoutBetweenProducerAndLayerNorm) {
  GraphBuilder b = linear_start("fc_2");
  Node& d = b.node("drop_3", Op::dropout, {"fc_2"});
  d.p = 0.1;
  layer_norm(b, "ln_2", "drop_3");
  const LnVerdict& v = verdict(detect_foldable(b.build({"ln_2"}), Mode::training), "ln_2");
  EXPECT_TRUE(v.foldable[0]) << v.reason[0];
  EXPECT_FALSE(v.foldable[1]);
  EXPECT_TRUE(mentions(v.reason[1], "drop_3")) << v.reason[1];
  EXPECT_TRUE(mentions(v.reason[1], "fc_2")) << v.reason[1];
  EXPECT_TRUE(mentions(v.reason[1], "ln_2")) << v.reason[1];
  EXPECT_TRUE(v.reason[0].empty());
}

TEST(AnalysisRules, TrainingDropoutOnAResidualBranchSpoilsTheStream) {
  // pre-norm block: h = emb + drop(fc(ln1(h))); ln2(h). The dropout output is opaque in
  // training, so ln2 cannot fold; emb's shift flows through the add (not the dropout).
  GraphBuilder b;
  b.index_input("tok", {2, 3}, 10).param("E", {10, 8}).param("fc.w", {8, 8});
  Node& e = b.node("emb", Op::embedding, {"tok"});
  e.weight = "E";
  layer_norm(b, "ln1", "emb");
  Node& fc = b.node("fc", Op::linear, {"ln1"});
  fc.weight = "fc.w";
  Node& d = b.node("drop", Op::dropout, {"fc"});
  d.p = 0.2;
  b.node("h", Op::add, {"emb", "drop"});
  layer_norm(b, "ln2", "h");
  const FoldPlan plan = detect_foldable(b.build({"ln2"}), Mode::training);
  EXPECT_TRUE(verdict(plan, "ln1").foldable[1]) << verdict(plan, "ln1").reason[1];
  EXPECT_TRUE(verdict(plan, "ln2").foldable[0]);
  EXPECT_FALSE(verdict(plan, "ln2").foldable[1]);
  EXPECT_TRUE(mentions(verdict(plan, "ln2").reason[1], "drop"));
  EXPECT_EQ(plan.fold, std::vector<std::string>{"ln1"});
}

TEST(AnalysisRules, PositionalEmbeddingIsAParamTermCenteredOverFeatures) {
  GraphBuilder b;
  b.index_input("tok", {2, 3}, 10).param("E", {10, 8}).param("pos", {3, 8}).param("bias1", {3, 1});
  Node& e = b.node("emb", Op::embedding, {"tok"});
  e.weight = "E";
  b.node("h", Op::add, {"emb", "pos"});
  b.node("h2", Op::add, {"h", "bias1"});  // broadcast along the features: removed
  layer_norm(b, "ln", "h2");
  const FoldPlan plan = detect_foldable(b.build({"ln"}), Mode::inference);
  const LnVerdict& v = verdict(plan, "ln");
  ASSERT_TRUE(v.foldable[0]) << v.reason[0];
  EXPECT_TRUE(has_producer(v, "emb"));
  bool pos = false, removed = false;
  for (const CenterTerm& t : v.terms) {
    if (t.param == "pos") {
      pos = true;
      EXPECT_EQ(t.node, "h");
      EXPECT_EQ(t.slot, "inputs/1");
      EXPECT_EQ(t.axes, Axes{1});
      EXPECT_FALSE(t.remove);
    }
    if (t.param == "bias1") {
      removed = true;
      EXPECT_TRUE(t.remove);
    }
  }
  EXPECT_TRUE(pos);
  EXPECT_TRUE(removed);
}

TEST(AnalysisRules, NormBiasWithoutWeightIsATerm) {
  GraphBuilder b = linear_start();
  b.param("nb", {8});
  Node& ln0 = layer_norm(b, "ln0", "fc");
  ln0.bias = "nb";
  layer_norm(b, "ln1", "ln0");
  const FoldPlan plan = detect_foldable(b.build({"ln1"}), Mode::inference);
  const LnVerdict& v = verdict(plan, "ln1");
  ASSERT_TRUE(v.foldable[0]) << v.reason[0];
  ASSERT_EQ(v.terms.size(), 1u);
  EXPECT_EQ(v.terms[0].param, "nb");
  EXPECT_EQ(v.terms[0].slot, "bias");
}

TEST(AnalysisRules, ProductOfParamsBroadcastAlongTheNormAxesIsRemoved) {
  // pq = P Q has shape [3, 1]: broadcast along the features the LN normalizes, so the LN
  // absorbs it like a broadcast param term (regression param_matmul_broadcast_along_norm_axis).
  GraphBuilder b = linear_start();
  b.param("P", {3, 4}).param("Q", {4, 1});
  b.node("pq", Op::matmul, {"P", "Q"});
  b.node("h", Op::add, {"fc", "pq"});
  layer_norm(b, "ln", "h");
  const FoldPlan plan = detect_foldable(b.build({"ln"}), Mode::inference);
  const LnVerdict& v = verdict(plan, "ln");
  ASSERT_TRUE(v.foldable[0]) << v.reason[0];
  ASSERT_TRUE(v.foldable[1]) << v.reason[1];
  EXPECT_TRUE(has_producer(v, "fc"));
  EXPECT_FALSE(has_producer(v, "pq"));
  bool removed = false;
  for (const CenterTerm& t : v.terms)
    if (t.param == "Q") {
      removed = true;
      EXPECT_EQ(t.node, "pq");
      EXPECT_EQ(t.slot, "inputs/1");
      EXPECT_TRUE(t.remove);
    }
  EXPECT_TRUE(removed);
}

TEST(AnalysisRules, NormWithWeightIsOpaque) {
  GraphBuilder b = linear_start();
  b.param("nw", {8});
  Node& ln0 = layer_norm(b, "ln0", "fc");
  ln0.weight = "nw";
  layer_norm(b, "ln1", "ln0");
  const LnVerdict& v = verdict(detect_foldable(b.build({"ln1"}), Mode::inference), "ln1");
  EXPECT_FALSE(v.foldable[0]);
  EXPECT_TRUE(v.opaque);
  EXPECT_TRUE(mentions(v.reason[0], "ln0")) << v.reason[0];
}

TEST(AnalysisRules, TiedEmbeddingIsCenteredOnlyWhereItFeedsTheNorm) {
  // The lm head reads E raw; the embedding's use is still a term.
  GraphBuilder b;
  b.index_input("tok", {2, 3}, 10).param("E", {10, 8});
  Node& e = b.node("emb", Op::embedding, {"tok"});
  e.weight = "E";
  layer_norm(b, "ln", "emb");
  Node& head = b.node("head", Op::linear, {"ln"});
  head.weight = "E";
  const FoldPlan plan = detect_foldable(b.build({"head"}), Mode::inference);
  EXPECT_TRUE(verdict(plan, "ln").foldable[0]);
  EXPECT_TRUE(verdict(plan, "ln").foldable[1]);
  ASSERT_EQ(plan.center.size(), 1u);
  EXPECT_EQ(plan.center[0].node, "emb");
}

TEST(AnalysisRules, SoftmaxAbsorbsAlongTheShiftAxis) {
  GraphBuilder b = linear_start();
  layer_norm(b, "ln", "fc");
  Node& s = b.node("sm", Op::softmax, {"fc"});
  s.axis = -1;
  Node& s2 = b.node("sm_tok", Op::softmax, {"fc"});
  s2.axis = 1;
  const FoldPlan plan = detect_foldable(b.build({"ln", "sm"}), Mode::inference);
  EXPECT_TRUE(verdict(plan, "ln").foldable[0]) << verdict(plan, "ln").reason[0];
  GraphBuilder b2 = linear_start();
  layer_norm(b2, "ln", "fc");
  Node& s3 = b2.node("sm_tok", Op::softmax, {"fc"});
  s3.axis = 1;
  const LnVerdict& v = verdict(detect_foldable(b2.build({"ln", "sm_tok"}), Mode::inference), "ln");
  EXPECT_FALSE(v.foldable[0]);
  EXPECT_TRUE(mentions(v.reason[0], "sm_tok")) << v.reason[0];
}

TEST(AnalysisRules, RnnNormAlwaysFolds) {
  GraphBuilder b;
  b.input("x", {2, 3, 4}).param("wih", {5, 4}).param("whh", {5, 5}).param("rb", {5});
  Node& r = b.node("rnn", Op::rnn, {"x"});
  r.weight_ih = "wih";
  r.weight_hh = "whh";
  r.bias = "rb";
  r.norm = RnnNorm{};
  const FoldPlan plan = detect_foldable(b.build({"rnn"}), Mode::training);
  const LnVerdict& v = verdict(plan, "rnn.norm");
  EXPECT_TRUE(v.foldable[0]);
  EXPECT_TRUE(v.foldable[1]);
  EXPECT_TRUE(has_producer(v, "rnn"));
}

TEST(AnalysisRules, DeadLayerNormFoldsWithNothingCentered) {
  GraphBuilder b = linear_start();
  layer_norm(b, "ln_dead", "x");
  layer_norm(b, "ln", "fc");
  const FoldPlan plan = detect_foldable(b.build({"ln"}), Mode::inference);
  EXPECT_TRUE(verdict(plan, "ln_dead").foldable[0]);
  EXPECT_TRUE(verdict(plan, "ln_dead").terms.empty());
}

TEST(AnalysisRules, StructuralZerosCutDependence) {
  // fc's shift reaches an output only through sub(fc, fc) = 0.
  GraphBuilder b = linear_start();
  layer_norm(b, "ln", "fc");
  b.node("z", Op::sub, {"fc", "fc"});
  const LnVerdict& v = verdict(detect_foldable(b.build({"ln", "z"}), Mode::inference), "ln");
  EXPECT_TRUE(v.foldable[0]) << v.reason[0];
}

TEST(AnalysisRules, LayerNormsOwnZeroMeanDoesNotMakeItDead) {
  // mean(ln) over its axes is 0 only while ln subtracts the mean: ln is judged as live.
  GraphBuilder b;
  b.input("x", {2, 8});
  layer_norm(b, "ln", "x");
  Node& m = b.node("m", Op::mean, {"ln"});
  m.axes = {-1};
  const LnVerdict& v = verdict(detect_foldable(b.build({"m"}), Mode::inference), "ln");
  EXPECT_FALSE(v.foldable[0]);
  EXPECT_TRUE(mentions(v.reason[0], "x")) << v.reason[0];
}

TEST(AnalysisRules, DeepResidualStreamIsFoldableThroughout) {
  // emb -> [ln_k -> fc1 -> gelu -> fc2 -> add]* -> ln_f
  GraphBuilder b;
  b.index_input("tok", {1, 4}, 16).param("E", {16, 8});
  Node& e = b.node("emb", Op::embedding, {"tok"});
  e.weight = "E";
  std::string h = "emb";
  const int blocks = 30;
  for (int k = 0; k < blocks; ++k) {
    const std::string s = std::to_string(k);
    layer_norm(b, "ln" + s, h);
    b.param("w1_" + s, {16, 8}).param("w2_" + s, {8, 16});
    Node& f1 = b.node("fc1_" + s, Op::linear, {"ln" + s});
    f1.weight = "w1_" + s;
    b.node("act" + s, Op::gelu, {"fc1_" + s});
    Node& f2 = b.node("fc2_" + s, Op::linear, {"act" + s});
    f2.weight = "w2_" + s;
    b.node("h" + s, Op::add, {h, "fc2_" + s});
    h = "h" + s;
  }
  layer_norm(b, "ln_f", h);
  const FoldPlan plan = detect_foldable(b.build({"ln_f"}), Mode::inference);
  EXPECT_EQ(plan.foldable_count(Mode::inference), size_t(blocks + 1));
  const LnVerdict& last = verdict(plan, "ln_f");
  EXPECT_EQ(last.terms.size(), size_t(blocks + 1));  // emb and every fc2
  EXPECT_EQ(last.term_count, size_t(blocks + 1));
  EXPECT_EQ(plan.center.size(), size_t(blocks + 1));
  // Without the per-LN lists the verdicts and the plan are the same.
  const FoldPlan lean = detect_foldable(b.build({"ln_f"}), Mode::inference, {false});
  EXPECT_TRUE(verdict(lean, "ln_f").terms.empty());
  EXPECT_EQ(verdict(lean, "ln_f").term_count, size_t(blocks + 1));
  EXPECT_EQ(lean.center.size(), plan.center.size());
}

// The zero mean of an LN output without affine is carried through inference dropouts and
// sums of zero-mean operands: mean(dropout(ln0) + ln0) over ln0's axes is 0, so the
// graph input times it is 0 and ln2 = LayerNorm(0) folds with nothing centered (the input
// itself cannot be centered). A DAG of 60
// sums that each add their operand to itself (2^60 paths back to ln0) answers in bounded
// work (the question gives up, conservatively, after a fixed number of visits) - if the
// walk were unbounded this test would not finish.
TEST(AnalysisRules, ZeroMeanThroughSumsIsBoundedOnReusedOperands) {
  for (int chain : {1, 60}) {
    GraphBuilder b = linear_start();
    layer_norm(b, "ln0", "fc");
    Node& d = b.node("d", Op::dropout, {"ln0"});
    d.p = 0.1;
    std::string last = "d";
    for (int k = 0; k < chain; ++k) {
      const std::string name = "s" + std::to_string(k);
      b.node(name, Op::add, {last, k == 0 ? "ln0" : last});
      last = name;
    }
    Node& m = b.node("m", Op::mean, {last});
    m.axes = {-1};
    m.keepdims = true;
    b.node("p", Op::mul, {"x", "m"});
    layer_norm(b, "ln2", "p");
    const FoldPlan plan = detect_foldable(b.build({"ln2", "ln0"}), Mode::inference);
    const LnVerdict v = verdict(plan, "ln2");
    if (chain == 1) {
      EXPECT_TRUE(v.foldable[0]) << v.reason[0];  // inference: the mean is 0
      EXPECT_TRUE(v.terms.empty());
      EXPECT_FALSE(v.foldable[1]);  // training: the dropout mask breaks the zero mean
    } else {
      EXPECT_FALSE(v.foldable[0]);  // past the visit budget: a conservative "no"
    }
  }
}

// A mean that is one constant cuts dependence: a softmax averaged over its own axis (1/n),
// a LayerNorm without weight averaged over its axes (its bias's mean) while it stays a
// LayerNorm. In training an active dropout keeps `ln`'s input from being zero-mean, so
// `ln` folds only if nothing reaches an output through it.
TEST(AnalysisRules, ConstantMeansCutDependenceOnlyWhereTheyAreConstant) {
  enum Reader { softmax_own_axis, softmax_other_axis, norm_bias_only, norm_with_weight,
                norm_other_axis };
  for (Reader reader : {softmax_own_axis, softmax_other_axis, norm_bias_only, norm_with_weight,
                        norm_other_axis}) {
    SCOPED_TRACE(int(reader));
    GraphBuilder b = linear_start();
    b.node("drop", Op::dropout, {"fc"}).p = 0.1;
    layer_norm(b, "ln", "drop");
    Axes mean_axes = {-1};
    if (reader == softmax_own_axis || reader == softmax_other_axis) {
      b.node("sm", Op::softmax, {"ln"}).axis = -1;
      if (reader == softmax_other_axis) mean_axes = {1};
    } else {
      // After a relu: `after`'s input is not zero-mean, so `after` itself stays a LayerNorm.
      b.node("act", Op::relu, {"ln"});
      b.param("after.b", {8});
      Node& after = layer_norm(b, "after", "act");
      after.bias = "after.b";
      if (reader == norm_with_weight) {
        b.param("after.w", {8});
        after.weight = "after.w";
      }
      if (reader == norm_other_axis) mean_axes = {1};
    }
    Node& m = b.node("m", Op::mean, {reader <= softmax_other_axis ? "sm" : "after"});
    m.axes = mean_axes;
    const FoldPlan plan = detect_foldable(b.build({"m"}), Mode::training);
    const LnVerdict v = verdict(plan, "ln");
    EXPECT_TRUE(v.foldable[0]) << v.reason[0];  // inference: fc is centered
    const bool constant = reader == softmax_own_axis || reader == norm_bias_only;
    EXPECT_EQ(v.foldable[1], constant) << v.reason[1];
  }
}

// A softmax read only through its constant mean, but itself a graph output, keeps its
// input live.
TEST(AnalysisRules, ConstantMeanDoesNotHideAnOutput) {
  GraphBuilder b = linear_start();
  b.node("drop", Op::dropout, {"fc"}).p = 0.1;
  layer_norm(b, "ln", "drop");
  b.node("sm", Op::softmax, {"ln"}).axis = -1;
  b.node("m", Op::mean, {"sm"}).axes = {-1};
  const FoldPlan plan = detect_foldable(b.build({"m", "sm"}), Mode::training);
  EXPECT_FALSE(verdict(plan, "ln").foldable[1]);
}

// A constant mean is uniform along every axis: a LayerNorm over it outputs its bias (here
// none: zero), so `lnz`, multiplied by that zero, is dead; averaged over another axis the
// softmax is not constant and `lnz` stays live.
TEST(AnalysisRules, ConstantMeanIsUniform) {
  for (int64_t mean_axis : {1, 2}) {
    SCOPED_TRACE(mean_axis);
    GraphBuilder b;
    b.input("x", {2, 3, 8}).input("z", {2, mean_axis == 1 ? 8 : 3});
    b.node("sm", Op::softmax, {"x"}).axis = 1;
    b.node("m", Op::mean, {"sm"}).axes = {mean_axis};  // [2, 8] or [2, 3], like z
    layer_norm(b, "post", "m");
    b.node("drop", Op::dropout, {"z"}).p = 0.1;
    layer_norm(b, "lnz", "drop");
    b.node("prod", Op::mul, {"lnz", "post"});
    const FoldPlan plan = detect_foldable(b.build({"prod"}), Mode::training);
    EXPECT_EQ(verdict(plan, "lnz").foldable[1], mean_axis == 1) << verdict(plan, "lnz").reason[1];
  }
}

// The constant mean of an LN with a bias holds only while it stays an LN: when its own
// input is not zero-mean, it is not "dead" through its own constant mean.
TEST(AnalysisRules, NormWithBiasIsNotDeadThroughItsOwnConstantMean) {
  GraphBuilder b = linear_start();
  b.node("drop", Op::dropout, {"fc"}).p = 0.1;
  b.param("ln.b", {8});
  layer_norm(b, "ln", "drop").bias = "ln.b";
  b.node("m", Op::mean, {"ln"}).axes = {-1};
  const FoldPlan plan = detect_foldable(b.build({"m"}), Mode::training);
  const LnVerdict v = verdict(plan, "ln");
  EXPECT_TRUE(v.foldable[0]) << v.reason[0];
  EXPECT_FALSE(v.foldable[1]);
  EXPECT_TRUE(mentions(v.reason[1], "drop")) << v.reason[1];
}

// mean_j(a · softmax_j(s)ᵀ) = (1/n) Σ_k a[i, k]: zero when a is zero-mean along k. Here
// `a` is an LN's zero-mean output, so `ln2` folds with nothing centered, and the mean `m`
// is a structural zero (`ln3`, behind an active dropout in training, is dead through the
// product with it); with the softmax along the other axis its columns do not sum to one
// and neither holds.
TEST(AnalysisRules, ProductWithSoftmaxColumnsKeepsZeroMean) {
  for (int64_t softmax_axis : {1, 2}) {
    SCOPED_TRACE(softmax_axis);
    GraphBuilder b;
    b.input("x", {2, 4, 4}).input("s", {2, 4, 4}).input("z", {2, 4, 5});
    layer_norm(b, "ln1", "x");
    b.node("sm", Op::softmax, {"s"}).axis = softmax_axis;
    b.node("mm", Op::matmul, {"ln1", "sm"}).transpose_b = true;
    layer_norm(b, "ln2", "mm");
    Node& m = b.node("m", Op::mean, {"mm"});
    m.axes = {-1};
    m.keepdims = true;
    b.node("drop", Op::dropout, {"z"}).p = 0.1;
    layer_norm(b, "ln3", "drop");
    b.node("prod", Op::mul, {"ln3", "m"});
    const FoldPlan plan = detect_foldable(b.build({"ln2", "prod"}), Mode::training);
    const LnVerdict v2 = verdict(plan, "ln2"), v3 = verdict(plan, "ln3");
    EXPECT_EQ(v2.foldable[0], softmax_axis == 1) << v2.reason[0];
    if (softmax_axis == 1) { EXPECT_TRUE(v2.terms.empty()); }
    EXPECT_EQ(v3.foldable[1], softmax_axis == 1) << v3.reason[1];
  }
}

// The mean of a mean is a mean over the union of their axes (seen in the input's axes,
// keepdims or not): zero when the input is zero-mean over some of them.
TEST(AnalysisRules, MeanOfMeanOfZeroMeanValueIsZero) {
  for (bool keepdims : {false, true}) {
    SCOPED_TRACE(keepdims);
    GraphBuilder b = linear_start();
    b.node("c", Op::center, {"fc"}).axes = {-1};  // zero-mean over axis 2
    Node& m1 = b.node("m1", Op::mean, {"c"});
    m1.axes = {1};
    m1.keepdims = keepdims;
    // m1's last axis is fc's axis 2 either way.
    Node& m2 = b.node("m2", Op::mean, {"m1"});
    m2.axes = {-1};
    m2.keepdims = true;  // [2, 1] or [2, 1, 1]: broadcasts against z's [2, 5]
    b.input("z", {2, 5});
    b.node("drop", Op::dropout, {"z"}).p = 0.1;
    layer_norm(b, "ln", "drop");
    b.node("prod", Op::mul, {"ln", "m2"});
    const FoldPlan plan = detect_foldable(b.build({"prod"}), Mode::training);
    const LnVerdict v = verdict(plan, "ln");
    EXPECT_TRUE(v.foldable[1]) << v.reason[1];  // prod is 0: ln is dead
  }
}

// Uniform axes through a conv and a matmul. `u` = (x + c) - x is the scalar c everywhere.
// A conv keeps it constant along time only without padding (windows reaching into the
// padding see zeros); a matmul with a param keeps it constant along the rows, not the
// columns. A LayerNorm over axes its input is constant along outputs 0, so `lnz`
// (behind an active dropout in training) is dead through the product with it.
TEST(AnalysisRules, UniformAxesThroughConvAndMatmul) {
  enum Case { conv_unpadded, conv_padded, matmul_rows, matmul_cols };
  for (Case c : {conv_unpadded, conv_padded, matmul_rows, matmul_cols}) {
    SCOPED_TRACE(int(c));
    GraphBuilder b;
    b.input("x", {1, 2, 5}).param("c", {1}).param("K", {2, 2, 3}).param("B", {5, 4});
    b.node("xc", Op::add, {"x", "c"});
    b.node("u", Op::sub, {"xc", "x"});
    Shape z_shape;
    if (c == conv_unpadded || c == conv_padded) {
      Node& conv = b.node("mix", Op::conv1d, {"u"});
      conv.weight = "K";
      conv.padding = {c == conv_padded ? 1 : 0};
      layer_norm(b, "ln_t", "mix", {2});  // over time
      z_shape = {1, 2, c == conv_padded ? 5 : 3};
    } else {
      b.node("mix", Op::matmul, {"u", "B"});  // [1, 2, 4]
      layer_norm(b, "ln_t", "mix", {c == matmul_rows ? 1 : 2});
      z_shape = {1, 2, 4};
    }
    b.input("z", z_shape);
    b.node("drop", Op::dropout, {"z"}).p = 0.1;
    layer_norm(b, "lnz", "drop");
    b.node("prod", Op::mul, {"lnz", "ln_t"});
    const FoldPlan plan = detect_foldable(b.build({"prod"}), Mode::training);
    const bool uniform = c == conv_unpadded || c == matmul_rows;
    EXPECT_EQ(verdict(plan, "lnz").foldable[1], uniform) << verdict(plan, "lnz").reason[1];
  }
}

// A mean through a reshape: a block averaged whole is the mean over its input axes (the
// centered rows of 8, flattened with their 3 tokens into 24, average to 0); a block
// averaged in part is not (halves of centered rows do not).
TEST(AnalysisRules, ZeroMeanThroughReshapeOfWholeBlocks) {
  for (bool whole : {true, false}) {
    SCOPED_TRACE(whole);
    GraphBuilder b = linear_start();
    b.node("c", Op::center, {"fc"}).axes = {-1};
    b.node("r", Op::reshape, {"c"}).shape = whole ? Shape{2, 24} : Shape{2, 6, 4};
    Node& m = b.node("m", Op::mean, {"r"});
    m.axes = {-1};
    m.keepdims = true;  // [2, 1] or [2, 6, 1]
    b.input("z", whole ? Shape{2, 5} : Shape{2, 6, 5});
    b.node("drop", Op::dropout, {"z"}).p = 0.1;
    layer_norm(b, "lnz", "drop");
    b.node("prod", Op::mul, {"lnz", "m"});
    const FoldPlan plan = detect_foldable(b.build({"prod"}), Mode::training);
    EXPECT_EQ(verdict(plan, "lnz").foldable[1], whole) << verdict(plan, "lnz").reason[1];
  }
}

// A centered producer's shift cancelling between routes through sums: out = fc + ((ln +
// x) - fc) is ln + x, so centering fc (for `ln`) changes no output - the shift reaches
// `ln`, which absorbs it, and cancels in `out`. When it does not cancel (fc taken twice
// in the difference), or the difference where it is still present is itself an output,
// `ln` is not foldable.
TEST(AnalysisRules, ShiftCancellingBetweenRoutesThroughSums) {
  enum Case { cancels, no_cancel, partial_sum_is_output };
  for (Case c : {cancels, no_cancel, partial_sum_is_output}) {
    SCOPED_TRACE(int(c));
    GraphBuilder b = linear_start();
    layer_norm(b, "ln", "fc");
    b.node("w", Op::add, {"ln", "x"});
    if (c == no_cancel) {
      b.node("fc2", Op::scale, {"fc"}).factor = 2.0;
      b.node("d", Op::sub, {"w", "fc2"});
    } else {
      b.node("d", Op::sub, {"w", "fc"});
    }
    b.node("out", Op::add, {"fc", "d"});
    std::vector<std::string> outputs = {"out"};
    if (c == partial_sum_is_output) outputs.push_back("d");
    const FoldPlan plan = detect_foldable(b.build(outputs), Mode::inference);
    const LnVerdict v = verdict(plan, "ln");
    EXPECT_EQ(v.foldable[0], c == cancels) << v.reason[0];
    if (c == cancels) { EXPECT_TRUE(has_producer(v, "fc")); }
  }
}

// The Gram matrix g = c·cᵀ of a value c centered over its rows: mean_j g[i, j] =
// Σ_k c[i, k] · mean_j c[j, k] = 0 (the right operand zero-mean along the columns j), and
// mean_i g[i, j] = 0 (the left operand zero-mean along the rows i); centered over its
// features instead, neither mean vanishes. A zero mean makes `lnz` (behind an active
// dropout in training) dead through the product with it.
TEST(AnalysisRules, ProductOfZeroMeanOperandIsZeroMeanAlongTheirAxes) {
  enum Case { columns, rows, centered_other_axis };
  for (Case c : {columns, rows, centered_other_axis}) {
    SCOPED_TRACE(int(c));
    GraphBuilder b;
    b.input("x", {2, 3, 4}).input("z", {2, 3, 5});
    b.node("c", Op::center, {"x"}).axes = {c == centered_other_axis ? 2 : 1};
    b.node("g", Op::matmul, {"c", "c"}).transpose_b = true;  // [2, 3, 3]
    Node& m = b.node("m", Op::mean, {"g"});
    m.axes = {c == rows ? 1 : 2};
    m.keepdims = true;  // [2, 1, 3] or [2, 3, 1]
    b.node("drop", Op::dropout, {"z"}).p = 0.1;
    layer_norm(b, "lnz", "drop");
    if (c == rows) {
      b.node("mt", Op::transpose, {"m"}).perm = {0, 2, 1};  // [2, 3, 1]
      b.node("prod", Op::mul, {"lnz", "mt"});
    } else {
      b.node("prod", Op::mul, {"lnz", "m"});
    }
    const FoldPlan plan = detect_foldable(b.build({"prod"}), Mode::training);
    EXPECT_EQ(verdict(plan, "lnz").foldable[1], c != centered_other_axis)
        << verdict(plan, "lnz").reason[1];
  }
}

// The region where a shift cancels takes keepdims means of its members along: centering fc
// (for `ln`) shifts it by δ, constant over the features; d = fc - mean_f(fc) and out2 =
// (fc + x) - fc both cancel it, so `ln` folds. A mean over the tokens (δ not constant
// there) or of 2·fc (which carries 2δ) leaves d shifted: not foldable.
TEST(AnalysisRules, ShiftCancellingRegionTakesMeansAlong) {
  enum Case { cancels, mean_over_tokens, mean_of_doubled };
  for (Case c : {cancels, mean_over_tokens, mean_of_doubled}) {
    SCOPED_TRACE(int(c));
    GraphBuilder b = linear_start();
    layer_norm(b, "ln", "fc");
    std::string averaged = "fc";
    if (c == mean_of_doubled) {
      b.node("fc2", Op::scale, {"fc"}).factor = 2.0;
      averaged = "fc2";
    }
    Node& m = b.node("m", Op::mean, {averaged});
    m.axes = {c == mean_over_tokens ? 1 : -1};
    m.keepdims = true;
    b.node("d", Op::sub, {"fc", "m"});
    b.node("w", Op::add, {"fc", "x"});
    b.node("out2", Op::sub, {"w", "fc"});
    const FoldPlan plan = detect_foldable(b.build({"ln", "d", "out2"}), Mode::inference);
    const LnVerdict v = verdict(plan, "ln");
    EXPECT_EQ(v.foldable[0], c == cancels) << v.reason[0];
  }
}

// A norm over [1, 2] of rows already zero-mean over 2 is s·x (s constant over [1, 2]):
// zero-mean over 2, so `ln2` (over 2) folds without centering anything. Not so when the
// rows are not centered, or the norm has a weight varying along 2; an RMSNorm without
// affine over [1, 2] keeps the zero mean too.
TEST(AnalysisRules, NormOverMoreAxesKeepsZeroMeanOfCenteredRows) {
  enum Case { layer_norm_centered, uncentered, with_weight, rms_centered };
  for (Case c : {layer_norm_centered, uncentered, with_weight, rms_centered}) {
    SCOPED_TRACE(int(c));
    GraphBuilder b;
    b.input("x", {2, 3, 8}).param("g", {3, 8});
    b.node("c", Op::center, {"x"}).axes = {-1};
    Node& n = b.node("n", c == rms_centered ? Op::rms_norm : Op::layer_norm,
                     {c == uncentered ? "x" : "c"});
    n.axes = {1, 2};
    if (c == with_weight) n.weight = "g";
    layer_norm(b, "ln2", "n");
    const FoldPlan plan = detect_foldable(b.build({"ln2"}), Mode::inference);
    const LnVerdict v = verdict(plan, "ln2");
    EXPECT_EQ(v.foldable[0], c == layer_norm_centered || c == rms_centered) << v.reason[0];
  }
}

// A concat of two keepdims means of fc over the features (a mean and a max) along the
// features: centering fc shifts both parts by the same δ, so `lnc` absorbs it and `ln`
// folds. With one part a mean of x (not shifted), the concat is not shifted alike.
TEST(AnalysisRules, ConcatOfMeansOfTheShiftedValue) {
  for (bool same : {true, false}) {
    SCOPED_TRACE(same);
    GraphBuilder b = linear_start();
    layer_norm(b, "ln", "fc");
    Node& m1 = b.node("m1", Op::mean, {"fc"});
    m1.axes = {-1};
    m1.keepdims = true;
    Node& m2 = b.node("m2", Op::max, {same ? "fc" : "x"});
    m2.axes = {-1};
    m2.keepdims = true;
    b.node("cat", Op::concat, {"m1", "m2"}).axis = -1;
    layer_norm(b, "lnc", "cat");
    const FoldPlan plan = detect_foldable(b.build({"ln", "lnc"}), Mode::inference);
    const LnVerdict v = verdict(plan, "ln");
    EXPECT_EQ(v.foldable[0], same) << v.reason[0];
  }
}

// `ln0` reaches the output only through `lnf`'s zero mean; `lnf` folds because its input
// is zero-mean over the features. A center (or y - mean(y)) over the features between
// them makes that so whatever ln0 is, so ln0 may become an RMSNorm too; over the tokens,
// the features' zero mean still comes from ln0 staying an LN, so it is kept (folding both
// changed the output by 2.0 at 256 bits before the check knew the axes).
TEST(AnalysisRules, CenteringShieldsAFoldOnlyOverItsAxes) {
  for (bool mean_form : {false, true}) {
    for (int axis : {1, 2}) {
      SCOPED_TRACE(std::to_string(mean_form) + " axis " + std::to_string(axis));
      GraphBuilder b;
      b.input("x", {2, 3, 4});
      layer_norm(b, "ln0", "x");
      if (mean_form) {
        Node& m = b.node("m", Op::mean, {"ln0"});
        m.axes = {axis};
        m.keepdims = true;
        b.node("c", Op::sub, {"ln0", "m"});
      } else {
        b.node("c", Op::center, {"ln0"}).axes = {axis};
      }
      layer_norm(b, "lnf", "c");
      Node& mf = b.node("mf", Op::mean, {"lnf"});
      mf.axes = {-1};
      mf.keepdims = true;
      b.node("out", Op::mul, {"x", "mf"});
      const FoldPlan plan = detect_foldable(b.build({"out"}), Mode::inference);
      EXPECT_TRUE(verdict(plan, "lnf").foldable[0]);
      EXPECT_EQ(verdict(plan, "ln0").foldable[0], axis == 2) << verdict(plan, "ln0").reason[0];
    }
  }
}

// A conv that maps each position on its own (kernel 1, stride 1, no padding, no bias) is a
// linear map over the channels: a value centered along its length stays centered, so the
// LN over the length folds with nothing centered. A wider kernel, padding or a stride
// averages other positions (or a subset of them), and a bias is a constant along the
// length that the centering does not remove: not foldable.
TEST(AnalysisRules, MeansPassThroughPointwiseConvsOnly) {
  enum Case { pointwise, kernel_3, padded, strided, biased };
  for (Case c : {pointwise, kernel_3, padded, strided, biased}) {
    SCOPED_TRACE(int(c));
    GraphBuilder b;
    b.input("x", {2, 4, 6}).param("k", {4, 4, c == kernel_3 ? 3 : 1}).param("kb", {4});
    b.node("cx", Op::center, {"x"}).axes = {2};
    Node& conv = b.node("conv", Op::conv1d, {"cx"});
    conv.weight = "k";
    if (c == padded) conv.padding = {1};
    if (c == strided) conv.stride = {2};
    if (c == biased) conv.bias = "kb";
    layer_norm(b, "ln", "conv");
    const LnVerdict v = verdict(detect_foldable(b.build({"ln"}), Mode::inference), "ln");
    EXPECT_EQ(v.foldable[0], c == pointwise) << v.reason[0];
    if (c == pointwise) { EXPECT_TRUE(v.terms.empty()); }
  }
}

// The unary ops of an ONNX import are nonlinearities: a shift of fc reaching one breaks
// (ln is not foldable, the reason names it), and an LN of its output keeps an opaque atom.
TEST(AnalysisRules, ImportedUnaryOpsBreakAndAreOpaque) {
  for (Op op : {Op::sqrt, Op::reciprocal, Op::erf, Op::hard_sigmoid, Op::hard_swish, Op::clip,
                Op::log, Op::sin, Op::cos, Op::atan}) {
    SCOPED_TRACE(std::string(op_name(op)));
    GraphBuilder b = linear_start();
    layer_norm(b, "ln", "fc");
    Node& u = b.node("u", op, {"fc"});
    if (op == Op::clip) u.max = 0.5;
    layer_norm(b, "ln_u", "u");
    const FoldPlan plan = detect_foldable(b.build({"ln", "u", "ln_u"}), Mode::inference);
    EXPECT_FALSE(verdict(plan, "ln").foldable[0]);
    EXPECT_TRUE(mentions(verdict(plan, "ln").reason[0], "u")) << verdict(plan, "ln").reason[0];
    EXPECT_FALSE(verdict(plan, "ln_u").foldable[0]);
    EXPECT_TRUE(verdict(plan, "ln_u").opaque);
  }
}

// Which of them keep a structural zero zero: sqrt, erf, hard_swish, sin, atan always; clip
// when 0 lies within its bounds; hard_sigmoid when beta <= 0 (hard_sigmoid(0) =
// clamp(beta, 0, 1)); reciprocal and log never (no value at 0); cos never (cos 0 = 1). ln reads fc + u(sub(x, x)): foldable exactly when u(0) = 0.
TEST(AnalysisRules, ImportedUnaryOpsOfAStructuralZero) {
  struct Case {
    Op op;
    double a, b;  // clip: min, max; hard_sigmoid: alpha, beta
    bool zero;
  };
  const double inf = std::numeric_limits<double>::infinity();
  for (const Case& c : {Case{Op::sqrt, 0, 0, true}, Case{Op::erf, 0, 0, true},
                        Case{Op::hard_swish, 0, 0, true}, Case{Op::clip, -1, 1, true},
                        Case{Op::clip, 0.5, inf, false}, Case{Op::clip, -inf, -0.5, false},
                        Case{Op::hard_sigmoid, 0.2, 0.5, false},
                        Case{Op::hard_sigmoid, 0.2, -0.1, true},
                        Case{Op::reciprocal, 0, 0, false}, Case{Op::sin, 0, 0, true},
                        Case{Op::atan, 0, 0, true}, Case{Op::cos, 0, 0, false},
                        Case{Op::log, 0, 0, false}}) {
    SCOPED_TRACE(std::string(op_name(c.op)) + " " + std::to_string(c.a) + " " + std::to_string(c.b));
    GraphBuilder b = linear_start();
    b.node("z", Op::sub, {"x", "x"});
    Node& u = b.node("u", c.op, {"z"});
    if (c.op == Op::clip) u.min = c.a, u.max = c.b;
    if (c.op == Op::hard_sigmoid) u.alpha = c.a, u.beta = c.b;
    b.node("s", Op::add, {"fc", "u"});
    layer_norm(b, "ln", "s");
    const LnVerdict v = verdict(detect_foldable(b.build({"ln"}), Mode::inference), "ln");
    EXPECT_EQ(v.foldable[0], c.zero) << v.reason[0];
  }
}

// A slice along the tokens passes the features' mean (ln_tok folds, fc centered, its
// shift constant along the features through the slice); along the features it keeps
// part of them, whose mean centering fc does not zero (ln_feat: no, naming the slice);
// a slice of x does not cancel x (ln_diff keeps sl - x); ln_same: sl - sl cancels.
TEST(AnalysisRules, SliceOnOtherAxesPassesMeansAndShifts) {
  GraphBuilder b = linear_start();
  Node& t = b.node("tok", Op::slice, {"fc"});
  t.axes = {1}, t.starts = {1}, t.ends = {3};
  layer_norm(b, "ln_tok", "tok");
  Node& f = b.node("feat", Op::slice, {"fc"});
  f.axes = {-1}, f.starts = {0}, f.ends = {4};
  layer_norm(b, "ln_feat", "feat");
  b.param("w2", {8, 8});
  b.node("fc2", Op::linear, {"x"}).weight = "w2";
  Node& t2 = b.node("tok2", Op::slice, {"fc2"});
  t2.axes = {1}, t2.starts = {0}, t2.ends = {3}, t2.steps = {2};  // tokens 0, 2 of 3
  Node& t3 = b.node("tok3", Op::slice, {"fc2"});
  t3.axes = {1}, t3.starts = {0}, t3.ends = {2};  // tokens 0, 1
  b.node("d", Op::sub, {"tok2", "tok3"});
  layer_norm(b, "ln_diff", "d");
  const FoldPlan plan = detect_foldable(b.build({"ln_tok", "ln_feat", "ln_diff"}), Mode::inference);
  const LnVerdict tok = verdict(plan, "ln_tok");
  EXPECT_TRUE(tok.foldable[0]) << tok.reason[0];
  EXPECT_TRUE(has_producer(tok, "fc"));
  const LnVerdict feat = verdict(plan, "ln_feat");
  EXPECT_FALSE(feat.foldable[0]);
  EXPECT_TRUE(mentions(feat.reason[0], "feat")) << feat.reason[0];
  EXPECT_TRUE(verdict(plan, "ln_diff").foldable[0]) << verdict(plan, "ln_diff").reason[0];
  EXPECT_TRUE(has_producer(verdict(plan, "ln_diff"), "fc2"));
}

// A shift constant along the features, sliced along the features, is still constant
// along them: ln2 absorbs fc's shift after a feature slice, so ln1 folds. A slice of a
// centered value along the centered axis is no longer zero-mean (ln3 of center(fc) sliced).
TEST(AnalysisRules, SliceKeepsConstantAxesButNotZeroMeans) {
  GraphBuilder b = linear_start();
  layer_norm(b, "ln1", "fc");
  Node& f = b.node("feat", Op::slice, {"fc"});
  f.axes = {2}, f.starts = {2}, f.ends = {7};
  layer_norm(b, "ln2", "feat");
  b.node("c", Op::center, {"x"}).axes = {-1};
  Node& cs = b.node("cs", Op::slice, {"c"});
  cs.axes = {-1}, cs.starts = {1}, cs.ends = {8};
  layer_norm(b, "ln3", "cs");
  Node& ts = b.node("ts", Op::slice, {"c"});
  ts.axes = {1}, ts.starts = {1}, ts.ends = {3};
  layer_norm(b, "ln4", "ts");
  const FoldPlan plan = detect_foldable(b.build({"ln1", "ln2", "ln3", "ln4"}), Mode::inference);
  EXPECT_TRUE(verdict(plan, "ln1").foldable[0]) << verdict(plan, "ln1").reason[0];
  EXPECT_FALSE(verdict(plan, "ln2").foldable[0]);
  EXPECT_FALSE(verdict(plan, "ln3").foldable[0]);
  EXPECT_TRUE(mentions(verdict(plan, "ln3").reason[0], "cs")) << verdict(plan, "ln3").reason[0];
  EXPECT_TRUE(verdict(plan, "ln4").foldable[0]) << verdict(plan, "ln4").reason[0];
}

// A where whose condition is constant along the features picks whole rows: ln_rows folds
// (fc's and fc2's shifts are constant along the features where picked, 0 elsewhere);
// where(m, fc, fc2) with m varying along the features mixes parts of rows: ln_mix no,
// naming it.
TEST(AnalysisRules, WhereByConstantConditionPicksRowsOrMixes) {
  GraphBuilder b = linear_start();
  b.param("w2", {8, 8});
  b.node("fc2", Op::linear, {"x"}).weight = "w2";
  Node& rows = b.node("rows", Op::where, {"fc", "fc2"});
  rows.condition_shape = {3, 1}, rows.condition = {1, 0, 1};
  layer_norm(b, "ln_rows", "rows");
  b.param("w3", {8, 8}).param("w4", {8, 8});
  b.node("fc3", Op::linear, {"x"}).weight = "w3";
  b.node("fc4", Op::linear, {"x"}).weight = "w4";
  Node& mix = b.node("mix", Op::where, {"fc3", "fc4"});
  mix.condition_shape = {8}, mix.condition = {1, 0, 1, 1, 0, 1, 1, 1};
  layer_norm(b, "ln_mix", "mix");
  const FoldPlan plan = detect_foldable(b.build({"ln_rows", "ln_mix"}), Mode::inference);
  const LnVerdict r = verdict(plan, "ln_rows");
  EXPECT_TRUE(r.foldable[0]) << r.reason[0];
  EXPECT_TRUE(has_producer(r, "fc") && has_producer(r, "fc2"));
  const LnVerdict m = verdict(plan, "ln_mix");
  EXPECT_FALSE(m.foldable[0]);
  EXPECT_TRUE(mentions(m.reason[0], "mix")) << m.reason[0];
}

// fc's shift through a feature-varying where reaches an LN over the features non-constant
// (ln_after does not absorb it, so ln_fc, whose term fc is, is not foldable); through
// where(m, fc, fc) it is fc's own shift (ln_same absorbs it).
TEST(AnalysisRules, WhereShiftVariesAlongTheCondition) {
  GraphBuilder b = linear_start();
  layer_norm(b, "ln_fc", "fc");
  Node& mix = b.node("mix", Op::where, {"fc", "x"});
  mix.condition_shape = {8}, mix.condition = {1, 0, 1, 1, 0, 1, 1, 1};
  b.node("t", Op::tanh, {"mix"});
  FoldPlan plan = detect_foldable(b.build({"ln_fc", "t"}), Mode::inference);
  EXPECT_FALSE(verdict(plan, "ln_fc").foldable[0]);
  GraphBuilder b2 = linear_start();
  layer_norm(b2, "ln_fc", "fc");
  Node& same = b2.node("same", Op::where, {"fc", "fc"});
  same.condition_shape = {8}, same.condition = {1, 0, 1, 1, 0, 1, 1, 1};
  layer_norm(b2, "ln_same", "same");
  b2.node("t", Op::tanh, {"ln_same"});
  plan = detect_foldable(b2.build({"ln_fc", "t"}), Mode::inference);
  EXPECT_TRUE(verdict(plan, "ln_fc").foldable[0]) << verdict(plan, "ln_fc").reason[0];
}

// Zeros padded along the tokens keep the features' mean (ln_tok folds); along the features
// the mean is a share of fc's but fc's shift is no longer constant there (ln_feat: no,
// naming the pad); a nonzero pad value is a constant (ln_val: no, naming it); an expand of
// a keepdims token mean is constant along the copies (ln_e folds).
TEST(AnalysisRules, PadAndExpand) {
  GraphBuilder b = linear_start();
  for (const char* fc : {"fc2", "fc3", "fc4"}) {
    b.param(std::string(fc) + ".w", {8, 8});
    b.node(fc, Op::linear, {"x"}).weight = std::string(fc) + ".w";
  }
  b.node("pt", Op::pad, {"fc"}).pads = {0, 1, 0, 0, 2, 0};
  layer_norm(b, "ln_tok", "pt");
  b.node("pf", Op::pad, {"fc2"}).pads = {0, 0, 1, 0, 0, 0};
  layer_norm(b, "ln_feat", "pf");
  Node& pv = b.node("pv", Op::pad, {"fc3"});
  pv.pads = {0, 1, 0, 0, 0, 0}, pv.value = 1.0;
  layer_norm(b, "ln_val", "pv");
  Node& m = b.node("m", Op::mean, {"fc4"});
  m.axes = {1}, m.keepdims = true;
  b.node("e", Op::expand, {"m"}).shape = {3, 1};
  layer_norm(b, "ln_e", "e");
  const FoldPlan plan =
      detect_foldable(b.build({"ln_tok", "ln_feat", "ln_val", "ln_e"}), Mode::inference);
  EXPECT_TRUE(verdict(plan, "ln_tok").foldable[0]) << verdict(plan, "ln_tok").reason[0];
  EXPECT_FALSE(verdict(plan, "ln_feat").foldable[0]);
  EXPECT_TRUE(mentions(verdict(plan, "ln_feat").reason[0], "pf")) << verdict(plan, "ln_feat").reason[0];
  EXPECT_FALSE(verdict(plan, "ln_val").foldable[0]);
  EXPECT_TRUE(mentions(verdict(plan, "ln_val").reason[0], "pv")) << verdict(plan, "ln_val").reason[0];
  EXPECT_TRUE(verdict(plan, "ln_e").foldable[0]) << verdict(plan, "ln_e").reason[0];
}

// An opaque op (imported, not modelled): its output is an opaque atom (ln_after), a
// deviation reaching it breaks (ln_beside: fc2's shift reaches `side`, a graph output
// through an unknown op), and it reads an LN's output like any consumer (ln_before folds:
// the LN's own output does not change; its producer fc3 feeds nothing else). Every reason names the node and its op_type.
TEST(AnalysisRules, OpaqueOpIsAnAtomAndAbsorbsNothing) {
  GraphBuilder b = linear_start();
  Node& o1 = b.node("foo", Op::opaque, {"fc"});
  o1.op_type = "com.microsoft.Foo", o1.shape = {2, 3, 8};
  layer_norm(b, "ln_after", "foo");
  b.param("w3", {8, 8});
  b.node("fc3", Op::linear, {"x"}).weight = "w3";
  layer_norm(b, "ln_before", "fc3");
  Node& o2 = b.node("after_ln", Op::opaque, {"ln_before"});
  o2.op_type = "TopK", o2.shape = {2, 3, 1};
  b.param("w2", {8, 8});
  b.node("fc2", Op::linear, {"x"}).weight = "w2";
  layer_norm(b, "ln_beside", "fc2");
  Node& o3 = b.node("side", Op::opaque, {"fc2", "x"});
  o3.op_type = "NonMaxSuppression", o3.shape = {5};
  Node& o4 = b.node("source", Op::opaque, {});  // no inputs (RandomNormal)
  o4.op_type = "RandomNormal", o4.shape = {2, 3, 8};
  layer_norm(b, "ln_source", "source");
  const Graph g = b.build({"ln_after", "after_ln", "ln_beside", "side", "ln_source"});
  for (Mode mode : {Mode::inference, Mode::training}) {
    const FoldPlan plan = detect_foldable(g, mode);
    const LnVerdict after = verdict(plan, "ln_after");
    EXPECT_FALSE(after.foldable[0]);
    EXPECT_TRUE(after.opaque);
    EXPECT_TRUE(mentions(after.reason[0], "foo")) << after.reason[0];
    EXPECT_NE(after.reason[0].find("com.microsoft.Foo"), std::string::npos) << after.reason[0];
    EXPECT_TRUE(verdict(plan, "ln_before").foldable[0]);
    const LnVerdict beside = verdict(plan, "ln_beside");
    EXPECT_FALSE(beside.foldable[0]);
    EXPECT_FALSE(beside.opaque);
    EXPECT_TRUE(mentions(beside.reason[0], "side")) << beside.reason[0];
    EXPECT_NE(beside.reason[0].find("NonMaxSuppression"), std::string::npos) << beside.reason[0];
    const LnVerdict source = verdict(plan, "ln_source");
    EXPECT_FALSE(source.foldable[0]);
    EXPECT_NE(source.reason[0].find("RandomNormal"), std::string::npos) << source.reason[0];
  }
}

// An opaque op is neither zero nor uniform nor zero-mean: an LN reading
// sub(opaque, opaque') of two different opaque nodes keeps both atoms, and the mean of
// an opaque output over an axis of size > 1 is never taken as constant.
TEST(AnalysisRules, OpaqueOpIsNeverAssumedZeroOrUniform) {
  GraphBuilder b;
  b.input("x", {2, 8});
  Node& o1 = b.node("o1", Op::opaque, {"x"});
  o1.op_type = "Identity2", o1.shape = {2, 8};
  Node& o2 = b.node("o2", Op::opaque, {"x"});
  o2.op_type = "Identity2", o2.shape = {2, 8};
  b.node("d", Op::sub, {"o1", "o2"});
  layer_norm(b, "ln", "d");
  // An LN of an opaque value over an axis it might be uniform along: not dead.
  Node& o3 = b.node("o3", Op::opaque, {"x"});
  o3.op_type = "Unknown", o3.shape = {2, 8};
  b.param("w", {8, 8});
  b.node("fc", Op::linear, {"x"}).weight = "w";
  b.node("s", Op::add, {"fc", "o3"});
  layer_norm(b, "ln2", "s");
  const FoldPlan plan = detect_foldable(b.build({"ln", "ln2"}), Mode::inference);
  EXPECT_FALSE(verdict(plan, "ln").foldable[0]);
  EXPECT_FALSE(verdict(plan, "ln2").foldable[0]);
  EXPECT_TRUE(mentions(verdict(plan, "ln2").reason[0], "o3")) << verdict(plan, "ln2").reason[0];
}

// Axis sets are 64-bit masks: a tensor of rank 64 is refused with the node named, before
// any mask is built (a shift by 64 would be undefined).
TEST(AnalysisRules, RankAbove63IsRefusedWithTheNodeNamed) {
  GraphBuilder b;
  b.input("x", Shape(64, 1));
  b.node("deep_relu", Op::relu, {"x"});
  layer_norm(b, "ln", "deep_relu");
  const Graph g = b.build({"ln"});
  try {
    detect_foldable(g, Mode::inference);
    FAIL() << "rank 64 accepted";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("rank up to 63"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("deep_relu"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lnv
