// The LibTorch engine against the reference evaluator (double): outputs and gradients of
// the loss agree to ~1e-12 in float64, on hand-built graphs that together use every op,
// on the golden models and their folds, on the zoo at test size, and on random graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/eval/evaluator.h"
#include "core/model_json.h"
#include "generators/architectures.h"
#include "generators/random_graph.h"
#include "tests/eval_test_graphs.h"
#include "torch/engine.h"

namespace lnv {
namespace {

using testing::GraphBuilder;
using torch_engine::Engine;
using torch_engine::Precision;

constexpr double kTol = 1e-12;

// max |a - b| relative to the larger magnitude in the reference tensor (at least 1).
double rel_diff(const Tensor<double>& ref, const Tensor<double>& got) {
  EXPECT_EQ(ref.shape, got.shape);
  if (ref.shape != got.shape || ref.data.size() != got.data.size()) return INFINITY;
  double scale = 1.0, diff = 0.0;
  for (size_t i = 0; i < ref.data.size(); ++i) {
    scale = std::max(scale, std::abs(ref.data[i]));
    diff = std::max(diff, std::abs(ref.data[i] - got.data[i]));
  }
  return diff / scale;
}

// Forward (no-grad path), and forward + gradients (autograd path), against the evaluator.
void cross_check(const Graph& g, Mode mode, uint64_t seed, const std::string& label) {
  SCOPED_TRACE(label + " (" + std::string(mode_name(mode)) + ", seed " +
               std::to_string(seed) + ")");
  const auto inputs = eval::random_inputs<double>(g, seed);
  const eval::RunOptions ropt{mode, seed};
  const eval::Evaluation<double> ev = eval::evaluate<double>(g, inputs, ropt);
  const eval::Gradients<double> ref = eval::gradients<double>(g, ev, ropt);

  Engine e(g, {Precision::f64});
  const auto outs = e.forward(inputs, {mode, seed});
  ASSERT_EQ(outs.size(), ev.outputs.size());
  for (size_t k = 0; k < outs.size(); ++k)
    EXPECT_LE(rel_diff(ev.outputs[k], outs[k]), kTol) << "output " << g.outputs[k];

  const torch_engine::GradResult got = e.gradients(inputs, {mode, seed});
  for (size_t k = 0; k < outs.size(); ++k)
    EXPECT_LE(rel_diff(ev.outputs[k], got.outputs[k]), kTol) << "output " << g.outputs[k];
  EXPECT_NEAR(got.loss, ref.loss, kTol * std::max(1.0, std::abs(ref.loss)));
  for (size_t k = 0; k < g.inputs.size(); ++k)
    if (g.inputs[k].dtype == DType::float_) {
      EXPECT_LE(rel_diff(ref.inputs[k], got.inputs[k]), kTol) << "d/d input " << g.inputs[k].name;
    }
  for (size_t k = 0; k < g.params.size(); ++k)
    EXPECT_LE(rel_diff(ref.params[k], got.params[k]), kTol) << "d/d param " << g.params[k].name;
}

void cross_check_modes(const Graph& g, const std::string& label) {
  for (Mode m : {Mode::inference, Mode::training})
    for (uint64_t seed : {1u, 2u}) cross_check(g, m, seed, label);
}

// --- hand-built graphs; together they use every op -------------------------------------

// Sets a node's attributes right after adding it (GraphBuilder's reference is only valid
// until the next node).
template <class F>
void add(GraphBuilder& b, const std::string& name, Op op, std::vector<std::string> in, F set) {
  set(b.node(name, op, std::move(in)));
}
void add(GraphBuilder& b, const std::string& name, Op op, std::vector<std::string> in) {
  b.node(name, op, std::move(in));
}

std::vector<Graph> hand_built() {
  std::vector<Graph> out;
  {  // producers with cbwc, broadcast params, matmuls with a param on either side
    GraphBuilder b("producers");
    b.input("x", {2, 3, 4}).index_input("ids", {2, 3}, 5);
    b.param("W", {6, 4}).param("bW", {6}).param("E", {5, 6}).param("M", {5, 6});
    b.param("A", {4, 6}).param("pos", {3, 6}).param("g", {3}).param("gb", {3});
    add(b, "fc", Op::linear, {"x"}, [](Node& n) { n.weight = "W", n.bias = "bW", n.cbwc = true; });
    add(b, "emb", Op::embedding, {"ids"}, [](Node& n) { n.weight = "E", n.cbwc = true; });
    add(b, "s", Op::add, {"fc", "emb"});
    add(b, "sp", Op::sub, {"s", "pos"});
    add(b, "mm", Op::matmul, {"sp", "M"}, [](Node& n) { n.transpose_b = true, n.cbwc = true; });
    add(b, "ln", Op::layer_norm, {"mm"}, [](Node& n) { n.axes = {1}, n.weight = "g", n.bias = "gb"; });
    add(b, "mx", Op::max, {"ln"}, [](Node& n) { n.axes = {-1}, n.keepdims = true; });
    add(b, "mp", Op::matmul, {"A", "sp"}, [](Node& n) { n.transpose_b = true, n.cbwc = true; });
    add(b, "tt", Op::transpose, {"sp"}, [](Node& n) { n.perm = {0, 2, 1}; });
    add(b, "mv", Op::matmul, {"sp", "tt"});
    out.push_back(b.build({"mx", "mp", "mv"}));
  }
  {  // convolutions: grouped, strided, dilated, padded; a norm over the channel axis
    GraphBuilder b("convs");
    b.input("x", {2, 4, 9}).input("img", {1, 2, 5, 5});
    b.param("W1", {6, 2, 3}).param("b1", {6}).param("W2", {4, 2, 3, 3}).param("b2", {4});
    b.param("W3", {4, 1, 3, 3}).param("g", {4});
    add(b, "c1", Op::conv1d, {"x"}, [](Node& n) {
      n.weight = "W1", n.bias = "b1", n.stride = {2}, n.padding = {1}, n.dilation = {2};
      n.groups = 2;
    });
    add(b, "c2", Op::conv2d, {"img"}, [](Node& n) {
      n.weight = "W2", n.bias = "b2", n.padding = {1, 1}, n.cbwc = true;
    });
    add(b, "c3", Op::conv2d, {"c2"}, [](Node& n) { n.weight = "W3", n.stride = {2}, n.groups = 4; });
    add(b, "rms", Op::rms_norm, {"c3"}, [](Node& n) { n.axes = {1}, n.weight = "g", n.eps = 1e-3; });
    add(b, "m", Op::mean, {"rms"}, [](Node& n) { n.axes = {2, 3}; });
    out.push_back(b.build({"c1", "m"}));
  }
  {  // recurrences with each kind of norm, attention with and without biases, dropout
    GraphBuilder b("sequence");
    b.input("x", {2, 4, 6});
    b.param("wih", {5, 6}).param("whh", {5, 5}).param("bh", {5}).param("nw", {5}).param("nb", {5});
    b.param("wih2", {5, 5}).param("whh2", {5, 5}).param("nw2", {5});
    b.param("wih3", {5, 5}).param("whh3", {5, 5});
    for (const char* p : {"wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo"})
      b.param(p, std::string(p)[0] == 'w' ? Shape{6, 6} : Shape{6});
    for (const char* p : {"vq", "vk", "vv", "vo"}) b.param(p, {6, 6});
    add(b, "r1", Op::rnn, {"x"}, [](Node& n) {
      n.weight_ih = "wih", n.weight_hh = "whh", n.bias = "bh", n.cbwc = true;
      n.norm = RnnNorm{Op::layer_norm, 1e-5, "nw", "nb"};
    });
    add(b, "r2", Op::rnn, {"r1"}, [](Node& n) {
      n.weight_ih = "wih2", n.weight_hh = "whh2", n.norm = RnnNorm{Op::rms_norm, 1e-4, "nw2", ""};
    });
    add(b, "r3", Op::rnn, {"r2"}, [](Node& n) { n.weight_ih = "wih3", n.weight_hh = "whh3"; });
    add(b, "a1", Op::attention, {"x"}, [](Node& n) {
      n.wq = "wq", n.wk = "wk", n.wv = "wv", n.wo = "wo", n.bq = "bq", n.bk = "bk";
      n.bv = "bv", n.bo = "bo", n.heads = 2, n.causal = true, n.cbwc = true;
    });
    add(b, "a2", Op::attention, {"a1"}, [](Node& n) {
      n.wq = "vq", n.wk = "vk", n.wv = "vv", n.wo = "vo", n.heads = 3;
    });
    add(b, "d", Op::dropout, {"a2"}, [](Node& n) { n.p = 0.3; });
    add(b, "sm", Op::softmax, {"d"}, [](Node& n) { n.axis = 1; });
    out.push_back(b.build({"r3", "sm"}));
  }
  {  // gated recurrences in ONNX's layout: x [T, N, F]; every direction, initial states,
     // shorter sequences, linear_before_reset, each output
    GraphBuilder b("gated");
    b.input("x", {4, 2, 3});
    b.param("lw", {2, 8, 3}).param("lr", {2, 8, 2}).param("lb", {2, 16});
    b.param("lh", {2, 2, 2}).param("lc", {2, 2, 2});
    b.param("gw", {1, 9, 3}).param("gr", {1, 9, 3}).param("gb", {1, 18}).param("gh", {1, 2, 3});
    b.param("hw", {1, 6, 3}).param("hr", {1, 6, 2});
    add(b, "l1", Op::lstm, {"x"}, [](Node& n) {
      n.weight_ih = "lw", n.weight_hh = "lr", n.bias = "lb", n.initial_h = "lh", n.initial_c = "lc";
      n.direction = "bidirectional", n.sequence_lens = {4, 2};
    });
    add(b, "l2", Op::lstm, {"x"}, [](Node& n) {
      n.weight_ih = "lw", n.weight_hh = "lr", n.bias = "lb", n.direction = "bidirectional";
      n.output = "y_c";
    });
    add(b, "g1", Op::gru, {"x"}, [](Node& n) {
      n.weight_ih = "gw", n.weight_hh = "gr", n.bias = "gb", n.initial_h = "gh";
      n.linear_before_reset = true, n.direction = "reverse", n.sequence_lens = {3, 4};
    });
    add(b, "g2", Op::gru, {"x"}, [](Node& n) {
      n.weight_ih = "gw", n.weight_hh = "gr", n.output = "y_h";
    });
    add(b, "g1r", Op::reshape, {"g1"}, [](Node& n) { n.shape = {4, 2, 3}; });
    add(b, "g3", Op::gru, {"g1r"}, [](Node& n) { n.weight_ih = "hw", n.weight_hh = "hr"; });
    out.push_back(b.build({"l1", "l2", "g2", "g3"}));
  }
  {  // elementwise ops, shapes and reductions
    GraphBuilder b("elementwise");
    b.input("x", {3, 4});
    b.param("P", {4}).param("Q", {3, 1}).param("bb", {4});
    add(b, "relu", Op::relu, {"x"});
    add(b, "gelu", Op::gelu, {"x"});
    add(b, "tanh", Op::tanh, {"x"});
    add(b, "sigmoid", Op::sigmoid, {"x"});
    add(b, "silu", Op::silu, {"x"});
    add(b, "eq", Op::exp, {"Q"});
    add(b, "mul", Op::mul, {"x", "P"});
    add(b, "div", Op::div, {"mul", "eq"});
    add(b, "scale", Op::scale, {"div"}, [](Node& n) { n.factor = -0.5; });
    add(b, "center", Op::center, {"scale"}, [](Node& n) { n.axes = {0}; });
    add(b, "cat0", Op::concat, {"relu", "gelu", "center"}, [](Node& n) { n.axis = 0; });
    add(b, "cat1", Op::concat, {"tanh", "sigmoid", "silu"}, [](Node& n) { n.axis = -1; });
    add(b, "rs", Op::reshape, {"cat1"}, [](Node& n) { n.shape = {-1, 6}; });
    add(b, "ln", Op::layer_norm, {"rs"}, [](Node& n) { n.axes = {0, 1}; });
    add(b, "rms", Op::rms_norm, {"cat0"}, [](Node& n) { n.axes = {-1}, n.bias = "bb"; });
    add(b, "mean", Op::mean, {"rms"}, [](Node& n) { n.axes = {0, 1}, n.keepdims = true; });
    out.push_back(b.build({"ln", "mean"}));
  }
  {  // the unary ops of an ONNX import (sqrt and reciprocal of positive values)
    GraphBuilder b("imported_unary");
    b.input("x", {3, 4});
    add(b, "ex", Op::exp, {"x"});
    add(b, "sqrt", Op::sqrt, {"ex"});
    add(b, "recip", Op::reciprocal, {"ex"});
    add(b, "erf", Op::erf, {"x"});
    add(b, "hsig", Op::hard_sigmoid, {"x"}, [](Node& n) { n.alpha = 0.3, n.beta = 0.4; });
    add(b, "hswish", Op::hard_swish, {"x"});
    add(b, "clip", Op::clip, {"x"}, [](Node& n) { n.min = -0.5, n.max = 0.75; });
    add(b, "clip_lo", Op::clip, {"x"}, [](Node& n) { n.min = -0.25; });
    add(b, "log", Op::log, {"ex"});
    add(b, "sin", Op::sin, {"x"});
    add(b, "cos", Op::cos, {"x"});
    add(b, "atan", Op::atan, {"x"});
    add(b, "cat", Op::concat, {"sqrt", "recip", "erf", "hsig", "hswish", "clip", "clip_lo", "log",
                               "sin", "cos", "atan"},
        [](Node& n) { n.axis = -1; });
    out.push_back(b.build({"cat"}));
  }
  {  // slices: a reversed step, negative starts, clamped ends, overlapping takes
    GraphBuilder b("slices");
    b.input("x", {2, 5, 4});
    add(b, "s", Op::slice, {"x"}, [](Node& n) {
      n.axes = {1, 2}, n.starts = {4, 1}, n.ends = {-100, 3}, n.steps = {-2, 1};
    });
    add(b, "u", Op::slice, {"x"}, [](Node& n) {
      n.axes = {-2, -1}, n.starts = {-4, 0}, n.ends = {4, 2};
    });
    add(b, "t", Op::tanh, {"s"});
    add(b, "v", Op::mul, {"t", "u"});
    out.push_back(b.build({"v"}));
  }
  {  // expand (bidirectional broadcast), pad with a value, where with a broadcast condition
    GraphBuilder b("expand_pad_where");
    b.input("x", {2, 1, 3});
    b.param("m", {5});
    add(b, "e", Op::expand, {"x"}, [](Node& n) { n.shape = {4, 1}; });
    add(b, "p", Op::pad, {"e"}, [](Node& n) { n.pads = {0, 1, 0, 1, 0, 2}, n.value = -0.5; });
    add(b, "t", Op::tanh, {"p"});
    add(b, "w", Op::where, {"t", "m"}, [](Node& n) {
      n.condition_shape = {5, 1}, n.condition = {1, 0, 1, 1, 0};
    });
    out.push_back(b.build({"w"}));
  }
  {  // a causal masked softmax
    GraphBuilder b("masked_softmax");
    b.input("x", {2, 3, 3});
    add(b, "s", Op::softmax, {"x"}, [](Node& n) {
      n.axis = -1, n.condition_shape = {3, 3}, n.condition = {1, 0, 0, 1, 1, 0, 1, 1, 1};
    });
    out.push_back(b.build({"s"}));
  }
  {  // params read through center_axes (an inference rewrite's centered weights)
    GraphBuilder b("center_axes");
    b.input("x", {2, 3});
    b.param("W", {4, 3}).param("c", {2, 4}).param("lw", {4});
    add(b, "fc", Op::linear, {"x"}, [](Node& n) { n.weight = "W"; });
    add(b, "s", Op::add, {"fc", "c"});
    add(b, "rms", Op::rms_norm, {"s"}, [](Node& n) { n.axes = {-1}, n.weight = "lw"; });
    Graph g = b.build({"rms"});
    g.params[0].center_axes = {0};
    g.params[1].center_axes = {0, 1};
    out.push_back(g);
  }
  return out;
}

TEST(TorchEngine, HandBuiltGraphsUseEveryOp) {
  std::set<Op> ops;
  for (const Graph& g : hand_built())
    for (const Node& n : g.nodes) ops.insert(n.op);
  for (int k = 0; k < static_cast<int>(Op::kCount); ++k)
    if (static_cast<Op>(k) != Op::opaque) {  // refused, not computed: RefusesAnOpaqueOp
      EXPECT_TRUE(ops.count(static_cast<Op>(k))) << "no hand-built graph uses "
                                                  << op_name(static_cast<Op>(k));
    }
}

TEST(TorchEngine, MatchesTheReferenceOnHandBuiltGraphs) {
  for (const Graph& g : hand_built()) cross_check_modes(g, g.name);
}

// --- golden models, their folds, the zoo, random graphs -------------------------------

std::vector<std::string> golden_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(std::string(LNV_SOURCE_DIR) + "/tests/golden"))
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(TorchEngine, MatchesTheReferenceOnGoldenModelsAndTheirFolds) {
  const auto files = golden_files();
  ASSERT_GE(files.size(), 10u);
  for (const std::string& f : files) {
    const Graph g = load_model(f);
    // A model with an opaque op cannot be evaluated (RefusesAnOpaqueOp).
    if (std::any_of(g.nodes.begin(), g.nodes.end(),
                    [](const Node& n) { return n.op == Op::opaque; }))
      continue;
    cross_check_modes(g, f);
    for (Mode m : {Mode::inference, Mode::training}) {
      const Graph folded = apply_fold(g, detect_foldable(g, m));
      cross_check(folded, m, 3, f + " folded for " + std::string(mode_name(m)));
    }
  }
}

TEST(TorchEngine, MatchesTheReferenceOnTheZoo) {
  zoo::ArchOptions text;
  text.layers = 1, text.hidden = 8, text.heads = 2, text.seq = 4, text.vocab = 11, text.batch = 2;
  zoo::ArchOptions vision;
  vision.layers = 1, vision.hidden = 8, vision.heads = 2, vision.image = 8, vision.patch = 4;
  vision.classes = 3, vision.batch = 2;
  zoo::ArchOptions staged;
  staged.depths = {1, 1}, staged.hidden = 4, staged.heads = 1, staged.image = 16;
  staged.patch = 4, staged.window = 2, staged.classes = 3;
  for (const char* a : {"gpt2", "bert", "opt", "phi", "rnnlm"})
    cross_check_modes(zoo::build_architecture(a, text), a);
  cross_check_modes(zoo::build_architecture("vit", vision), "vit");
  cross_check_modes(zoo::build_architecture("swin", staged), "swin");
  staged.window.reset();
  cross_check_modes(zoo::build_architecture("convnext", staged), "convnext");
}

TEST(TorchEngine, MatchesTheReferenceOnRandomGraphs) {
  gen::GenConfig cfg;
  std::set<Op> seen;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Graph g = gen::generate_case(cfg, seed).value();
    for (const Node& n : g.nodes) seen.insert(n.op);
    cross_check(g, seed % 2 ? Mode::training : Mode::inference, seed,
                "random graph " + std::to_string(seed) + "\n" + gen::describe(g));
  }
  EXPECT_GE(seen.size(), 20u);  // the campaign really covers the op table
}

// --- float32, the fused kernel, reused buffers, errors -------------------------------

Graph rms_model() {
  GraphBuilder b("rms");
  b.input("x", {3, 5, 64});
  b.param("W", {64, 64}).param("bW", {64}).param("g", {64}).param("gb", {64});
  add(b, "fc", Op::linear, {"x"}, [](Node& n) { n.weight = "W", n.bias = "bW"; });
  add(b, "rms", Op::rms_norm, {"fc"}, [](Node& n) { n.axes = {-1}, n.weight = "g", n.bias = "gb"; });
  add(b, "out", Op::linear, {"rms"}, [](Node& n) { n.weight = "W"; });
  return b.build({"out"});
}

TEST(TorchEngine, Float32FusedAndComposedRmsNormAgreeWithFloat64) {
  const Graph g = rms_model();
  const auto inputs = eval::random_inputs<double>(g, 5);
  const auto ref = Engine(g, {Precision::f64}).forward(inputs, {});
  const auto fused = Engine(g, {Precision::f32, true}).forward(inputs, {});
  const auto composed = Engine(g, {Precision::f32, false}).forward(inputs, {});
  EXPECT_LE(rel_diff(ref[0], fused[0]), 1e-5);
  EXPECT_LE(rel_diff(ref[0], composed[0]), 1e-5);
  EXPECT_GT(rel_diff(ref[0], fused[0]), 0.0);  // really ran in float32
}

TEST(TorchEngine, TakesEachMovedBiasIntoTheLinearBeforeIt) {
  zoo::ArchOptions text;
  text.layers = 2, text.hidden = 8, text.heads = 2, text.seq = 4, text.vocab = 11, text.batch = 2;
  const Graph g = zoo::build_architecture("gpt2", text);
  const Graph folded = apply_fold(g, detect_foldable(g, Mode::inference));
  size_t linear_readers = 0;
  for (const std::string& r : moved_bias_readers(folded))
    if (folded.nodes[folded.node_index(moved_bias_own(r))].op == Op::linear) ++linear_readers;
  ASSERT_GT(linear_readers, 0u);
  Engine e(folded, {Precision::f64});
  EXPECT_EQ(e.absorbed_biases(), linear_readers);
  // the same outputs as the exact evaluator, run after run (the biases are computed once)
  const auto inputs = eval::random_inputs<double>(folded, 3);
  const auto ref = eval::evaluate(folded, eval::random_inputs<double>(folded, 3), {Mode::inference, 3});
  for (int run = 0; run < 2; ++run) {
    const auto out = e.forward(inputs, {Mode::inference, 3});
    for (size_t k = 0; k < out.size(); ++k) EXPECT_LE(rel_diff(ref.outputs[k], out[k]), 1e-12) << run;
  }
  EXPECT_EQ(Engine(g, {Precision::f64}).absorbed_biases(), 0u);  // nothing moved
}

TEST(TorchEngine, ReusedBuffersDoNotLeakBetweenRuns) {
  const Graph g = rms_model();
  Engine e(g, {Precision::f32});
  const auto first_in = eval::random_inputs<double>(g, 1);
  const auto second_in = eval::random_inputs<double>(g, 2);
  const auto first = e.forward(first_in, {});
  const auto second = e.forward(second_in, {});
  EXPECT_GT(rel_diff(first[0], second[0]), 1e-3);
  EXPECT_EQ(e.forward(first_in, {})[0].data, first[0].data);
  e.set_norm_timing(true);
  e.set_inputs(second_in);
  e.run({});
  e.run({});
  EXPECT_EQ(e.output(0).data, second[0].data);
  const auto t = e.norm_timings();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].node, "rms");
  EXPECT_EQ(t[0].calls, 2);
  EXPECT_EQ(t[0].rows, 15);
  EXPECT_EQ(t[0].cols, 64);
}

TEST(TorchEngine, RejectsInputsOfTheWrongShapeOrIds) {
  const Graph g = hand_built()[0];
  Engine e(g, {Precision::f64});
  auto inputs = eval::random_inputs<double>(g, 1);
  auto wrong = inputs;
  wrong[0].shape = {3, 2, 4};
  EXPECT_THROW(e.forward(wrong, {}), ModelError);
  wrong = inputs;
  wrong[1].data[0] = 5;  // range is 5
  EXPECT_THROW(e.forward(wrong, {}), ModelError);
  wrong.pop_back();
  EXPECT_THROW(e.forward(wrong, {}), ModelError);
}

// An opaque op (an imported op lnverify does not model) is refused with an error that
// names the node and its op_type, forward and backward, like the exact evaluators.
TEST(TorchEngine, RefusesAnOpaqueOp) {
  GraphBuilder b("opaque");
  b.input("x", {2, 3});
  add(b, "t", Op::tanh, {"x"});
  add(b, "top", Op::opaque, {"t"}, [](Node& n) { n.op_type = "TopK", n.shape = {2, 1}; });
  const Graph g = b.build({"top"});
  Engine e(g, {Precision::f64});
  const auto inputs = eval::random_inputs<double>(g, 1);
  for (int backward = 0; backward < 2; ++backward) {
    try {
      if (backward) e.gradients(inputs, {});
      else e.forward(inputs, {});
      ADD_FAILURE() << "an opaque op was evaluated";
    } catch (const NotEvaluableError& err) {
      EXPECT_NE(std::string(err.what()).find("'top'"), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("TopK"), std::string::npos) << err.what();
    }
  }
}

}  // namespace
}  // namespace lnv
