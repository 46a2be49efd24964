// The DOT graph of the HTML report: blocks found by name prefix, every LN filled with its
// verdict's colour, the breaking node and the centered producers marked, and blocks
// collapsed into one node listing their LNs when the graph is large.
#include <gtest/gtest.h>

#include <regex>

#include <nlohmann/json.hpp>

#include "core/model_json.h"
#include "generators/architectures.h"
#include "reports/graph_dot.h"

namespace lnv::report {
namespace {

TEST(GraphDot, BlockIsThePrefixUpToTheLastNumberedSegment) {
  EXPECT_EQ(block_of("/layers.0/blocks.1/attn/qkv/MatMul"), "/layers.0/blocks.1");
  EXPECT_EQ(block_of("/features/features.1/features.1.0/norm1/LayerNormalization"),
            "/features/features.1/features.1.0");
  EXPECT_EQ(block_of("h.3.mlp.c_fc"), "h.3");
  EXPECT_EQ(block_of("encoder.11.attention.LayerNorm"), "encoder.11");
  EXPECT_EQ(block_of("h0.ln_1"), "");      // "h0" is not a plain number
  EXPECT_EQ(block_of("ln_f"), "");
  EXPECT_EQ(block_of("/norm/LayerNormalization"), "");
  EXPECT_EQ(block_of("layers.12"), "");    // the number is the node itself, not a block
}

// The DOT statement of node `id`.
std::string statement(const std::string& dot, const std::string& id) {
  std::smatch m;
  const std::regex re("\\n +" + id + " \\[([^\\n]*)\\];");
  if (!std::regex_search(dot, m, re)) return "";
  return m[1].str();
}

class GraphDotOnExample : public ::testing::Test {
 protected:
  Graph g = load_model(std::string(LNV_SOURCE_DIR) + "/examples/gpt2_tiny.json");
  FoldPlan plan = detect_foldable(g, Mode::inference);
  std::string id(const std::string& node) { return "n" + std::to_string(g.node_index(node)); }
};

TEST_F(GraphDotOnExample, LayerNormsBreakingNodeAndCenteredProducersAreMarked) {
  const std::string dot = graph_dot(g, plan);
  ASSERT_EQ(plan.layer_norms.size(), 5u);
  for (const LnVerdict& v : plan.layer_norms) {
    ASSERT_EQ(verdict_class(v), "inference") << v.name;  // a dropout breaks training
    const std::string s = statement(dot, id(v.node));
    EXPECT_NE(s.find("fillcolor=\"#ffe0b2\""), std::string::npos) << s;
    EXPECT_NE(s.find("inference yes, training no"), std::string::npos) << s;
  }
  const std::string drop = statement(dot, id("drop_emb"));
  EXPECT_NE(drop.find("shape=octagon"), std::string::npos) << drop;
  EXPECT_NE(drop.find("breaks 5 LNs"), std::string::npos) << drop;
  for (const CenterTerm& t : plan.center)
    EXPECT_NE(statement(dot, id(t.node)).find("centered"), std::string::npos) << t.node;
  EXPECT_EQ(dot.find("subgraph cluster_"), std::string::npos);  // no numbered block here
  EXPECT_NE(dot.find("color=\"#c62828\", penwidth=1.5"), std::string::npos);  // a path edge
}

TEST(GraphDot, UncollapsedAndCollapsedDrawTheSameBlocks) {
  zoo::ArchOptions o;
  o.layers = 2, o.hidden = 16, o.heads = 2, o.vocab = 20, o.seq = 4;
  const Graph h = zoo::build_architecture("gpt2", o);  // blocks "h.0", "h.1"
  const FoldPlan hp = detect_foldable(h, Mode::inference);
  const std::string full = graph_dot(h, hp, {1000});
  EXPECT_NE(full.find("subgraph cluster_0 {\n    label=\"h.0\""), std::string::npos);
  EXPECT_NE(full.find("label=\"h.1\""), std::string::npos);

  const std::string collapsed = graph_dot(h, hp, {0});
  EXPECT_EQ(collapsed.find("subgraph cluster_"), std::string::npos);
  const DotLayout layout = dot_layout(h, {0});
  ASSERT_TRUE(layout.collapsed);
  ASSERT_EQ(layout.blocks, (std::vector<std::string>{"h.0", "h.1"}));
  const std::string b0 = statement(collapsed, "b0");
  EXPECT_NE(b0.find("<B>h.0</B>"), std::string::npos) << b0;
  EXPECT_NE(b0.find("ln_1: inference yes, training no"), std::string::npos) << b0;
  EXPECT_NE(b0.find("ln_2: inference yes, training no"), std::string::npos) << b0;
  EXPECT_EQ(layout.anchor(size_t(h.node_index("h.1.ln_2"))), "b1");
  EXPECT_EQ(layout.anchor(size_t(h.node_index("ln_f"))), "n" + std::to_string(h.node_index("ln_f")));
  // No edge inside a block survives; the blocks are chained.
  EXPECT_NE(collapsed.find("  b0 -> b1"), std::string::npos);
  EXPECT_EQ(collapsed.find("  b0 -> b0"), std::string::npos);
}

TEST(GraphDot, BlockOfOneNodeIsDrawnAsTheNode) {
  const nlohmann::json j = nlohmann::json::parse(R"({
    "format": "lnverify.model", "version": 1, "name": "one_node_blocks",
    "inputs": [{"name": "x", "shape": [2, 4]}],
    "nodes": [
      {"name": "stem.0.act", "op": "gelu", "inputs": ["x"]},
      {"name": "blk.1.act", "op": "gelu", "inputs": ["stem.0.act"]},
      {"name": "blk.1.ln", "op": "layer_norm", "inputs": ["blk.1.act"], "axes": [-1]}
    ],
    "outputs": ["blk.1.ln"]})");
  const Graph g = parse_model(j, "");
  const DotLayout layout = dot_layout(g, {1000});
  ASSERT_EQ(layout.blocks, (std::vector<std::string>{"blk.1"}));
  EXPECT_EQ(layout.node_block, (std::vector<int>{-1, 0, 0}));
  const std::string dot = graph_dot(g, detect_foldable(g, Mode::inference), {1000});
  EXPECT_NE(dot.find("label=\"stem.0.act\\ngelu\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("label=\"act\\ngelu\\nbreaks 1 LN\""), std::string::npos) << dot;  // in blk.1
}

}  // namespace
}  // namespace lnv::report
