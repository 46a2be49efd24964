// Zero means by construction (docs/spec/semantics.md, "Terms"): whether a value is
// zero-mean over some axes whatever the inputs - a center, an LN without affine the reading
// trusts, y - mean(y), a producer marked cbwc - and how linear ops along other axes, means,
// reshapes and transposes carry that.
#include "core/analysis/analyzer.h"

namespace lnv::analysis::detail {

bool Analyzer::zero_mean_over(const ValueRef& x, const Axes& axes, const Trust& trust) const {
  int budget = kZeroMeanVisits;
  return zero_mean_within(x, axes, trust, budget);
}

int32_t Analyzer::own_mean_subtracted(int32_t v) const {
  if (g_.nodes[v].op != Op::sub) return -1;
  const ValueRef& y = g_.node_inputs[v][0];
  const ValueRef& m = g_.node_inputs[v][1];
  if (m.kind != ValueRef::Kind::node || g_.nodes[m.index].op != Op::mean ||
      !g_.nodes[m.index].keepdims || !(g_.node_inputs[m.index][0] == y) ||
      !(g_.node_shapes[v] == g_.shape_of(y)))
    return -1;
  return m.index;
}

bool Analyzer::zero_mean_within(const ValueRef& x, const Axes& axes, const Trust& trust,
                                int& budget) const {
  if (x.kind != ValueRef::Kind::node || --budget < 0) return false;
  const Node& n = g_.nodes[x.index];
  const Shape& s = g_.node_shapes[x.index];
  const Mask b = analysis::mask_of(axes);
  auto inside = [&](const Axes& own) {
    const Mask m = analysis::mask_of(normalize_axes(own, int64_t(s.size()), n.name)) &
                   ~analysis::size1_mask(s);
    return m != 0 && subset(m, b);
  };
  if (n.op == Op::layer_norm && n.weight.empty() && n.bias.empty())
    return inside(n.axes) && trusts(trust, x.index);
  if (n.op == Op::center) return inside(n.axes);
  // sub(y, mean(y, B, keepdims)) is zero-mean over B.
  if (const int32_t m = own_mean_subtracted(x.index); m >= 0) return inside(g_.nodes[m].axes);
  if (n.cbwc && (n.op == Op::linear || n.op == Op::embedding || n.op == Op::attention))
    return inside({-1});
  // The mean over B is linear: an identity (inference dropout), a scale, or a sum or
  // difference of same-shape operands that are each zero-mean over B keeps it zero.
  const auto& in = g_.node_inputs[x.index];
  const bool identity = n.op == Op::scale ||
                        (n.op == Op::dropout && (mode_ == Mode::inference || n.p == 0.0));
  if (identity) return zero_mean_within(in[0], axes, trust, budget);
  if (n.op == Op::add || n.op == Op::sub) {
    for (const ValueRef& r : in)
      if (g_.shape_of(r) != s || !zero_mean_within(r, axes, trust, budget)) return false;
    return true;
  }
  // Linear maps along other axes: mean_B(x Wᵀ) = mean_B(x) Wᵀ without a bias when B avoids
  // the feature axis; a 2-D param multiplying from the left mixes rows only, from the right
  // columns only; a transpose permutes B.
  const int64_t R = int64_t(s.size());
  const Mask real = b & ~analysis::size1_mask(s);
  auto same_rank = [&](const ValueRef& r) { return int64_t(g_.shape_of(r).size()) == R; };
  auto is_param2 = [&](const ValueRef& r) {
    return r.kind == ValueRef::Kind::param && g_.shape_of(r).size() == 2;
  };
  if (n.op == Op::linear && n.bias.empty() && !(real & bit(R - 1)) && same_rank(in[0]))
    return zero_mean_within(in[0], axes, trust, budget);
  if (n.op == Op::matmul && R >= 2) {
    if (is_param2(in[0]) && same_rank(in[1]) && !n.transpose_b && !(real & bit(R - 2)))
      return zero_mean_within(in[1], axes, trust, budget);
    if (is_param2(in[1]) && same_rank(in[0]) && !(real & bit(R - 1)))
      return zero_mean_within(in[0], axes, trust, budget);
  }
  // a·b averaged over the columns j: Σ_k a[.., i, k] · mean_j b[.., k, j], zero when b is
  // zero-mean along j, or when that mean is one constant and a is zero-mean along k (a
  // right operand whose columns sum to one, such as a softmax along j); averaged over the
  // rows i: Σ_k mean_i a[.., i, k] · b[.., k, j], zero when a is zero-mean along i.
  if (n.op == Op::matmul && R >= 2 && same_rank(in[0]) && same_rank(in[1])) {
    const int64_t b_cols = n.transpose_b ? R - 2 : R - 1;
    if ((real & bit(R - 1)) && zero_mean_within(in[1], {b_cols}, trust, budget)) return true;
    if ((real & bit(R - 1)) && in[1].kind == ValueRef::Kind::node &&
        constant_mean_over(in[1].index, bit(b_cols), trust) &&
        zero_mean_within(in[0], {R - 1}, trust, budget))
      return true;
    if ((real & bit(R - 2)) && zero_mean_within(in[0], {R - 2}, trust, budget)) return true;
  }
  // A mean over A of a value zero-mean over some of A ∪ B (B seen in the input's axes).
  if (n.op == Op::mean) {
    const int64_t Ri = int64_t(g_.shape_of(in[0]).size());
    const Mask reduced = analysis::mask_of(normalize_axes(n.axes, Ri, n.name));
    Axes inner;
    for (int64_t a = 0, o = 0; a < Ri; ++a) {
      const bool kept = n.keepdims || !(reduced & bit(a));
      if ((reduced & bit(a)) || (kept && (b & bit(o)))) inner.push_back(a);
      if (kept) ++o;
    }
    return zero_mean_within(in[0], inner, trust, budget);
  }
  // Through a reshape: a block averaged whole is the mean over its input axes (a block
  // averaged in part is not a mean over whole input axes: no).
  if (n.op == Op::reshape) {
    Mask inner = 0;
    for (const auto& blk : analysis::reshape_blocks(g_.shape_of(in[0]), s)) {
      if ((blk.out & real) == 0) continue;
      if (!subset(blk.out, b)) return false;
      inner |= blk.in;
    }
    return zero_mean_within(in[0], analysis::axes_of(inner), trust, budget);
  }
  if (n.op == Op::transpose) {
    Axes permuted;
    for (int64_t i = 0; i < R; ++i)
      if (b & bit(i)) permuted.push_back(normalize_axis(n.perm[size_t(i)], R, n.name));
    return zero_mean_within(in[0], permuted, trust, budget);
  }
  return false;
}

}  // namespace lnv::analysis::detail
