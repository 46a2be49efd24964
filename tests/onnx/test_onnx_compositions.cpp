// ONNX ops imported as compositions (onnx/import_compositions.cpp; docs/onnx.md, "Ops
// imported as compositions"): what the analysis learns through them, checked against
// exact evaluation of the rewrite, and bad attributes refused naming the node. Their
// values are held to ONNX's own node tests by test_onnx_import_backend.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/eval/evaluator.h"
#include "onnx/import.h"
#include "tests/onnx/onnx_builder.h"

namespace fs = std::filesystem;
using namespace lnv::onnx_import;

namespace {

constexpr int64_t kTokens = 3, kD = 8;

// A graph over input x [kTokens, kD]: y = x W (a producer), LN1(y) a graph output, and a
// branch from y that ends in LN2, which the test fills in.
struct Builder : OnnxBuilder {
  Builder() : OnnxBuilder(17, "compositions") {
    input("x", {kTokens, kD});
    std::vector<double> w(kD * kD);
    for (size_t k = 0; k < w.size(); ++k) w[k] = std::sin(0.7 * double(k) + 0.3);
    init("W", {kD, kD}, w);
    node("mm", "MatMul", {"x", "W"}, {"y"});
    layer_norm("ln1", "y", kD, "ln1_out");
  }
  void layer_norm(const std::string& name, const std::string& in, int64_t d, const std::string& out) {
    std::vector<double> g(static_cast<size_t>(d)), b(static_cast<size_t>(d));
    for (int64_t k = 0; k < d; ++k) g[size_t(k)] = 1.0 + 0.1 * double(k), b[size_t(k)] = 0.2 - 0.05 * double(k);
    init(name + ".g", {d}, g);
    init(name + ".b", {d}, b);
    integer(node(name, "LayerNormalization", {in, name + ".g", name + ".b"}, {out}), "axis", -1);
    output(out, {kTokens, d});
  }
  // y as [kTokens, 1, kD] for a 1-D pool over the features, pooled to `pooled` features.
  void pool(const std::string& op, int64_t kernel, int64_t stride, int64_t pooled) {
    ints_init("to3", {kTokens, 1, kD});
    ints_init("to2", {kTokens, pooled});
    node("r3", "Reshape", {"y", "to3"}, {"y3"});
    Node& p = node("pool", op, {"y3"}, {"p3"});
    ints(p, "kernel_shape", {kernel});
    ints(p, "strides", {stride});
    node("r2", "Reshape", {"p3", "to2"}, {"p2"});
    layer_norm("ln2", "p2", pooled, "ln2_out");
  }
  lnv::Graph import() const {
    static int count = 0;
    const fs::path dir = fs::temp_directory_path() / ("lnv_compositions_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path p = dir / ("m" + std::to_string(count++) + ".onnx");
    save_onnx(m, p);
    return import_onnx(p, {});
  }
};

bool foldable(const lnv::FoldPlan& plan, const std::string& ln) {
  for (const lnv::LnVerdict& v : plan.layer_norms)
    if (v.name.find(ln) != std::string::npos) return v.foldable[0];
  std::string names;
  for (const lnv::LnVerdict& v : plan.layer_norms) names += " " + v.name;
  throw std::runtime_error("no LN " + ln + " among" + names);
}

// The rewrite of `plan` changes no output of g (random inputs, double).
double rewrite_difference(const lnv::Graph& g, const lnv::FoldPlan& plan) {
  const lnv::Graph rw = lnv::apply_fold(g, plan);
  const auto in = lnv::eval::random_inputs<double>(g, 7);
  const auto a = lnv::eval::evaluate<double>(g, in, lnv::eval::RunOptions{});
  const auto b = lnv::eval::evaluate<double>(rw, in, lnv::eval::RunOptions{});
  double worst = 0;
  for (size_t o = 0; o < a.outputs.size(); ++o)
    for (size_t k = 0; k < a.outputs[o].data.size(); ++k)
      worst = std::max(worst, std::fabs(a.outputs[o].data[k] - b.outputs[o].data[k]));
  return worst;
}

// A MaxPool whose windows tile the features is a max over reshaped axes: centering W
// shifts y by a constant per token, which passes max (max(x + c) = max(x) + c) and LN2
// absorbs, so LN1 folds, and the rewrite changes no output.
TEST(OnnxCompositions, TilingMaxPoolPassesAConstantShift) {
  Builder b;
  b.pool("MaxPool", 2, 2, kD / 2);
  const lnv::Graph g = b.import();
  const lnv::FoldPlan plan = lnv::detect_foldable(g, lnv::Mode::inference);
  EXPECT_TRUE(foldable(plan, "ln1"));
  EXPECT_LT(rewrite_difference(g, plan), 1e-12);
}

// Overlapping windows are strided slices stacked by a concat, which the concat rule does
// not know to carry one shift: a sound "no".
TEST(OnnxCompositions, OverlappingMaxPoolIsASoundNo) {
  Builder b;
  b.pool("MaxPool", 3, 1, kD - 2);
  const lnv::Graph g = b.import();
  EXPECT_FALSE(foldable(lnv::detect_foldable(g, lnv::Mode::inference), "ln1"));
}

// An AveragePool is linear: the per-token shift passes (a mean of a constant) either way.
TEST(OnnxCompositions, AveragePoolPassesAConstantShift) {
  for (int64_t kernel : {2, 3}) {
    SCOPED_TRACE(kernel);
    Builder b;
    b.pool("AveragePool", kernel, kernel == 2 ? 2 : 1, kernel == 2 ? kD / 2 : kD - 2);
    const lnv::Graph g = b.import();
    const lnv::FoldPlan plan = lnv::detect_foldable(g, lnv::Mode::inference);
    EXPECT_TRUE(foldable(plan, "ln1"));
    EXPECT_LT(rewrite_difference(g, plan), 1e-12);
  }
}

// An Einsum that is a matmul by a constant is a producer: the LN after it folds, and the
// rewrite (its weight centered) changes no output.
TEST(OnnxCompositions, EinsumThatIsAMatmulIsAProducer) {
  Builder b;
  std::vector<double> e(kD * kD);
  for (size_t k = 0; k < e.size(); ++k) e[k] = std::cos(0.3 * double(k));
  b.init("E", {kD, kD}, e);
  Node& n = b.node("es", "Einsum", {"ln1_out", "E"}, {"z"});
  Builder::text(n, "equation", "td,ed->te");
  // ONNX 1.12's Einsum shape inference gives the output's rank, not its dims.
  b.m.graph.value_info.push_back(Builder::value("z", {kTokens, kD}));
  b.layer_norm("ln2", "z", kD, "ln2_out");
  const lnv::Graph g = b.import();
  const lnv::FoldPlan plan = lnv::detect_foldable(g, lnv::Mode::inference);
  EXPECT_TRUE(foldable(plan, "ln2"));
  EXPECT_LT(rewrite_difference(g, plan), 1e-12);
}

// A PRelu is a nonlinearity: a shift reaching it breaks (LN1 cannot fold), and LN2 keeps
// an opaque atom.
TEST(OnnxCompositions, PReluIsANonlinearity) {
  Builder b;
  b.init("slope", {kD}, std::vector<double>(kD, 0.25));
  b.node("pr", "PRelu", {"y", "slope"}, {"z"});
  b.layer_norm("ln2", "z", kD, "ln2_out");
  const lnv::FoldPlan plan = lnv::detect_foldable(b.import(), lnv::Mode::inference);
  EXPECT_FALSE(foldable(plan, "ln1"));
  EXPECT_FALSE(foldable(plan, "ln2"));
}

std::string import_error(const Builder& b) {
  try {
    (void)b.import();
  } catch (const lnv::ModelError& e) {
    return e.what();
  }
  return "";
}

// Attribute values the ONNX specification rules out are errors naming the node.
TEST(OnnxCompositions, BadAttributesNameTheNode) {
  {
    Builder b;
    Node& n = b.node("bad_celu", "Celu", {"y"}, {"z"});
    Builder::real(n, "alpha", 0.0);
    b.layer_norm("ln2", "z", kD, "ln2_out");
    const std::string e = import_error(b);
    EXPECT_NE(e.find("bad_celu"), std::string::npos) << e;
    EXPECT_NE(e.find("alpha"), std::string::npos) << e;
  }
  {
    Builder b;
    b.ints_init("to4", {kTokens, 1, 1, kD});
    b.node("r4", "Reshape", {"y", "to4"}, {"y4"});
    b.init("roi", {0}, {});
    b.init("scales", {4}, {1, 1, 1, 1});
    Node& n = b.node("bad_resize", "Resize", {"y4", "roi", "scales"}, {"z"});
    Builder::text(n, "mode", "bicubic");
    b.m.graph.outputs.push_back(Builder::value("z", {kTokens, 1, 1, kD}));
    const std::string e = import_error(b);
    EXPECT_NE(e.find("bad_resize"), std::string::npos) << e;
    EXPECT_NE(e.find("bicubic"), std::string::npos) << e;
  }
}

}  // namespace
