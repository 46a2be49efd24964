// Which nodes are producers and where their features lie (producers.h;
// docs/spec/semantics.md, "Op rules", "Producers").
#include "core/analysis/producers.h"

#include <algorithm>

#include "core/analysis/axes_mask.h"

namespace lnv::analysis {

namespace {

bool is_param(const Graph& g, int32_t n, int k) {
  return g.node_inputs[n][k].kind == ValueRef::Kind::param;
}

// The axis of a plain producer's output holding its features, -1 for other nodes
// (core/analysis/producers.h, producer_feature_axis).
int64_t plain_feature_axis(const Graph& g, int32_t n);

bool is_graph_output(const Graph& g, int32_t n) {
  return std::find(g.output_refs.begin(), g.output_refs.end(),
                   ValueRef{ValueRef::Kind::node, n}) != g.output_refs.end();
}

// Where a chain step sends the feature axis `f` of its input: the output axis, or -1 when
// the step does not keep it whole.
int64_t feature_through(const Graph& g, int32_t step, int64_t f) {
  const Node& node = g.nodes[step];
  if (node.op == Op::transpose) {
    const int64_t R = int64_t(node.perm.size());
    for (int64_t i = 0; i < R; ++i)
      if ((node.perm[size_t(i)] + R) % R == f) return i;
    return -1;
  }
  if (node.op == Op::reshape) {
    const Shape& in = g.shape_of(g.node_inputs[step][0]);
    const Shape& out = g.node_shapes[step];
    for (const ReshapeBlock& b : reshape_blocks(in, out))
      if (b.in == bit(f)) {
        const int64_t o = __builtin_ctzll(b.out);
        return b.out == bit(o) && out[size_t(o)] == in[size_t(f)] ? o : -1;
      }
  }
  return -1;
}

// The bias operand of add node `n` (a param laid out along output axis f at full size,
// reading `from` as its other operand), as a LayerScale bias; nullopt when it is none.
std::optional<LayerScale::Bias> chain_bias(const Graph& g, int32_t n, int32_t from, int64_t f) {
  const Node& node = g.nodes[n];
  if (node.op != Op::add) return std::nullopt;
  const Shape& out = g.node_shapes[n];
  for (int k = 0; k < 2; ++k) {
    const ValueRef& other = g.node_inputs[n][1 - k];
    if (!is_param(g, n, k) || other != ValueRef{ValueRef::Kind::node, from}) continue;
    const Shape& b = g.shape_of(g.node_inputs[n][k]);
    const int64_t axis = f - int64_t(out.size() - b.size());
    if (g.shape_of(other) != out || axis < 0 || b[size_t(axis)] != out[size_t(f)]) return std::nullopt;
    return LayerScale::Bias{n, k, axis};
  }
  return std::nullopt;
}

}  // namespace

std::optional<LayerScale> layer_scale_of(const Graph& g, int32_t n) {
  if (g.nodes[n].op != Op::mul) return std::nullopt;
  const Shape& out = g.node_shapes[n];
  const size_t R = out.size();
  for (int k = 0; k < 2; ++k) {
    const ValueRef& y = g.node_inputs[n][1 - k];
    if (!is_param(g, n, k) || y.kind != ValueRef::Kind::node || g.shape_of(y) != out) continue;
    const Shape& gs = g.shape_of(g.node_inputs[n][k]);
    const Mask varies = ~broadcast_const_axes(gs, R) & all_axes(R);
    if (varies == 0 || (varies & (varies - 1)) != 0) continue;
    LayerScale ls;
    ls.mul = n;
    ls.gamma = k;
    ls.feature = __builtin_ctzll(varies);
    // Walk the chain back to its producer, carrying the feature axis up through each step.
    std::vector<int32_t> steps;
    int32_t v = y.index;
    while (plain_feature_axis(g, v) < 0) {
      const Node& node = g.nodes[v];
      if (node.op != Op::transpose && node.op != Op::reshape && node.op != Op::add) break;
      steps.push_back(v);
      int32_t next = -1;
      if (node.op == Op::add) {
        for (int j = 0; j < 2; ++j)
          if (!is_param(g, v, j) && g.node_inputs[v][j].kind == ValueRef::Kind::node)
            next = g.node_inputs[v][j].index;
      } else if (g.node_inputs[v][0].kind == ValueRef::Kind::node) {
        next = g.node_inputs[v][0].index;
      }
      if (next < 0) break;
      v = next;
    }
    const int32_t p = v;
    if (plain_feature_axis(g, p) < 0 || !is_centerable_producer(g, p) || g.nodes[p].cbwc) continue;
    // Forward from the producer: every value before the mul read by the next step alone.
    int64_t f = plain_feature_axis(g, p);
    int32_t from = p;
    bool ok = true;
    for (auto it = steps.rbegin(); it != steps.rend() && ok; ++it) {
      ok = g.consumers[from].size() == 1 && !is_graph_output(g, from);
      if (g.nodes[*it].op == Op::add) {
        const auto bias = chain_bias(g, *it, from, f);
        ok = ok && bias.has_value();
        if (ok) ls.biases.push_back(*bias);
      } else {
        f = feature_through(g, *it, f);
        ok = ok && f >= 0;
      }
      from = *it;
    }
    ok = ok && g.consumers[from].size() == 1 && !is_graph_output(g, from) && f == ls.feature &&
         out[size_t(f)] > 1 && gs[size_t(f - int64_t(R - gs.size()))] == out[size_t(f)];
    if (!ok) continue;
    ls.producer = p;
    return ls;
  }
  return std::nullopt;
}

int64_t producer_feature_axis(const Graph& g, int32_t n) {
  if (g.nodes[n].op == Op::mul) {
    const auto ls = layer_scale_of(g, n);
    return ls ? ls->feature : -1;
  }
  return plain_feature_axis(g, n);
}

namespace {

int64_t plain_feature_axis(const Graph& g, int32_t n) {
  const int64_t R = int64_t(g.node_shapes[n].size());
  if (!is_weighted(g.nodes[n].op)) return -1;  // only a weighted producer has features
  switch (family_member<WeightedOp>(g.nodes[n].op)) {
    case WeightedOp::linear:
    case WeightedOp::embedding:
    case WeightedOp::attention:
      return R - 1;
    case WeightedOp::conv1d:
    case WeightedOp::conv2d:
      return 1;
    case WeightedOp::matmul:
      if (is_param(g, n, 1)) return R - 1;
      if (is_param(g, n, 0)) return R - 2;
      return -1;
    case WeightedOp::rnn:
    case WeightedOp::lstm:
    case WeightedOp::gru:
      return -1;
  }
  return -1;
}

}  // namespace

bool centering_zeroes_features(const Graph& g, int32_t n) {
  const Node& node = g.nodes[n];
  return !((node.op == Op::conv1d || node.op == Op::conv2d) && node.groups != 1);
}

bool is_centerable_producer(const Graph& g, int32_t n) {
  if (g.nodes[n].op == Op::rnn) return true;
  if (g.nodes[n].op == Op::mul) return layer_scale_of(g, n).has_value();
  if (producer_feature_axis(g, n) < 0 || !centering_zeroes_features(g, n)) return false;
  return !(g.nodes[n].op == Op::matmul && is_param(g, n, 0) && is_param(g, n, 1));
}

}  // namespace lnv::analysis
