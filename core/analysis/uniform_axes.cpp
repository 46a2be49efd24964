// Uniform axes (docs/spec/semantics.md, "Constant axes"): the axes along which a value is
// the same everywhere by construction, whatever the inputs - zero values, and what is
// computed from values uniform along some axes - one rule per op family. A LayerNorm of a
// value uniform along its axes outputs its bias (constant_means.cpp), and a grouped conv
// reading a value uniform along the channels centers like a dense one (mean_rules.cpp).
#include "core/analysis/analyzer.h"

namespace lnv::analysis::detail {

namespace {

// The uniform axes of a node's operands.
struct Operands {
  const Graph& g;
  const std::vector<Mask>& uniform;
  size_t R;  // the node's rank

  // r's uniform axes, in r's own axes.
  Mask own(const ValueRef& r) const {
    return r.kind == ValueRef::Kind::node ? uniform[r.index] : size1_mask(g.shape_of(r));
  }
  // r's uniform axes, broadcast to the node's shape.
  Mask mapped(const ValueRef& r) const {
    const Shape& s = g.shape_of(r);
    return operand_to_out(own(r), s.size(), R) | broadcast_const_axes(s, R);
  }
};

// out[.., i, j] = Σ_k a[.., i, k] b[.., k, j]: uniform along a batch axis where both
// operands are, along the rows where a is, along the columns where b is.
Mask matmul_uniform(const Graph& g, int32_t v, const Operands& x) {
  const auto& in = g.node_inputs[v];
  const size_t R = x.R;
  if (R < 2 || g.shape_of(in[0]).size() < 2 || g.shape_of(in[1]).size() < 2) return 0;
  const Mask ma = x.mapped(in[0]), mb = x.mapped(in[1]);
  const Mask rows = bit(int64_t(R) - 2), cols = bit(int64_t(R) - 1);
  const bool b_cols = (mb & (g.nodes[v].transpose_b ? rows : cols)) != 0;
  return (ma & mb & ~(rows | cols)) | (ma & rows) | (b_cols ? cols : 0);
}

Mask transpose_uniform(const Graph& g, int32_t v, const Operands& x) {
  const Node& n = g.nodes[v];
  const Mask in_uniform = x.own(g.node_inputs[v][0]);  // same rank as v
  Mask m = 0;
  for (size_t i = 0; i < x.R; ++i)
    if (in_uniform & bit(normalize_axis(n.perm[i], int64_t(x.R), n.name))) m |= bit(int64_t(i));
  return m;
}

// A block's output axes are uniform when all its input axes are (its elements are then
// constant); size-1 axes are uniform anyway.
Mask reshape_uniform(const Graph& g, int32_t v, const Operands& x) {
  const ValueRef& in = g.node_inputs[v][0];
  const Mask in_uniform = x.own(in);
  Mask m = 0;
  for (const auto& blk : reshape_blocks(g.shape_of(in), g.node_shapes[v]))
    if (subset(blk.in, in_uniform)) m |= blk.out;
  return m;
}

// A reduction over axes A: uniform along each kept axis the input is uniform along.
Mask reduction_uniform(const Graph& g, int32_t v, const Operands& x) {
  const Node& n = g.nodes[v];
  const ValueRef& in = g.node_inputs[v][0];
  const Shape& s = g.shape_of(in);
  const Mask in_uniform = x.own(in);
  const Mask reduced = mask_of(normalize_axes(n.axes, int64_t(s.size()), n.name));
  Mask m = 0;
  int64_t o = 0;
  for (size_t a = 0; a < s.size(); ++a) {
    if (!n.keepdims && (reduced & bit(int64_t(a)))) continue;
    if ((in_uniform & bit(int64_t(a))) && !(reduced & bit(int64_t(a)))) m |= bit(o);
    ++o;
  }
  return m;
}

// Uniform along the axes other than the concat axis where every part is.
Mask concat_uniform(const Graph& g, int32_t v, const Operands& x) {
  const Node& n = g.nodes[v];
  Mask m = all_axes(x.R) & ~bit(normalize_axis(n.axis, int64_t(x.R), n.name));
  for (const ValueRef& r : g.node_inputs[v]) m &= x.mapped(r);
  return m;
}

}  // namespace

Mask Analyzer::uniform_axes(int32_t v, const std::vector<bool>& zero,
                             const std::vector<Mask>& uniform, const SumForms& sums) const {
  const Node& n = g_.nodes[v];
  const Shape& out = g_.node_shapes[v];
  const size_t R = out.size();
  const Mask all = all_axes(R);
  if (zero[v]) return all;
  const auto& in = g_.node_inputs[v];
  const Operands x{g_, uniform, R};
  // A sum is uniform along the axes all its atoms are uniform along ((a + c) - a = c).
  Mask from_sums = 0;
  if (sums.combined[v]) {
    from_sums = all;
    for (const auto& [a, c] : sums.form(v)) from_sums &= x.mapped(a);
  }
  // sub(a, center(a, B)) is the mean of a over B: uniform along B too.
  if (op_of(v) == Op::sub)
    for (const ValueRef& a : in)
      if (a.kind == ValueRef::Kind::node)
        if (const int32_t cn = center_partner(v, a.index); cn >= 0)
          return ((uniform[a.index] | norm_axes(cn) | from_sums) & all) | size1_mask(out);
  Mask m = 0;
  switch (op_family(op_of(v))) {
    case OpFamily::unary_nonlinearity:
    case OpFamily::scale:
      m = x.mapped(in[0]);
      break;
    case OpFamily::dropout:
      m = mode_ == Mode::training && n.p > 0.0 ? 0 : x.mapped(in[0]);
      break;
    case OpFamily::elementwise_binary:
      m = x.mapped(in[0]) & x.mapped(in[1]);
      break;
    case OpFamily::weighted_producer:
      switch (family_member<WeightedOp>(op_of(v))) {
        case WeightedOp::linear:
          m = x.mapped(in[0]) & ~bit(int64_t(R) - 1);
          break;
        case WeightedOp::conv1d:
        case WeightedOp::conv2d:
          m = x.own(in[0]) & conv_constant_axes(n, R);  // same rank; not along the channels
          break;
        case WeightedOp::matmul:
          m = matmul_uniform(g_, v, x);
          break;
        case WeightedOp::embedding:
        case WeightedOp::rnn:
        case WeightedOp::lstm:
        case WeightedOp::gru:
        case WeightedOp::attention:
          m = 0;
          break;
      }
      break;
    case OpFamily::opaque:  // unknown: uniform only along its size-1 axes
      m = 0;
      break;
    // Row-wise over axes A: uniform along the axes outside A where the input is; along A
    // as well when the input is and nothing the node adds varies along A (a row constant
    // along A normalizes to 0 under LayerNorm, to c / sqrt(c^2 + eps) under RMSNorm - so
    // also when one is swapped for the other - centers to 0, softmaxes to 1/|A|; an affine
    // weight or bias varies along A).
    case OpFamily::norm:
      m = x.mapped(in[0]) & (n.weight.empty() && n.bias.empty() ? all : ~norm_axes(v));
      break;
    case OpFamily::center:
      m = x.mapped(in[0]);
      break;
    case OpFamily::softmax:  // a mask keeps different positions where it varies
      m = x.mapped(in[0]) & (is_masked_softmax(n) ? ~where_select(g_, v).varies : all);
      break;
    case OpFamily::shape_op:
      switch (family_member<ShapeOp>(op_of(v))) {
        case ShapeOp::transpose:
          m = transpose_uniform(g_, v, x);
          break;
        case ShapeOp::reshape:
          m = reshape_uniform(g_, v, x);
          break;
        case ShapeOp::slice:  // a subset of a uniform line is uniform
          m = x.own(in[0]);
          break;
        case ShapeOp::expand:  // copies along the broadcast axes
          m = x.mapped(in[0]);
          break;
        case ShapeOp::pad:  // the pad value differs from generic values along the padded axes
          m = x.own(in[0]) & ~pad_axes(g_, v);
          break;
      }
      break;
    // Where it picks from a uniform operand, along the axes c is constant along.
    case OpFamily::select: {
      const WhereSelect& w = select_of(v);
      m = (w.picks[0] ? x.mapped(in[0]) : all) & (w.picks[1] ? x.mapped(in[1]) : all);
      if (!(alias(in[0]) == alias(in[1]))) m &= ~w.varies;  // where(c, v, v) is v
      break;
    }
    case OpFamily::reduction:
      m = reduction_uniform(g_, v, x);
      break;
    case OpFamily::concat:
      m = concat_uniform(g_, v, x);
      break;
  }
  return ((m | from_sums) & all) | size1_mask(out);
}

}  // namespace lnv::analysis::detail
