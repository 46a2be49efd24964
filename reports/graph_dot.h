// The model's graph as Graphviz DOT, coloured by the audit: every LayerNorm by its verdict,
// the producers and params the plan centers, and the node that breaks each "no".
//
//   std::string dot = graph_dot(g, detect_foldable(g, Mode::inference));
//
// Nodes are grouped into repeated blocks by name prefix (block_of): a cluster per block;
// above DotOptions::collapse_above nodes every block is drawn as one node that lists its
// LayerNorms with their verdicts, so a 2000-node export stays readable (docs/spec/reports.md).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/analysis/fold_plan.h"
#include "core/graph.h"

namespace lnv::report {

// The repeated block a node belongs to: its name up to and including the last segment
// that is a plain number, segments being split at '/' and '.' ("/layers.0/blocks.1/attn/
// MatMul" -> "/layers.0/blocks.1", "h.3.mlp.c_fc" -> "h.3"); "" when no segment before the
// last one is a number.
std::string block_of(const std::string& node_name);

// A node's verdict colour class: "fold" (both modes), "inference" (inference only),
// "training" (training only) or "keep" (neither).
std::string verdict_class(const LnVerdict& v);

struct DotOptions {
  size_t collapse_above = 250;  // collapse blocks when the graph has more nodes than this
};

// Which block each node is drawn in (blocks of one node are not drawn as blocks), and
// whether blocks are collapsed.
struct DotLayout {
  bool collapsed = false;
  std::vector<std::string> blocks;  // block prefixes, in order of first node
  std::vector<int> node_block;      // per node: index into blocks, -1 for none
  // The SVG id of the element that shows node i: "n<i>", or "b<k>" for a collapsed block.
  std::string anchor(size_t node) const;
};
DotLayout dot_layout(const Graph& g, const DotOptions& options = {});

// Precondition: g is finalized and plan = detect_foldable(g, ...).
std::string graph_dot(const Graph& g, const FoldPlan& plan, const DotOptions& options = {});

}  // namespace lnv::report
