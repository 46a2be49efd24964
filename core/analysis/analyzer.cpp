// The analyzer's constructor (analyzer.h): the two readings of the graph every rule reads
// (docs/spec/semantics.md, "Foldability"). `strict` trusts only what no rewrite changes
// (sub(a, a), scale 0, center, cbwc); the default reading also trusts LayerNorms, which
// stay LayerNorms or are folded exactly - except the LN being judged, whose own fold must
// not be justified by its own zero-mean output (hence LN deadness uses strict). Each
// reading decides, in topological order, which values are structurally zero and along
// which axes each value is uniform; then, backward, which values are live.
#include "core/analysis/analyzer.h"

namespace lnv::analysis::detail {

Analyzer::Analyzer(const Graph& g, Mode mode)
    : g_(g),
      mode_(mode),
      ops_(g.nodes.size()),
      norm_masks_(g.nodes.size(), 0),
      size1_masks_(g.nodes.size(), 0),
      means_(g.nodes.size()),
      safe_(g.nodes.size()),
      producer_terms_(g.nodes.size(), -1) {
  const size_t n = g.nodes.size();
  // Axis sets are 64-bit masks: checked before any is built.
  for (size_t i = 0; i < n; ++i)
    if (g.node_shapes[i].size() > 63)
      throw ModelError(g.nodes[i].name, "the analysis supports tensors of rank up to 63");
  for (size_t i = 0; i < n; ++i) {
    ops_[i] = g.nodes[i].op;
    size1_masks_[i] = size1_mask(g.node_shapes[i]);
    if (has_norm_mask(ops_[i]))
      norm_masks_[i] = mask_of(normalize_axes(g.nodes[i].axes, int64_t(g.node_shapes[i].size()),
                                              g.nodes[i].name));
  }
  auto for_each_use = [&](auto&& fn) {
    for (size_t c = 0; c < n; ++c)
      for (size_t k = 0; k < g.node_inputs[c].size(); ++k) {
        const ValueRef& r = g.node_inputs[c][k];
        // A where never picking operand k does not read it: no use, for liveness and safety.
        if (r.kind == ValueRef::Kind::node && reads_operand(int32_t(c), k))
          fn(size_t(r.index), int32_t(c), int32_t(k));
      }
  };
  use_start_.assign(n + 1, 0);
  for_each_use([&](size_t v, int32_t, int32_t) { ++use_start_[v + 1]; });
  for (size_t v = 0; v < n; ++v) use_start_[v + 1] += use_start_[v];
  use_list_.resize(size_t(use_start_[n]));
  std::vector<int32_t> next(use_start_.begin(), use_start_.end() - 1);
  for_each_use([&](size_t v, int32_t c, int32_t k) { use_list_[size_t(next[v]++)] = {c, k}; });
  is_output_.assign(n, false);
  for (const ValueRef& r : g.output_refs)
    if (r.kind == ValueRef::Kind::node) is_output_[r.index] = true;
  strict_sums_ = SumForms(n);
  for (bool strict : {true, false}) {
    std::vector<bool>& zero = strict ? zero_strict_ : zero_;
    const Trust trust{.lns = !strict};
    zero.assign(n, false);
    std::vector<Mask>& uniform = strict ? uniform_strict_ : uniform_;
    uniform.assign(n, 0);
    SumForms default_sums(n);
    SumForms& sums = strict ? strict_sums_ : default_sums;
    for (int32_t v : g.order) {
      zero[v] = structurally_zero(v, zero, trust);
      // Uniform axes of each reading, in the same order (an LN of a value uniform along
      // its axes outputs its bias).
      sums.add(g, v, ops_[size_t(v)], zero, mode);
      uniform[v] = uniform_axes(v, zero, uniform, sums);
      // A mean that is one constant is uniform along every axis.
      if (constant_mean(v, trust)) uniform[v] = all_axes(g.node_shapes[v].size());
    }
    (strict ? live_strict_ : live_) = live_in_reading(zero, trust);
  }
  // An LN can also be dead because its contributions cancel between routes
  // (`sub(a, add(a, c))`): such an LN is dead in both readings.
  const std::vector<bool> through_sums =
      live_through_sums(strict_sums_, zero_strict_, Trust{.lns = false});
  for (size_t v = 0; v < n; ++v)
    if (g.nodes[v].op == Op::layer_norm && !through_sums[v]) live_strict_[v] = live_[v] = false;
}

bool Analyzer::trusts(const Trust& t, int32_t ln) const {
  if (!t.lns) return false;
  if (t.distrusted && (*t.distrusted)[ln]) {
    if (t.consulted) t.consulted->push_back(ln);
    return false;
  }
  return true;
}

ValueRef Analyzer::alias(ValueRef r) const {
  while (r.kind == ValueRef::Kind::node) {
    const Op op = op_of(r.index);
    if (op != Op::dropout && op != Op::scale) break;
    const Node& n = g_.nodes[r.index];
    const bool identity = (op == Op::dropout && (mode_ == Mode::inference || n.p == 0.0)) ||
                          (op == Op::scale && n.factor == 1.0);
    if (!identity) break;
    r = g_.node_inputs[r.index][0];
  }
  return r;
}

}  // namespace lnv::analysis::detail
