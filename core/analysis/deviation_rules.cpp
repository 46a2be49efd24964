// The deviation rules (docs/spec/semantics.md, "Op rules"; "Deviations", "Constant axes",
// "Absorption"): for each op family, what a consumer does with a deviation δ, constant
// along the operand axes u, that enters by one operand - passes it on (constant along
// which output axes, and whether some of u was lost), absorbs it (its output does not
// change), or breaks (δ enters nonlinearly).
#include "core/analysis/analyzer.h"

namespace lnv::analysis::detail {

namespace {

EdgeResult passes(Mask u, const Shape& out, bool dropped) {
  EdgeResult e;
  e.kind = EdgeResult::pass;
  e.u = u | size1_mask(out);
  e.dropped = dropped;
  return e;
}

EdgeResult breaks(BreakKind why) {
  EdgeResult e;
  e.kind = EdgeResult::brk;
  e.why = why;
  return e;
}

EdgeResult absorbs() {
  EdgeResult e;
  e.kind = EdgeResult::absorb;
  return e;
}

}  // namespace

Mask conv_constant_axes(const Node& conv, size_t rank) {
  Mask m = bit(0);
  for (size_t s = 2; s < rank; ++s) {
    const int64_t pad = conv.padding.size() == 1 ? conv.padding[0] : conv.padding[s - 2];
    if (pad == 0) m |= bit(int64_t(s));
  }
  return m;
}

Mask slice_cut(const Graph& g, int32_t n) {
  const Shape& in = g.shape_of(g.node_inputs[n][0]);
  const std::vector<SliceAxis> l = slice_layout(g.nodes[n], in, g.nodes[n].name);
  Mask cut = 0;
  for (size_t a = 0; a < l.size(); ++a)
    if (!l[a].whole(in[a])) cut |= bit(int64_t(a));
  return cut;
}

Mask pad_axes(const Graph& g, int32_t n) {
  const std::vector<PadAxis> l =
      pad_layout(g.nodes[n], g.shape_of(g.node_inputs[n][0]), g.nodes[n].name);
  Mask m = 0;
  for (size_t a = 0; a < l.size(); ++a)
    if (!l[a].none()) m |= bit(int64_t(a));
  return m;
}

WhereSelect where_select(const Graph& g, int32_t n) {
  const Node& node = g.nodes[n];
  const Shape& cs = node.condition_shape;
  const std::vector<int64_t> st = strides_of(cs);
  WhereSelect w;
  Mask varies = 0;
  for (size_t i = 0; i < node.condition.size(); ++i) {
    w.picks[node.condition[i] != 0 ? 0 : 1] = true;
    for (size_t p = 0; p < cs.size(); ++p) {
      if (varies & bit(int64_t(p))) continue;
      const int64_t idx = (int64_t(i) / st[p]) % cs[p];
      if (idx + 1 < cs[p] && node.condition[i] != node.condition[i + size_t(st[p])])
        varies |= bit(int64_t(p));
    }
  }
  w.varies = operand_to_out(varies, cs.size(), g.node_shapes[n].size());
  return w;
}

EdgeResult Analyzer::edge(int32_t c, int k, Mask u) {
  const Op op = op_of(c);
  switch (op_family(op)) {
    case OpFamily::weighted_producer:
      switch (family_member<WeightedOp>(op)) {
        case WeightedOp::linear:
          return linear_edge(c, k, u);
        case WeightedOp::conv1d:
        case WeightedOp::conv2d:
          return conv_edge(c, k, u);
        case WeightedOp::matmul:
          return matmul_edge(c, k, u);
        case WeightedOp::embedding:
          return breaks(BreakKind::index);
        case WeightedOp::rnn:
        case WeightedOp::lstm:
        case WeightedOp::gru:
        case WeightedOp::attention:
          return breaks(BreakKind::gate);
      }
      break;
    case OpFamily::elementwise_binary:
      switch (family_member<BinaryOp>(op)) {
        case BinaryOp::add:
        case BinaryOp::sub:
          return sum_edge(c, k, u);
        case BinaryOp::mul:
        case BinaryOp::div:
          return product_edge(c, k, u);
      }
      break;
    case OpFamily::scale:
      return scale_edge(c, k, u);
    case OpFamily::dropout:
      return dropout_edge(c, k, u);
    case OpFamily::unary_nonlinearity:
      return breaks(BreakKind::nonlinear);
    case OpFamily::softmax:
      return softmax_edge(c, k, u);
    case OpFamily::reduction:
      return reduction_edge(c, k, u);
    case OpFamily::shape_op:
      switch (family_member<ShapeOp>(op)) {
        case ShapeOp::transpose:
          return transpose_edge(c, k, u);
        case ShapeOp::reshape:
          return reshape_edge(c, k, u);
        // A slice takes a subset of positions: δ stays constant along every axis it was
        // (a constant line cut along it is still constant), and along no other.
        case ShapeOp::slice:
          return passes(u, out_shape(c), false);
        case ShapeOp::expand:
          return expand_edge(c, k, u);
        case ShapeOp::pad:
          return pad_edge(c, k, u);
      }
      break;
    case OpFamily::select:
      return where_edge(c, k, u);
    case OpFamily::concat:
      return concat_edge(c, k, u);
    case OpFamily::center:
      return norm_edge(c, k, u);
    case OpFamily::norm:
      switch (family_member<NormOp>(op)) {
        case NormOp::layer_norm:
          return norm_edge(c, k, u);
        case NormOp::rms_norm:
          return breaks(BreakKind::rms_norm);
      }
      break;
    // An op lnverify does not model absorbs nothing and may do anything with δ.
    case OpFamily::opaque:
      return breaks(BreakKind::opaque);
  }
  throw InternalError("edge: unknown op");
}

// --- Producers -------------------------------------------------------------------------

// Mixes along the input's last axis: δ stays constant along the others.
EdgeResult Analyzer::linear_edge(int32_t c, int k, Mask u) {
  const int64_t features = int64_t(in_shape(c, k).size()) - 1;
  return passes(u & ~bit(features), out_shape(c), (u & bit(features)) != 0);
}

EdgeResult Analyzer::conv_edge(int32_t c, int k, Mask u) {
  const Shape& in = in_shape(c, k);
  const Mask m = u & conv_constant_axes(g_.nodes[c], in.size());
  return passes(m, out_shape(c), (u & ~m & ~size1_mask(in)) != 0);
}

EdgeResult Analyzer::matmul_edge(int32_t c, int k, Mask u) {
  const Node& node = g_.nodes[c];
  const size_t R = out_shape(c).size(), r = in_shape(c, k).size();
  const Shape& other = in_shape(c, 1 - k);
  if (r < 2 || other.size() < 2) return passes(0, out_shape(c), true);
  // δ constant along the contracted axis meets the other operand's sums over it:
  // zero when that operand is zero-mean over its contracted axis by construction.
  const int64_t mine_k = k == 0 ? int64_t(r) - 1 : (node.transpose_b ? int64_t(r) - 1 : int64_t(r) - 2);
  const int64_t other_k =
      k == 0 ? (node.transpose_b ? int64_t(other.size()) - 1 : int64_t(other.size()) - 2)
             : int64_t(other.size()) - 1;
  // When those sums are one constant (a norm's bias, say), the product is the shift
  // times that constant: constant along the other operand's free axis.
  bool constant_sums = false;
  if ((u & bit(mine_k)) && other[other_k] > 1) {
    const Form sums = operand_mean(c, 1 - k, bit(other_k));
    if (pool_.size(sums) == 0) return absorbs();
    constant_sums = is_constant(sums);
  }
  // Batch axes: kept where the other operand is constant along them.
  const Mask other_const =
      constant_sums ? ~Mask(0)
                    : broadcast_const_axes(Shape(other.begin(), other.end() - 2), R - 2);
  const Mask batch_u = operand_to_out(u & all_axes(r - 2), r - 2, R - 2) | all_axes(R - r);
  Mask m = batch_u & other_const;
  if (constant_sums) m |= bit(int64_t(R) - (k == 0 ? 1 : 2));
  if (k == 0) {
    if (u & bit(int64_t(r) - 2)) m |= bit(int64_t(R) - 2);
  } else {
    const int64_t n_axis = node.transpose_b ? int64_t(r) - 2 : int64_t(r) - 1;
    if (u & bit(n_axis)) m |= bit(int64_t(R) - 1);
  }
  return passes(m, out_shape(c), true);
}

// --- Elementwise -----------------------------------------------------------------------

// Deviations add; sub(a, a) and sub(v, mean(v)) over axes of u cancel.
EdgeResult Analyzer::sum_edge(int32_t c, int k, Mask u) {
  const auto& ins = g_.node_inputs[c];
  if (op_of(c) == Op::sub && alias(ins[0]) == alias(ins[1])) return absorbs();
  const ValueRef& self = ins[k];
  if (self.kind == ValueRef::Kind::node && cancels_with_mean(c, self.index, u)) return absorbs();
  const Shape& in = in_shape(c, k);
  const size_t R = out_shape(c).size();
  return passes(operand_to_out(u, in.size(), R) | broadcast_const_axes(in, R), out_shape(c),
                false);
}

// Scaled elementwise by the other operand: constant only along the axes the factor is.
EdgeResult Analyzer::product_edge(int32_t c, int k, Mask u) {
  if (op_of(c) == Op::div && k == 1) return breaks(BreakKind::denominator);
  const Shape& in = in_shape(c, k);
  const size_t R = out_shape(c).size();
  const Mask mine = operand_to_out(u, in.size(), R) | broadcast_const_axes(in, R);
  const Mask factor_const = broadcast_const_axes(in_shape(c, 1 - k), R);
  return passes(mine & factor_const, out_shape(c), (mine & ~factor_const) != 0);
}

EdgeResult Analyzer::scale_edge(int32_t c, int, Mask u) {
  if (g_.nodes[c].factor == 0.0) return absorbs();
  return passes(u, out_shape(c), false);
}

// --- Dropout ---------------------------------------------------------------------------

// In training the mask makes δ vary along every axis.
EdgeResult Analyzer::dropout_edge(int32_t c, int, Mask u) {
  if (mode_ == Mode::training && g_.nodes[c].p > 0.0) return passes(0, out_shape(c), true);
  return passes(u, out_shape(c), false);
}

// --- Softmax ---------------------------------------------------------------------------

// softmax(x + δ) = softmax(x) when δ is constant along the softmax axis.
EdgeResult Analyzer::softmax_edge(int32_t c, int, Mask u) {
  const Node& node = g_.nodes[c];
  const int64_t ax = normalize_axis(node.axis, int64_t(out_shape(c).size()), node.name);
  if (u & bit(ax)) return absorbs();
  return breaks(BreakKind::norm_axes);
}

// --- Reductions ------------------------------------------------------------------------

// A mean passes δ (constant along the axes it averages afterwards); a max passes it only
// over axes along which δ is constant (max(x + c) = max(x) + c).
EdgeResult Analyzer::reduction_edge(int32_t c, int k, Mask u) {
  const Node& node = g_.nodes[c];
  const size_t r = in_shape(c, k).size();
  const Mask b = mask_of(normalize_axes(node.axes, int64_t(r), node.name));
  if (node.op == Op::max && !subset(b, u)) return breaks(BreakKind::max_axes);
  if (node.keepdims) return passes(node.op == Op::mean ? u | b : u, out_shape(c), false);
  return passes(drop_axes(u, b, r), out_shape(c), false);
}

// --- Shape ops -------------------------------------------------------------------------

EdgeResult Analyzer::transpose_edge(int32_t c, int, Mask u) {
  const Node& node = g_.nodes[c];
  const size_t R = out_shape(c).size();
  Mask m = 0;
  for (size_t i = 0; i < R; ++i) {
    const int64_t p = node.perm[i] < 0 ? node.perm[i] + int64_t(R) : node.perm[i];
    if (u & bit(p)) m |= bit(int64_t(i));
  }
  return passes(m, out_shape(c), false);
}

// A block whose input axes are all in u stays constant; a block split or merged across
// u's boundary loses its axes.
EdgeResult Analyzer::reshape_edge(int32_t c, int k, Mask u) {
  Mask m = 0;
  bool dropped = false;
  for (const auto& blk : reshape_blocks(in_shape(c, k), out_shape(c))) {
    if (subset(blk.in, u)) m |= blk.out;
    else if (blk.in & u) dropped = true;
  }
  return passes(m, out_shape(c), dropped);
}

// Every copy gets the same δ: constant along the broadcast axes too.
EdgeResult Analyzer::expand_edge(int32_t c, int k, Mask u) {
  const Shape& in = in_shape(c, k);
  const size_t R = out_shape(c).size();
  return passes(operand_to_out(u, in.size(), R) | broadcast_const_axes(in, R), out_shape(c), false);
}

// δ(pad(x)) = pad(δ(x), 0) whatever the pad value: δ at x's positions, 0 in the padding, so
// no longer constant along a padded axis.
EdgeResult Analyzer::pad_edge(int32_t c, int k, Mask u) {
  const Mask padded = pad_axes(g_, c);
  return passes(u & ~padded, out_shape(c), (u & padded & ~size1_mask(in_shape(c, k))) != 0);
}

// δ(y) = c·δ(x) (δ entering by x): δ where c picks x, 0 elsewhere - constant only along the
// axes c is constant along. An operand c never picks does not reach the output; where(c, v,
// v) is v.
EdgeResult Analyzer::where_edge(int32_t c, int k, Mask u) {
  const WhereSelect& w = select_of(c);
  if (!w.picks[k]) return absorbs();
  const Shape& in = in_shape(c, k);
  const size_t R = out_shape(c).size();
  const Mask mine = operand_to_out(u, in.size(), R) | broadcast_const_axes(in, R);
  const auto& ins = g_.node_inputs[c];
  if (alias(ins[0]) == alias(ins[1])) return passes(mine, out_shape(c), false);
  return passes(mine & ~w.varies, out_shape(c), (mine & w.varies) != 0);
}

// --- Concat ----------------------------------------------------------------------------

// Along the concat axis δ stays constant only when every part carries the same δ (copies
// of one value).
EdgeResult Analyzer::concat_edge(int32_t c, int, Mask u) {
  const Node& node = g_.nodes[c];
  const int64_t ax = normalize_axis(node.axis, int64_t(out_shape(c).size()), node.name);
  bool same = true;
  for (const ValueRef& x : g_.node_inputs[c])
    same = same && copy_root(x, ax) == copy_root(g_.node_inputs[c][0], ax);
  if (same) return passes(u, out_shape(c), false);
  return passes(u & ~bit(ax), out_shape(c), (u & bit(ax)) != 0);
}

ValueRef Analyzer::copy_root(ValueRef x, int64_t axis) const {
  x = alias(x);
  while (x.kind == ValueRef::Kind::node && op_of(x.index) == Op::concat) {
    const Node& n = g_.nodes[x.index];
    const int64_t R = int64_t(g_.node_shapes[x.index].size());
    if (normalize_axis(n.axis, R, n.name) != axis) break;
    const auto& in = g_.node_inputs[x.index];
    const ValueRef first = copy_root(in[0], axis);
    for (const ValueRef& y : in)
      if (!(copy_root(y, axis) == first)) return x;
    x = first;
  }
  return x;
}

// --- Norms and center ------------------------------------------------------------------

// A center or LayerNorm over axes along which δ is constant absorbs it; a center over
// other axes passes it, a LayerNorm breaks.
EdgeResult Analyzer::norm_edge(int32_t c, int, Mask u) {
  if (subset(norm_axes(c), u)) return absorbs();
  if (op_of(c) == Op::center) return passes(u, out_shape(c), false);
  return breaks(BreakKind::norm_axes);
}

}  // namespace lnv::analysis::detail
