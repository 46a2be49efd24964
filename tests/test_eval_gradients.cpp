// Reverse-mode gradients of every op, in both modes where dropout matters, with cbwc and
// center_axes, against central differences in 256-bit MPFR: step h = 1e-30, so the
// truncation error is O(h^2) ~ 1e-60 and rounding ~ 2^-256 / h ~ 1e-47; agreement is
// required to 1e-30 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/eval/evaluator.h"
#include "tests/eval_test_graphs.h"

namespace lnv {
namespace {

using eval::Mpfr;
using testing::GraphBuilder;

struct Check {
  Mode mode = Mode::inference;
  uint64_t seed = 3;
};

// Compares dL/d(every float input and param element) with central differences.
void check_gradients(const Graph& g, Check c = {}) {
  eval::set_mpfr_bits(256);
  const eval::RunOptions opt{c.mode, c.seed};
  const std::vector<Tensor<Mpfr>> inputs = eval::random_inputs<Mpfr>(g, c.seed);
  const std::vector<Tensor<Mpfr>> params = eval::param_values<Mpfr>(g);
  const eval::Evaluation<Mpfr> ev = eval::evaluate_with_params(g, inputs, params, opt);
  const eval::Gradients<Mpfr> gr = eval::gradients(g, ev, opt);
  EXPECT_EQ(gr.loss, eval::loss(g, ev, c.seed));

  const Mpfr h("1e-30");
  const Mpfr tol("1e-30");
  auto loss_at = [&](const std::vector<Tensor<Mpfr>>& in, const std::vector<Tensor<Mpfr>>& ps) {
    return eval::loss(g, eval::evaluate_with_params(g, in, ps, opt), c.seed);
  };
  Mpfr largest(0);
  auto compare = [&](const Mpfr& analytic, const Mpfr& lp, const Mpfr& lm,
                     const std::string& what) {
    const Mpfr fd = (lp - lm) / (2 * h);
    const Mpfr err = abs(fd - analytic);
    const Mpfr scale = std::max(Mpfr(1), Mpfr(abs(analytic)));
    const Mpfr bound = tol * scale;
    EXPECT_LE(err, bound) << what << ": reverse mode " << static_cast<double>(analytic)
                                << ", central difference " << static_cast<double>(fd);
    largest = std::max(largest, Mpfr(abs(analytic)));
  };

  ASSERT_EQ(gr.inputs.size(), g.inputs.size());
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    if (g.inputs[k].dtype == DType::index) {
      EXPECT_TRUE(gr.inputs[k].data.empty()) << "index input " << g.inputs[k].name;
      continue;
    }
    ASSERT_EQ(gr.inputs[k].shape, g.inputs[k].shape);
    for (int64_t i = 0; i < inputs[k].size(); ++i) {
      std::vector<Tensor<Mpfr>> plus = inputs, minus = inputs;
      plus[k].data[i] += h;
      minus[k].data[i] -= h;
      compare(gr.inputs[k].data[i], loss_at(plus, params), loss_at(minus, params),
              "input " + g.inputs[k].name + "[" + std::to_string(i) + "]");
    }
  }
  ASSERT_EQ(gr.params.size(), g.params.size());
  for (size_t k = 0; k < g.params.size(); ++k) {
    ASSERT_EQ(gr.params[k].shape, g.params[k].shape);
    for (int64_t i = 0; i < params[k].size(); ++i) {
      std::vector<Tensor<Mpfr>> plus = params, minus = params;
      plus[k].data[i] += h;
      minus[k].data[i] -= h;
      compare(gr.params[k].data[i], loss_at(inputs, plus), loss_at(inputs, minus),
              "param " + g.params[k].name + "[" + std::to_string(i) + "]");
    }
  }
  // A graph whose gradients all vanish would make the comparison vacuous.
  EXPECT_GT(largest, Mpfr("0.01"));
}

// ---------------------------------------------------------------- producers

TEST(EvalGradients, Linear) {
  GraphBuilder b;
  b.input("x", {2, 3, 4}).param("W", {5, 4}).param("b", {5});
  Node& n = b.node("y", Op::linear, {"x"});
  n.weight = "W";
  n.bias = "b";
  check_gradients(b.build({"y"}));
}

TEST(EvalGradients, LinearCbwc) {
  GraphBuilder b;
  b.input("x", {3, 4}).param("W", {5, 4}).param("b", {5});
  Node& n = b.node("y", Op::linear, {"x"});
  n.weight = "W";
  n.bias = "b";
  n.cbwc = true;
  b.node("t", Op::tanh, {"y"});  // so that the centering is not absorbed by linearity
  check_gradients(b.build({"t"}));
}

TEST(EvalGradients, MatmulBatchBroadcast) {
  GraphBuilder b;
  b.input("a", {2, 1, 2, 3}).input("b", {3, 3, 4});
  b.node("y", Op::matmul, {"a", "b"});
  check_gradients(b.build({"y"}));
}

TEST(EvalGradients, MatmulTransposeBParamCbwc) {
  GraphBuilder b;
  b.input("a", {2, 3, 4}).param("B", {5, 4});
  Node& n = b.node("y", Op::matmul, {"a", "B"});
  n.transpose_b = true;
  n.cbwc = true;
  b.node("s", Op::sigmoid, {"y"});
  check_gradients(b.build({"s"}));
}

TEST(EvalGradients, MatmulParamBCbwc) {
  GraphBuilder b;
  b.input("a", {3, 4}).param("B", {4, 5});
  b.node("y", Op::matmul, {"a", "B"}).cbwc = true;
  b.node("s", Op::exp, {"y"});
  check_gradients(b.build({"s"}));
}

TEST(EvalGradients, MatmulParamACbwc) {
  GraphBuilder b;
  b.param("A", {4, 3}).input("x", {2, 3, 2});
  b.node("y", Op::matmul, {"A", "x"}).cbwc = true;
  b.node("s", Op::silu, {"y"});
  check_gradients(b.build({"s"}));
}

TEST(EvalGradients, EmbeddingWithRepeatedIdsAndCbwc) {
  for (bool cbwc : {false, true}) {
    GraphBuilder b;
    b.index_input("tok", {2, 5}, 3).param("E", {4, 3});
    Node& n = b.node("e", Op::embedding, {"tok"});
    n.weight = "E";
    n.cbwc = cbwc;
    b.node("t", Op::tanh, {"e"});
    check_gradients(b.build({"t"}));
  }
}

TEST(EvalGradients, Conv1dStridePaddingDilationGroups) {
  GraphBuilder b;
  b.input("x", {2, 4, 7}).param("W", {6, 2, 3}).param("b", {6});
  Node& n = b.node("y", Op::conv1d, {"x"});
  n.weight = "W";
  n.bias = "b";
  n.stride = {2};
  n.padding = {2};
  n.dilation = {2};
  n.groups = 2;
  check_gradients(b.build({"y"}));
}

TEST(EvalGradients, Conv2dAsymmetricGeometry) {
  GraphBuilder b;
  b.input("x", {1, 2, 5, 4}).param("W", {3, 2, 2, 3}).param("b", {3});
  Node& n = b.node("y", Op::conv2d, {"x"});
  n.weight = "W";
  n.bias = "b";
  n.stride = {2, 1};
  n.padding = {1, 2};
  n.dilation = {1, 2};
  check_gradients(b.build({"y"}));
}

TEST(EvalGradients, Conv2dDepthwiseCbwc) {
  GraphBuilder b;
  b.input("x", {1, 3, 4, 4}).param("W", {3, 1, 3, 3}).param("b", {3});
  Node& n = b.node("y", Op::conv2d, {"x"});
  n.weight = "W";
  n.bias = "b";
  n.padding = {1};
  n.groups = 3;
  n.cbwc = true;
  b.node("t", Op::tanh, {"y"});
  check_gradients(b.build({"t"}));
}

Graph rnn_graph(std::optional<Op> norm_kind, bool affine, bool bias, bool cbwc) {
  GraphBuilder b;
  b.input("x", {2, 4, 3}).param("Wih", {5, 3}).param("Whh", {5, 5});
  if (bias) b.param("b", {5});
  if (affine) b.param("gamma", {5}).param("beta", {5});
  Node& n = b.node("h", Op::rnn, {"x"});
  n.weight_ih = "Wih";
  n.weight_hh = "Whh";
  if (bias) n.bias = "b";
  n.cbwc = cbwc;
  if (norm_kind) {
    n.norm = RnnNorm{*norm_kind, 1e-3, affine ? "gamma" : "", affine ? "beta" : ""};
  }
  return b.build({"h"});
}

TEST(EvalGradients, RnnPlain) { check_gradients(rnn_graph(std::nullopt, false, true, false)); }

TEST(EvalGradients, RnnLayerNormAffine) {
  check_gradients(rnn_graph(Op::layer_norm, true, true, false));
}

TEST(EvalGradients, RnnRmsNormCbwcNoBias) {
  check_gradients(rnn_graph(Op::rms_norm, true, false, true));
}

TEST(EvalGradients, RnnLayerNormCbwc) { check_gradients(rnn_graph(Op::layer_norm, false, true, true)); }

// An lstm or gru over x [T = 3, N = 2, F = 3], H = 2, reading a tanh of the input (so
// that x's gradient passes a nonlinearity first) and read by a tanh.
struct GatedCase {
  Op op = Op::lstm;
  std::string direction = "forward", output = "y";
  bool bias = true, initial = false, lbr = false, lens = false;
};

Graph gated_graph(const GatedCase& c) {
  const int64_t gates = c.op == Op::lstm ? 4 : 3, d = c.direction == "bidirectional" ? 2 : 1;
  GraphBuilder b;
  b.input("x", {3, 2, 3}).param("W", {d, gates * 2, 3}).param("R", {d, gates * 2, 2});
  if (c.bias) b.param("B", {d, 2 * gates * 2});
  if (c.initial) b.param("h0", {d, 2, 2});
  if (c.initial && c.op == Op::lstm) b.param("c0", {d, 2, 2});
  b.node("xt", Op::tanh, {"x"});
  Node& n = b.node("r", c.op, {"xt"});
  n.weight_ih = "W";
  n.weight_hh = "R";
  if (c.bias) n.bias = "B";
  if (c.initial) {
    n.initial_h = "h0";
    if (c.op == Op::lstm) n.initial_c = "c0";
  }
  n.direction = c.direction;
  n.output = c.output;
  n.linear_before_reset = c.lbr;
  if (c.lens) n.sequence_lens = {3, 2};
  b.node("y", Op::tanh, {"r"});
  return b.build({"y"});
}

TEST(EvalGradients, LstmForward) { check_gradients(gated_graph({})); }
TEST(EvalGradients, LstmReverseInitialStatesYc) {
  check_gradients(gated_graph({Op::lstm, "reverse", "y_c", true, true}));
}
TEST(EvalGradients, LstmBidirectionalLengthsYh) {
  check_gradients(gated_graph({Op::lstm, "bidirectional", "y_h", true, true, false, true}));
}
TEST(EvalGradients, LstmNoBiasLengths) {
  check_gradients(gated_graph({Op::lstm, "forward", "y", false, false, false, true}));
}
TEST(EvalGradients, GruForward) { check_gradients(gated_graph({Op::gru})); }
TEST(EvalGradients, GruLinearBeforeReset) {
  check_gradients(gated_graph({Op::gru, "forward", "y", true, true, true}));
}
TEST(EvalGradients, GruBidirectionalLengthsYh) {
  check_gradients(gated_graph({Op::gru, "bidirectional", "y_h", true, true, false, true}));
}
TEST(EvalGradients, GruReverseLinearBeforeResetLengths) {
  check_gradients(gated_graph({Op::gru, "reverse", "y", true, false, true, true}));
}

Graph attention_graph(bool causal, bool biases, bool cbwc, int64_t heads) {
  GraphBuilder b;
  b.input("x", {2, 3, 4});
  for (const char* w : {"wq", "wk", "wv", "wo"}) b.param(w, {4, 4});
  if (biases)
    for (const char* w : {"bq", "bk", "bv", "bo"}) b.param(w, {4});
  Node& n = b.node("a", Op::attention, {"x"});
  n.wq = "wq", n.wk = "wk", n.wv = "wv", n.wo = "wo";
  if (biases) n.bq = "bq", n.bk = "bk", n.bv = "bv", n.bo = "bo";
  n.heads = heads;
  n.causal = causal;
  n.cbwc = cbwc;
  b.node("t", Op::tanh, {"a"});
  return b.build({"t"});
}

TEST(EvalGradients, AttentionCausalTwoHeads) { check_gradients(attention_graph(true, true, false, 2)); }
TEST(EvalGradients, AttentionFullOneHeadNoBias) {
  check_gradients(attention_graph(false, false, false, 1));
}
TEST(EvalGradients, AttentionCbwc) { check_gradients(attention_graph(false, true, true, 2)); }

// ---------------------------------------------------------------- elementwise

TEST(EvalGradients, BinaryOpsBroadcastWithParams) {
  for (Op op : {Op::add, Op::sub, Op::mul, Op::div}) {
    GraphBuilder b;
    b.input("x", {2, 3, 4}).param("p", {3, 1});
    b.node("u", op, {"x", "p"});
    b.node("v", op, {"p", "u"});  // param on the left, broadcast the other way
    b.node("w", Op::mul, {"v", "v"});  // the same value on both sides
    check_gradients(b.build({"w"}));
  }
}

TEST(EvalGradients, ScaleAndUnaryNonlinearities) {
  for (int k = 0; k < static_cast<int>(Op::kCount); ++k) {
    const Op op = static_cast<Op>(k);
    if (!is_unary_nonlinearity(op)) continue;
    SCOPED_TRACE(std::string(op_name(op)));
    GraphBuilder b;
    b.input("x", {3, 4});
    b.node("s", Op::scale, {"x"}).factor = -1.5;
    // sqrt, reciprocal and log need a positive operand; a clip needs bounds the values cross.
    const bool positive = op == Op::sqrt || op == Op::reciprocal || op == Op::log;
    if (positive) b.node("e", Op::exp, {"s"});
    Node& y = b.node("y", op, {positive ? "e" : "s"});
    if (op == Op::clip) y.min = -0.5, y.max = 0.75;
    check_gradients(b.build({"y"}));
  }
}

TEST(EvalGradients, DropoutBothModes) {
  for (Mode mode : {Mode::inference, Mode::training}) {
    GraphBuilder b;
    b.input("x", {4, 5}).param("W", {3, 5});
    b.node("d", Op::dropout, {"x"}).p = 0.4;
    Node& n = b.node("y", Op::linear, {"d"});
    n.weight = "W";
    check_gradients(b.build({"y"}), {mode, 11});
  }
}

TEST(EvalGradients, Softmax) {
  GraphBuilder b;
  b.input("x", {2, 3, 4});
  b.node("y", Op::softmax, {"x"}).axis = 1;
  check_gradients(b.build({"y"}));
}

// ---------------------------------------------------------------- reductions, layout

TEST(EvalGradients, MeanAndMaxOverAxes) {
  for (Op op : {Op::mean, Op::max})
    for (bool keepdims : {false, true}) {
      GraphBuilder b;
      b.input("x", {2, 3, 4});
      Node& n = b.node("r", op, {"x"});
      n.axes = {0, -1};
      n.keepdims = keepdims;
      b.node("t", Op::tanh, {"r"});
      check_gradients(b.build({"t"}));
    }
}

TEST(EvalGradients, TransposeReshapeConcat) {
  GraphBuilder b;
  b.input("x", {2, 3, 4}).input("z", {2, 2, 4});
  b.node("t", Op::transpose, {"x"}).perm = {2, 0, -2};
  b.node("r", Op::reshape, {"t"}).shape = {2, 3, -1};
  b.node("c", Op::concat, {"x", "z", "x"}).axis = -2;
  b.node("e", Op::exp, {"c"});
  b.node("s", Op::sigmoid, {"r"});
  check_gradients(b.build({"e", "s"}));
}

// ---------------------------------------------------------------- norms, centering

TEST(EvalGradients, SliceScattersBack) {
  GraphBuilder b;
  b.input("x", {2, 5, 4});
  Node& s = b.node("s", Op::slice, {"x"});
  s.axes = {1, 2}, s.starts = {4, 1}, s.ends = {-100, 3}, s.steps = {-2, 1};
  b.node("t", Op::tanh, {"s"});
  Node& s2 = b.node("u", Op::slice, {"x"});  // overlapping: both cotangents add up
  s2.axes = {1, -1}, s2.starts = {1, 0}, s2.ends = {4, 2};
  b.node("v", Op::mul, {"t", "u"});
  check_gradients(b.build({"v"}));
}

TEST(EvalGradients, ExpandPadWhere) {
  GraphBuilder b;
  b.input("x", {2, 1, 4});
  b.param("m", {6});
  b.node("e", Op::expand, {"x"}).shape = {3, 1};  // copies: cotangents add up
  Node& p = b.node("p", Op::pad, {"e"});
  p.pads = {0, 1, 0, 0, 0, 2}, p.value = 0.5;  // the pad value gets no gradient
  b.node("t", Op::tanh, {"p"});
  Node& w = b.node("w", Op::where, {"t", "m"});
  w.condition_shape = {4, 1}, w.condition = {1, 0, 0, 1};
  Node& w2 = b.node("w2", Op::where, {"p", "p"});  // both operands one value
  w2.condition_shape = {6}, w2.condition = {1, 0, 1, 1, 0, 0};
  b.node("s", Op::mul, {"w2", "w"});
  check_gradients(b.build({"s"}));
}

// Masked positions get zero gradient (not NaN: no -inf is ever formed).
TEST(EvalGradients, MaskedSoftmax) {
  GraphBuilder b;
  b.input("x", {2, 4, 4});
  b.node("t", Op::tanh, {"x"});
  Node& s = b.node("s", Op::softmax, {"t"});
  s.axis = -1, s.condition_shape = {4, 4};
  s.condition = {1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1};
  b.param("w", {2, 4, 4});
  b.node("m", Op::mul, {"s", "w"});
  check_gradients(b.build({"m"}));  // finite differences: 0 at the masked positions
}

TEST(EvalGradients, CenterOverAxes) {
  GraphBuilder b;
  b.input("x", {2, 3, 4});
  b.node("c", Op::center, {"x"}).axes = {0, 2};
  b.node("t", Op::tanh, {"c"});
  check_gradients(b.build({"t"}));
}

TEST(EvalGradients, NormsWithAndWithoutAffine) {
  for (Op op : {Op::layer_norm, Op::rms_norm})
    for (bool affine : {false, true}) {
      GraphBuilder b;
      b.input("x", {2, 3, 4});
      if (affine) b.param("w", {3, 4}).param("b", {3, 4});
      Node& n = b.node("n", op, {"x"});
      n.axes = {-2, -1};
      n.eps = 1e-2;
      if (affine) n.weight = "w", n.bias = "b";
      b.node("t", Op::tanh, {"n"});
      check_gradients(b.build({"t"}));
    }
}

TEST(EvalGradients, ParamWithCenterAxes) {
  GraphBuilder b;
  b.input("x", {2, 3, 4}).param("pos", {3, 4});
  b.node("a", Op::add, {"x", "pos"});
  b.node("t", Op::tanh, {"a"});
  Graph g = b.build({"t"});
  g.params[0].center_axes = {1};
  check_gradients(g);
  // The gradient of a centered param is itself centered over those axes.
  const eval::RunOptions opt;
  const auto ev = eval::evaluate(g, eval::random_inputs<double>(g, 3), opt);
  const auto gr = eval::gradients(g, ev, opt);
  for (int r = 0; r < 3; ++r) {
    double sum = 0;
    for (int c = 0; c < 4; ++c) sum += gr.params[0].data[r * 4 + c];
    EXPECT_NEAR(sum, 0.0, 1e-12);
  }
}

TEST(EvalGradients, TiedWeightAndOutputsThatAreInputsOrParams) {
  GraphBuilder b;
  b.index_input("tok", {2, 3}, 6).param("E", {6, 4});
  Node& e = b.node("e", Op::embedding, {"tok"});
  e.weight = "E";
  b.node("n", Op::layer_norm, {"e"}).axes = {-1};
  Node& head = b.node("logits", Op::matmul, {"n", "E"});
  head.transpose_b = true;
  check_gradients(b.build({"logits", "E"}), {Mode::training, 5});
}

TEST(EvalGradients, DeepResidualTrainingStack) {
  GraphBuilder b;
  b.input("x", {1, 3, 4}).param("W1", {4, 4}).param("W2", {4, 4}).param("g", {4});
  b.node("ln1", Op::layer_norm, {"x"}).axes = {-1};
  Node& f1 = b.node("f1", Op::linear, {"ln1"});
  f1.weight = "W1";
  f1.cbwc = true;
  b.node("d1", Op::dropout, {"f1"}).p = 0.25;
  b.node("r1", Op::add, {"x", "d1"});
  Node& ln2 = b.node("ln2", Op::rms_norm, {"r1"});
  ln2.axes = {-1};
  ln2.weight = "g";
  Node& f2 = b.node("f2", Op::linear, {"ln2"});
  f2.weight = "W2";
  b.node("gl", Op::gelu, {"f2"});
  b.node("r2", Op::add, {"r1", "gl"});
  check_gradients(b.build({"r2"}), {Mode::training, 9});
}

TEST(EvalGradients, MaxSendsTheGradientToTheFirstMaximumOnTies) {
  GraphBuilder b;
  b.input("x", {2, 3});
  Node& n = b.node("m", Op::max, {"x"});
  n.axes = {1};
  b.node("unused", Op::exp, {"x"});  // reaches no output: contributes nothing
  const Graph g = b.build({"m"});
  const eval::RunOptions opt;
  const auto ev = eval::evaluate<double>(g, {Tensor<double>({2, 3}, {1, 5, 5, 7, 2, 7})}, opt);
  const auto gr = eval::gradients(g, ev, opt);
  const auto r = eval::loss_cotangents<double>(g, 0);
  EXPECT_EQ(gr.inputs[0].data, (std::vector<double>{0, r[0].data[0], 0, r[0].data[1], 0, 0}));
}

}  // namespace
}  // namespace lnv
