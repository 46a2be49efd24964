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
  if (op_of(v) != Op::sub) return -1;
  const ValueRef& y = g_.node_inputs[v][0];
  const ValueRef& m = g_.node_inputs[v][1];
  if (m.kind != ValueRef::Kind::node || op_of(m.index) != Op::mean ||
      !g_.nodes[m.index].keepdims || !(g_.node_inputs[m.index][0] == y) ||
      !(g_.node_shapes[v] == g_.shape_of(y)))
    return -1;
  return m.index;
}

bool Analyzer::zero_mean_within(const ValueRef& x, const Axes& axes, const Trust& trust,
                                int& budget) const {
  if (x.kind != ValueRef::Kind::node || --budget < 0) return false;
  const int32_t v = x.index;
  const Node& n = g_.nodes[v];
  const Shape& s = g_.node_shapes[v];
  const Mask b = mask_of(axes);
  // Whether the axes `own` of v (those of size > 1, at least one) lie inside B.
  auto inside = [&](const Axes& own) {
    const Mask m = mask_of(normalize_axes(own, int64_t(s.size()), n.name)) & ~size1_mask(s);
    return m != 0 && subset(m, b);
  };
  const auto& in = g_.node_inputs[v];
  switch (op_family(n.op)) {
    case OpFamily::norm:
      switch (family_member<NormOp>(n.op)) {
        case NormOp::layer_norm:
          return n.weight.empty() && n.bias.empty() && inside(n.axes) && trusts(trust, v);
        case NormOp::rms_norm:
          return false;
      }
      return false;
    case OpFamily::center:
      return inside(n.axes);
    case OpFamily::weighted_producer:
      switch (family_member<WeightedOp>(n.op)) {
        // A producer already centered (cbwc) over its features; mean_B(x Wᵀ) = mean_B(x) Wᵀ
        // without a bias when B avoids the feature axis.
        case WeightedOp::linear: {
          if (n.cbwc) return inside({-1});
          const int64_t R = int64_t(s.size());
          return n.bias.empty() && !(b & ~size1_mask(s) & bit(R - 1)) &&
                 int64_t(g_.shape_of(in[0]).size()) == R &&
                 zero_mean_within(in[0], axes, trust, budget);
        }
        case WeightedOp::embedding:
        case WeightedOp::attention:
          return n.cbwc && inside({-1});
        case WeightedOp::matmul:
          return zero_mean_through_matmul(v, axes, trust, budget);
        case WeightedOp::conv1d:
        case WeightedOp::conv2d:
        case WeightedOp::rnn:
        case WeightedOp::lstm:
        case WeightedOp::gru:
          return false;
      }
      return false;
    // The mean over B is linear: an identity (inference dropout), a scale, or a sum or
    // difference of same-shape operands that are each zero-mean over B keeps it zero.
    case OpFamily::scale:
      return zero_mean_within(in[0], axes, trust, budget);
    case OpFamily::dropout:
      return (mode_ == Mode::inference || n.p == 0.0) &&
             zero_mean_within(in[0], axes, trust, budget);
    case OpFamily::elementwise_binary:
      switch (family_member<BinaryOp>(n.op)) {
        case BinaryOp::sub:
          // sub(y, mean(y, B, keepdims)) is zero-mean over B.
          if (const int32_t m = own_mean_subtracted(v); m >= 0) return inside(g_.nodes[m].axes);
          [[fallthrough]];
        case BinaryOp::add:
          for (const ValueRef& r : in)
            if (g_.shape_of(r) != s || !zero_mean_within(r, axes, trust, budget)) return false;
          return true;
        case BinaryOp::mul:
        case BinaryOp::div:
          return false;
      }
      return false;
    case OpFamily::reduction:
      switch (family_member<ReductionOp>(n.op)) {
        case ReductionOp::mean:
          return zero_mean_through_mean(v, b, trust, budget);
        case ReductionOp::max:
          return false;
      }
      return false;
    case OpFamily::shape_op:
      switch (family_member<ShapeOp>(n.op)) {
        case ShapeOp::reshape:
          return zero_mean_through_reshape(v, b, trust, budget);
        case ShapeOp::slice:
          // A slice keeps a zero mean over axes it does not cut, and loses it over the others.
          return (b & slice_cut(g_, v)) == 0 && zero_mean_within(in[0], axes, trust, budget);
        // mean_B(expand(x)) is the broadcast of x's mean over the axes of B x is not broadcast
        // along (over none of them: x itself, not zero by construction).
        case ShapeOp::expand: {
          const Mask b_in = out_to_operand(b & ~size1_mask(s), g_.shape_of(in[0]).size(), s.size()) &
                            ~size1_mask(g_.shape_of(in[0]));
          return b_in != 0 && zero_mean_within(in[0], axes_of(b_in), trust, budget);
        }
        // Zeros padded around x: the mean over B is (a share of) x's at x's positions, 0 in the
        // padding. A nonzero pad value is a constant there.
        case ShapeOp::pad:
          return (n.value == 0.0 || pad_axes(g_, v) == 0) && zero_mean_within(in[0], axes, trust, budget);
        case ShapeOp::transpose: {
          // A transpose permutes B.
          const int64_t R = int64_t(s.size());
          Axes permuted;
          for (int64_t i = 0; i < R; ++i)
            if (b & bit(i)) permuted.push_back(normalize_axis(n.perm[size_t(i)], R, n.name));
          return zero_mean_within(in[0], permuted, trust, budget);
        }
      }
      return false;
    // Along axes c is constant along, each row of the output is a row of one operand: zero
    // when each operand it picks is zero-mean over B. Where c varies along B as well,
    // mean_B(y) = mean_{B∩V}(c·mean_{B∖V}(x) + (1-c)·mean_{B∖V}(z)): zero when each picked
    // operand is zero-mean over B∖V (B∖V not empty).
    case OpFamily::select: {
      const WhereSelect& w = select_of(v);
      const Mask inner = b & (alias(in[0]) == alias(in[1]) ? ~Mask(0) : ~w.varies) & ~size1_mask(s);
      if ((b & w.varies) != 0 && inner == 0) return false;
      for (int k = 0; k < 2; ++k) {
        if (!w.picks[k]) continue;
        const Shape& sk = g_.shape_of(in[k]);
        const Mask bk = out_to_operand(inner, sk.size(), s.size()) & ~size1_mask(sk);
        if (bk == 0 || !zero_mean_within(in[k], axes_of(bk), trust, budget)) return false;
      }
      return true;
    }
    case OpFamily::unary_nonlinearity:
    case OpFamily::softmax:
    case OpFamily::concat:
    case OpFamily::opaque:
      return false;
  }
  return false;
}

// A 2-D param multiplying from the left mixes rows only, from the right columns only. Two
// activations a·b averaged over the columns j: Σ_k a[.., i, k] · mean_j b[.., k, j], zero
// when b is zero-mean along j, or when that mean is one constant and a is zero-mean along
// k (a right operand whose columns sum to one, such as a softmax along j); averaged over
// the rows i: Σ_k mean_i a[.., i, k] · b[.., k, j], zero when a is zero-mean along i.
bool Analyzer::zero_mean_through_matmul(int32_t v, const Axes& axes, const Trust& trust,
                                        int& budget) const {
  const Node& n = g_.nodes[v];
  const Shape& s = g_.node_shapes[v];
  const auto& in = g_.node_inputs[v];
  const int64_t R = int64_t(s.size());
  if (R < 2) return false;
  const Mask real = mask_of(axes) & ~size1_mask(s);
  auto same_rank = [&](const ValueRef& r) { return int64_t(g_.shape_of(r).size()) == R; };
  auto is_param2 = [&](const ValueRef& r) {
    return r.kind == ValueRef::Kind::param && g_.shape_of(r).size() == 2;
  };
  if (is_param2(in[0]) && same_rank(in[1]) && !n.transpose_b && !(real & bit(R - 2)))
    return zero_mean_within(in[1], axes, trust, budget);
  if (is_param2(in[1]) && same_rank(in[0]) && !(real & bit(R - 1)))
    return zero_mean_within(in[0], axes, trust, budget);
  if (!same_rank(in[0]) || !same_rank(in[1])) return false;
  const int64_t b_cols = n.transpose_b ? R - 2 : R - 1;
  if ((real & bit(R - 1)) && zero_mean_within(in[1], {b_cols}, trust, budget)) return true;
  if ((real & bit(R - 1)) && in[1].kind == ValueRef::Kind::node &&
      constant_mean_over(in[1].index, bit(b_cols), trust) &&
      zero_mean_within(in[0], {R - 1}, trust, budget))
    return true;
  return (real & bit(R - 2)) && zero_mean_within(in[0], {R - 2}, trust, budget);
}

// A mean over A of a value zero-mean over some of A ∪ B (B seen in the input's axes).
bool Analyzer::zero_mean_through_mean(int32_t v, Mask b, const Trust& trust, int& budget) const {
  const Node& n = g_.nodes[v];
  const ValueRef& in = g_.node_inputs[v][0];
  const int64_t Ri = int64_t(g_.shape_of(in).size());
  const Mask reduced = mask_of(normalize_axes(n.axes, Ri, n.name));
  Axes inner;
  for (int64_t a = 0, o = 0; a < Ri; ++a) {
    const bool kept = n.keepdims || !(reduced & bit(a));
    if ((reduced & bit(a)) || (kept && (b & bit(o)))) inner.push_back(a);
    if (kept) ++o;
  }
  return zero_mean_within(in, inner, trust, budget);
}

// A block averaged whole is the mean over its input axes (a block averaged in part is not
// a mean over whole input axes: no).
bool Analyzer::zero_mean_through_reshape(int32_t v, Mask b, const Trust& trust,
                                         int& budget) const {
  const ValueRef& in = g_.node_inputs[v][0];
  const Mask real = b & ~size1_mask(g_.node_shapes[v]);
  Mask inner = 0;
  for (const auto& blk : reshape_blocks(g_.shape_of(in), g_.node_shapes[v])) {
    if ((blk.out & real) == 0) continue;
    if (!subset(blk.out, b)) return false;
    inner |= blk.in;
  }
  return zero_mean_within(in, axes_of(inner), trust, budget);
}

}  // namespace lnv::analysis::detail
