// Small ONNX graphs written with the IR and save_onnx, imported: norms and Gelu in the
// spellings exporters use (docs/onnx.md, "Norms"), evaluated in double against the norm's
// formula; partial matches that must not become norms; names kept, sanitized and unique.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>
#include <unistd.h>

#include "core/error.h"
#include "core/model_json.h"
#include "core/eval/evaluator.h"
#include "onnx/constant_fold.h"
#include "onnx/import.h"
#include "onnx/import_context.h"
#include "tests/onnx/onnx_builder.h"

namespace fs = std::filesystem;
using namespace lnv::onnx_import;

namespace {

constexpr int64_t kRows = 3, kD = 8;

// A graph over input x [kRows, kD], built node by node.
struct Builder : OnnxBuilder {
  explicit Builder(int opset = 14) : OnnxBuilder(opset, "norm") { input("x", {kRows, kD}); }
  void output(const std::string& name, const std::vector<int64_t>& dims = {kRows, kD}) {
    OnnxBuilder::output(name, dims);
  }
  void weights() {
    std::vector<double> w(kD), b(kD);
    for (int64_t k = 0; k < kD; ++k) w[k] = 1.0 + 0.125 * k, b[k] = 0.25 - 0.0625 * k;
    init("weight", {kD}, w);
    init("bias", {kD}, b);
  }
  fs::path write() const {
    static int count = 0;
    const fs::path dir = fs::temp_directory_path() / ("lnv_import_norms_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path p = dir / ("m" + std::to_string(count++) + ".onnx");
    save_onnx(m, p);
    return p;
  }
};

// torch's decomposition below opset 17, with the variations other exporters use.
struct Spelling {
  bool mul_square = false;     // Mul(d, d) instead of Pow(d, 2)
  bool reciprocal = false;     // Mul(d, Reciprocal(s)) instead of Div(d, s)
  bool eps_first = false;      // Add(eps, var)
  bool casts = false;          // Cast to float before, inside (the one the norm spans) and after
  bool affine = true;          // Mul weight, Add bias
};

void layer_norm_decomposed(Builder& b, const Spelling& s) {
  b.scalar("two", 2.0);
  b.scalar("eps", 1e-5);
  b.weights();
  std::string x = "x";
  if (s.casts) {
    Builder::integer(b.node("/ln/Cast", "Cast", {"x"}, {"xc"}), "to", 1);
    x = "xc";
  }
  Builder::ints(b.node("/ln/ReduceMean", "ReduceMean", {x}, {"mean"}), "axes", {-1});
  b.node("/ln/Sub", "Sub", {x, "mean"}, {"d"});
  std::string d = "d";
  if (s.casts) {
    Builder::integer(b.node("/ln/Cast_1", "Cast", {"d"}, {"dc"}), "to", 1);
    d = "dc";
  }
  if (s.mul_square) b.node("/ln/Mul_sq", "Mul", {d, d}, {"sq"});
  else b.node("/ln/Pow", "Pow", {d, "two"}, {"sq"});
  Builder::ints(b.node("/ln/ReduceMean_1", "ReduceMean", {"sq"}, {"var"}), "axes", {-1});
  if (s.eps_first) b.node("/ln/Add", "Add", {"eps", "var"}, {"ve"});
  else b.node("/ln/Add", "Add", {"var", "eps"}, {"ve"});
  b.node("/ln/Sqrt", "Sqrt", {"ve"}, {"s"});
  if (s.reciprocal) {
    b.node("/ln/Reciprocal", "Reciprocal", {"s"}, {"r"});
    b.node("/ln/Div", "Mul", {"r", d}, {"n"});
  } else {
    b.node("/ln/Div", "Div", {d, "s"}, {"n"});
  }
  std::string out = "n";
  if (s.affine) {
    b.node("/ln/Mul", "Mul", {"n", "weight"}, {"nw"});
    b.node("/ln/Add_1", "Add", {"nw", "bias"}, {"y"});
    out = "y";
  }
  if (s.casts) {
    Builder::integer(b.node("/ln/Cast_2", "Cast", {out}, {"yc"}), "to", 1);
    out = "yc";
  }
  b.output(out);
}

std::vector<double> input_values() {
  std::vector<double> x(kRows * kD);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(1.0 + 0.7 * i) * (1 + i % 3);
  return x;
}

// The norm's formula, in double.
std::vector<double> expected(bool rms, bool affine, double eps) {
  const std::vector<double> x = input_values();
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < kRows; ++r) {
    const double* row = &x[r * kD];
    double mean = 0, var = 0;
    if (!rms) mean = std::accumulate(row, row + kD, 0.0) / kD;
    for (int64_t k = 0; k < kD; ++k) var += (row[k] - mean) * (row[k] - mean) / kD;
    for (int64_t k = 0; k < kD; ++k) {
      double v = (row[k] - mean) / std::sqrt(var + eps);
      if (affine) v = v * (1.0 + 0.125 * k) + (rms ? 0.0 : 0.25 - 0.0625 * k);
      y[r * kD + k] = v;
    }
  }
  return y;
}

// Imports `b`, expects exactly one norm node of `op` spanning `nodes` ONNX nodes, and
// compares its evaluation with the formula.
void expect_norm(const Builder& b, lnv::Op op, size_t nodes, bool affine, double eps,
                 bool bias = true) {
  const lnv::Graph g = import_onnx(b.write(), {});
  int norms = 0;
  for (const lnv::Node& n : g.nodes)
    if (n.op == lnv::Op::layer_norm || n.op == lnv::Op::rms_norm) {
      ++norms;
      EXPECT_EQ(n.op, op);
      EXPECT_EQ(n.eps, eps);
      EXPECT_EQ(n.weight.empty(), !affine);
      EXPECT_EQ(n.bias.empty(), !(affine && bias));
      ASSERT_TRUE(parse_meta(g)["onnx"]["norms"].contains(n.name)) << g.meta;
      EXPECT_EQ(parse_meta(g)["onnx"]["norms"][n.name].size(), nodes) << g.meta;
    }
  EXPECT_EQ(norms, 1);
  EXPECT_EQ(g.nodes.size(), 1u) << "every node of the spelling is replaced";
  lnv::Tensor<double> x({kRows, kD}, input_values());
  const auto ev = lnv::eval::evaluate<double>(g, {x}, lnv::eval::RunOptions{});
  const auto want = expected(op == lnv::Op::rms_norm, affine, eps);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(ev.outputs[0].data[i], want[i], 1e-12);
}

TEST(OnnxImportNorms, TorchDecompositionBelowOpset17) {
  Builder b;
  layer_norm_decomposed(b, {});
  expect_norm(b, lnv::Op::layer_norm, 9, true, double(1e-5f));
  const lnv::Graph g = import_onnx(b.write(), {});
  EXPECT_EQ(g.nodes[0].name, "/ln/LayerNormalization") << "named after the nodes' common path";
}

TEST(OnnxImportNorms, MulSquareReciprocalEpsFirstAndCasts) {
  for (int variant = 0; variant < 16; ++variant) {
    SCOPED_TRACE(variant);
    Spelling s;
    s.mul_square = variant & 1;
    s.reciprocal = variant & 2;
    s.eps_first = variant & 4;
    s.casts = variant & 8;
    Builder b;
    layer_norm_decomposed(b, s);
    expect_norm(b, lnv::Op::layer_norm, 9 + s.reciprocal + s.casts, true, double(1e-5f));
  }
}

TEST(OnnxImportNorms, DecompositionWithoutAffine) {
  Spelling s;
  s.affine = false;
  Builder b;
  layer_norm_decomposed(b, s);
  expect_norm(b, lnv::Op::layer_norm, 7, false, double(1e-5f));
}

TEST(OnnxImportNorms, LayerNormalizationOp) {
  Builder b(17);
  b.weights();
  Builder::real(b.node("/ln/LayerNormalization", "LayerNormalization", {"x", "weight", "bias"}, {"y"}),
                "epsilon", 1e-6f);
  b.output("y");
  expect_norm(b, lnv::Op::layer_norm, 1, true, static_cast<double>(1e-6f));
}

// Without the attribute, epsilon is ONNX's default, a float attribute: the float nearest
// 1e-5 (as ONNX Runtime and a folded model's float initializer hold it), not the double.
TEST(OnnxImportNorms, LayerNormalizationDefaultEpsilonIsAFloat) {
  Builder b(17);
  b.weights();
  b.node("/ln/LayerNormalization", "LayerNormalization", {"x", "weight", "bias"}, {"y"});
  b.output("y");
  expect_norm(b, lnv::Op::layer_norm, 1, true, static_cast<double>(1e-5f));
}

void rms_decomposed(Builder& b, bool reciprocal, bool mul_square) {
  b.scalar("two", 2.0);
  b.scalar("eps", 1e-6);
  b.weights();
  if (mul_square) b.node("/rms/Mul_sq", "Mul", {"x", "x"}, {"sq"});
  else b.node("/rms/Pow", "Pow", {"x", "two"}, {"sq"});
  Builder::ints(b.node("/rms/ReduceMean", "ReduceMean", {"sq"}, {"ms"}), "axes", {-1});
  b.node("/rms/Add", "Add", {"ms", "eps"}, {"ve"});
  b.node("/rms/Sqrt", "Sqrt", {"ve"}, {"s"});
  if (reciprocal) {
    b.node("/rms/Reciprocal", "Reciprocal", {"s"}, {"r"});
    b.node("/rms/Mul", "Mul", {"x", "r"}, {"n"});
  } else {
    b.node("/rms/Div", "Div", {"x", "s"}, {"n"});
  }
  b.node("/rms/Mul_1", "Mul", {"weight", "n"}, {"y"});
  b.output("y");
}

TEST(OnnxImportNorms, RmsNormDecompositions) {
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE(variant);
    Builder b;
    rms_decomposed(b, variant & 1, variant & 2);
    expect_norm(b, lnv::Op::rms_norm, 6 + (variant & 1), true, double(1e-6f), false);
  }
}

TEST(OnnxImportNorms, SimplifiedLayerNormalization) {
  Builder b(17);
  b.m.opset_imports.push_back({"com.microsoft", 1});
  b.weights();
  Builder::real(b.node("/rms/SLN", "SimplifiedLayerNormalization", {"x", "weight"}, {"y"}, "com.microsoft"),
                "epsilon", 1e-6f);
  b.output("y");
  expect_norm(b, lnv::Op::rms_norm, 1, true, static_cast<double>(1e-6f), false);
}

TEST(OnnxImportNorms, RMSNormalizationOpset23) {
  Builder b(23);
  b.weights();
  Builder::real(b.node("/rms/RMSNormalization", "RMSNormalization", {"x", "weight"}, {"y"}),
                "epsilon", 1e-6f);
  b.output("y");
  expect_norm(b, lnv::Op::rms_norm, 1, true, static_cast<double>(1e-6f), false);
}

TEST(OnnxImportNorms, GeluOpset20) {
  Builder b(20);
  b.node("/mlp/Gelu", "Gelu", {"x"}, {"y"});
  b.output("y");
  const lnv::Graph g = import_onnx(b.write(), {});
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, lnv::Op::gelu);
}

TEST(OnnxImportNorms, SkipLayerNormalizationIsAnAddAndALayerNorm) {
  Builder b(17);
  b.m.opset_imports.push_back({"com.microsoft", 1});
  b.input("skip", {kRows, kD});
  b.weights();
  Builder::real(b.node("/sln", "SkipLayerNormalization", {"x", "skip", "weight", "bias"}, {"y"}, "com.microsoft"),
                "epsilon", 1e-5f);
  b.output("y");
  const lnv::Graph g = import_onnx(b.write(), {});
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].op, lnv::Op::add);
  EXPECT_EQ(g.nodes[1].op, lnv::Op::layer_norm);
  EXPECT_EQ(parse_meta(g)["onnx"]["norms"]["/sln"], nlohmann::json::array({"/sln"}));
}

TEST(OnnxImportNorms, GeluErfSpellings) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    Builder b;
    b.scalar("sqrt2", std::sqrt(2.0));
    b.scalar("one", 1.0);
    b.scalar("half", 0.5);
    b.node("/mlp/Div", "Div", {"x", "sqrt2"}, {"u"});
    b.node("/mlp/Erf", "Erf", {"u"}, {"e"});
    b.node("/mlp/Add", "Add", {"e", "one"}, {"a"});
    if (variant == 0) {
      b.node("/mlp/Mul", "Mul", {"x", "a"}, {"m"});
      b.node("/mlp/Mul_1", "Mul", {"m", "half"}, {"y"});
    } else if (variant == 1) {
      b.node("/mlp/Mul", "Mul", {"a", "half"}, {"m"});
      b.node("/mlp/Mul_1", "Mul", {"x", "m"}, {"y"});
    } else {
      b.node("/mlp/Mul", "Mul", {"x", "half"}, {"m"});
      b.node("/mlp/Mul_1", "Mul", {"m", "a"}, {"y"});
    }
    b.output("y");
    const lnv::Graph g = import_onnx(b.write(), {});
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(g.nodes[0].op, lnv::Op::gelu);
    EXPECT_EQ(g.nodes[0].name, "/mlp/Gelu");
  }
}

// The patterns matched in the folded graph of `b` (nothing is mapped).
size_t matches(const Builder& b) {
  const Model folded = fold_constants(load_onnx(b.write())).model;
  Importer im(folded);
  im.import_inputs();
  return match_patterns(im).size();
}

TEST(OnnxImportNorms, PartialMatchesAreNotNorms) {
  {  // the mean is also a graph output
    Builder b;
    layer_norm_decomposed(b, {});
    b.output("mean", {kRows, 1});
    EXPECT_EQ(matches(b), 0u);
  }
  {  // the centered value is read by another node
    Builder b;
    layer_norm_decomposed(b, {});
    b.node("/other/Relu", "Relu", {"d"}, {"z"});
    b.output("z");
    EXPECT_EQ(matches(b), 0u);
  }
  {  // the variance over another axis
    Builder b;
    layer_norm_decomposed(b, {});
    for (Node& n : b.m.graph.nodes)
      if (n.name == "/ln/ReduceMean_1") n.attributes[0].ints = {0};
    EXPECT_EQ(matches(b), 0u);
  }
  {  // eps is not a constant
    Builder b;
    layer_norm_decomposed(b, {});
    std::erase_if(b.m.graph.initializers, [](const Initializer& i) { return i.name == "eps"; });
    b.input("eps", {});
    EXPECT_EQ(matches(b), 0u);
  }
  {  // the mean is not kept (keepdims = 0)
    Builder b;
    layer_norm_decomposed(b, {});
    for (Node& n : b.m.graph.nodes)
      if (n.name == "/ln/ReduceMean_1") Builder::integer(n, "keepdims", 0);
    b.m.graph.outputs.clear();
    b.output("n");  // the broadcast no longer matches: import only what still checks
    EXPECT_EQ(matches(b), 0u);
  }
  {  // a cube, not a square
    Builder b;
    rms_decomposed(b, false, false);
    b.m.graph.initializers[0].value.floats = {3.0};
    EXPECT_EQ(matches(b), 0u);
  }
  {  // InvStdDev of LayerNormalization read: computed beside the norm with sqrt and
     // reciprocal, or, while model.json lacks them, the node is not a plain norm
    Builder b(17);
    b.weights();
    b.node("/ln/LayerNormalization", "LayerNormalization", {"x", "weight", "bias"}, {"y", "", "inv"});
    b.output("y");
    b.output("inv", {kRows, 1});
    const bool ops = lnv::op_from_name("sqrt") && lnv::op_from_name("reciprocal");
    EXPECT_EQ(matches(b), ops ? 1u : 0u);
  }
}

TEST(OnnxImportNorms, LayerNormalizationWithItsMeanRead) {
  Builder b(17);
  b.weights();
  b.node("/ln/LayerNormalization", "LayerNormalization", {"x", "weight", "bias"}, {"y", "mean"});
  b.output("y");
  b.output("mean", {kRows, 1});
  const lnv::Graph g = import_onnx(b.write(), {});
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].op, lnv::Op::layer_norm);
  EXPECT_EQ(g.nodes[1].name, "/ln/LayerNormalization.Mean");
  lnv::Tensor<double> x({kRows, kD}, input_values());
  const auto ev = lnv::eval::evaluate<double>(g, {x}, lnv::eval::RunOptions{});
  const auto want = expected(false, true, 1e-5);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(ev.outputs[0].data[i], want[i], 1e-6);
  for (int64_t r = 0; r < kRows; ++r)
    EXPECT_NEAR(ev.outputs[1].data[r],
                std::accumulate(&x.data[r * kD], &x.data[(r + 1) * kD], 0.0) / kD, 1e-15);
}

TEST(OnnxImportNorms, WeightOfAnotherShapeStaysAMul) {
  Builder b;
  layer_norm_decomposed(b, {});
  for (Initializer& i : b.m.graph.initializers)
    if (i.name == "weight") i.value = Tensor{ElemType::Float, {kRows, kD}, std::vector<double>(kRows * kD, 2.0), {}};
  const Model folded = fold_constants(load_onnx(b.write())).model;
  Importer im(folded);
  im.import_inputs();
  EXPECT_EQ(match_patterns(im).size(), 1u);
  EXPECT_FALSE(im.consumed(7)) << "the Mul by a [rows, D] tensor is not the norm's weight";
}

// Before opset 13 Softmax normalizes over the flattened axes from `axis` on.
TEST(OnnxImportOps, SoftmaxBeforeOpset13FlattensFromItsAxis) {
  Builder b(11);
  b.m.graph.inputs.clear();
  b.input("x", {2, 3, 4});
  Builder::integer(b.node("/sm", "Softmax", {"x"}, {"y"}), "axis", 1);
  b.output("y", {2, 3, 4});
  const lnv::Graph g = import_onnx(b.write(), {});
  ASSERT_EQ(g.nodes.size(), 3u);  // reshape [2, 12], softmax, reshape back
  std::vector<double> x(24);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.3 * i) * 3;
  const auto ev = lnv::eval::evaluate<double>(g, {lnv::Tensor<double>({2, 3, 4}, x)}, lnv::eval::RunOptions{});
  for (int r = 0; r < 2; ++r) {
    double max = -1e300, sum = 0;
    for (int k = 0; k < 12; ++k) max = std::max(max, x[r * 12 + k]);
    for (int k = 0; k < 12; ++k) sum += std::exp(x[r * 12 + k] - max);
    for (int k = 0; k < 12; ++k)
      EXPECT_NEAR(ev.outputs[0].data[r * 12 + k], std::exp(x[r * 12 + k] - max) / sum, 1e-15);
  }
}

TEST(OnnxImportOps, MatMulWithA1DOperand) {
  Builder b;
  std::vector<double> v(kD);
  for (int64_t k = 0; k < kD; ++k) v[k] = 0.5 - 0.25 * k;
  b.init("v", {kD}, v);
  b.node("/mv", "MatMul", {"x", "v"}, {"y"});
  b.output("y", {kRows});
  const lnv::Graph g = import_onnx(b.write(), {});
  lnv::Tensor<double> x({kRows, kD}, input_values());
  const auto ev = lnv::eval::evaluate<double>(g, {x}, lnv::eval::RunOptions{});
  ASSERT_EQ(ev.outputs[0].shape, (lnv::Shape{kRows}));
  for (int64_t r = 0; r < kRows; ++r) {
    double want = 0;
    for (int64_t k = 0; k < kD; ++k) want += x.data[r * kD + k] * v[k];
    EXPECT_NEAR(ev.outputs[0].data[r], want, 1e-12);
  }
}

TEST(OnnxImportNames, KeptSanitizedAndUnique) {
  Builder b;
  b.init("w b", {kD, kD}, std::vector<double>(kD * kD, 0.5));
  b.node("proj out", "MatMul", {"x", "w b"}, {"h"});
  b.node("proj out", "Relu", {"h"}, {"r"});  // the same node name twice
  b.node("", "Tanh", {"r"}, {"t#1"});        // unnamed
  b.output("t#1");
  const lnv::Graph g = import_onnx(b.write(), {});
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.params[0].name, "w_b");
  EXPECT_EQ(g.nodes[0].name, "proj_out");
  EXPECT_EQ(g.nodes[1].name, "proj_out.2");
  EXPECT_EQ(g.nodes[2].name, "t_1") << "an unnamed node takes its output's name";
  const nlohmann::json renamed = parse_meta(g)["onnx"]["renamed"];
  EXPECT_EQ(renamed["w_b"], "w b");
  EXPECT_EQ(renamed["proj_out.2"], "proj out");
  EXPECT_EQ(renamed["t_1"], "t#1");
  EXPECT_EQ(parse_meta(g)["onnx"]["outputs"]["t#1"], "t_1");
}

TEST(OnnxImportNames, AnOpNotModelledIsOpaqueNamedAsTheFileSpellsIt) {
  Builder b;
  b.node("my node!", "Floor", {"x"}, {"y"});
  b.output("y");
  const lnv::Graph g = import_onnx(b.write(), {});
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, lnv::Op::opaque);
  EXPECT_EQ(g.nodes[0].op_type, "Floor");
  EXPECT_EQ(g.nodes[0].shape, (lnv::Shape{kRows, kD}));
  EXPECT_EQ(parse_meta(g)["onnx"]["renamed"]["my_node_"], "my node!");
  EXPECT_EQ(parse_meta(g)["onnx"]["opaque"]["my_node_"], "no mapping of this op");
  lnv::Tensor<double> x({kRows, kD}, input_values());
  try {
    lnv::eval::evaluate<double>(g, {x}, lnv::eval::RunOptions{});
    FAIL() << "an opaque op evaluated";
  } catch (const lnv::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("op 'Floor'"), std::string::npos) << e.what();
  }
}

TEST(OnnxImportNames, EveryOutputReadOfAnOpaqueNodeIsANode) {
  Builder b(13);  // Dropout whose mask is read: opaque, both outputs
  b.scalar("ratio", 0.25);
  b.m.graph.initializers.push_back({"training", Tensor{ElemType::Bool, {}, {}, {1}}});
  b.node("/do", "Dropout", {"x", "ratio", "training"}, {"y", "mask"});
  Builder::integer(b.node("/cast", "Cast", {"mask"}, {"z"}), "to", 1);
  b.output("y");
  b.output("z");
  const lnv::Graph g = import_onnx(b.write(), {});
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.nodes[0].name, "/do:0");
  EXPECT_EQ(g.nodes[1].name, "/do:1");
  EXPECT_EQ(g.nodes[1].shape, (lnv::Shape{kRows, kD}));
  EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"x", "ratio"}))
      << "integer and bool constants are not inputs";
  EXPECT_EQ(g.nodes[2].op_type, "Cast") << "a cast from bool is opaque too";
}

// A float constant holding -inf or NaN (nn.MultiheadAttention's causal mask) cannot be a
// model.json param: a mapped node reading it is opaque, with the constant not among its
// inputs, and the import goes on; the same constant is no error where nothing reads it.
TEST(OnnxImportNames, ANodeReadingANonFiniteConstantIsOpaque) {
  const double inf = std::numeric_limits<double>::infinity();
  Builder b;
  std::vector<double> mask(kRows * kD, 0.0);
  mask[1] = -inf;
  mask[2] = std::nan("");
  b.init("mask", {kRows, kD}, mask);
  b.node("/attn/Add", "Add", {"x", "mask"}, {"scores"});
  b.node("/attn/Softmax", "Softmax", {"scores"}, {"y"});
  b.output("y");
  const lnv::Graph g = import_onnx(b.write(), {});
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].op, lnv::Op::opaque);
  EXPECT_EQ(g.nodes[0].op_type, "Add");
  EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"x"}));
  EXPECT_TRUE(g.params.empty());
  EXPECT_EQ(parse_meta(g)["onnx"]["opaque"]["/attn/Add"],
            "it reads the constant 'mask', which holds an infinity or a NaN");
  EXPECT_EQ(g.nodes[1].op, lnv::Op::softmax);
}

}  // namespace
