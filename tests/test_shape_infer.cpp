// Shape rules of every op (core/shape_infer.cpp), through Graph::finalize(): the output
// shapes, and the errors for wrong shapes and attributes, each naming the node.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/graph.h"

namespace lnv {
namespace {

// Builds small graphs: inputs and params by name and shape, nodes by op.
struct Builder {
  Graph g;

  Builder& input(const std::string& name, Shape shape, DType dtype = DType::float_,
                 int64_t range = 0) {
    g.inputs.push_back({name, std::move(shape), dtype, range});
    return *this;
  }
  Builder& param(const std::string& name, Shape shape) {
    Param p;
    p.name = name;
    p.shape = shape;
    p.values.assign(numel(shape), 0.5);
    g.params.push_back(std::move(p));
    return *this;
  }
  Node& node(const std::string& name, Op op, std::vector<std::string> inputs) {
    Node n;
    n.name = name;
    n.op = op;
    n.inputs = std::move(inputs);
    g.nodes.push_back(std::move(n));
    return g.nodes.back();
  }
  // Finalizes with `out` as the output and returns its shape.
  Shape shape(const std::string& out) {
    g.outputs = {out};
    g.finalize();
    return g.shape_of(out);
  }
  // Finalizes and returns the error message ("" when there was none).
  std::string error(const std::string& out) {
    g.outputs = {out};
    try {
      g.finalize();
    } catch (const ModelError& e) {
      return e.what();
    }
    return "";
  }
};

// Asserts the message names the node's JSON path and contains `needle`.
#define EXPECT_NODE_ERROR(msg, path, needle)                     \
  do {                                                           \
    const std::string m_ = (msg);                                \
    EXPECT_NE(m_.find(path), std::string::npos) << m_;           \
    EXPECT_NE(m_.find(needle), std::string::npos) << m_;         \
  } while (0)

TEST(ShapeInfer, Linear) {
  Builder b;
  b.input("x", {2, 5, 8}).param("W", {16, 8}).param("b", {16});
  Node& n = b.node("h", Op::linear, {"x"});
  n.weight = "W";
  n.bias = "b";
  EXPECT_EQ(b.shape("h"), (Shape{2, 5, 16}));
}

TEST(ShapeInfer, LinearRejectsWrongWeightAndBias) {
  Builder b;
  b.input("x", {2, 5, 8}).param("W", {16, 7});
  b.node("h", Op::linear, {"x"}).weight = "W";
  EXPECT_NODE_ERROR(b.error("h"), "/nodes/0 (node 'h')/weight", "[16, 7]");

  Builder c;
  c.input("x", {2, 8}).param("W", {16, 8}).param("b", {8});
  Node& n = c.node("h", Op::linear, {"x"});
  n.weight = "W";
  n.bias = "b";
  EXPECT_NODE_ERROR(c.error("h"), "/nodes/0 (node 'h')/bias", "expected [16]");
}

TEST(ShapeInfer, MatmulBroadcastsBatchAxes) {
  Builder b;
  b.input("a", {3, 1, 4, 5}).input("b", {6, 5, 7});
  b.node("m", Op::matmul, {"a", "b"});
  EXPECT_EQ(b.shape("m"), (Shape{3, 6, 4, 7}));
}

TEST(ShapeInfer, MatmulTransposeBAndParamOperand) {
  Builder b;
  b.input("a", {2, 4, 5}).param("B", {7, 5});
  b.node("m", Op::matmul, {"a", "B"}).transpose_b = true;
  EXPECT_EQ(b.shape("m"), (Shape{2, 4, 7}));
}

TEST(ShapeInfer, MatmulRejectsInnerMismatchRankAndBatch) {
  Builder b;
  b.input("a", {4, 5}).input("b", {6, 7});
  b.node("m", Op::matmul, {"a", "b"});
  EXPECT_NODE_ERROR(b.error("m"), "node 'm'", "inner dimensions differ");

  Builder c;
  c.input("a", {5}).input("b", {5, 7});
  c.node("m", Op::matmul, {"a", "b"});
  EXPECT_NODE_ERROR(c.error("m"), "node 'm')/inputs/0", "rank >= 2");

  Builder d;
  d.input("a", {2, 4, 5}).input("b", {3, 5, 7});
  d.node("m", Op::matmul, {"a", "b"});
  EXPECT_NODE_ERROR(d.error("m"), "node 'm'", "do not broadcast");
}

TEST(ShapeInfer, Embedding) {
  Builder b;
  b.input("tok", {2, 5}, DType::index, 50).param("E", {50, 8});
  b.node("e", Op::embedding, {"tok"}).weight = "E";
  EXPECT_EQ(b.shape("e"), (Shape{2, 5, 8}));
}

TEST(ShapeInfer, EmbeddingNeedsIndexInputAndEnoughRows) {
  Builder b;
  b.input("x", {2, 5}).param("E", {50, 8});
  b.node("e", Op::embedding, {"x"}).weight = "E";
  EXPECT_NODE_ERROR(b.error("e"), "node 'e')/inputs/0", "dtype index");

  Builder c;
  c.input("tok", {2, 5}, DType::index, 60).param("E", {50, 8});
  c.node("e", Op::embedding, {"tok"}).weight = "E";
  EXPECT_NODE_ERROR(c.error("e"), "node 'e')/weight", "50 rows");
}

TEST(ShapeInfer, IndexInputFeedsOnlyEmbedding) {
  Builder b;
  b.input("tok", {2, 8}, DType::index, 10).param("W", {4, 8});
  b.node("h", Op::linear, {"tok"}).weight = "W";
  EXPECT_NODE_ERROR(b.error("h"), "node 'h')/inputs/0", "index input");
}

TEST(ShapeInfer, Conv1dStridePaddingDilation) {
  // PyTorch: Conv1d(4, 6, k=3, stride=2, padding=1, dilation=2) on L=10:
  // floor((10 + 2 - 2*2 - 1)/2) + 1 = 4.
  Builder b;
  b.input("x", {2, 4, 10}).param("W", {6, 4, 3}).param("b", {6});
  Node& n = b.node("c", Op::conv1d, {"x"});
  n.weight = "W";
  n.bias = "b";
  n.stride = {2};
  n.padding = {1};
  n.dilation = {2};
  EXPECT_EQ(b.shape("c"), (Shape{2, 6, 4}));
}

TEST(ShapeInfer, Conv2dPerAxisAndGroups) {
  // H: floor((9 + 0 - 1*(3-1) - 1)/1) + 1 = 7; W: floor((8 + 2*2 - 3*(2-1) - 1)/3) + 1 = 3.
  Builder b;
  b.input("x", {1, 6, 9, 8}).param("W", {4, 3, 3, 2});
  Node& n = b.node("c", Op::conv2d, {"x"});
  n.weight = "W";
  n.groups = 2;
  n.stride = {1, 3};
  n.padding = {0, 2};
  n.dilation = {1, 3};
  EXPECT_EQ(b.shape("c"), (Shape{1, 4, 7, 3}));
}

TEST(ShapeInfer, ConvRejectsBadGeometry) {
  {
    Builder b;  // weight in-channels must be C/groups
    b.input("x", {1, 6, 9, 8}).param("W", {4, 6, 3, 3});
    Node& n = b.node("c", Op::conv2d, {"x"});
    n.weight = "W";
    n.groups = 2;
    EXPECT_NODE_ERROR(b.error("c"), "node 'c')/weight", "C/groups = 3");
  }
  {
    Builder b;  // groups must divide C
    b.input("x", {1, 6, 9}).param("W", {4, 1, 3});
    Node& n = b.node("c", Op::conv1d, {"x"});
    n.weight = "W";
    n.groups = 4;
    EXPECT_NODE_ERROR(b.error("c"), "node 'c')/groups", "does not divide");
  }
  {
    Builder b;  // groups must divide out
    b.input("x", {1, 6, 9}).param("W", {5, 3, 3});
    Node& n = b.node("c", Op::conv1d, {"x"});
    n.weight = "W";
    n.groups = 2;
    EXPECT_NODE_ERROR(b.error("c"), "node 'c')/groups", "5 output channels");
  }
  {
    Builder b;  // kernel larger than the padded input
    b.input("x", {1, 2, 4}).param("W", {3, 2, 3});
    Node& n = b.node("c", Op::conv1d, {"x"});
    n.weight = "W";
    n.dilation = {2};
    EXPECT_NODE_ERROR(b.error("c"), "node 'c')/weight", "does not fit");
  }
  {
    Builder b;  // wrong number of per-axis entries, and zero stride
    b.input("x", {1, 2, 4, 4}).param("W", {3, 2, 1, 1});
    Node& n = b.node("c", Op::conv2d, {"x"});
    n.weight = "W";
    n.stride = {1, 1, 1};
    EXPECT_NODE_ERROR(b.error("c"), "node 'c')/stride", "one entry or 2");
    b.g.nodes[0].stride = {0};
    EXPECT_NODE_ERROR(b.error("c"), "node 'c')/stride", "from 1 to 2^31");
    // Geometry beyond 2^31 would overflow the span (2^62 · 4 wraps to 0) or give a length
    // of 2^62 that a command would then try to evaluate.
    b.g.nodes[0].stride = {1};
    b.g.nodes[0].padding = {int64_t{1} << 61};
    EXPECT_NODE_ERROR(b.error("c"), "node 'c')/padding", "from 0 to 2^31");
    b.g.nodes[0].padding = {0};
    b.g.nodes[0].dilation = {int64_t{1} << 62};
    EXPECT_NODE_ERROR(b.error("c"), "node 'c')/dilation", "from 1 to 2^31");
  }
  {
    Builder b;  // rank of x
    b.input("x", {2, 4}).param("W", {3, 2, 1});
    b.node("c", Op::conv1d, {"x"}).weight = "W";
    EXPECT_NODE_ERROR(b.error("c"), "node 'c')/inputs/0", "rank-3");
  }
}

// Every node's output has at most 2^31 elements, computed without overflow: a reshape
// whose dims multiply to 1 modulo 2^64, a broadcast or a padded conv of bounded inputs
// beyond it are refused with the node named; 2^31 itself is accepted.
TEST(ShapeInfer, OutputsAreBoundedWithoutOverflow) {
  {
    Builder b;
    b.input("x", {1});
    b.node("r", Op::reshape, {"x"}).shape = {1099511627781, 4427218533709827277};
    EXPECT_NODE_ERROR(b.error("r"), "node 'r')/shape", "more than 2^31 elements");
  }
  {
    Builder b;
    b.input("a", {65536, 1}).input("c", {1, 65536});
    b.node("s", Op::add, {"a", "c"});
    EXPECT_NODE_ERROR(b.error("s"), "node 's')", "output shape [65536, 65536] has more than 2^31");
  }
  {
    Builder b;
    b.input("a", {32768, 1}).input("c", {1, 65536});
    b.node("s", Op::add, {"a", "c"});
    EXPECT_EQ(b.shape("s"), (Shape{32768, 65536}));
  }
  {
    Builder b;  // padding 2^30 on both sides of a length-1 axis: 2^31 + 1 positions
    b.input("x", {1, 1, 1}).param("W", {1, 1, 1});
    Node& n = b.node("c", Op::conv1d, {"x"});
    n.weight = "W";
    n.padding = {int64_t{1} << 30};
    EXPECT_NODE_ERROR(b.error("c"), "node 'c')", "more than 2^31 elements");
  }
}

// CBWC on a matmul centers its param operand: with two value operands the model is
// refused when it is read, naming the node's attribute.
TEST(ShapeInfer, MatmulCbwcNeedsAParamOperand) {
  Builder b;
  b.input("x", {2, 3}).input("y", {3, 4});
  b.node("m", Op::matmul, {"x", "y"}).cbwc = true;
  EXPECT_NODE_ERROR(b.error("m"), "node 'm')/cbwc", "needs a param operand");
  b.g.inputs.pop_back();
  b.param("y", {3, 4});
  EXPECT_EQ(b.shape("m"), (Shape{2, 4}));
}

TEST(ShapeInfer, Rnn) {
  Builder b;
  b.input("x", {2, 7, 3}).param("Wi", {5, 3}).param("Wh", {5, 5}).param("b", {5});
  b.param("g", {5});
  Node& n = b.node("r", Op::rnn, {"x"});
  n.weight_ih = "Wi";
  n.weight_hh = "Wh";
  n.bias = "b";
  n.norm = RnnNorm{Op::layer_norm, 1e-5, "g", ""};
  EXPECT_EQ(b.shape("r"), (Shape{2, 7, 5}));
}

// lstm, gru in ONNX's layout: y [T, D, N, H], y_h and y_c [D, N, H].
TEST(ShapeInfer, GatedRecurrent) {
  Builder b;
  b.input("x", {7, 2, 3}).param("W", {2, 20, 3}).param("R", {2, 20, 5}).param("B", {2, 40});
  b.param("h0", {2, 2, 5}).param("gW", {1, 15, 3}).param("gR", {1, 15, 5});
  Node& l = b.node("l", Op::lstm, {"x"});
  l.weight_ih = "W", l.weight_hh = "R", l.bias = "B", l.initial_h = "h0", l.initial_c = "h0";
  l.direction = "bidirectional";
  EXPECT_EQ(b.shape("l"), (Shape{7, 2, 2, 5}));
  b.g.nodes[0].output = "y_c";
  EXPECT_EQ(b.shape("l"), (Shape{2, 2, 5}));
  Node& g = b.node("g", Op::gru, {"x"});
  g.weight_ih = "gW", g.weight_hh = "gR", g.output = "y_h", g.sequence_lens = {7, 1};
  EXPECT_EQ(b.shape("g"), (Shape{1, 2, 5}));
}

TEST(ShapeInfer, GatedRecurrentRejectsWhatDoesNotFit) {
  Builder b;
  b.input("x", {7, 2, 3}).param("W", {1, 20, 3}).param("R", {1, 20, 4}).param("B", {1, 20});
  Node& l = b.node("l", Op::lstm, {"x"});
  l.weight_ih = "W", l.weight_hh = "R";
  EXPECT_NODE_ERROR(b.error("l"), "node 'l')/weight_hh", "expected [1, 20, 5]");
  b.g.params[1].shape = {1, 20, 5};
  b.g.params[1].values.assign(100, 0.0);
  b.g.nodes[0].direction = "sideways";
  EXPECT_NODE_ERROR(b.error("l"), "node 'l')/direction", "\"sideways\"");
  b.g.nodes[0].direction = "bidirectional";  // W has one direction
  EXPECT_NODE_ERROR(b.error("l"), "node 'l')/weight_ih", "expected [2, 4·H, 3]");
  b.g.nodes[0].direction = "forward";
  b.g.nodes[0].bias = "B";
  EXPECT_NODE_ERROR(b.error("l"), "node 'l')/bias", "expected [1, 40]");
  b.g.nodes[0].bias = "";
  b.g.nodes[0].sequence_lens = {7, 8};
  EXPECT_NODE_ERROR(b.error("l"), "node 'l')/sequence_lens/1", "[1, 7], got 8");
  b.g.nodes[0].sequence_lens = {7};
  EXPECT_NODE_ERROR(b.error("l"), "node 'l')/sequence_lens", "expected 2 lengths");
  b.g.nodes[0].sequence_lens = {};
  b.g.nodes[0].output = "y_c";
  EXPECT_EQ(b.shape("l"), (Shape{1, 2, 5}));
  b.g.nodes[0].op = Op::gru;  // 20 rows are not 3·H
  EXPECT_NODE_ERROR(b.error("l"), "node 'l')/weight_ih", "expected [1, 3·H, 3]");
}

TEST(ShapeInfer, RnnRejectsWrongShapesAndActivation) {
  Builder b;
  b.input("x", {2, 7, 3}).param("Wi", {5, 3}).param("Wh", {5, 4}).param("g", {4});
  Node& n = b.node("r", Op::rnn, {"x"});
  n.weight_ih = "Wi";
  n.weight_hh = "Wh";
  EXPECT_NODE_ERROR(b.error("r"), "node 'r')/weight_hh", "expected [5, 5]");
  b.g.params[1].shape = {5, 5};
  b.g.params[1].values.assign(25, 0.0);
  b.g.nodes[0].activation = "relu";
  EXPECT_NODE_ERROR(b.error("r"), "node 'r')/activation", "tanh");
  b.g.nodes[0].activation = "tanh";
  b.g.nodes[0].norm = RnnNorm{Op::layer_norm, 1e-5, "g", ""};
  EXPECT_NODE_ERROR(b.error("r"), "node 'r')/norm/weight", "expected [5]");
}

TEST(ShapeInfer, Attention) {
  Builder b;
  b.input("x", {2, 5, 8}).param("Q", {8, 8}).param("bo", {8});
  Node& n = b.node("a", Op::attention, {"x"});
  n.wq = n.wk = n.wv = n.wo = "Q";
  n.bo = "bo";
  n.heads = 4;
  EXPECT_EQ(b.shape("a"), (Shape{2, 5, 8}));
  b.g.nodes[0].heads = 3;
  EXPECT_NODE_ERROR(b.error("a"), "node 'a')/heads", "do not divide D = 8");
  b.g.nodes[0].heads = 2;
  b.g.params[1].shape = {4};
  b.g.params[1].values.assign(4, 0.0);
  EXPECT_NODE_ERROR(b.error("a"), "node 'a')/bo", "expected [8]");
}

TEST(ShapeInfer, ElementwiseBroadcastAndUnary) {
  Builder b;
  b.input("x", {2, 1, 4}).param("P", {3, 1});
  b.node("s", Op::add, {"x", "P"});
  b.node("r", Op::gelu, {"s"});
  b.node("d", Op::dropout, {"r"}).p = 0.25;
  b.node("k", Op::scale, {"d"}).factor = 2.0;
  EXPECT_EQ(b.shape("k"), (Shape{2, 3, 4}));
  b.g.nodes[2].p = 1.0;
  EXPECT_NODE_ERROR(b.error("k"), "/nodes/2 (node 'd')/p", "0 <= p < 1");

  Builder c;
  c.input("x", {2, 3}).input("y", {4});
  c.node("m", Op::mul, {"x", "y"});
  EXPECT_NODE_ERROR(c.error("m"), "node 'm')/inputs", "do not broadcast");
}

TEST(ShapeInfer, ReductionsWithNegativeAxesAndKeepdims) {
  Builder b;
  b.input("x", {2, 3, 4, 5});
  Node& m = b.node("m", Op::mean, {"x"});
  m.axes = {-1, 1};
  EXPECT_EQ(b.shape("m"), (Shape{2, 4}));
  b.g.nodes[0].keepdims = true;
  EXPECT_EQ(b.shape("m"), (Shape{2, 1, 4, 1}));
  b.g.nodes[0].op = Op::max;
  b.g.nodes[0].axes = {4};
  EXPECT_NODE_ERROR(b.error("m"), "node 'm')/axes", "out of range");
  b.g.nodes[0].axes = {3, -1};
  EXPECT_NODE_ERROR(b.error("m"), "node 'm')/axes", "repeated");
}

TEST(ShapeInfer, SoftmaxAxis) {
  Builder b;
  b.input("x", {2, 3});
  b.node("s", Op::softmax, {"x"}).axis = -2;
  EXPECT_EQ(b.shape("s"), (Shape{2, 3}));
  b.g.nodes[0].axis = 2;
  EXPECT_NODE_ERROR(b.error("s"), "node 's')/axis", "out of range");
}

TEST(ShapeInfer, Transpose) {
  Builder b;
  b.input("x", {2, 3, 4});
  b.node("t", Op::transpose, {"x"}).perm = {2, 0, -2};
  EXPECT_EQ(b.shape("t"), (Shape{4, 2, 3}));
  b.g.nodes[0].perm = {0, 0, 1};
  EXPECT_NODE_ERROR(b.error("t"), "node 't')/perm", "twice");
  b.g.nodes[0].perm = {0, 1};
  EXPECT_NODE_ERROR(b.error("t"), "node 't')/perm", "permutation of 3");
}

TEST(ShapeInfer, ReshapeWithMinusOne) {
  Builder b;
  b.input("x", {2, 3, 4});
  b.node("r", Op::reshape, {"x"}).shape = {4, -1};
  EXPECT_EQ(b.shape("r"), (Shape{4, 6}));
  b.g.nodes[0].shape = {-1, 5};
  EXPECT_NODE_ERROR(b.error("r"), "node 'r')/shape", "cannot reshape");
  b.g.nodes[0].shape = {-1, -1};
  EXPECT_NODE_ERROR(b.error("r"), "node 'r')/shape", "only one entry may be -1");
  b.g.nodes[0].shape = {5, 5};
  EXPECT_NODE_ERROR(b.error("r"), "node 'r')/shape", "25 elements");
  b.g.nodes[0].shape = {0, 24};
  EXPECT_NODE_ERROR(b.error("r"), "node 'r')/shape", "positive");
}

TEST(ShapeInfer, OpaqueTakesItsShapeAndAnyInputs) {
  Builder b;
  b.input("x", {2, 3, 4}).input("ids", {2, 3}, DType::index, 7).param("w", {5});
  Node& n = b.node("o", Op::opaque, {"x", "ids", "w"});
  n.op_type = "com.microsoft.Foo";
  n.shape = {2, 3, 1};
  EXPECT_EQ(b.shape("o"), (Shape{2, 3, 1}));  // reads an index input too
  b.g.nodes[0].inputs.clear();                // no inputs (RandomNormal)
  EXPECT_EQ(b.shape("o"), (Shape{2, 3, 1}));
  b.g.nodes[0].shape = {};  // a scalar
  EXPECT_EQ(b.shape("o"), (Shape{}));
  b.g.nodes[0].shape = {2, 0};
  EXPECT_NODE_ERROR(b.error("o"), "node 'o')/shape", "positive");
  b.g.nodes[0].shape = {1 << 16, 1 << 16};
  EXPECT_NODE_ERROR(b.error("o"), "node 'o')/shape", "2^31");
  b.g.nodes[0].shape = {2};
  b.g.nodes[0].op_type = "";
  EXPECT_NODE_ERROR(b.error("o"), "node 'o')/op_type", "source op");
}

TEST(ShapeInfer, ClipNeedsOrderedBoundsAndAtLeastOne) {
  Builder b;
  b.input("x", {2, 3});
  Node& n = b.node("c", Op::clip, {"x"});
  n.min = -1;
  EXPECT_EQ(b.shape("c"), (Shape{2, 3}));
  b.g.nodes[0].max = -2;
  EXPECT_NODE_ERROR(b.error("c"), "node 'c')/min", "min <= max");
  b.g.nodes[0].min = -std::numeric_limits<double>::infinity();
  b.g.nodes[0].max = std::numeric_limits<double>::infinity();
  EXPECT_NODE_ERROR(b.error("c"), "node 'c'", "at least one bound");
}

TEST(ShapeInfer, SliceClampsAsOnnx) {
  Builder b;
  b.input("x", {4, 6, 5});
  Node& n = b.node("s", Op::slice, {"x"});
  n.axes = {1, -1}, n.starts = {-4, 0}, n.ends = {std::numeric_limits<int64_t>::max(), 5};
  n.steps = {1, 2};
  EXPECT_EQ(b.shape("s"), (Shape{4, 4, 3}));  // [2, 6) of 6; 0, 2, 4 of 5
  auto& s = b.g.nodes[0];
  s.axes = {0}, s.starts = {-1}, s.ends = {std::numeric_limits<int64_t>::min()}, s.steps = {-1};
  EXPECT_EQ(b.shape("s"), (Shape{4, 6, 5}));  // reversed
  s.starts = {100}, s.ends = {-100}, s.steps = {-3};
  EXPECT_EQ(b.shape("s"), (Shape{2, 6, 5}));  // 3, 0
  s.steps = {0};
  EXPECT_NODE_ERROR(b.error("s"), "node 's')/steps", "nonzero");
  s.steps = {1}, s.starts = {3}, s.ends = {3};
  EXPECT_NODE_ERROR(b.error("s"), "node 's')/starts", "no element");
  s.starts = {0, 1};
  EXPECT_NODE_ERROR(b.error("s"), "node 's')/starts", "one entry per axis");
  s.axes = {0, -3}, s.starts = {0, 0}, s.ends = {1, 1}, s.steps = {};
  EXPECT_NODE_ERROR(b.error("s"), "node 's')/axes", "repeated");
  s.axes = {3}, s.starts = {0}, s.ends = {1};
  EXPECT_NODE_ERROR(b.error("s"), "node 's')/axes", "3");
}

TEST(ShapeInfer, ExpandBroadcastsBothWays) {
  Builder b;
  b.input("x", {3, 1, 5});
  Node& n = b.node("e", Op::expand, {"x"});
  n.shape = {2, 1, 4, 1};
  EXPECT_EQ(b.shape("e"), (Shape{2, 3, 4, 5}));  // a 1 in shape keeps x's dim
  b.g.nodes[0].shape = {2, 1, 5};  // 3 against 2
  EXPECT_NODE_ERROR(b.error("e"), "node 'e')/shape", "broadcast");
  b.g.nodes[0].shape = {0};
  EXPECT_NODE_ERROR(b.error("e"), "node 'e')/shape", "1 ... 2^31");
}

TEST(ShapeInfer, PadAddsBeginsAndEnds) {
  Builder b;
  b.input("x", {2, 3});
  Node& n = b.node("p", Op::pad, {"x"});
  n.pads = {1, 0, 2, 4};
  EXPECT_EQ(b.shape("p"), (Shape{5, 7}));
  b.g.nodes[0].pads = {1, 0, 2};
  EXPECT_NODE_ERROR(b.error("p"), "node 'p')/pads", "2 entries per axis");
  b.g.nodes[0].pads = {1, -1, 0, 0};
  EXPECT_NODE_ERROR(b.error("p"), "node 'p')/pads", "0 ... 2^31");
  b.g.nodes[0].pads = {0, 0, 0, 0};
  b.g.nodes[0].value = std::numeric_limits<double>::infinity();
  EXPECT_NODE_ERROR(b.error("p"), "node 'p')/value", "finite");
}

TEST(ShapeInfer, WhereBroadcastsConditionAndOperands) {
  Builder b;
  b.input("x", {2, 1, 4}).param("y", {4});
  Node& n = b.node("w", Op::where, {"x", "y"});
  n.condition_shape = {3, 1}, n.condition = {1, 0, 1};
  EXPECT_EQ(b.shape("w"), (Shape{2, 3, 4}));
  b.g.nodes[0].condition = {1, 0};
  EXPECT_NODE_ERROR(b.error("w"), "node 'w')/condition", "expected 3 entries");
  b.g.nodes[0].condition = {1, 2, 0};
  EXPECT_NODE_ERROR(b.error("w"), "node 'w')/condition/1", "0 or 1");
  b.g.nodes[0].condition = {1, 0, 1};
  b.g.nodes[0].condition_shape = {3, 2};
  b.g.nodes[0].condition = {1, 0, 1, 1, 0, 1};
  EXPECT_NODE_ERROR(b.error("w"), "node 'w')/inputs", "broadcast");
}

TEST(ShapeInfer, MaskedSoftmaxKeepsAPositionPerRowAndDoesNotBroadcastX) {
  Builder b;
  b.input("x", {2, 3, 3});
  Node& n = b.node("s", Op::softmax, {"x"});
  n.axis = -1, n.condition_shape = {3, 3}, n.condition = {1, 0, 0, 1, 1, 0, 1, 1, 1};
  EXPECT_EQ(b.shape("s"), (Shape{2, 3, 3}));
  b.g.nodes[0].condition = {1, 0, 0, 0, 0, 0, 1, 1, 1};  // row 1 keeps nothing
  EXPECT_NODE_ERROR(b.error("s"), "node 's')/condition", "keeps no position");
  b.g.nodes[0].axis = 1;  // along axis 1 every column keeps row 2
  EXPECT_EQ(b.shape("s"), (Shape{2, 3, 3}));
  b.g.nodes[0].condition = {1, 0};
  EXPECT_NODE_ERROR(b.error("s"), "node 's')/condition", "expected 9 entries");
  b.g.nodes[0].condition_shape = {2, 3, 3, 1}, b.g.nodes[0].condition.assign(18, 1);
  EXPECT_NODE_ERROR(b.error("s"), "node 's')/condition_shape", "broadcast");
}

TEST(ShapeInfer, Concat) {
  Builder b;
  b.input("x", {2, 3, 4}).input("y", {2, 5, 4}).param("z", {2, 1, 4});
  b.node("c", Op::concat, {"x", "y", "z"}).axis = -2;
  EXPECT_EQ(b.shape("c"), (Shape{2, 9, 4}));
  b.g.nodes[0].axis = 0;
  EXPECT_NODE_ERROR(b.error("c"), "node 'c')/inputs/1", "except along axis 0");

  Builder d;
  d.input("x", {2, 3}).input("y", {2, 3, 1});
  d.node("c", Op::concat, {"x", "y"}).axis = 0;
  EXPECT_NODE_ERROR(d.error("c"), "node 'c')/inputs/1", "[2, 3, 1]");
}

TEST(ShapeInfer, CenterAndNorms) {
  Builder b;
  b.input("x", {2, 3, 4}).param("g", {3, 4}).param("bt", {3, 4}).param("v", {4});
  b.node("c", Op::center, {"x"}).axes = {-1};
  Node& ln = b.node("ln", Op::layer_norm, {"c"});
  ln.axes = {-1, -2};
  ln.weight = "g";
  ln.bias = "bt";
  Node& rms = b.node("rms", Op::rms_norm, {"ln"});
  rms.axes = {2};
  rms.weight = "v";
  EXPECT_EQ(b.shape("rms"), (Shape{2, 3, 4}));
  b.g.nodes[1].weight = "v";  // [4] but the axes span [3, 4]
  EXPECT_NODE_ERROR(b.error("rms"), "/nodes/1 (node 'ln')/weight", "expected [3, 4]");
  b.g.nodes[1].weight = "g";
  b.g.nodes[1].eps = -1.0;
  EXPECT_NODE_ERROR(b.error("rms"), "node 'ln')/eps", "eps >= 0");
  b.g.nodes[1].eps = 1e-5;
  b.g.nodes[0].axes = {};
  EXPECT_NODE_ERROR(b.error("rms"), "node 'c')/axes", "at least one axis");
}

TEST(ShapeInfer, ParamAttributeOnWrongOpIsRejected) {
  Builder b;
  b.input("x", {2, 3}).param("W", {3, 3});
  b.node("r", Op::relu, {"x"}).weight = "W";
  EXPECT_NODE_ERROR(b.error("r"), "node 'r')/weight", "relu has no attribute 'weight'");
}

TEST(ShapeInfer, WeightNamingANodeIsRejected) {
  Builder b;
  b.input("x", {2, 3});
  b.node("r", Op::relu, {"x"});
  b.node("h", Op::linear, {"x"}).weight = "r";
  EXPECT_NODE_ERROR(b.error("h"), "node 'h')/weight", "not a param");
}

TEST(ShapeInfer, CalledDirectlyNamesTheNode) {
  Builder b;
  b.input("x", {2, 3}).param("W", {4, 5});
  Node& n = b.node("h", Op::linear, {"x"});
  n.weight = "W";
  try {
    infer_shape(b.g, b.g.nodes[0], {{2, 3}});
    FAIL() << "expected a ModelError";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.where(), "node 'h'/weight");
  }
}

}  // namespace
}  // namespace lnv
