// Liveness (docs/spec/semantics.md, "Foldability"; docs/spec/decisions.md): which values
// some graph output depends on, in one reading of "zero" (a structurally zero value, or one
// read only through constant means or by nodes that ignore their inputs, cuts the
// dependence), also through sums whose routes cancel; and the swap check of dead folds:
// whether swapping LayerNorms dead only behind other LNs, together with a plan, reaches an
// output.
#include <algorithm>

#include "core/analysis/analyzer.h"

namespace lnv::analysis::detail {

std::vector<bool> Analyzer::live_in_reading(const std::vector<bool>& zero,
                                            const Trust& trust) const {
  const size_t n = g_.nodes.size();
  // A structurally zero node depends on nothing.
  std::vector<bool> live(n, false);
  // cut[c]: c is live, but only through means of it that are one constant whatever its
  // input (constant_mean): c's own value (its bias) matters, its input does not.
  std::vector<bool> cut(n, false);
  for (auto it = g_.order.rbegin(); it != g_.order.rend(); ++it) {
    const int32_t v = *it;
    bool l = is_output_[v];
    for (auto [c, k] : uses(v))
      l = l || (live[c] && !cut[c] && !ignores_inputs(c, zero, trust));
    live[v] = l && !zero[v];
    cut[v] = live[v] && only_constant_means(v, live, zero, trust);
  }
  return live;
}

std::vector<bool> Analyzer::live_through_sums(const SumForms& sums, const std::vector<bool>& zero,
                                              const Trust& trust) const {
  const size_t n = g_.nodes.size();
  // whole[v]: v's value is needed, not only a constant mean of it (constant_mean); a node
  // read only through such means is live (its own params matter), its input is not.
  std::vector<bool> live(n, false), whole(n, false);
  auto mark = [&](int32_t r, bool value) {
    auto set = [&](int32_t a) {
      live[a] = true;
      whole[a] = whole[a] || value;
    };
    if (!sums.combined[r]) {
      set(r);
      return;
    }
    for (const auto& [a, c] : sums.form(r))  // a sum passes its atoms' values
      if (a.kind == ValueRef::Kind::node) set(a.index);
  };
  for (const ValueRef& r : g_.output_refs)
    if (r.kind == ValueRef::Kind::node) mark(r.index, true);
  for (auto it = g_.order.rbegin(); it != g_.order.rend(); ++it) {
    const int32_t v = *it;
    if (sums.combined[v] || !whole[v] || ignores_inputs(v, zero, trust)) continue;
    const bool constant = constant_mean(v, trust);
    for (size_t k = 0; k < g_.node_inputs[v].size(); ++k)
      if (const ValueRef& r = g_.node_inputs[v][k]; r.kind == ValueRef::Kind::node && reads_operand(v, k))
        mark(r.index, !constant);
  }
  return live;
}

bool Analyzer::swap_reaches_output(const std::vector<char>& swapped, const std::vector<char>& folded,
                                   const std::vector<char>& centered, std::vector<int32_t>* blame) const {
  const size_t n = g_.nodes.size();
  std::vector<bool> zero(n, false);
  std::vector<char> changed(n, 0), unzeroed(n, 0), distrusted(n, 0);
  // zero_over[v] = B (not unzeroed): v may have changed, but is zero-mean over every axis
  // set that contains B - the output of a center, an LN without affine, or y - mean(y)
  // over B, and linear combinations of such values; over other axes (a center over the
  // tokens, for a fold over the features) its zero mean may be lost.
  std::vector<Mask> zero_over(n, 0);
  const Trust trust{.lns = true, .distrusted = &distrusted, .consulted = blame};
  for (int32_t v : g_.order) {
    const Node& node = g_.nodes[v];
    if (swapped[v]) {
      changed[v] = unzeroed[v] = distrusted[v] = 1;
    } else {
      // A folded LN whose input may have lost the zero mean its fold relied on is an
      // RMSNorm of an uncentered value: trust neither its zero-mean output nor its
      // ignoring a uniform input (an RMSNorm of a uniform row is not its bias) - decided
      // before its own zero and ignoring are read.
      bool input_unzeroed = false;
      for (const ValueRef& r : g_.node_inputs[v])
        if (r.kind == ValueRef::Kind::node)
          input_unzeroed |= unzeroed[r.index] != 0 ||
                            (node.op == Op::layer_norm && (zero_over[r.index] & ~norm_axes(v)) != 0);
      const bool broken_fold = node.op == Op::layer_norm && folded[v] && input_unzeroed;
      if (broken_fold) distrusted[v] = 1;
      zero[v] = structurally_zero(v, zero, trust);
      // Sums of values of v's shape, identities and scales keep a zero mean over B.
      const bool linear = ((node.op == Op::add || node.op == Op::sub) &&
                           g_.shape_of(g_.node_inputs[v][0]) == g_.node_shapes[v] &&
                           g_.shape_of(g_.node_inputs[v][1]) == g_.node_shapes[v]) ||
                          node.op == Op::scale ||
                          (node.op == Op::dropout && (mode_ == Mode::inference || node.p == 0.0));
      if (!ignores_inputs(v, zero, trust) && !constant_mean(v, trust))
        for (size_t k = 0; k < g_.node_inputs[v].size(); ++k)
          if (const ValueRef& r = g_.node_inputs[v][k];
              r.kind == ValueRef::Kind::node && reads_operand(v, k)) {
            changed[v] |= changed[r.index];
            unzeroed[v] |= unzeroed[r.index];
            if (zero_over[r.index] == 0) continue;
            if (linear) zero_over[v] |= zero_over[r.index];
            else unzeroed[v] = 1;
          }
      // As a center: y - mean(y) is zero-mean whatever changed in y.
      Mask resets = 0;
      if (node.op == Op::center ||
          (node.op == Op::layer_norm && node.weight.empty() && node.bias.empty() && !broken_fold))
        resets = norm_axes(v);
      if (const int32_t m = own_mean_subtracted(v); m >= 0) resets = norm_axes(m);
      if (centered[v]) {
        unzeroed[v] = 0;
        zero_over[v] = 0;
      } else if (resets != 0 && (unzeroed[v] || zero_over[v])) {
        unzeroed[v] = 0;
        zero_over[v] = resets & ~analysis::size1_mask(g_.node_shapes[v]);
      }
    }
    if (changed[v] && is_output_[v]) return true;
  }
  return false;
}

}  // namespace lnv::analysis::detail
