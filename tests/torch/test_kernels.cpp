// The fused norm kernels (torch/kernels/norm_kernels.h) against naive long-double loops
// and against the reference evaluator (core/eval/evaluator.h), in float and double, over
// widths that exercise the vector body, the short vector loop and the scalar tail, with
// and without weight/bias, and with row counts that run both single- and multi-threaded.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/eval/evaluator.h"
#include "core/graph.h"
#include "torch/engine.h"
#include "torch/kernels/norm_kernels.h"

namespace lnv {
namespace {

enum class Norm { rms, layer };

struct Case {
  int64_t rows, cols;
  bool weight, bias;
};

// Widths: below one vector, one vector + tail, the 4-vector body + every remainder kind,
// a transformer width (all short rows: the pipelined path for these small inputs), and
// 1100 (rows over 4 KiB: blocks of 4 rows); rows: single-threaded (1, 7: three pipelined
// pairs and a row left over, or a block of 4 and three single rows) and above the
// parallel threshold (301: each thread's share ends in a row left over).
std::vector<Case> cases() {
  std::vector<Case> out;
  for (int64_t cols : {1, 3, 8, 13, 32, 45, 100, 768, 1100})
    for (int64_t rows : {1, 7, 301})
      for (int affine = 0; affine < 4; ++affine)
        out.push_back({rows, cols, (affine & 1) != 0, (affine & 2) != 0});
  return out;
}

template <class T>
std::vector<T> random_vector(int64_t n, uint64_t seed, double mean, double std) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(mean, std);
  std::vector<T> v(n);
  for (auto& e : v) e = T(dist(gen));
  return v;
}

// The naive definition in long double, from the same (rounded) inputs as the kernel, and
// the scale of each output's terms, (|x - mean| + mean|x|) / rms * |w| + |b|, where the
// computed mean carries an error of a few ulps of mean|x|, which x - mean can expose.
struct Naive {
  std::vector<long double> value, magnitude;
};

template <class T>
Naive naive_norm(Norm kind, const std::vector<T>& x, const T* w, const T* b, int64_t rows,
                 int64_t cols, double eps) {
  Naive out{std::vector<long double>(x.size()), std::vector<long double>(x.size())};
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x.data() + r * cols;
    long double mean = 0, mean_abs = 0;
    if (kind == Norm::layer) {
      for (int64_t j = 0; j < cols; ++j) mean += xr[j], mean_abs += std::fabs(xr[j]);
      mean /= cols, mean_abs /= cols;
    }
    long double ss = 0;
    for (int64_t j = 0; j < cols; ++j) ss += (xr[j] - mean) * (xr[j] - mean);
    const long double inv = 1.0L / std::sqrt(ss / cols + (long double)eps);
    for (int64_t j = 0; j < cols; ++j) {
      long double v = (xr[j] - mean) * inv;
      long double m = (std::fabs(xr[j] - mean) + mean_abs) * inv;
      if (w) v *= w[j], m *= std::fabs((long double)w[j]);
      if (b) v += b[j], m += std::fabs((long double)b[j]);
      out.value[r * cols + j] = v;
      out.magnitude[r * cols + j] = m;
    }
  }
  return out;
}

// |got - want| <= tol * magnitude, elementwise.
template <class T>
void expect_close(const std::vector<T>& got, const std::vector<long double>& want,
                  const std::vector<long double>& magnitude, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  int64_t worst_at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(double(got[i]))) << what << " at " << i;
    const double err = double(std::fabs(got[i] - want[i]) / (magnitude[i] + 1e-300L));
    if (err > worst) worst = err, worst_at = int64_t(i);
  }
  EXPECT_LE(worst, tol) << what << ": worst scaled error at flat index " << worst_at
                        << " (got " << double(got[worst_at]) << ", want "
                        << double(want[worst_at]) << ")";
}

template <class T>
void expect_close(const std::vector<T>& got, const Naive& want, double tol,
                  const std::string& what) {
  expect_close(got, want.value, want.magnitude, tol, what);
}
template <class T>
void run_kernel(Norm kind, const std::vector<T>& x, const T* w, const T* b,
                std::vector<T>& y, int64_t rows, int64_t cols, T eps) {
  if (kind == Norm::rms)
    kernels::rms_norm(x.data(), w, b, y.data(), rows, cols, eps);
  else
    kernels::layer_norm(x.data(), w, b, y.data(), rows, cols, eps);
}

// float: each output is a handful of roundings of O(1) values plus a row reduction whose
// relative error grows like sqrt(cols) * eps for random data; 64 ulps of the term scale
// leaves room for both and still catches a wrong formula, eps or affine term.
template <class T>
double tolerance() {
  return std::is_same_v<T, float> ? 64 * std::numeric_limits<float>::epsilon() : 1e-14;
}

template <class T>
void check_against_naive(Norm kind, double mean) {
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    const auto x = random_vector<T>(c.rows * c.cols, seed++, mean, 2.0);
    const auto wv = random_vector<T>(c.cols, seed++, 1.0, 0.5);
    const auto bv = random_vector<T>(c.cols, seed++, 0.0, 0.5);
    const T* w = c.weight ? wv.data() : nullptr;
    const T* b = c.bias ? bv.data() : nullptr;
    const double eps = 1e-5;
    std::vector<T> y(x.size(), T(-7));
    run_kernel<T>(kind, x, w, b, y, c.rows, c.cols, T(eps));
    expect_close(y, naive_norm(kind, x, w, b, c.rows, c.cols, eps), tolerance<T>(),
                 std::string(kind == Norm::rms ? "rms_norm" : "layer_norm") + " " +
                     std::to_string(c.rows) + "x" + std::to_string(c.cols) +
                     (c.weight ? " +w" : "") + (c.bias ? " +b" : ""));
  }
}

TEST(NormKernels, RmsNormFloatMatchesNaive) { check_against_naive<float>(Norm::rms, 0.0); }
TEST(NormKernels, RmsNormDoubleMatchesNaive) { check_against_naive<double>(Norm::rms, 0.0); }
TEST(NormKernels, LayerNormFloatMatchesNaive) {
  check_against_naive<float>(Norm::layer, 0.0);
}
TEST(NormKernels, LayerNormDoubleMatchesNaive) {
  check_against_naive<double>(Norm::layer, 0.0);
}
// A large common offset: a one-pass E[x^2] - E[x]^2 variance would lose most digits here.
TEST(NormKernels, LayerNormFloatSurvivesLargeMean) {
  check_against_naive<float>(Norm::layer, 300.0);
}
TEST(NormKernels, LayerNormDoubleSurvivesLargeMean) {
  check_against_naive<double>(Norm::layer, 1e4);
}

// Shapes chosen for one row path (kernels::row_path), checked like the small cases over
// every row: the path is asserted first, so a change of thresholds cannot silently leave
// a path untested.
template <class T>
void check_path_shape(Norm kind, kernels::RowPath path, int64_t rows, int64_t cols,
                      uint64_t seed) {
  ASSERT_EQ(kernels::row_path(rows, cols, sizeof(T)), path) << rows << "x" << cols;
  const auto x = random_vector<T>(rows * cols, seed, 0.5, 2.0);
  const auto w = random_vector<T>(cols, seed + 1, 1.0, 0.5);
  const auto b = random_vector<T>(cols, seed + 2, 0.0, 0.5);
  std::vector<T> y(x.size(), T(-7));
  run_kernel<T>(kind, x, w.data(), b.data(), y, rows, cols, T(1e-5));
  expect_close(y, naive_norm(kind, x, w.data(), b.data(), rows, cols, 1e-5), tolerance<T>(),
               std::string(kind == Norm::rms ? "rms_norm" : "layer_norm") + " path " +
                   std::to_string(int(path)) + " " + std::to_string(rows) + "x" +
                   std::to_string(cols));
}

// Inputs large enough (>= 8 MiB, rows <= 4 KiB) for the prefetching path (rows one at a
// time, the next row prefetched during each write pass), odd row counts and, for 1003
// columns, a scalar tail.
template <class T>
void check_prefetching_shape(Norm kind, int64_t rows, int64_t cols, uint64_t seed) {
  check_path_shape<T>(kind, kernels::RowPath::prefetching, rows, cols, seed);
}

TEST(NormKernels, RowPathRule) {
  using kernels::RowPath;
  EXPECT_EQ(kernels::row_path(512, 768, 4), RowPath::pipelined_pairs);  // 1.5 MiB: in cache
  EXPECT_EQ(kernels::row_path(1, 768, 4), RowPath::pipelined_pairs);
  EXPECT_EQ(kernels::row_path(4096, 768, 4), RowPath::prefetching);     // 12 MiB
  EXPECT_EQ(kernels::row_path(16384, 1024, 4), RowPath::prefetching);   // 4 KiB rows, 64 MiB
  EXPECT_EQ(kernels::row_path(2048, 4096, 4), RowPath::blocks_of_4);    // 16 KiB rows
  EXPECT_EQ(kernels::row_path(4096, 768, 8), RowPath::blocks_of_4);     // 6 KiB rows
  EXPECT_EQ(kernels::row_path(7, 1100, 4), RowPath::blocks_of_4);       // 4400-byte rows
  EXPECT_EQ(kernels::row_path(4, 1 << 20, 4), RowPath::blocks_of_4);    // 4 MiB rows
  EXPECT_FALSE(kernels::prefetches_next_block(512, 768, 4));
  EXPECT_TRUE(kernels::prefetches_next_block(4096, 768, 4));
  EXPECT_FALSE(kernels::prefetches_next_block(2048, 4096, 4));
}

// The pipelined path with two threads' shares, the second ending in a single row (43
// rows: shares of 22 and 21), a width whose vector loop ends in one single vector and a scalar
// tail (1003 = 62 * 16 + 8 + 3), and a double width; and the blocks of 4 with a short
// last block and a tail.
TEST(NormKernels, PipelinedAndBlockPathsMatchNaive) {
  using kernels::RowPath;
  for (Norm kind : {Norm::rms, Norm::layer}) {
    check_path_shape<float>(kind, RowPath::pipelined_pairs, 43, 1003, 80);
    check_path_shape<double>(kind, RowPath::pipelined_pairs, 45, 509, 90);
    check_path_shape<float>(kind, RowPath::blocks_of_4, 23, 1029, 100);
    check_path_shape<double>(kind, RowPath::blocks_of_4, 22, 777, 110);
  }
}

TEST(NormKernels, PrefetchingFloatMatchesNaive) {
  for (Norm kind : {Norm::rms, Norm::layer}) {
    check_prefetching_shape<float>(kind, 2819, 768, 40);
    check_prefetching_shape<float>(kind, 2101, 1003, 50);
  }
}

TEST(NormKernels, PrefetchingDoubleMatchesNaive) {
  for (Norm kind : {Norm::rms, Norm::layer}) check_prefetching_shape<double>(kind, 2051, 512, 60);
}

TEST(NormKernels, PrefetchingAddRmsNormMatchesAddThenRmsNorm) {
  const int64_t rows = 2819, cols = 768;
  ASSERT_TRUE(kernels::prefetches_next_block(rows, cols, sizeof(float)));
  const auto x = random_vector<float>(rows * cols, 70, 0.0, 1.0);
  const auto res = random_vector<float>(rows * cols, 71, 0.5, 2.0);
  const auto w = random_vector<float>(cols, 72, 1.0, 0.5);
  const auto b = random_vector<float>(cols, 73, 0.0, 0.5);
  std::vector<float> sum(x.size(), -7.0f), y(x.size(), -7.0f);
  kernels::add_rms_norm(x.data(), res.data(), w.data(), b.data(), sum.data(), y.data(), rows,
                        cols, 1e-5f);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(sum[i], x[i] + res[i]) << i;
  expect_close(y, naive_norm(Norm::rms, sum, w.data(), b.data(), rows, cols, 1e-5),
               tolerance<float>(), "add_rms_norm prefetching");
}

TEST(NormKernels, AddRmsNormMatchesAddThenRmsNorm) {
  uint64_t seed = 100;
  for (const Case& c : cases()) {
    const auto x = random_vector<float>(c.rows * c.cols, seed++, 0.0, 1.0);
    const auto res = random_vector<float>(c.rows * c.cols, seed++, 0.5, 2.0);
    const auto wv = random_vector<float>(c.cols, seed++, 1.0, 0.5);
    const auto bv = random_vector<float>(c.cols, seed++, 0.0, 0.5);
    const float* w = c.weight ? wv.data() : nullptr;
    const float* b = c.bias ? bv.data() : nullptr;
    std::vector<float> sum(x.size(), -7.0f), y(x.size(), -7.0f);
    kernels::add_rms_norm(x.data(), res.data(), w, b, sum.data(), y.data(), c.rows, c.cols,
                          1e-5f);
    // The sum is one float addition: exact match.
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(sum[i], x[i] + res[i]) << i;
    expect_close(y, naive_norm(Norm::rms, sum, w, b, c.rows, c.cols, 1e-5),
                 tolerance<float>(), "add_rms_norm " + std::to_string(c.rows) + "x" +
                                         std::to_string(c.cols));
  }
}

TEST(NormKernels, CopyRowsCopiesEveryElement) {
  for (int64_t cols : {1, 5, 16, 17, 768})
    for (int64_t rows : {1, 3, 200}) {
      const auto x = random_vector<float>(rows * cols, uint64_t(rows * 1000 + cols), 0, 1);
      std::vector<float> y(x.size(), -7.0f);
      kernels::copy_rows(x.data(), y.data(), rows, cols);
      EXPECT_EQ(y, x) << rows << "x" << cols;
    }
}

TEST(NormKernels, EpsEntersUnderTheRoot) {
  // A constant row: LayerNorm gives 0; RMSNorm of c gives c / sqrt(c^2 + eps).
  const std::vector<double> x(16, 0.01);
  std::vector<double> y(16);
  kernels::rms_norm(x.data(), nullptr, nullptr, y.data(), 1, 16, 1e-4);
  EXPECT_NEAR(y[0], 0.01 / std::sqrt(1e-4 + 1e-4), 1e-15);
  kernels::layer_norm(x.data(), nullptr, nullptr, y.data(), 1, 16, 1e-4);
  for (double v : y) EXPECT_EQ(v, 0.0);
}

// ---------------------------------------------------------------- reference evaluator

// A one-node graph: x [rows, cols] -> norm over the last axis (weight/bias as given).
Graph norm_graph(Norm kind, int64_t rows, int64_t cols, double eps,
                 const std::vector<double>* w, const std::vector<double>* b) {
  Graph g;
  g.name = "norm";
  g.inputs.push_back({"x", {rows, cols}, DType::float_, 0});
  Node n;
  n.name = "y";
  n.op = kind == Norm::rms ? Op::rms_norm : Op::layer_norm;
  n.inputs = {"x"};
  n.axes = {-1};
  n.eps = eps;
  auto add_param = [&](const std::string& name, const std::vector<double>& values) {
    Param p;
    p.name = name;
    p.shape = {cols};
    p.values = values;
    g.params.push_back(p);
    return name;
  };
  if (w) n.weight = add_param("w", *w);
  if (b) n.bias = add_param("b", *b);
  g.nodes.push_back(n);
  g.outputs = {"y"};
  g.finalize();
  return g;
}

TEST(NormKernels, DoubleKernelsMatchReferenceEvaluator) {
  uint64_t seed = 500;
  for (Norm kind : {Norm::rms, Norm::layer})
    for (const Case& c : {Case{5, 768, true, true}, Case{3, 45, true, false},
                          Case{9, 7, false, true}, Case{1, 100, false, false}}) {
      const auto x = random_vector<double>(c.rows * c.cols, seed++, 0.3, 1.5);
      const auto w = random_vector<double>(c.cols, seed++, 1.0, 0.5);
      const auto b = random_vector<double>(c.cols, seed++, 0.0, 0.5);
      const double eps = 1e-5;
      const Graph g = norm_graph(kind, c.rows, c.cols, eps, c.weight ? &w : nullptr,
                                 c.bias ? &b : nullptr);
      const auto ev = eval::evaluate<double>(g, {Tensor<double>({c.rows, c.cols}, x)}, {});
      std::vector<double> y(x.size());
      const double* wp = c.weight ? w.data() : nullptr;
      const double* bp = c.bias ? b.data() : nullptr;
      if (kind == Norm::rms)
        kernels::rms_norm(x.data(), wp, bp, y.data(), c.rows, c.cols, eps);
      else
        kernels::layer_norm(x.data(), wp, bp, y.data(), c.rows, c.cols, eps);
      const std::vector<double>& want = ev.outputs.at(0).data;
      ASSERT_EQ(want.size(), y.size());
      const Naive mag = naive_norm<double>(kind, x, wp, bp, c.rows, c.cols, eps);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_LE(std::fabs(y[i] - want[i]), 1e-14 * double(mag.magnitude[i]))
            << (kind == Norm::rms ? "rms" : "layer") << " " << c.rows << "x" << c.cols
            << " at " << i;
    }
}

// The float kernels against the evaluator run in double on the same (float) inputs.
TEST(NormKernels, FloatKernelsMatchReferenceEvaluator) {
  uint64_t seed = 900;
  for (Norm kind : {Norm::rms, Norm::layer}) {
    const int64_t rows = 64, cols = 768;
    const auto xf = random_vector<float>(rows * cols, seed++, 0.1, 1.0);
    const auto wf = random_vector<float>(cols, seed++, 1.0, 0.3);
    const auto bf = random_vector<float>(cols, seed++, 0.0, 0.3);
    const std::vector<double> x(xf.begin(), xf.end()), w(wf.begin(), wf.end()),
        b(bf.begin(), bf.end());
    const Graph g = norm_graph(kind, rows, cols, 1e-5, &w, &b);
    const auto ev = eval::evaluate<double>(g, {Tensor<double>({rows, cols}, x)}, {});
    std::vector<float> y(xf.size());
    run_kernel<float>(kind, xf, wf.data(), bf.data(), y, rows, cols, 1e-5f);
    std::vector<long double> want(ev.outputs.at(0).data.begin(),
                                  ev.outputs.at(0).data.end());
    expect_close(y, want,
                 naive_norm(kind, xf, wf.data(), bf.data(), rows, cols, 1e-5).magnitude,
                 tolerance<float>(), kind == Norm::rms ? "rms vs evaluator"
                                                       : "layer vs evaluator");
  }
}

// ---------------------------------------------------------------- the engine's add + rms

// The torch engine computes an add node of two same-shape tensors together with the
// rms_norm (trailing axes) that reads it, by kernels::add_rms_norm, in float32 inference;
// the sum stays the add's value for its other readers. The graph has that pattern
// (s -> y, s also read by z and an output), a second norm on the same add (computed on its
// own), a broadcasting add and a norm over a non-trailing axis (neither fused).
Graph add_norm_graph() {
  Graph g;
  g.name = "add_norm";
  const int64_t D = 64;
  g.inputs.push_back({"x", {3, 5, D}, DType::float_, 0});
  g.inputs.push_back({"r", {3, 5, D}, DType::float_, 0});
  auto param = [&](const std::string& name, Shape shape, uint64_t seed, double mean) {
    Param p;
    p.name = name;
    p.shape = shape;
    p.values = random_vector<double>(numel(shape), seed, mean, 0.3);
    g.params.push_back(p);
  };
  param("g", {D}, 1, 1.0);
  param("gb", {D}, 2, 0.0);
  param("h", {D}, 3, 1.0);
  param("rb", {D}, 4, 0.5);
  param("g5", {5}, 5, 1.0);
  auto node = [&](const std::string& name, Op op, std::vector<std::string> inputs,
                  Axes axes = {}, std::string w = "", std::string b = "") {
    Node n;
    n.name = name;
    n.op = op;
    n.inputs = std::move(inputs);
    n.axes = std::move(axes);
    n.eps = 1e-5;
    n.weight = std::move(w);
    n.bias = std::move(b);
    g.nodes.push_back(n);
  };
  node("s", Op::add, {"x", "r"});
  node("y", Op::rms_norm, {"s"}, {-1}, "g", "gb");          // fused with s
  node("z", Op::add, {"s", "y"});                           // reads the sum too
  node("y2", Op::rms_norm, {"s"}, {2}, "h");                // second norm of s: on its own
  node("t", Op::add, {"z", "rb"});                          // broadcasting: not fused
  node("u", Op::rms_norm, {"t"}, {-1}, "", "gb");
  node("v", Op::add, {"u", "y2"});
  node("w", Op::rms_norm, {"v"}, {1}, "g5");                // non-trailing axis: not fused
  g.outputs = {"y", "z", "s", "y2", "u", "w"};
  g.finalize();
  return g;
}

double max_rel_diff(const Tensor<double>& want, const Tensor<double>& got) {
  double scale = 0, diff = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    scale = std::max(scale, std::fabs(want.data[i]));
    diff = std::max(diff, std::fabs(want.data[i] - got.data[i]));
  }
  return diff / std::max(scale, 1e-300);
}

TEST(NormKernels, EngineFusesTheResidualAddIntoRmsNorm) {
  using torch_engine::Engine;
  using torch_engine::Precision;
  const Graph g = add_norm_graph();
  Engine fused(g, {Precision::f32, true}), composed(g, {Precision::f32, false});
  for (uint64_t seed : {11, 12}) {  // twice: the reused buffers must not leak
    const auto inputs = eval::random_inputs<double>(g, seed);
    const auto ref = eval::evaluate<double>(g, inputs, {});
    const auto got = fused.forward(inputs, {});
    const auto plain = composed.forward(inputs, {});
    ASSERT_EQ(got.size(), ref.outputs.size());
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k].shape, ref.outputs[k].shape) << g.outputs[k];
      EXPECT_LE(max_rel_diff(ref.outputs[k], got[k]), 1e-5) << g.outputs[k] << " seed " << seed;
      EXPECT_LE(max_rel_diff(plain[k], got[k]), 1e-5) << g.outputs[k] << " seed " << seed;
    }
    // The sum is one float addition either way: bit for bit.
    EXPECT_EQ(got[2].data, plain[2].data) << "seed " << seed;
    EXPECT_GT(max_rel_diff(ref.outputs[0], got[0]), 0.0);  // really ran in float32
  }
  // The fused call is timed as the norm's call: once per run, with the norm's rows/cols.
  fused.set_norm_timing(true);
  fused.set_inputs(eval::random_inputs<double>(g, 13));
  fused.run({});
  fused.run({});
  const auto timings = fused.norm_timings();
  ASSERT_EQ(timings.size(), 4u);
  EXPECT_EQ(timings[0].node, "y");
  for (const auto& t : timings) EXPECT_EQ(t.calls, 2) << t.node;
  EXPECT_EQ(timings[0].rows, 15);
  EXPECT_EQ(timings[0].cols, 64);
  // Unfused, the feeding add is timed into its norm, which still counts one call per run.
  composed.set_norm_timing(true);
  composed.set_inputs(eval::random_inputs<double>(g, 13));
  composed.run({});
  composed.run({});
  for (const auto& t : composed.norm_timings()) {
    EXPECT_EQ(t.calls, 2) << t.node;
    EXPECT_GT(t.seconds, 0) << t.node;
  }
}

}  // namespace
}  // namespace lnv
