// apply_fold: the rewritten graph's structure (LNs swapped, weights centered or marked
// cbwc, center nodes inserted, names kept, tied weights untied only where needed), and
// its outputs against the original's by exact evaluation at 256 bits.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/eval/evaluator.h"
#include "tests/eval_test_graphs.h"

namespace lnv {
namespace {

using eval::Mpfr;
using testing::GraphBuilder;

// h = emb(E) + pos; r2 = h + drop(fc(lnA(h))) + ln0(h) (ln0: bias only); head(E, ln1(r2))
Graph tied_model() {
  GraphBuilder b;
  b.index_input("tok", {2, 3}, 10)
      .param("E", {10, 8})
      .param("pos", {3, 8})
      .param("nb", {8})
      .param("fc.w", {8, 8})
      .param("fc.b", {8})
      .param("ln1.w", {8});
  b.node("emb", Op::embedding, {"tok"}).weight = "E";
  b.node("h", Op::add, {"emb", "pos"});
  Node& ln0 = b.node("ln0", Op::layer_norm, {"h"});
  ln0.axes = {-1};
  ln0.bias = "nb";
  b.node("lnA", Op::layer_norm, {"h"}).axes = {-1};
  Node& fc = b.node("fc", Op::linear, {"lnA"});
  fc.weight = "fc.w";
  fc.bias = "fc.b";
  b.node("drop", Op::dropout, {"fc"}).p = 0.25;
  b.node("r", Op::add, {"h", "drop"});
  b.node("r2", Op::add, {"r", "ln0"});
  Node& ln1 = b.node("ln1", Op::layer_norm, {"r2"});
  ln1.axes = {-1};
  ln1.weight = "ln1.w";
  b.node("head", Op::linear, {"ln1"}).weight = "E";
  return b.build({"head"});
}

const Node& node(const Graph& g, const std::string& name) { return g.nodes[g.node_index(name)]; }
const Param& param(const Graph& g, const std::string& name) {
  return g.params[g.param_index(name)];
}

// Largest |a - b| / max(1, |a|) over every output.
double output_gap(const Graph& a, const Graph& b, Mode mode, uint64_t seed) {
  eval::set_mpfr_bits(256);
  eval::RunOptions opt;
  opt.mode = mode;
  opt.seed = seed;
  const auto ea = eval::evaluate<Mpfr>(a, eval::random_inputs<Mpfr>(a, seed), opt);
  const auto eb = eval::evaluate<Mpfr>(b, eval::random_inputs<Mpfr>(b, seed), opt);
  double gap = 0;
  for (size_t o = 0; o < ea.outputs.size(); ++o)
    for (int64_t i = 0; i < ea.outputs[o].size(); ++i) {
      const Mpfr& x = ea.outputs[o].data[i];
      const Mpfr d = abs(x - eb.outputs[o].data[i]) / std::max(Mpfr(1), Mpfr(abs(x)));
      gap = std::max(gap, d.convert_to<double>());
    }
  return gap;
}

TEST(Rewrite, InferenceCentersInPlaceUntiesAndSwaps) {
  const Graph g = tied_model();
  const FoldPlan plan = detect_foldable(g, Mode::inference);
  ASSERT_EQ(plan.foldable_count(Mode::inference), 3u);
  const Graph f = apply_fold(g, plan);
  ASSERT_TRUE(f.finalized());
  EXPECT_EQ(node(f, "ln0").op, Op::rms_norm);
  EXPECT_EQ(node(f, "lnA").op, Op::rms_norm);
  EXPECT_EQ(node(f, "ln1").op, Op::rms_norm);
  EXPECT_EQ(node(f, "ln1").weight, "ln1.w");
  // fc is only a term: centered in place (weight and bias over the output axis).
  EXPECT_EQ(param(f, "fc.w").center_axes, Axes{0});
  EXPECT_EQ(param(f, "fc.b").center_axes, Axes{0});
  EXPECT_FALSE(node(f, "fc").cbwc);
  // E feeds the embedding (a term) and the head (raw): the embedding gets a copy.
  EXPECT_EQ(node(f, "emb").weight, "E.centered");
  EXPECT_EQ(param(f, "E.centered").center_axes, Axes{1});
  EXPECT_EQ(node(f, "head").weight, "E");
  EXPECT_TRUE(param(f, "E").center_axes.empty());
  EXPECT_EQ(param(f, "pos").center_axes, Axes{1});
  EXPECT_EQ(param(f, "nb").center_axes, Axes{0});
  EXPECT_EQ(f.outputs, g.outputs);
  EXPECT_LT(output_gap(g, f, Mode::inference, 1), 1e-60);
  EXPECT_LT(output_gap(g, f, Mode::inference, 2), 1e-60);
}

// x -> fc -> ln (bias) -> t (transpose [1, 0, 2]: the features stay last) -> {q (linear
// with a bias), k (matmul with a [8, 4] param, no bias: narrower than the norm)}.
Graph bias_readers(bool residual) {
  GraphBuilder b;
  b.input("x", {2, 3, 8}).param("w", {8, 8}).param("beta", {8}).param("gamma", {8});
  b.param("qw", {6, 8}).param("qb", {6}).param("kw", {8, 4});
  b.node("fc", Op::linear, {"x"}).weight = "w";
  Node& ln = b.node("ln", Op::layer_norm, {"fc"});
  ln.axes = {-1};
  ln.weight = "gamma";
  ln.bias = "beta";
  b.node("t", Op::transpose, {"ln"}).perm = {1, 0, 2};
  Node& q = b.node("q", Op::linear, {"t"});
  q.weight = "qw";
  q.bias = "qb";
  b.node("k", Op::matmul, {"t", "kw"});
  if (!residual) return b.build({"q", "k"});
  b.input("y", {2, 3, 8});
  b.node("res", Op::add, {"y", "ln"});
  return b.build({"q", "k", "res"});
}

// What a residual add sums with the norm of bias_readers: the output of `o` (a linear of
// the input z with a bias) reached through `tail`, which `res` adds to ln.
enum class Sibling { linear, linear_read_twice, linear_without_bias, matmul_add, dropout, reads_norm };

Graph residual_sibling(Sibling kind) {
  GraphBuilder b;
  b.input("x", {2, 3, 8}).input("z", {3, 2, 5}).param("w", {8, 8}).param("beta", {8}).param("gamma", {8});
  b.param("qw", {6, 8}).param("qb", {6}).param("ow", {8, 5}).param("ob", {8}).param("mw", {5, 8});
  b.node("fc", Op::linear, {"x"}).weight = "w";
  Node& ln = b.node("ln", Op::layer_norm, {"fc"});
  ln.axes = {-1};
  ln.weight = "gamma";
  ln.bias = "beta";
  Node& q = b.node("q", Op::linear, {"ln"});
  q.weight = "qw";
  q.bias = "qb";
  std::string last;
  std::vector<std::string> outputs{"q", "res"};
  if (kind == Sibling::matmul_add) {
    b.node("o", Op::matmul, {"z", "mw"});
    b.node("o.bias", Op::add, {"o", "ob"});
    last = "o.bias";
  } else if (kind == Sibling::reads_norm) {
    b.node("t0", Op::transpose, {"ln"}).perm = {1, 0, 2};
    Node& o = b.node("o", Op::linear, {"t0"});
    o.weight = "w";
    o.bias = "ob";
    last = "o";
  } else {
    Node& o = b.node("o", Op::linear, {"z"});
    o.weight = "ow";
    if (kind != Sibling::linear_without_bias) o.bias = "ob";
    last = "o";
    if (kind == Sibling::linear_read_twice) outputs.push_back("o");
  }
  if (kind == Sibling::dropout) {
    b.node("drop", Op::dropout, {last}).p = 0.1;
    last = "drop";
  }
  b.node("back", Op::transpose, {last}).perm = {1, 0, 2};
  b.node("res", Op::add, {"ln", "back"});
  return b.build(outputs);
}

TEST(Rewrite, MovesAFoldedNormsBiasIntoItsReaders) {
  for (Mode mode : {Mode::inference, Mode::training}) {
    const Graph g = bias_readers(false);
    const FoldPlan plan = detect_foldable(g, mode);
    ASSERT_EQ(plan.layer_norms.size(), 1u);
    const BiasMove& m = plan.layer_norms[0].bias;
    ASSERT_TRUE(m.moves) << m.kept;
    EXPECT_EQ(m.readers, (std::vector<std::string>{"q", "k"}));
    const Graph f = apply_fold(g, plan);
    EXPECT_EQ(node(f, "ln").op, Op::rms_norm);
    EXPECT_TRUE(node(f, "ln").bias.empty());
    EXPECT_EQ(node(f, "q").op, Op::add);  // q(t) = q.own(t) + qw·beta
    EXPECT_EQ(node(f, "q").inputs, (std::vector<std::string>{"q.own", "q.moved_bias"}));
    EXPECT_EQ(node(f, "q.own").bias, "qb");
    EXPECT_EQ(node(f, "q.moved_bias").inputs, std::vector<std::string>{"beta"});
    EXPECT_EQ(node(f, "k.moved_bias").inputs, (std::vector<std::string>{"k.moved_bias.row", "kw"}));
    EXPECT_EQ(moved_bias_readers(f), (std::vector<std::string>{"q", "k"}));
    EXPECT_EQ(f.outputs, g.outputs);
    EXPECT_LT(output_gap(g, f, mode, 1), 1e-60) << mode_name(mode);
  }
}

TEST(Rewrite, KeepsTheBiasOfANormWithAnotherReader) {
  const Graph g = bias_readers(true);
  const FoldPlan plan = detect_foldable(g, Mode::inference);
  const BiasMove& m = plan.layer_norms[0].bias;
  EXPECT_FALSE(m.moves);
  EXPECT_TRUE(m.readers.empty());
  EXPECT_NE(m.kept.find("`res` (add) adds `ln` to a value that is no node's output"), std::string::npos)
      << m.kept;
  const Graph f = apply_fold(g, plan);
  EXPECT_EQ(node(f, "ln").bias, "beta");
  EXPECT_TRUE(moved_bias_readers(f).empty());
}

// ln + back(o(z)): (ln − β) + back(o(z) + β) is the same sum, so o adds β to its own bias.
TEST(Rewrite, MovesTheBiasThroughAResidualAddIntoTheOtherProducer) {
  for (Sibling kind : {Sibling::linear, Sibling::matmul_add}) {
    for (Mode mode : {Mode::inference, Mode::training}) {
      const Graph g = residual_sibling(kind);
      const FoldPlan plan = detect_foldable(g, mode);
      ASSERT_EQ(plan.layer_norms.size(), 1u);
      ASSERT_TRUE(plan.layer_norms[0].foldable[static_cast<int>(mode)]);
      const BiasMove& m = plan.layer_norms[0].bias;
      ASSERT_TRUE(m.moves) << m.kept;
      EXPECT_EQ(m.readers, std::vector<std::string>{"q"});
      EXPECT_EQ(m.residual, std::vector<std::string>{"o"});
      const Graph f = apply_fold(g, plan);
      EXPECT_TRUE(node(f, "ln").bias.empty());
      EXPECT_EQ(node(f, "o").inputs, (std::vector<std::string>{"o.own", "o.moved_bias"}));
      EXPECT_EQ(node(f, "o.moved_bias").op, Op::reshape);
      EXPECT_EQ(node(f, "o.moved_bias").inputs, std::vector<std::string>{"beta"});
      EXPECT_EQ(moved_bias_readers(f), (std::vector<std::string>{"q", "o"}));
      EXPECT_LT(output_gap(g, f, mode, 1), 1e-60) << mode_name(mode);
      EXPECT_LT(output_gap(g, f, mode, 2), 1e-60) << mode_name(mode);
    }
  }
}

TEST(Rewrite, KeepsTheBiasWhereTheResidualsOtherProducerCannotTakeIt) {
  const std::vector<std::pair<Sibling, std::string>> cases{
      {Sibling::linear_without_bias, "`o` (linear) is not a linear or a matmul by a 2-D param that adds a bias"},
      {Sibling::linear_read_twice, "`o` (linear) is a graph output, which would see the bias"},
      {Sibling::reads_norm, "`o` would take the bias twice"},
  };
  for (const auto& [kind, why] : cases) {
    const Graph g = residual_sibling(kind);
    const FoldPlan plan = detect_foldable(g, Mode::inference);
    const BiasMove& m = plan.layer_norms[0].bias;
    EXPECT_FALSE(m.moves) << why;
    EXPECT_TRUE(m.readers.empty() && m.residual.empty());
    EXPECT_NE(m.kept.find(why), std::string::npos) << m.kept;
    const Graph f = apply_fold(g, plan);
    EXPECT_EQ(node(f, "ln").bias, "beta");
    EXPECT_LT(output_gap(g, f, Mode::inference, 1), 1e-60);
  }
  // In training a dropout between o and the add would scale β with o's output.
  const Graph g = residual_sibling(Sibling::dropout);
  const FoldPlan plan = detect_foldable(g, Mode::training);
  const BiasMove& m = plan.layer_norms[0].bias;
  EXPECT_FALSE(m.moves);
  EXPECT_NE(m.kept.find("`drop` (dropout) is not a linear"), std::string::npos) << m.kept;
}

TEST(Rewrite, TrainingKeepsStoredParamsAndMarksCbwc) {
  // Without the dropout, ln1 folds in training too.
  Graph g = tied_model();
  g.nodes[g.node_index("drop")].p = 0.0;
  g.finalize();
  const FoldPlan plan = detect_foldable(g, Mode::training);
  ASSERT_EQ(plan.foldable_count(Mode::training), 3u);
  const Graph f = apply_fold(g, plan);
  for (size_t i = 0; i < g.params.size(); ++i) {
    EXPECT_EQ(f.params[i].name, g.params[i].name);
    EXPECT_EQ(f.params[i].values, g.params[i].values);
    EXPECT_TRUE(f.params[i].center_axes.empty());
  }
  EXPECT_EQ(f.params.size(), g.params.size());
  EXPECT_TRUE(node(f, "fc").cbwc);
  EXPECT_TRUE(node(f, "emb").cbwc);
  EXPECT_FALSE(node(f, "head").cbwc);
  EXPECT_EQ(node(f, "emb").weight, "E");
  // pos is read through a center node over its feature axis.
  const Node& h = node(f, "h");
  ASSERT_TRUE(f.has("pos.center"));
  EXPECT_EQ(h.inputs[1], "pos.center");
  EXPECT_EQ(node(f, "pos.center").op, Op::center);
  EXPECT_EQ(node(f, "pos.center").axes, Axes{1});
  // ln0's bias moved out: ln0 is now the add of the bias-free norm and center(nb).
  EXPECT_EQ(node(f, "ln0").op, Op::add);
  EXPECT_EQ(node(f, "ln0.nobias").op, Op::rms_norm);
  EXPECT_TRUE(node(f, "ln0.nobias").bias.empty());
  EXPECT_EQ(node(f, "ln0").inputs, (std::vector<std::string>{"ln0.nobias", "nb.center"}));
  EXPECT_EQ(node(f, "ln1").op, Op::rms_norm);
  EXPECT_LT(output_gap(g, f, Mode::training, 3), 1e-60);
}

TEST(Rewrite, TrainingWithDropoutFoldsOnlyWhatTrainingAllows) {
  const Graph g = tied_model();
  const FoldPlan plan = detect_foldable(g, Mode::training);
  EXPECT_EQ(plan.fold, (std::vector<std::string>{"ln0", "lnA"}));
  const Graph f = apply_fold(g, plan);
  EXPECT_EQ(node(f, "ln1").op, Op::layer_norm);
  EXPECT_FALSE(node(f, "fc").cbwc);
  for (uint64_t seed : {4u, 5u}) EXPECT_LT(output_gap(g, f, Mode::training, seed), 1e-60);
}

TEST(Rewrite, ForcedFoldOfANonFoldableNormChangesTheOutputs) {
  // fc also reaches the output raw: centering it is not exact, and apply_fold does it
  // anyway when told to.
  GraphBuilder b;
  b.input("x", {2, 3, 8}).param("w", {8, 8});
  b.node("fc", Op::linear, {"x"}).weight = "w";
  b.node("ln", Op::layer_norm, {"fc"}).axes = {-1};
  const Graph g = b.build({"ln", "fc"});
  FoldPlan plan = detect_foldable(g, Mode::inference);
  ASSERT_FALSE(plan.layer_norms[0].foldable[0]);
  EXPECT_TRUE(plan.fold.empty());
  EXPECT_LT(output_gap(g, apply_fold(g, plan), Mode::inference, 1), 1e-60);
  plan.fold = {"ln"};
  plan.center = plan.layer_norms[0].terms;
  ASSERT_EQ(plan.center.size(), 1u);
  const Graph forced = apply_fold(g, plan);
  EXPECT_EQ(node(forced, "ln").op, Op::rms_norm);
  EXPECT_GT(output_gap(g, forced, Mode::inference, 1), 1e-3);
}

TEST(Rewrite, RnnNormBecomesRmsInside) {
  GraphBuilder b;
  b.input("x", {2, 3, 4}).param("wih", {5, 4}).param("whh", {5, 5}).param("rb", {5});
  Node& r = b.node("rnn", Op::rnn, {"x"});
  r.weight_ih = "wih";
  r.weight_hh = "whh";
  r.bias = "rb";
  r.norm = RnnNorm{};
  const Graph g = b.build({"rnn"});
  const Graph fi = apply_fold(g, detect_foldable(g, Mode::inference));
  EXPECT_EQ(node(fi, "rnn").norm->kind, Op::rms_norm);
  EXPECT_EQ(param(fi, "wih").center_axes, Axes{0});
  EXPECT_EQ(param(fi, "whh").center_axes, Axes{0});
  EXPECT_EQ(param(fi, "rb").center_axes, Axes{0});
  EXPECT_LT(output_gap(g, fi, Mode::inference, 1), 1e-60);
  const Graph ft = apply_fold(g, detect_foldable(g, Mode::training));
  EXPECT_TRUE(node(ft, "rnn").cbwc);
  EXPECT_LT(output_gap(g, ft, Mode::training, 1), 1e-60);
}

TEST(Rewrite, PlanNamingAnUnknownNodeIsAModelError) {
  GraphBuilder b;
  b.input("x", {2, 8});
  b.node("ln", Op::layer_norm, {"x"}).axes = {-1};
  const Graph g = b.build({"ln"});
  FoldPlan plan = detect_foldable(g, Mode::inference);
  plan.fold = {"nope"};
  EXPECT_THROW(apply_fold(g, plan), ModelError);
}

}  // namespace
}  // namespace lnv
