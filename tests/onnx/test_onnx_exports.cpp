// Real torch.onnx exports (tests/data/onnx/, made by scripts/make_onnx_test_models.py):
// with the batch and sequence dims bound, folding leaves no shape arithmetic (no node
// computes an integer tensor that is read; Reshape, Expand and Pad read constant shapes;
// every value read has a static shape) and keeps every compute op the export holds; the
// folded model passes ONNX's checker when written out.
#include <gtest/gtest.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <set>

#include "core/error.h"
#include "onnx/constant_fold.h"

using namespace lnv::onnx_import;

namespace {

struct Export {
  const char* file;
  DimBindings dims;
  // Compute ops and how many the export holds; folding must keep each of them.
  std::map<std::string, size_t> compute_ops;
};

const std::string kDir = std::string(LNV_SOURCE_DIR) + "/tests/data/onnx/";

std::map<std::string, size_t> count_ops(const Graph& g) {
  std::map<std::string, size_t> counts;
  for (const Node& n : g.nodes) ++counts[n.op_type];
  return counts;
}

ElemType type_of(const Graph& g, const std::string& name) {
  if (const Initializer* init = g.initializer(name)) return init->value.type;
  for (const auto* list : {&g.inputs, &g.value_info, &g.outputs})
    for (const ValueInfo& v : *list)
      if (v.name == name) return v.type;
  return ElemType::Undefined;
}

class OnnxExports : public ::testing::TestWithParam<Export> {};

TEST_P(OnnxExports, FoldingLeavesOnlyTheComputeGraph) {
  const Export& e = GetParam();
  const Model model = load_onnx(kDir + e.file, e.dims);
  const FoldResult folded = fold_constants(model);
  const Graph& g = folded.model.graph;
  std::cout << e.file << ": " << folded.stats.nodes_before << " nodes before folding, "
            << folded.stats.nodes_after << " after (" << folded.stats.nodes_folded << " folded, "
            << folded.stats.dead_nodes_removed << " dead removed, " << folded.stats.rounds
            << " rounds)\n";

  std::set<std::string> read;  // values a node or the graph's outputs read
  for (const Node& n : g.nodes) read.insert(n.inputs.begin(), n.inputs.end());
  for (const ValueInfo& v : g.outputs) read.insert(v.name);
  const auto shapes = static_shapes(g);
  for (const Node& n : g.nodes) {
    for (const char* op : {"Shape", "Size", "Constant", "ConstantOfShape", "Range", "Trilu"})
      EXPECT_NE(n.op_type, op) << n.name;
    if (n.op_type == "Reshape" || n.op_type == "Expand" || n.op_type == "Pad")
      EXPECT_NE(g.initializer(n.inputs.at(1)), nullptr) << n.name << " reads a computed shape";
    for (const auto& out : n.outputs)  // every value read has a static shape
      if (read.count(out)) EXPECT_TRUE(shapes.count(out)) << out << " has no static shape";
    for (const auto& out : n.outputs)  // (Dropout's unread mask output is bool)
      if (read.count(out))
        EXPECT_TRUE(is_float_type(type_of(g, out)))
            << n.name << " (" << n.op_type << ") computes " << elem_type_name(type_of(g, out))
            << " tensor " << out;
  }
  const auto after = count_ops(g);
  for (const auto& [op, count] : e.compute_ops) {
    EXPECT_EQ(count_ops(model.graph)[op], count) << op << " in the export";
    EXPECT_EQ(after.count(op) ? after.at(op) : 0, count) << op << " after folding";
  }
  EXPECT_EQ(g.inputs.size(), model.graph.inputs.size());
  EXPECT_EQ(g.outputs.size(), model.graph.outputs.size());
  // Folding again finds nothing more.
  EXPECT_EQ(fold_constants(folded.model).stats.nodes_folded, 0u);
  // The folded model is a valid ONNX model: written out, it passes ONNX's checker and
  // shape inference when read back (its input dims are bound: no --dim names a symbol).
  const std::string copy = ::testing::TempDir() + "folded_" + e.file;
  save_onnx(folded.model, copy);
  EXPECT_EQ(load_onnx(copy).graph.nodes.size(), g.nodes.size());
  std::remove(copy.c_str());
}

const DimBindings kTokens = {{"batch", 2}, {"seq", 8}};
const DimBindings kImages = {{"batch", 2}};

INSTANTIATE_TEST_SUITE_P(
    Exports, OnnxExports,
    ::testing::Values(
        Export{"gpt2_tiny_opset17.onnx", kTokens,
               {{"LayerNormalization", 5}, {"MatMul", 13}, {"Softmax", 2}, {"Erf", 2}, {"Split", 2},
                {"Where", 2}}},
        Export{"gpt2_tiny_opset14.onnx", kTokens,
               {{"ReduceMean", 10}, {"Pow", 5}, {"Sqrt", 5}, {"Sub", 5}, {"MatMul", 13},
                {"Softmax", 2}, {"Erf", 2}, {"Split", 2}, {"Where", 2}}},
        Export{"gpt2_tiny_opset11.onnx", kTokens,
               {{"ReduceMean", 10}, {"Pow", 5}, {"Sqrt", 5}, {"Sub", 5}, {"MatMul", 13},
                {"Softmax", 2}, {"Erf", 2}, {"Split", 2}, {"Where", 2}}},
        Export{"bert_tiny_opset9.onnx", kTokens,
               {{"ReduceMean", 10}, {"Pow", 5}, {"Sqrt", 5}, {"Sub", 5}, {"MatMul", 10},
                {"Gemm", 3}, {"Softmax", 2}, {"Erf", 2}, {"Tanh", 1}}},
        Export{"bert_tiny_opset17.onnx", kTokens,
               {{"LayerNormalization", 5}, {"MatMul", 10}, {"Gemm", 3}, {"Softmax", 2},
                {"Erf", 2}, {"Tanh", 1}}},
        Export{"bert_tiny_opset14.onnx", kTokens,
               {{"ReduceMean", 10}, {"Pow", 5}, {"Sqrt", 5}, {"Sub", 5}, {"MatMul", 10},
                {"Gemm", 3}, {"Softmax", 2}, {"Erf", 2}, {"Tanh", 1}}},
        Export{"vit_tiny_opset17.onnx", kImages,
               {{"LayerNormalization", 5}, {"MatMul", 10}, {"Gemm", 3}, {"Softmax", 2},
                {"Erf", 2}, {"Conv", 1}}},
        Export{"vit_tiny_opset14.onnx", kImages,
               {{"ReduceMean", 10}, {"Pow", 5}, {"Sqrt", 5}, {"Sub", 5}, {"MatMul", 10},
                {"Gemm", 3}, {"Softmax", 2}, {"Erf", 2}, {"Conv", 1}}},
        Export{"swin_tiny_opset17.onnx", kImages,
               {{"LayerNormalization", 11}, {"MatMul", 25}, {"Softmax", 4}, {"Erf", 4},
                {"Conv", 1}, {"Gemm", 1}, {"GlobalAveragePool", 1}, {"Dropout", 8}, {"Pad", 5}}},
        Export{"swin_tiny_opset14.onnx", kImages,
               {{"ReduceMean", 22}, {"Sqrt", 11}, {"MatMul", 25}, {"Softmax", 4}, {"Erf", 4},
                {"Conv", 1}, {"Gemm", 1}, {"GlobalAveragePool", 1}, {"Dropout", 8}, {"Pad", 5}}},
        // The causal mask (ConstantOfShape of -inf, Trilu) folds to a constant.
        Export{"prenorm_lm_tiny_opset17.onnx", kTokens,
               {{"LayerNormalization", 5}, {"MatMul", 11}, {"Gemm", 2}, {"Softmax", 2},
                {"Erf", 2}}},
        Export{"prenorm_lm_tiny_opset14.onnx", kTokens,
               {{"ReduceMean", 10}, {"Pow", 5}, {"Sqrt", 5}, {"Sub", 5}, {"MatMul", 11},
                {"Gemm", 2}, {"Softmax", 2}, {"Erf", 2}}},
        Export{"convnext_tiny_opset17.onnx", kImages,
               {{"LayerNormalization", 7}, {"MatMul", 8}, {"Conv", 6}, {"Erf", 4}, {"Gemm", 1},
                {"GlobalAveragePool", 1}}},
        Export{"convnext_tiny_opset14.onnx", kImages,
               {{"ReduceMean", 14}, {"Pow", 7}, {"Sqrt", 7}, {"Sub", 7}, {"MatMul", 8},
                {"Conv", 6}, {"Erf", 4}, {"Gemm", 1}, {"GlobalAveragePool", 1}}}),
    [](const auto& info) {
      std::string name = info.param.file;
      return name.substr(0, name.find('.'));
    });

TEST(OnnxExports, ADimNoInputHasIsNamed) {
  try {
    load_onnx(kDir + "vit_tiny_opset17.onnx", {{"batch", 1}, {"seq", 4}});
    FAIL() << "loaded with a dim the model does not have";
  } catch (const lnv::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("--dim seq: no graph input has a dim named 'seq' (its "
                                         "symbolic dims: batch)"),
              std::string::npos) << e.what();
  }
}

TEST(OnnxExports, AnUnboundSequenceDimIsNamed) {
  try {
    load_onnx(kDir + "gpt2_tiny_opset17.onnx", {{"batch", 1}});
    FAIL() << "loaded without binding seq";
  } catch (const lnv::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("input 'input_ids': dim 1 is the symbol 'seq'"),
              std::string::npos) << e.what();
  }
}

}  // namespace
