// Forward values of every op in double, each against a hand-worked case or a naive loop
// written differently from the evaluator's kernel; dropout masks, random inputs and
// cotangents against an independent SplitMix64; cbwc and center_axes against the
// centered weights computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <tuple>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/eval/evaluator.h"
#include "tests/eval_test_graphs.h"

namespace lnv {
namespace {

using testing::GraphBuilder;
using Vec = std::vector<double>;

// ---------------------------------------------------------------- helpers

eval::Evaluation<double> run(const Graph& g, std::vector<Tensor<double>> inputs,
                             Mode mode = Mode::inference, uint64_t seed = 0) {
  return eval::evaluate(g, std::move(inputs), eval::RunOptions{mode, seed});
}

eval::Evaluation<double> run_random(const Graph& g, Mode mode = Mode::inference,
                                    uint64_t seed = 0) {
  return run(g, eval::random_inputs<double>(g, 1), mode, seed);
}

void expect_near(const Vec& got, const Vec& want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "at flat index " << i;
}

const Tensor<double>& out(const eval::Evaluation<double>& ev, size_t k = 0) { return ev.outputs[k]; }

// An independent SplitMix64 / FNV-1a (docs/spec/format.md, "Random numbers").
struct RefStream {
  uint64_t state;
  RefStream(uint64_t seed, const std::string& name) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
    state = seed ^ h;
  }
  uint64_t next() {
    state += 0x9E3779B97F4A7C15ULL;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) / 9007199254740992.0; }
  // The first `n` standard normals (Box–Muller pairs, cos then sin).
  Vec normals(size_t n) {
    Vec v;
    while (v.size() < n) {
      const double u1 = 1.0 - uniform(), u2 = uniform();
      const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
      v.push_back(r * std::cos(a));
      v.push_back(r * std::sin(a));
    }
    v.resize(n);
    return v;
  }
};

// Weight w [rows, cols] minus the mean of each column (centered over axis 0).
Vec center_columns(const Vec& w, int64_t rows, int64_t cols) {
  Vec out = w;
  for (int64_t c = 0; c < cols; ++c) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += w[r * cols + c];
    for (int64_t r = 0; r < rows; ++r) out[r * cols + c] -= s / rows;
  }
  return out;
}

Vec center_vector(const Vec& b) { return center_columns(b, static_cast<int64_t>(b.size()), 1); }

// ---------------------------------------------------------------- producers

TEST(EvalForward, LinearHandWorked) {
  GraphBuilder b;
  b.input("x", {1, 2}).param("W", {3, 2}, {1, 0, 0, 1, 1, 1}).param("b", {3}, {0.5, 0, -1});
  Node& n = b.node("y", Op::linear, {"x"});
  n.weight = "W";
  n.bias = "b";
  const Graph g = b.build({"y"});
  const auto ev = run(g, {Tensor<double>({1, 2}, {1, 2})});
  EXPECT_EQ(out(ev).shape, (Shape{1, 3}));
  expect_near(out(ev).data, {1.5, 2, 2});
}

// evaluate with known values takes a node's value from them and computes the rest from it:
// with the values of the same graph's evaluation it gives that evaluation, and a known
// value that differs flows into what reads it.
TEST(EvalForward, KnownNodeValuesAreTakenNotComputed) {
  GraphBuilder b;
  b.input("x", {1, 2}).param("W", {3, 2}, {1, 0, 0, 1, 1, 1});
  b.node("h", Op::linear, {"x"}).weight = "W";
  b.node("y", Op::relu, {"h"});
  const Graph g = b.build({"y"});
  const std::vector<Tensor<double>> x{Tensor<double>({1, 2}, {1, -2})};
  const auto full = run(g, x);
  const int32_t h = g.node_index("h"), y = g.node_index("y");
  std::vector<const Tensor<double>*> known(g.nodes.size(), nullptr);
  known[h] = &full.nodes[h];
  const auto reused = eval::evaluate(g, x, eval::RunOptions{}, known);
  expect_near(out(reused).data, out(full).data, 0);
  const Tensor<double> other({1, 3}, {-1, 4, -5});
  known[h] = &other;
  const auto taken = eval::evaluate(g, x, eval::RunOptions{}, known);
  expect_near(taken.nodes[h].data, other.data, 0);
  expect_near(out(taken).data, {0, 4, 0}, 0);
  known[h] = nullptr;
  known[y] = &other;
  expect_near(out(eval::evaluate(g, x, eval::RunOptions{}, known)).data, other.data, 0);
}

TEST(EvalForward, LinearMatchesNaiveLoop) {
  GraphBuilder b;
  b.input("x", {2, 3, 4}).param("W", {5, 4}).param("b", {5});
  Node& n = b.node("y", Op::linear, {"x"});
  n.weight = "W";
  n.bias = "b";
  const Graph g = b.build({"y"});
  const auto ev = run_random(g);
  const Vec& x = ev.inputs[0].data;
  const Vec& w = g.params[0].values;
  const Vec& bias = g.params[1].values;
  Vec want(6 * 5);
  for (int o = 0; o < 5; ++o)
    for (int r = 0; r < 6; ++r) want[r * 5 + o] = bias[o];
  for (int i = 0; i < 4; ++i)  // accumulate input by input
    for (int r = 0; r < 6; ++r)
      for (int o = 0; o < 5; ++o) want[r * 5 + o] += w[o * 4 + i] * x[r * 4 + i];
  expect_near(out(ev).data, want);
}

TEST(EvalForward, MatmulBatchBroadcast) {
  GraphBuilder b;
  b.input("a", {2, 1, 2, 3}).input("b", {3, 3, 4});
  b.node("y", Op::matmul, {"a", "b"});
  const Graph g = b.build({"y"});
  const auto ev = run_random(g);
  ASSERT_EQ(out(ev).shape, (Shape{2, 3, 2, 4}));
  const Vec& a = ev.inputs[0].data;
  const Vec& bb = ev.inputs[1].data;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int m = 0; m < 2; ++m)
        for (int n = 0; n < 4; ++n) {
          double s = 0;
          for (int k = 0; k < 3; ++k) s += a[(i * 2 + m) * 3 + k] * bb[(j * 3 + k) * 4 + n];
          EXPECT_NEAR(out(ev).data[((i * 3 + j) * 2 + m) * 4 + n], s, 1e-12);
        }
}

TEST(EvalForward, MatmulTransposeBWithParam) {
  GraphBuilder b;
  b.input("a", {2, 3}).param("B", {4, 3});
  b.node("y", Op::matmul, {"a", "B"}).transpose_b = true;
  const Graph g = b.build({"y"});
  const auto ev = run_random(g);
  const Vec& a = ev.inputs[0].data;
  const Vec& B = g.params[0].values;
  for (int m = 0; m < 2; ++m)
    for (int n = 0; n < 4; ++n) {
      double s = 0;
      for (int k = 0; k < 3; ++k) s += a[m * 3 + k] * B[n * 3 + k];
      EXPECT_NEAR(out(ev).data[m * 4 + n], s, 1e-12);
    }
}

TEST(EvalForward, EmbeddingGathersRows) {
  GraphBuilder b;
  b.index_input("tok", {2, 2}, 3).param("E", {3, 2}, {0, 1, 10, 11, 20, 21});
  b.node("e", Op::embedding, {"tok"}).weight = "E";
  const Graph g = b.build({"e"});
  const auto ev = run(g, {Tensor<double>({2, 2}, {2, 0, 2, 1})});
  EXPECT_EQ(out(ev).shape, (Shape{2, 2, 2}));
  expect_near(out(ev).data, {20, 21, 0, 1, 20, 21, 10, 11});
}

TEST(EvalForward, Conv1dHandWorked) {
  GraphBuilder b;
  b.input("x", {1, 1, 4}).param("w", {1, 1, 2}, {1, -1});
  Node& n = b.node("y", Op::conv1d, {"x"});
  n.weight = "w";
  n.padding = {1};
  n.stride = {2};
  const Graph g = b.build({"y"});
  // padded [0 1 2 3 4 0], windows at 0, 2, 4: 0-1, 2-3, 4-0.
  const auto ev = run(g, {Tensor<double>({1, 1, 4}, {1, 2, 3, 4})});
  EXPECT_EQ(out(ev).shape, (Shape{1, 1, 3}));
  expect_near(out(ev).data, {-1, -1, 4});
}

// conv2d by an explicitly zero-padded copy of the input (PyTorch semantics).
Vec conv2d_reference(const Vec& x, Shape xs, const Vec& w, Shape ws, const Vec& bias,
                     int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                     int64_t groups, Shape& ys) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  const int64_t O = ws[0], Cg = ws[1], KH = ws[2], KW = ws[3];
  const int64_t HP = H + 2 * ph, WP = W + 2 * pw;
  Vec padded(N * C * HP * WP, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t v = 0; v < W; ++v)
          padded[((n * C + c) * HP + h + ph) * WP + v + pw] = x[((n * C + c) * H + h) * W + v];
  const int64_t OH = (HP - dh * (KH - 1) - 1) / sh + 1, OW = (WP - dw * (KW - 1) - 1) / sw + 1;
  ys = {N, O, OH, OW};
  Vec y(N * O * OH * OW, 0.0);
  const int64_t per_group_out = O / groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double s = bias.empty() ? 0.0 : bias[o];
          const int64_t grp = o / per_group_out;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t a = 0; a < KH; ++a)
              for (int64_t bcol = 0; bcol < KW; ++bcol)
                s += w[((o * Cg + c) * KH + a) * KW + bcol] *
                     padded[((n * C + grp * Cg + c) * HP + i * sh + a * dh) * WP + j * sw +
                            bcol * dw];
          y[((n * O + o) * OH + i) * OW + j] = s;
        }
  return y;
}

TEST(EvalForward, Conv2dMatchesPaddedReference) {
  GraphBuilder b;
  b.input("x", {2, 4, 5, 6}).param("W", {6, 2, 2, 3}).param("b", {6});
  Node& n = b.node("y", Op::conv2d, {"x"});
  n.weight = "W";
  n.bias = "b";
  n.stride = {2, 1};
  n.padding = {1, 2};
  n.dilation = {2, 1};
  n.groups = 2;
  const Graph g = b.build({"y"});
  const auto ev = run_random(g);
  Shape ys;
  const Vec want = conv2d_reference(ev.inputs[0].data, {2, 4, 5, 6}, g.params[0].values,
                                    {6, 2, 2, 3}, g.params[1].values, 2, 1, 1, 2, 2, 1, 2, ys);
  EXPECT_EQ(out(ev).shape, ys);
  expect_near(out(ev).data, want);
}

TEST(EvalForward, Conv1dMatchesPaddedReference) {
  GraphBuilder b;
  b.input("x", {2, 4, 9}).param("W", {4, 1, 3});
  Node& n = b.node("y", Op::conv1d, {"x"});
  n.weight = "W";
  n.stride = {2};
  n.padding = {3};
  n.dilation = {2};
  n.groups = 4;
  const Graph g = b.build({"y"});
  const auto ev = run_random(g);
  Shape ys;
  // conv1d is conv2d over a height of 1.
  const Vec want = conv2d_reference(ev.inputs[0].data, {2, 4, 1, 9}, g.params[0].values,
                                    {4, 1, 1, 3}, {}, 1, 2, 0, 3, 1, 2, 4, ys);
  EXPECT_EQ(out(ev).shape, (Shape{ys[0], ys[1], ys[3]}));
  expect_near(out(ev).data, want);
}

// h_t = tanh(LN(W_ih x_t + W_hh h_{t-1} + b) * gamma + beta), step by step.
TEST(EvalForward, RnnWithLayerNormStepByStep) {
  const int N = 2, T = 3, F = 2, H = 3;
  GraphBuilder b;
  b.input("x", {N, T, F}).param("Wih", {H, F}).param("Whh", {H, H}).param("b", {H});
  b.param("gamma", {H}).param("beta", {H});
  Node& n = b.node("h", Op::rnn, {"x"});
  n.weight_ih = "Wih";
  n.weight_hh = "Whh";
  n.bias = "b";
  n.norm = RnnNorm{Op::layer_norm, 1e-5, "gamma", "beta"};
  const Graph g = b.build({"h"});
  const auto ev = run_random(g);
  const Vec& x = ev.inputs[0].data;
  const Vec &wih = g.params[0].values, &whh = g.params[1].values, &bias = g.params[2].values;
  const Vec &gamma = g.params[3].values, &beta = g.params[4].values;
  for (int s = 0; s < N; ++s) {
    Vec h(H, 0.0);
    for (int t = 0; t < T; ++t) {
      Vec a(H);
      for (int o = 0; o < H; ++o) {
        a[o] = bias[o];
        for (int i = 0; i < F; ++i) a[o] += wih[o * F + i] * x[(s * T + t) * F + i];
        for (int i = 0; i < H; ++i) a[o] += whh[o * H + i] * h[i];
      }
      const double mu = (a[0] + a[1] + a[2]) / 3;
      double var = 0;
      for (double v : a) var += (v - mu) * (v - mu) / 3;
      for (int o = 0; o < H; ++o) {
        h[o] = std::tanh((a[o] - mu) / std::sqrt(var + 1e-5) * gamma[o] + beta[o]);
        EXPECT_NEAR(out(ev).data[(s * T + t) * H + o], h[o], 1e-12);
      }
    }
  }
}

// Self-attention with explicit per-head loops and a -inf causal mask.
TEST(EvalForward, AttentionPerHeadCausal) {
  const int N = 2, T = 3, D = 4, heads = 2, dh = 2;
  GraphBuilder b;
  b.input("x", {N, T, D});
  for (const char* w : {"wq", "wk", "wv", "wo"}) b.param(w, {D, D});
  for (const char* w : {"bq", "bk", "bv", "bo"}) b.param(w, {D});
  Node& n = b.node("a", Op::attention, {"x"});
  n.wq = "wq", n.wk = "wk", n.wv = "wv", n.wo = "wo";
  n.bq = "bq", n.bk = "bk", n.bv = "bv", n.bo = "bo";
  n.heads = heads;
  n.causal = true;
  const Graph g = b.build({"a"});
  const auto ev = run_random(g);
  const Vec& x = ev.inputs[0].data;
  auto proj = [&](int w, int bias, int s, int t, int f) {  // (x wᵀ + b)[s, t, f]
    double v = g.params[bias].values[f];
    for (int i = 0; i < D; ++i) v += x[(s * T + t) * D + i] * g.params[w].values[f * D + i];
    return v;
  };
  for (int s = 0; s < N; ++s) {
    Vec merged(T * D, 0.0);
    for (int hd = 0; hd < heads; ++hd)
      for (int i = 0; i < T; ++i) {
        Vec score(T);
        for (int j = 0; j < T; ++j) {
          if (j > i) {
            score[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double dot = 0;
          for (int e = 0; e < dh; ++e)
            dot += proj(0, 4, s, i, hd * dh + e) * proj(1, 5, s, j, hd * dh + e);
          score[j] = dot / std::sqrt(double(dh));
        }
        double z = 0;
        for (double v : score) z += std::exp(v);
        for (int j = 0; j < T; ++j)
          for (int e = 0; e < dh; ++e)
            merged[i * D + hd * dh + e] += std::exp(score[j]) / z * proj(2, 6, s, j, hd * dh + e);
      }
    for (int i = 0; i < T; ++i)
      for (int f = 0; f < D; ++f) {
        double v = g.params[7].values[f];
        for (int k = 0; k < D; ++k) v += merged[i * D + k] * g.params[3].values[f * D + k];
        EXPECT_NEAR(out(ev).data[(s * T + i) * D + f], v, 1e-12);
      }
  }
}

// ---------------------------------------------------------------- elementwise

TEST(EvalForward, BinaryOpsBroadcastHandWorked) {
  const Vec want[] = {{11, 21, 31, 12, 22, 32},
                      {-9, -19, -29, -8, -18, -28},
                      {10, 20, 30, 20, 40, 60},
                      {0.1, 0.05, 1.0 / 30, 0.2, 0.1, 2.0 / 30}};
  int k = 0;
  for (Op op : {Op::add, Op::sub, Op::mul, Op::div}) {
    GraphBuilder b;
    b.input("a", {2, 1}).param("p", {3}, {10, 20, 30});
    b.node("y", op, {"a", "p"});
    const auto ev = run(b.build({"y"}), {Tensor<double>({2, 1}, {1, 2})});
    EXPECT_EQ(out(ev).shape, (Shape{2, 3}));
    expect_near(out(ev).data, want[k++]);
  }
}

TEST(EvalForward, ScaleAndUnaryNonlinearities) {
  const Vec x = {-1.5, -0.5, 0.0, 1.0, 2.0};
  struct Case {
    Op op;
    Vec want;
  };
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  std::vector<Case> cases = {
      {Op::relu, {0, 0, 0, 1, 2}},
      // Φ-form GELU: 0.5 x (1 + erf(x/√2)), values from tables of the normal CDF.
      {Op::gelu, {-1.5 * 0.0668072012688581, -0.5 * 0.3085375387259869, 0, 0.8413447460685429,
                  2 * 0.9772498680518208}},
      {Op::tanh, {}}, {Op::sigmoid, {}}, {Op::silu, {}}, {Op::exp, {}}};
  for (double v : x) {
    cases[2].want.push_back(std::tanh(v));
    cases[3].want.push_back(sig(v));
    cases[4].want.push_back(v * sig(v));
    cases[5].want.push_back(std::exp(v));
  }
  for (const Case& c : cases) {
    GraphBuilder b;
    b.input("x", {5});
    b.node("y", c.op, {"x"});
    const auto ev = run(b.build({"y"}), {Tensor<double>({5}, x)});
    SCOPED_TRACE(std::string(op_name(c.op)));
    expect_near(out(ev).data, c.want, 1e-13);
  }
  GraphBuilder b;
  b.input("x", {5});
  b.node("y", Op::scale, {"x"}).factor = -2;
  expect_near(out(run(b.build({"y"}), {Tensor<double>({5}, x)})).data, {3, 1, 0, -2, -4});
}

// The unary ops an ONNX import needs, against values computed here (erf from tables).
TEST(EvalForward, ImportedUnaryOpsHandWorked) {
  const Vec x = {-4.0, -1.5, -0.5, 0.0, 1.0, 2.0, 4.0};
  struct Case {
    Op op;
    std::function<void(Node&)> set;
    Vec want;
  };
  const std::vector<Case> cases = {
      {Op::erf, {}, {-0.9999999845827421, -0.9661051464753108, -0.5204998778130465, 0,
                     0.8427007929497149, 0.9953222650189527, 0.9999999845827421}},
      {Op::hard_sigmoid, {}, {0, 0.2, 0.4, 0.5, 0.7, 0.9, 1}},
      {Op::hard_sigmoid, [](Node& n) { n.alpha = 0.5, n.beta = -0.25; },
       {0, 0, 0, 0, 0.25, 0.75, 1}},
      {Op::hard_swish, {}, {0, -1.5 * 0.25, -0.5 * (5.0 / 12), 0, 1.0 * (4.0 / 6), 2.0 * (5.0 / 6), 4}},
      {Op::clip, [](Node& n) { n.min = -0.5, n.max = 1.5; }, {-0.5, -0.5, -0.5, 0, 1, 1.5, 1.5}},
      {Op::clip, [](Node& n) { n.max = 1; }, {-4, -1.5, -0.5, 0, 1, 1, 1}},
      {Op::clip, [](Node& n) { n.min = 0; }, {0, 0, 0, 0, 1, 2, 4}},
  };
  for (const Case& c : cases) {
    GraphBuilder b;
    b.input("x", {7});
    Node& n = b.node("y", c.op, {"x"});
    if (c.set) c.set(n);
    SCOPED_TRACE(std::string(op_name(c.op)));
    expect_near(out(run(b.build({"y"}), {Tensor<double>({7}, x)})).data, c.want, 1e-13);
  }
  const Vec pos = {0.25, 1.0, 4.0, 9.0};
  for (Op op : {Op::sqrt, Op::reciprocal, Op::log}) {
    GraphBuilder b;
    b.input("x", {4});
    b.node("y", op, {"x"});
    const Vec want = op == Op::sqrt         ? Vec{0.5, 1, 2, 3}
                     : op == Op::reciprocal ? Vec{4, 1, 0.25, 1.0 / 9}
                                            : Vec{-2 * M_LN2, 0, 2 * M_LN2, 2 * 1.0986122886681098};
    expect_near(out(run(b.build({"y"}), {Tensor<double>({4}, pos)})).data, want, 1e-15);
  }
  // sin, cos, atan at angles whose values are known in closed form.
  const Vec angles = {-M_PI / 2, -M_PI / 6, 0.0, M_PI / 4, M_PI / 3, M_PI};
  const std::vector<std::pair<Op, Vec>> trig = {
      {Op::sin, {-1, -0.5, 0, M_SQRT1_2, std::sqrt(3.0) / 2, 0}},
      {Op::cos, {0, std::sqrt(3.0) / 2, 1, M_SQRT1_2, 0.5, -1}},
  };
  for (const auto& [op, want] : trig) {
    GraphBuilder b;
    b.input("x", {6});
    b.node("y", op, {"x"});
    SCOPED_TRACE(std::string(op_name(op)));
    expect_near(out(run(b.build({"y"}), {Tensor<double>({6}, angles)})).data, want, 1e-15);
  }
  GraphBuilder ba;
  ba.input("x", {5});
  ba.node("y", Op::atan, {"x"});
  expect_near(out(run(ba.build({"y"}), {Tensor<double>({5}, {-1.0, 0.0, 1.0, std::sqrt(3.0), 1 / std::sqrt(3.0)})})).data,
              {-M_PI / 4, 0, M_PI / 4, M_PI / 3, M_PI / 6}, 1e-15);
}

// Outside its domain a unary op is an error naming the node and the element, in every
// precision, not a NaN: sqrt of a negative value, reciprocal of 0, the gradient of sqrt
// at 0, and log of a value that is not positive.
TEST(EvalForward, DomainErrorsNameTheNode) {
  auto error = [](auto zero, Op op, double v, bool grad) -> std::string {
    using T = decltype(zero);
    GraphBuilder b;
    b.input("x", {3});
    b.node("bad", op, {"x"});
    const Graph g = b.build({"bad"});
    try {
      std::vector<Tensor<T>> in{Tensor<T>({3}, {T(1), T(v), T(2)})};
      const auto ev = eval::evaluate(g, std::move(in), eval::RunOptions{});
      if (grad) eval::gradients(g, ev, eval::RunOptions{});
    } catch (const ModelError& e) {
      return e.what();
    }
    return "";
  };
  for (auto [op, v, grad] : {std::tuple{Op::sqrt, -0.5, false}, std::tuple{Op::reciprocal, 0.0, false},
                             std::tuple{Op::sqrt, 0.0, true}, std::tuple{Op::log, 0.0, false},
                             std::tuple{Op::log, -2.0, false}}) {
    SCOPED_TRACE(std::string(op_name(op)));
    for (const std::string& e : {error(0.0, op, v, grad), error(eval::Mpfr(0), op, v, grad)}) {
      EXPECT_NE(e.find("node 'bad'"), std::string::npos) << e;
      EXPECT_NE(e.find("flat index 1"), std::string::npos) << e;
    }
  }
  EXPECT_EQ(error(0.0, Op::sqrt, 0.0, false), "");  // sqrt(0) = 0 is a value
}

// x = [[0..4], [5..9], [10..14]]: rows 1.. and columns 4, 2, 0 (step -2 from the last).
TEST(EvalForward, SliceHandWorked) {
  GraphBuilder b;
  b.input("x", {3, 5});
  Node& n = b.node("y", Op::slice, {"x"});
  n.axes = {0, 1}, n.starts = {1, -1}, n.ends = {std::numeric_limits<int64_t>::max(), -100};
  n.steps = {1, -2};
  Vec x(15);
  std::iota(x.begin(), x.end(), 0.0);
  const auto ev = run(b.build({"y"}), {Tensor<double>({3, 5}, x)});
  EXPECT_EQ(out(ev).shape, (Shape{2, 3}));
  expect_near(out(ev).data, {9, 7, 5, 14, 12, 10});
}

// x = [[0, 1, 2]] expanded to 2 rows; padded with one 9 before each axis and after the
// columns; where picks row 0 of the padded x and row 1 (and 2) of the param.
TEST(EvalForward, ExpandPadWhereHandWorked) {
  GraphBuilder b;
  b.input("x", {1, 3});
  b.param("q", {4}, {10, 11, 12, 13});
  b.node("e", Op::expand, {"x"}).shape = {2, 1};
  Node& p = b.node("p", Op::pad, {"e"});
  p.pads = {1, 0, 0, 1}, p.value = 9;
  Node& w = b.node("w", Op::where, {"p", "q"});
  w.condition_shape = {3, 1}, w.condition = {0, 1, 0};
  const auto ev = run(b.build({"e", "p", "w"}), {Tensor<double>({1, 3}, {0, 1, 2})});
  EXPECT_EQ(ev.outputs[0].shape, (Shape{2, 3}));
  expect_near(ev.outputs[0].data, {0, 1, 2, 0, 1, 2});
  EXPECT_EQ(ev.outputs[1].shape, (Shape{3, 4}));
  expect_near(ev.outputs[1].data, {9, 9, 9, 9, 0, 1, 2, 9, 0, 1, 2, 9});
  expect_near(ev.outputs[2].data, {10, 11, 12, 13, 0, 1, 2, 9, 10, 11, 12, 13});
}

// A masked softmax is the softmax of x + M, M = 0 kept and -inf masked: row [0, 1, 2]
// keeping positions 0 and 2 gives (1, 0, e^2) / (1 + e^2); a row keeping one position
// gives 1 there, whatever its value.
TEST(EvalForward, MaskedSoftmaxHandWorked) {
  GraphBuilder b;
  b.input("x", {2, 3});
  Node& s = b.node("s", Op::softmax, {"x"});
  s.axis = 1, s.condition_shape = {2, 3}, s.condition = {1, 0, 1, 0, 1, 0};
  const auto ev = run(b.build({"s"}), {Tensor<double>({2, 3}, {0, 1, 2, 5, -7, 9})});
  const double e2 = std::exp(2.0);
  expect_near(ev.outputs[0].data, {1 / (1 + e2), 0, e2 / (1 + e2), 0, 1, 0});
}

// An opaque op (imported, not modelled) is refused in every precision, with the node and
// its op_type named; a gradient needs a forward evaluation first, so it is refused too.
TEST(EvalForward, OpaqueIsRefusedNamingNodeAndOpType) {
  GraphBuilder b;
  b.input("x", {2, 3});
  b.node("t", Op::tanh, {"x"});
  Node& o = b.node("top", Op::opaque, {"t"});
  o.op_type = "TopK", o.shape = {2, 1};
  const Graph g = b.build({"top"});
  auto expect_refused = [](auto&& f) {
    try {
      f();
      ADD_FAILURE() << "an opaque op was evaluated";
    } catch (const NotEvaluableError& e) {
      EXPECT_NE(std::string(e.what()).find("node 'top'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'TopK'"), std::string::npos) << e.what();
    }
  };
  expect_refused([&] { run_random(g); });
  expect_refused([&] {
    eval::evaluate(g, eval::random_inputs<eval::Mpfr>(g, 1), eval::RunOptions{});
  });
}

TEST(EvalForward, SoftmaxOverAxisHandWorked) {
  GraphBuilder b;
  b.input("x", {3, 2});
  b.node("y", Op::softmax, {"x"}).axis = 0;
  // Column 0: [0, ln 2, ln 3] -> [1, 2, 3]/6; column 1 constant -> 1/3 each.
  const auto ev = run(b.build({"y"}), {Tensor<double>({3, 2}, {0, 7, std::log(2.0), 7, std::log(3.0), 7})});
  expect_near(out(ev).data, {1.0 / 6, 1.0 / 3, 2.0 / 6, 1.0 / 3, 3.0 / 6, 1.0 / 3});
}

// ---------------------------------------------------------------- reductions, layout

TEST(EvalForward, MeanAndMaxHandWorked) {
  const Tensor<double> x({2, 3}, {1, 5, 3, 4, 2, 6});
  struct Case {
    Op op;
    Axes axes;
    bool keepdims;
    Shape shape;
    Vec want;
  };
  const Case cases[] = {{Op::mean, {1}, false, {2}, {3, 4}},
                        {Op::mean, {-2, -1}, true, {1, 1}, {3.5}},
                        {Op::max, {0}, true, {1, 3}, {4, 5, 6}},
                        {Op::max, {1}, false, {2}, {5, 6}}};
  for (const Case& c : cases) {
    GraphBuilder b;
    b.input("x", {2, 3});
    Node& n = b.node("r", c.op, {"x"});
    n.axes = c.axes;
    n.keepdims = c.keepdims;
    const auto ev = run(b.build({"r"}), {x});
    EXPECT_EQ(out(ev).shape, c.shape);
    expect_near(out(ev).data, c.want);
  }
}

TEST(EvalForward, TransposeReshapeConcatHandWorked) {
  GraphBuilder b;
  b.input("x", {2, 3}).input("z", {2, 1});
  b.node("t", Op::transpose, {"x"}).perm = {1, 0};
  b.node("r", Op::reshape, {"x"}).shape = {3, -1};
  b.node("c", Op::concat, {"x", "z"}).axis = -1;
  const auto ev = run(b.build({"t", "r", "c"}), {Tensor<double>({2, 3}, {1, 2, 3, 4, 5, 6}),
                                                 Tensor<double>({2, 1}, {7, 8})});
  EXPECT_EQ(out(ev, 0).shape, (Shape{3, 2}));
  expect_near(out(ev, 0).data, {1, 4, 2, 5, 3, 6});
  EXPECT_EQ(out(ev, 1).shape, (Shape{3, 2}));
  expect_near(out(ev, 1).data, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(out(ev, 2).shape, (Shape{2, 4}));
  expect_near(out(ev, 2).data, {1, 2, 3, 7, 4, 5, 6, 8});
}

TEST(EvalForward, Transpose3dByCoordinates) {
  GraphBuilder b;
  b.input("x", {2, 3, 4});
  b.node("t", Op::transpose, {"x"}).perm = {2, 0, 1};
  const auto ev = run_random(b.build({"t"}));
  ASSERT_EQ(out(ev).shape, (Shape{4, 2, 3}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(out(ev).data[(k * 2 + i) * 3 + j], ev.inputs[0].data[(i * 3 + j) * 4 + k]);
}

// ---------------------------------------------------------------- norms, centering

TEST(EvalForward, CenterHandWorked) {
  GraphBuilder b;
  b.input("x", {2, 3});
  b.node("c", Op::center, {"x"}).axes = {1};
  const auto ev = run(b.build({"c"}), {Tensor<double>({2, 3}, {1, 2, 3, 4, 6, 8})});
  expect_near(out(ev).data, {-1, 0, 1, -2, 0, 2});
}

TEST(EvalForward, LayerNormAndRmsNormHandWorked) {
  {
    GraphBuilder b;
    b.input("x", {1, 4}).param("w", {4}, {1, 2, 1, 1}).param("b", {4}, {0, 0, 0, 10});
    Node& n = b.node("n", Op::layer_norm, {"x"});
    n.axes = {-1};
    n.eps = 0;
    n.weight = "w";
    n.bias = "b";
    // mean 2.5, biased variance 1.25.
    const double s = std::sqrt(1.25);
    const auto ev = run(b.build({"n"}), {Tensor<double>({1, 4}, {1, 2, 3, 4})});
    expect_near(out(ev).data, {-1.5 / s, 2 * -0.5 / s, 0.5 / s, 1.5 / s + 10});
  }
  {
    GraphBuilder b;
    b.input("x", {2});
    Node& n = b.node("n", Op::rms_norm, {"x"});
    n.axes = {0};
    n.eps = 0.5;
    // mean of squares 12.5, + eps = 13.
    const auto ev = run(b.build({"n"}), {Tensor<double>({2}, {3, 4})});
    expect_near(out(ev).data, {3 / std::sqrt(13.0), 4 / std::sqrt(13.0)});
  }
}

TEST(EvalForward, LayerNormOverTwoAxesWithAffine) {
  GraphBuilder b;
  b.input("x", {3, 2, 4}).param("w", {3, 4}).param("b", {3, 4});
  Node& n = b.node("n", Op::layer_norm, {"x"});
  n.axes = {0, 2};  // per index of axis 1, over 12 values; w indexed [axis0, axis2]
  n.weight = "w";
  n.bias = "b";
  const Graph g = b.build({"n"});
  const auto ev = run_random(g);
  const Vec& x = ev.inputs[0].data;
  for (int m = 0; m < 2; ++m) {
    double mu = 0, var = 0;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 4; ++k) mu += x[(i * 2 + m) * 4 + k] / 12;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 4; ++k) var += std::pow(x[(i * 2 + m) * 4 + k] - mu, 2) / 12;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 4; ++k) {
        const double want = (x[(i * 2 + m) * 4 + k] - mu) / std::sqrt(var + 1e-5) *
                                g.params[0].values[i * 4 + k] +
                            g.params[1].values[i * 4 + k];
        EXPECT_NEAR(out(ev).data[(i * 2 + m) * 4 + k], want, 1e-12);
      }
  }
}

// ---------------------------------------------------------------- dropout

TEST(EvalForward, DropoutMasksFromTheNodeStream) {
  const double p = 0.3;
  GraphBuilder b;
  b.input("x", {50, 40});
  b.node("drop_1", Op::dropout, {"x"}).p = p;
  const Graph g = b.build({"drop_1"});
  const auto inputs = eval::random_inputs<double>(g, 4);
  const Vec& x = inputs[0].data;

  expect_near(out(run(g, inputs, Mode::inference, 17)).data, x, 0);  // identity

  for (uint64_t seed : {17ULL, 18ULL}) {
    const auto ev = run(g, inputs, Mode::training, seed);
    RefStream rng(seed, "drop_1");
    int kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const bool keep = rng.uniform() >= p;
      kept += keep;
      ASSERT_EQ(out(ev).data[i], keep ? x[i] / (1 - p) : 0.0) << "seed " << seed << " at " << i;
    }
    EXPECT_NEAR(kept / 2000.0, 1 - p, 0.05);
  }
  EXPECT_NE(out(run(g, inputs, Mode::training, 17)).data,
            out(run(g, inputs, Mode::training, 18)).data);
}

// ---------------------------------------------------------------- cbwc, center_axes

Vec draw(const std::string& name, size_t n) { return RefStream(99, name).normals(n); }

// Runs `cbwc_graph` (a node with cbwc: true on the raw weights) and `plain_graph` (the same
// node without cbwc, on weights centered here) on the same inputs.
void expect_same_outputs(const Graph& cbwc_graph, const Graph& plain_graph) {
  const auto inputs = eval::random_inputs<double>(cbwc_graph, 2);
  const auto a = run(cbwc_graph, inputs);
  const auto b = run(plain_graph, inputs);
  expect_near(out(a).data, out(b).data);
  // The centering matters here: the raw weights give another function.
  Graph raw = cbwc_graph;
  for (Node& n : raw.nodes) n.cbwc = false;
  raw.finalize();
  double diff = 0;
  const auto c = run(raw, inputs);
  for (size_t i = 0; i < out(c).data.size(); ++i)
    diff = std::max(diff, std::abs(out(c).data[i] - out(a).data[i]));
  EXPECT_GT(diff, 1e-3);
}

TEST(EvalForward, CbwcLinearEqualsLinearWithCenteredWeight) {
  const Vec w = draw("W", 20), bias = draw("b", 5);
  auto graph = [](bool cbwc, Vec wv, Vec bv) {
    GraphBuilder b;
    b.input("x", {3, 4}).param("W", {5, 4}, std::move(wv)).param("b", {5}, std::move(bv));
    Node& n = b.node("y", Op::linear, {"x"});
    n.weight = "W";
    n.bias = "b";
    n.cbwc = cbwc;
    return b.build({"y"});
  };
  const Graph cb = graph(true, w, bias);
  expect_same_outputs(cb, graph(false, center_columns(w, 5, 4), center_vector(bias)));
  // And its outputs are zero-mean over the features.
  const auto ev = run_random(cb);
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int o = 0; o < 5; ++o) s += out(ev).data[r * 5 + o];
    EXPECT_NEAR(s, 0.0, 1e-12);
  }
}

TEST(EvalForward, CbwcEmbeddingCentersEachRow) {
  const Vec e = draw("E", 12);
  Vec centered = e;
  for (int r = 0; r < 4; ++r) {
    const double mu = (e[r * 3] + e[r * 3 + 1] + e[r * 3 + 2]) / 3;
    for (int c = 0; c < 3; ++c) centered[r * 3 + c] -= mu;
  }
  auto graph = [](bool cbwc, Vec ev) {
    GraphBuilder b;
    b.index_input("tok", {2, 3}, 4).param("E", {4, 3}, std::move(ev));
    Node& n = b.node("e", Op::embedding, {"tok"});
    n.weight = "E";
    n.cbwc = cbwc;
    return b.build({"e"});
  };
  expect_same_outputs(graph(true, e), graph(false, centered));
}

TEST(EvalForward, CbwcConvEqualsConvWithCenteredWeight) {
  const Vec w = draw("W", 4 * 2 * 3), bias = draw("b", 4);
  auto graph = [](bool cbwc, Vec wv, Vec bv) {
    GraphBuilder b;
    b.input("x", {1, 2, 6}).param("W", {4, 2, 3}, std::move(wv)).param("b", {4}, std::move(bv));
    Node& n = b.node("y", Op::conv1d, {"x"});
    n.weight = "W";
    n.bias = "b";
    n.cbwc = cbwc;
    return b.build({"y"});
  };
  expect_same_outputs(graph(true, w, bias),
                      graph(false, center_columns(w, 4, 6), center_vector(bias)));
}

TEST(EvalForward, CbwcMatmulCentersTheParamOperand) {
  const Vec bm = draw("B", 12);
  // b [k=3, n=4]: centered over its last axis (each row); with transpose_b, b [n=4, k=3]
  // is centered over axis 0 (each column).
  Vec rows = bm;
  for (int r = 0; r < 3; ++r) {
    double mu = 0;
    for (int c = 0; c < 4; ++c) mu += bm[r * 4 + c] / 4;
    for (int c = 0; c < 4; ++c) rows[r * 4 + c] -= mu;
  }
  for (bool tb : {false, true}) {
    auto graph = [&](bool cbwc, Vec v) {
      GraphBuilder b;
      b.input("a", {2, 3}).param("B", tb ? Shape{4, 3} : Shape{3, 4}, std::move(v));
      Node& n = b.node("y", Op::matmul, {"a", "B"});
      n.transpose_b = tb;
      n.cbwc = cbwc;
      return b.build({"y"});
    };
    expect_same_outputs(graph(true, bm), graph(false, tb ? center_columns(bm, 4, 3) : rows));
  }
}

TEST(EvalForward, CbwcRnnAndAttentionCenterTheirWeights) {
  {
    const Vec wih = draw("Wih", 6), whh = draw("Whh", 9), bias = draw("b", 3);
    auto graph = [](bool cbwc, Vec a, Vec h, Vec bv) {
      GraphBuilder b;
      b.input("x", {1, 3, 2}).param("Wih", {3, 2}, std::move(a)).param("Whh", {3, 3}, std::move(h));
      b.param("b", {3}, std::move(bv));
      Node& n = b.node("h", Op::rnn, {"x"});
      n.weight_ih = "Wih";
      n.weight_hh = "Whh";
      n.bias = "b";
      n.norm = RnnNorm{Op::rms_norm, 1e-5, "", ""};
      n.cbwc = cbwc;
      return b.build({"h"});
    };
    expect_same_outputs(graph(true, wih, whh, bias),
                        graph(false, center_columns(wih, 3, 2), center_columns(whh, 3, 3),
                              center_vector(bias)));
  }
  {
    const Vec wo = draw("wo", 16), bo = draw("bo", 4);
    auto graph = [](bool cbwc, Vec o, Vec ob) {
      GraphBuilder b;
      b.input("x", {1, 3, 4});
      for (const char* w : {"wq", "wk", "wv"}) b.param(w, {4, 4});
      b.param("wo", {4, 4}, std::move(o)).param("bo", {4}, std::move(ob));
      Node& n = b.node("a", Op::attention, {"x"});
      n.wq = "wq", n.wk = "wk", n.wv = "wv", n.wo = "wo", n.bo = "bo";
      n.heads = 2;
      n.cbwc = cbwc;
      return b.build({"a"});
    };
    expect_same_outputs(graph(true, wo, bo),
                        graph(false, center_columns(wo, 4, 4), center_vector(bo)));
  }
}

TEST(EvalForward, ParamCenterAxesAreApplied) {
  const Vec pos = draw("pos", 12);
  auto graph = [](Vec v, Axes center) {
    GraphBuilder b;
    b.input("x", {2, 3, 4}).param("pos", {3, 4}, std::move(v));
    b.node("y", Op::add, {"x", "pos"});
    Graph g = b.build({"y"});
    g.params[0].center_axes = center;
    return g;
  };
  // Centered over axis 0 (-2): each column of the [3, 4] param.
  const Graph centered = graph(pos, {-2});
  const auto ev = run_random(centered);
  expect_near(ev.params[0].data, center_columns(pos, 3, 4));
  const auto plain = run(graph(center_columns(pos, 3, 4), {}), ev.inputs);
  expect_near(out(ev).data, out(plain).data);
}

// ---------------------------------------------------------------- random streams

TEST(EvalForward, RandomInputsAndCotangentsFollowTheirStreams) {
  GraphBuilder b;
  b.input("x", {3, 5}).index_input("tok", {7}, 11);
  b.node("y", Op::exp, {"x"});
  const Graph g = b.build({"y", "x"});
  const auto in = eval::random_inputs<double>(g, 42);
  EXPECT_EQ(in[0].data, RefStream(42, "x").normals(15));
  RefStream ids(42, "tok");
  for (int i = 0; i < 7; ++i) EXPECT_EQ(in[1].data[i], std::floor(ids.uniform() * 11));
  const auto r = eval::loss_cotangents<double>(g, 42);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].data, RefStream(42, "y#cotangent").normals(15));
  EXPECT_EQ(r[1].data, RefStream(42, "x#cotangent").normals(15));
  // L = sum_o sum_i o_i r_i.
  const auto ev = run(g, in);
  double want = 0;
  for (int i = 0; i < 15; ++i)
    want += std::exp(in[0].data[i]) * r[0].data[i] + in[0].data[i] * r[1].data[i];
  EXPECT_NEAR(eval::loss(g, ev, 42), want, 1e-12);
}

// ---------------------------------------------------------------- errors, precision

TEST(EvalForward, BadInputsThrowModelErrorsNamingTheInput) {
  GraphBuilder b;
  b.index_input("tok", {3}, 4).param("E", {4, 2});
  b.node("e", Op::embedding, {"tok"}).weight = "E";
  const Graph g = b.build({"e"});
  auto message = [&](std::vector<Tensor<double>> in) -> std::string {
    try {
      run(g, std::move(in));
    } catch (const ModelError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message({Tensor<double>({3}, {0, 4, 1})}).find("'tok'"), std::string::npos);
  EXPECT_NE(message({Tensor<double>({3}, {0, -1, 1})}).find("not an integer in [0, 4)"),
            std::string::npos);
  EXPECT_NE(message({Tensor<double>({3}, {0, 0.5, 1})}).find("'tok'"), std::string::npos);
  EXPECT_NE(message({Tensor<double>({2}, {0, 1})}).find("shape [3]"), std::string::npos);
  EXPECT_NE(message({}).find("expected 1 input"), std::string::npos);
  EXPECT_EQ(message({Tensor<double>({3}, {0, 3, 1})}), "no error");
}

TEST(EvalForward, MpfrAgreesWithDoubleAndHasTheRequestedPrecision) {
  eval::set_mpfr_bits(256);
  EXPECT_GE(eval::mpfr_bits(), 256u);
  EXPECT_LE(eval::mpfr_bits(), 260u);
  GraphBuilder b;
  b.input("x", {2, 3, 4}).param("W", {4, 4}).param("g", {4});
  Node& f = b.node("f", Op::linear, {"x"});
  f.weight = "W";
  f.cbwc = true;
  b.node("s", Op::gelu, {"f"});
  Node& n = b.node("n", Op::rms_norm, {"s"});
  n.axes = {-1};
  n.weight = "g";
  b.node("p", Op::softmax, {"n"}).axis = 1;
  const Graph g = b.build({"p"});
  const eval::RunOptions opt;
  const auto d = eval::evaluate(g, eval::random_inputs<double>(g, 5), opt);
  const auto m = eval::evaluate(g, eval::random_inputs<eval::Mpfr>(g, 5), opt);
  ASSERT_EQ(m.outputs[0].data.size(), d.outputs[0].data.size());
  for (size_t i = 0; i < d.outputs[0].data.size(); ++i)
    EXPECT_NEAR(static_cast<double>(m.outputs[0].data[i]), d.outputs[0].data[i], 1e-13);
  // 1 + 2^-200 is representable at 256 bits.
  const eval::Mpfr one(1), tiny = pow(eval::Mpfr(2), -200);
  EXPECT_NE(one + tiny, one);
}

TEST(EvalForward, CbwcMatmulWithoutAParamOperandIsAModelError) {
  GraphBuilder b;
  b.input("a", {2, 3}).input("b", {3, 2});
  b.node("y", Op::matmul, {"a", "b"}).cbwc = true;
  try {  // refused when the graph is finalized, before any evaluation
    b.build({"y"});
    FAIL() << "expected a ModelError";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("'y'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lnv
