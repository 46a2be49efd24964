// The random-graph generator: every recipe builds a valid graph, every op kind occurs,
// and shrinking reaches small graphs.
#include <map>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "tests/rc_default_seed.h"

#include "generators/random_graph.h"

namespace lnv::gen {
namespace {

RC_GTEST_PROP(Generators, BuildsFinalizedGraphs, ()) {
  const Graph g = *gen_graph(GenConfig{});
  RC_ASSERT(g.finalized());
  RC_ASSERT(!g.nodes.empty());
  RC_ASSERT(static_cast<int>(g.nodes.size()) <= GenConfig{}.max_nodes + 12);
  for (const std::string& t : graph_tags(g)) RC_TAG(t);
}

TEST(Generators, EveryOpKindOccurs) {
  std::map<std::string, int> seen;
  const auto gen = gen_graph(GenConfig{});
  for (int i = 0; i < 400; ++i) {
    const Graph g = gen(rc::Random(1000 + i), 100).value();
    for (const std::string& t : graph_tags(g)) ++seen[t];
  }
  for (int k = 0; k < static_cast<int>(Op::kCount); ++k) {
    // An opaque op cannot be evaluated, so the property tests could not hold a verdict
    // near it to exact evaluation: the generator leaves it out (tests/test_opaque.cpp).
    if (static_cast<Op>(k) == Op::opaque) continue;
    const std::string tag = "op:" + std::string(op_name(static_cast<Op>(k)));
    EXPECT_GT(seen[tag], 0) << tag << " never generated";
  }
  for (const char* tag : {"conv:grouped", "conv:depthwise", "rnn:norm", "attention:causal",
                          "matmul:param_a", "matmul:param_b", "matmul:activations",
                          "matmul:params", "tied", "outputs>1", "norm:weight"})
    EXPECT_GT(seen[tag], 0) << tag << " never generated";
}

// Greedy shrinking toward "has a layer_norm" ends at a graph with a handful of nodes.
TEST(Generators, ShrinksToSmallGraphs) {
  const auto gen = gen_graph(GenConfig{});
  auto has_ln = [](const Graph& g) {
    for (const Node& n : g.nodes)
      if (n.op == Op::layer_norm) return true;
    return false;
  };
  int tried = 0;
  for (int i = 0; tried < 5 && i < 100; ++i) {
    rc::Shrinkable<Graph> s = gen(rc::Random(77 + i), 100);
    if (!has_ln(s.value()) || s.value().nodes.size() < 15) continue;
    ++tried;
    for (bool progress = true; progress;) {
      progress = false;
      for (auto seq = s.shrinks(); auto next = seq.next();) {
        if (has_ln(next->value())) {
          s = *next;
          progress = true;
          break;
        }
      }
    }
    EXPECT_LE(s.value().nodes.size(), 2u) << describe(s.value());
  }
  EXPECT_EQ(tried, 5);
}

}  // namespace
}  // namespace lnv::gen
