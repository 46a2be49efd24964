// The mean rules (docs/spec/semantics.md, "Op rules"; "Means"): for each op family, the
// mean of a node's output over a set of its axes in terms of its operands' means, producer
// terms and param terms - or an opaque atom, with the issue that explains it.
#include <algorithm>

#include "core/analysis/analyzer.h"
#include "core/analysis/producers.h"

namespace lnv::analysis::detail {

namespace {

Rule zero_rule() {
  Rule r;
  r.zero = true;
  return r;
}

Rule parts_rule(std::vector<Part> parts) {
  Rule r;
  r.parts = std::move(parts);
  return r;
}

}  // namespace

Rule Analyzer::mean_rule(int32_t n, Mask a) {
  if (zero_[n]) return zero_rule();
  const Op op = op_of(n);
  switch (op_family(op)) {
    case OpFamily::weighted_producer:
      switch (family_member<WeightedOp>(op)) {
        case WeightedOp::linear:
        case WeightedOp::embedding:
        case WeightedOp::attention:
        case WeightedOp::conv1d:
        case WeightedOp::conv2d:
          return producer_mean(n, a, bit(producer_feature_axis(g_, n)));
        case WeightedOp::matmul:
          return matmul_mean(n, a);
        // A recurrent layer is not linear in its input (the activations of its steps).
        case WeightedOp::rnn:
        case WeightedOp::lstm:
        case WeightedOp::gru:
          return opaque_mean(n, a, IssueKind::nonlinear_output);
      }
      break;
    case OpFamily::elementwise_binary:
      switch (family_member<BinaryOp>(op)) {
        case BinaryOp::add:
        case BinaryOp::sub:
          return sum_mean(n, a);
        case BinaryOp::mul:
        case BinaryOp::div:
          return product_mean(n, a);
      }
      break;
    case OpFamily::scale:
      return scale_mean(n, a);
    case OpFamily::dropout:
      return dropout_mean(n, a);
    // Unary nonlinearities and softmax are not linear in their input: their output is an
    // atom no centering removes.
    case OpFamily::unary_nonlinearity:
    case OpFamily::softmax:
      return opaque_mean(n, a, IssueKind::nonlinear_output);
    case OpFamily::reduction:
      switch (family_member<ReductionOp>(op)) {
        case ReductionOp::mean:
          return reduction_mean(n, a);
        case ReductionOp::max:
          return max_mean(n, a);
      }
      break;
    case OpFamily::shape_op:
      switch (family_member<ShapeOp>(op)) {
        case ShapeOp::transpose:
          return transpose_mean(n, a);
        case ShapeOp::reshape:
          return reshape_mean(n, a);
        case ShapeOp::slice:
          return slice_mean(n, a);
        case ShapeOp::expand:
          return expand_mean(n, a);
        case ShapeOp::pad:
          return pad_mean(n, a);
      }
      break;
    case OpFamily::select:
      return where_mean(n, a);
    case OpFamily::concat:
      return concat_mean(n, a);
    case OpFamily::center:
      return center_mean(n, a);
    case OpFamily::norm:
      switch (family_member<NormOp>(op)) {
        case NormOp::layer_norm:
          return layer_norm_mean(n, a);
        case NormOp::rms_norm:
          return rms_norm_mean(n, a);
      }
      break;
    // An op lnverify does not model: its output is an atom, whatever its inputs.
    case OpFamily::opaque:
      return opaque_mean(n, a, IssueKind::opaque_op);
  }
  throw InternalError("mean_rule: unknown op");
}

Mask Analyzer::operand_mask(int32_t n, int k, Mask m) const {
  return out_to_operand(m, in_shape(n, k).size(), out_shape(n).size()) &
         ~size1_mask(in_shape(n, k));
}

Rule Analyzer::opaque_mean(int32_t n, Mask a, IssueKind kind) {
  Rule r;
  r.leaf = opaque_entry(n, a, kind);
  return r;
}

// --- Producers -------------------------------------------------------------------------

// A conv without bias that maps each position on its own: kernel 1 along every spatial
// axis, stride 1, no padding (a linear map over the channels at each position, so means
// over the batch and spatial axes pass through it as through a linear layer).
bool Analyzer::pointwise_conv(int32_t n) const {
  const Node& node = g_.nodes[n];
  if ((node.op != Op::conv1d && node.op != Op::conv2d) || !node.bias.empty()) return false;
  const Shape& w = g_.shape_of(g_.ref(node.weight));
  for (size_t s = 2; s < w.size(); ++s)
    if (w[s] != 1) return false;
  for (int64_t stride : node.stride)
    if (stride != 1) return false;
  for (int64_t pad : node.padding)
    if (pad != 0) return false;
  return true;
}

int Analyzer::transparent_operand(int32_t n) const {
  const Node& node = g_.nodes[n];
  if ((node.op == Op::linear && node.bias.empty()) || pointwise_conv(n)) return 0;
  if (node.op != Op::matmul) return -1;
  const int act = input_is_param(n, 1) ? 0 : 1;
  if (!input_is_param(n, act) && !(act == 1 && node.transpose_b) &&
      in_shape(n, 1 - act).size() == 2 && in_shape(n, act).size() == out_shape(n).size())
    return act;
  return -1;
}

// A producer averaged over a, its features on the output axes `feature`.
Rule Analyzer::producer_mean(int32_t n, Mask a, Mask feature) {
  feature &= ~size1_mask(out_shape(n));
  const int act = transparent_operand(n);
  // A mean over axes the weight does not touch passes through the product (without a
  // bias): mean_A(x Wᵀ) = mean_A(x) Wᵀ.
  if (act >= 0 && a != 0 && (feature & a) == 0)
    return parts_rule({{act, a, 1.0, (uint64_t(uint32_t(n)) << 8) + 1, -1}});
  // A mean over the features and other axes: mean_F(mean_rest(x) Wᵀ), zero when the
  // input's mean over the rest vanishes by construction.
  if (act >= 0 && (a & ~feature) != 0 && (feature & a) != 0) {
    const Form rest = operand_mean(n, act, a & ~feature);
    if (pool_.size(rest) == 0) return zero_rule();
    // Centering this producer over its features would not be safe, but the input's mean
    // over the other axes is a combination of sound terms: zeroing it (centering those
    // terms) zeroes the whole mean, a linear function of it - center them instead.
    const int32_t producer = producer_term(n, feature);
    if (!term_safe_now(producer) && pool_.first_bad(rest) == nullptr)
      // Its own tag (+3: tag_of(n, k) uses +1 and +2): the transport mean_F(· Wᵀ) differs
      // from the pass-through above.
      return parts_rule({{act, a & ~feature, 1.0, (uint64_t(uint32_t(n)) << 8) + 3, -1}});
  }
  return producer_leaf(n, a, feature);
}

// The producer itself as the atom: its term when centering it zeroes this mean, a bad term
// when its layout or grouping keeps the mean alive, and zero (or opaque) when it is
// already centered (cbwc).
Rule Analyzer::producer_leaf(int32_t n, Mask a, Mask feature) {
  const Node& node = g_.nodes[n];
  Entry e;
  e.atom = n;
  e.mask = a;
  e.coeff = 1.0;
  // A grouped conv centered over all its output channels is not zero-mean over them, unless
  // its input is structurally zero (it then outputs its bias, which centering does center)
  // or uniform along the channel axis (every group then reads the same input, and for each
  // input position and tap the centered weights sum to 0 over all output channels, as for
  // a dense conv).
  const ValueRef& x = g_.node_inputs[n][0];
  const bool zero_input = x.kind == ValueRef::Kind::node && zero_[x.index];
  const bool same_input_per_group = x.kind == ValueRef::Kind::node && (uniform_[x.index] & bit(1));
  const bool grouped = !centering_zeroes_features(g_, n) && !zero_input && !same_input_per_group;
  Rule r;
  if (node.cbwc && node.op != Op::rnn) {
    if (subset(feature, a) && feature != 0 && !grouped) return zero_rule();
    e.status = EntryStatus::opaque;
    e.issue = add_issue({IssueKind::cbwc_other_axes, n, -1, feature, a});
    r.leaf = e;
    return r;
  }
  e.ref = producer_term(n, feature);
  if (grouped) {
    e.status = EntryStatus::bad_term;
    e.issue = add_issue({IssueKind::grouped_conv, n, -1, feature, a});
  } else if (feature == 0 || !subset(feature, a)) {
    e.status = EntryStatus::bad_term;
    e.issue = add_issue({IssueKind::feature_mismatch, n, -1, feature, a});
  } else {
    e.status = EntryStatus::term;
    e.safe = term_safe_now(e.ref);
  }
  r.leaf = e;
  return r;
}

Rule Analyzer::matmul_mean(int32_t n, Mask a) {
  // A product of two params constant along every averaged axis is a param term the LN
  // absorbs, like a broadcast param: removed by zeroing its second operand.
  if (input_is_param(n, 0) && input_is_param(n, 1) && a == 0)
    return parts_rule({{1, 0, 1.0, tag_of(n, 1), -1}});
  if (const int64_t feature = producer_feature_axis(g_, n); feature >= 0)
    return producer_mean(n, a, bit(feature));
  return activation_product_mean(n, a);
}

// Two activations: the mean over the columns is a·mean(b), over the rows mean(a)·b.
Rule Analyzer::activation_product_mean(int32_t n, Mask a) {
  const Node& node = g_.nodes[n];
  const Shape& out = out_shape(n);
  const size_t R = out.size();
  const size_t ra = in_shape(n, 0).size(), rb = in_shape(n, 1).size();
  if (a == bit(int64_t(R) - 1) && rb >= 2) {
    const Mask bm = node.transpose_b ? bit(int64_t(rb) - 2) : bit(int64_t(rb) - 1);
    // b a softmax along the columns: mean_j(b) = 1/J everywhere, so the mean over the
    // columns is K/J times a's mean over its last axis (k, of size K), in the same
    // coordinates when a has the output's shape but for that axis.
    const ValueRef bref = alias(g_.node_inputs[n][1]);
    if (bref.kind == ValueRef::Kind::node && op_of(bref.index) == Op::softmax &&
        ra == R && rb == R &&
        bm == bit(normalize_axis(g_.nodes[bref.index].axis, int64_t(rb),
                                 g_.nodes[bref.index].name))) {
      Shape rows = in_shape(n, 0), out_rows = out;
      rows.pop_back();
      out_rows.pop_back();
      if (rows == out_rows) {
        const double K = double(in_shape(n, 0)[ra - 1]), J = double(out[R - 1]);
        return parts_rule({{0, operand_mask(n, 0, bit(int64_t(R) - 1)), K / J, 0, -1}});
      }
    }
    return parts_rule({{1, bm, 1.0, tag_of(n, 1), -1}});
  }
  if (a == bit(int64_t(R) - 2) && ra >= 2)
    return parts_rule({{0, bit(int64_t(ra) - 2), 1.0, tag_of(n, 0), -1}});
  // Over the rows (or columns) and more: mean_rest(mean_rows(a)·b), zero when a's mean
  // over its rows (or b's over its columns) vanishes by construction.
  if (ra >= 2 && (a & bit(int64_t(R) - 2)) &&
      pool_.size(operand_mean(n, 0, bit(int64_t(ra) - 2))) == 0)
    return zero_rule();
  if (rb >= 2 && (a & bit(int64_t(R) - 1)) &&
      pool_.size(operand_mean(n, 1, node.transpose_b ? bit(int64_t(rb) - 2)
                                                     : bit(int64_t(rb) - 1))) == 0)
    return zero_rule();
  return opaque_mean(n, a, IssueKind::matmul_mixing);
}

// --- Elementwise -----------------------------------------------------------------------

Rule Analyzer::sum_mean(int32_t n, Mask a) {
  const double sign = op_of(n) == Op::sub ? -1.0 : 1.0;
  return parts_rule({{0, operand_mask(n, 0, a), 1.0, 0, -1},
                     {1, operand_mask(n, 1, a), sign, 0, -1}});
}

// mean_A(a·b) = mean_{A∩Vb}(b · mean_{A∖Vb}(a)): linear in a's mean over the axes along
// which b is constant (Vb: the axes b varies along). The outer mean over A∩Vb is part of
// the transport: the tag keeps it, so mean_{A}(a·b) and mean_{A'}(a·b) cancel only when
// A∩Vb = A'∩Vb (center over axes of Vb outside A: mean_A(a·b) - mean_{A∪B}(a·b) is not
// zero). A factor varying along every averaged axis leaves no centerable mean.
Rule Analyzer::product_mean(int32_t n, Mask a) {
  const Node& node = g_.nodes[n];
  const size_t R = out_shape(n).size();
  // A LayerScale averaged over its feature axis (and maybe more): the mul is a producer
  // term, centered by moving γ into its producer first.
  if (const int64_t f = producer_feature_axis(g_, n); f >= 0 && subset(bit(f), a))
    return producer_leaf(n, a, bit(f));
  const Mask va = ~broadcast_const_axes(in_shape(n, 0), R);
  const Mask vb = ~broadcast_const_axes(in_shape(n, 1), R);
  auto outer_tag = [&](int k, Mask outer) {
    if (outer == 0) return tag_of(n, k);
    uint64_t z = uint64_t(outer) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    return tag_of(n, k) ^ (z ^ (z >> 29));
  };
  if ((a & vb) == 0 || (a & ~vb) != 0)
    return parts_rule({{0, operand_mask(n, 0, a & ~vb), 1.0, outer_tag(0, a & vb), -1}});
  if (node.op == Op::mul && (a & ~va) != 0)
    return parts_rule({{1, operand_mask(n, 1, a & ~va), 1.0, outer_tag(1, a & va), -1}});
  Rule r;
  const int32_t issue = add_issue({IssueKind::per_feature_factor, n, -1, 0, a});
  if (node.op == Op::mul && input_is_param(n, 0) && !input_is_param(n, 1))
    r.parts.push_back({1, operand_mask(n, 1, a), 1.0, tag_of(n, 1), issue});
  else
    r.parts.push_back({0, operand_mask(n, 0, a), 1.0, tag_of(n, 0), issue});
  // The product itself is a new atom nobody can center.
  Entry e = opaque_entry(n, a, IssueKind::per_feature_factor);
  e.issue = issue;
  r.extra.push_back(pool_.leaf(e));
  return r;
}

Rule Analyzer::scale_mean(int32_t n, Mask a) {
  const double factor = g_.nodes[n].factor;
  if (factor == 0.0) return zero_rule();
  return parts_rule({{0, a, factor, 0, -1}});
}

// --- Dropout ---------------------------------------------------------------------------

Rule Analyzer::dropout_mean(int32_t n, Mask a) {
  if (mode_ == Mode::training && g_.nodes[n].p > 0.0)
    return opaque_mean(n, a, IssueKind::dropout_training);
  return parts_rule({{0, a, 1.0, 0, -1}});
}

// --- Reductions ------------------------------------------------------------------------

Rule Analyzer::reduction_mean(int32_t n, Mask a) {
  const Node& node = g_.nodes[n];
  const size_t rin = in_shape(n, 0).size();
  const Mask b = mask_of(normalize_axes(node.axes, int64_t(rin), node.name));
  const Mask a_in = node.keepdims ? a : insert_axes(a, b, rin);
  return parts_rule({{0, a_in | b, 1.0, 0, -1}});
}

Rule Analyzer::max_mean(int32_t n, Mask a) {
  const Node& node = g_.nodes[n];
  const size_t rin = in_shape(n, 0).size();
  const Mask b = mask_of(normalize_axes(node.axes, int64_t(rin), node.name));
  if (!subset(b, size1_mask(in_shape(n, 0))))
    return opaque_mean(n, a, IssueKind::nonlinear_output);
  // A max over axes of size 1 is the identity.
  return parts_rule({{0, node.keepdims ? a : insert_axes(a, b, rin), 1.0, 0, -1}});
}

// --- Shape ops -------------------------------------------------------------------------

// The mean over the averaged axes is a tensor over the others; when the transpose reorders
// those (of size > 1), it is a permuted tensor: a transport that qualifies the atoms (by
// the permutation), so it does not cancel against the unpermuted one.
Rule Analyzer::transpose_mean(int32_t n, Mask a) {
  const Node& node = g_.nodes[n];
  const Shape& out = out_shape(n);
  const size_t R = out.size();
  Mask a_in = 0;
  uint64_t order = 0;
  int64_t last = -1;
  bool kept = true;
  for (size_t i = 0; i < R; ++i) {
    const int64_t p = node.perm[i] < 0 ? node.perm[i] + int64_t(R) : node.perm[i];
    if (a & bit(int64_t(i))) {
      a_in |= bit(p);
    } else if (out[i] != 1) {
      kept = kept && p > last;
      last = p;
      order = order * 131 + uint64_t(p) + 1;
    }
  }
  return parts_rule({{0, a_in, 1.0, kept ? 0 : (order << 8) + 0xfe, -1}});
}

// A slice cutting none of the averaged axes: the mean of the slice is the slice of the
// mean (a transport: the positions it keeps along the cut axes qualify the atoms, so a
// slice of x does not cancel x). Cutting an averaged axis (taking part of it, or reversing
// it) averages a subset: not a mean over whole axes, an opaque atom - unless the input is
// uniform along it.
Rule Analyzer::slice_mean(int32_t n, Mask a) {
  const Shape& in = in_shape(n, 0);
  const std::vector<SliceAxis> l = slice_layout(g_.nodes[n], in, g_.nodes[n].name);
  const Mask real = a & ~size1_mask(out_shape(n));
  Mask cut = 0;
  uint64_t tag = 0x511ce;
  for (size_t i = 0; i < l.size(); ++i) {
    if (l[i].whole(in[i])) continue;
    cut |= bit(int64_t(i));
    tag = tag * 1000003 + (uint64_t(i) + 1);
    tag = tag * 1000003 + uint64_t(l[i].start);
    tag = tag * 1000003 + uint64_t(l[i].step);
    tag = tag * 1000003 + uint64_t(l[i].count);
  }
  // Along an axis the input is uniform along, any part has the mean of the whole.
  const ValueRef& x = g_.node_inputs[n][0];
  const Mask uniform = x.kind == ValueRef::Kind::node ? uniform_[x.index] : size1_mask(in);
  if (real & cut & ~uniform) return opaque_mean(n, a, IssueKind::slice_axes);
  return parts_rule({{0, real, 1.0, cut ? tag : 0, -1}});
}

// A broadcast: along the axes x is copied along, the mean is x itself (as for a broadcast
// operand of a sum).
Rule Analyzer::expand_mean(int32_t n, Mask a) {
  return parts_rule({{0, operand_mask(n, 0, a), 1.0, 0, -1}});
}

// Zeros around x: averaged along a padded axis of input size d and output size d', the
// mean is d/d' times x's (the ratio of the row lengths); along padded axes not averaged, x's
// mean sits among zeros (a transport, tagged by the layout). A nonzero pad value puts a
// constant into every mean (and constant rows where the padding is not averaged), which
// no centering removes.
Rule Analyzer::pad_mean(int32_t n, Mask a) {
  const Shape& in = in_shape(n, 0);
  const Shape& out = out_shape(n);
  const std::vector<PadAxis> l = pad_layout(g_.nodes[n], in, g_.nodes[n].name);
  const Mask padded = pad_axes(g_, n);
  if (padded == 0) return parts_rule({{0, a, 1.0, 0, -1}});
  if (g_.nodes[n].value != 0.0) return opaque_mean(n, a, IssueKind::pad_value);
  double ratio = 1.0;
  uint64_t tag = 0x9ad;
  for (size_t i = 0; i < l.size(); ++i) {
    if (l[i].none()) continue;
    if (a & bit(int64_t(i))) {
      ratio *= double(in[i]) / double(out[i]);
    } else {
      tag = tag * 1000003 + (uint64_t(i) + 1);
      tag = tag * 1000003 + uint64_t(l[i].before);
      tag = tag * 1000003 + uint64_t(l[i].after);
    }
  }
  return parts_rule({{0, a, ratio, subset(padded, a) ? 0 : tag, -1}});
}

// y = where(c, x, z), c constant, V the output axes c varies along. Averaged over axes c is
// constant along, each row is a row of x or of z: mean_a(y) = where(c, mean_a(x),
// mean_a(z)), each operand's mean placed by the condition (a transport, tagged per
// operand; an operand c never picks contributes nothing, and one c always picks is a mere
// broadcast). Averaged also along V: mean_{a∩V}(c·mean_{a∖V}(x) + (1-c)·mean_{a∖V}(z)),
// linear in the operands' means over a∖V (the outer mean over a∩V is part of the
// transport). With a ⊆ V, an operand uniform along a contributes itself times the mean of
// c over a (a transport too); any other operand leaves no mean of it: an opaque atom.
Rule Analyzer::where_mean(int32_t n, Mask a) {
  // where(c, v, v) is v.
  if (alias(g_.node_inputs[n][0]) == alias(g_.node_inputs[n][1]))
    return parts_rule({{0, operand_mask(n, 0, a), 1.0, 0, -1}});
  const WhereSelect& w = select_of(n);
  const Mask outer = a & w.varies, inner = a & ~w.varies;
  const bool both = w.picks[0] && w.picks[1];
  const size_t R = out_shape(n).size();
  for (int k = 0; k < 2 && outer != 0 && inner == 0; ++k) {
    const ValueRef& x = g_.node_inputs[n][k];
    const Shape& s = g_.shape_of(x);
    const Mask own = x.kind == ValueRef::Kind::node ? uniform_[x.index] : size1_mask(s);
    if (w.picks[k] && !subset(outer, operand_to_out(own, s.size(), R) | broadcast_const_axes(s, R)))
      return opaque_mean(n, a, IssueKind::where_mixes);
  }
  Rule r;
  for (int k = 0; k < 2; ++k) {
    if (!w.picks[k]) continue;
    uint64_t tag = both ? tag_of(n, k) : 0;
    if (outer != 0) {
      uint64_t z = uint64_t(outer) * 0x9E3779B97F4A7C15ull;
      z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
      tag = tag_of(n, k) ^ (z ^ (z >> 29));
    }
    r.parts.push_back({k, operand_mask(n, k, inner), 1.0, tag, -1});
  }
  return r;
}

// A block averaged whole is the mean over its input axes. A block averaged in part is not
// a mean over whole input axes (center over 4 rows, then [4, 3] -> [2, 6]: a group of 6
// holds 2 of the rows); when its averaged output axes are the block's innermost, with P
// elements, each group of P holds whole runs of the innermost input axes whose sizes
// multiply to a divisor of P, so it is an average of their mean: the part averages over
// those, and the rest is marked.
Rule Analyzer::reshape_mean(int32_t n, Mask a) {
  const Shape& in = in_shape(n, 0);
  const Shape& out = out_shape(n);
  Mask a_in = 0;
  bool whole = true;
  for (const auto& blk : reshape_blocks(in, out)) {
    const Mask s = blk.out & a;
    if (s == 0) continue;
    if (subset(blk.out, a)) {
      a_in |= blk.in;
      continue;
    }
    whole = false;
    const int64_t lowest = axes_of(s).front();
    bool innermost = true;
    int64_t P = 1;
    for (int64_t j : axes_of(blk.out)) {
      if (j >= lowest && !(s & bit(j))) innermost = false;
      if (s & bit(j)) P *= out[size_t(j)];
    }
    if (!innermost) continue;
    const std::vector<int64_t> ins = axes_of(blk.in);
    int64_t Q = 1;
    for (auto it = ins.rbegin(); it != ins.rend(); ++it) {
      Q *= in[size_t(*it)];
      if (P % Q != 0) break;
      a_in |= bit(*it);
    }
  }
  if (whole) return parts_rule({{0, a_in, 1.0, 0, -1}});
  return parts_rule(
      {{0, a_in, 1.0, tag_of(n, 0), add_issue({IssueKind::reshape_blocks, n, -1, 0, a})}});
}

// --- Concat ----------------------------------------------------------------------------

// Averaged along the concat axis, each part contributes its share; otherwise each part's
// mean lands on its own slice (a transport: tagged by the part).
Rule Analyzer::concat_mean(int32_t n, Mask a) {
  const Node& node = g_.nodes[n];
  const Shape& out = out_shape(n);
  const int64_t c = normalize_axis(node.axis, int64_t(out.size()), node.name);
  bool copies = in_shape(n, 0)[c] == 1;
  for (const ValueRef& x : g_.node_inputs[n])
    copies = copies && alias(x) == alias(g_.node_inputs[n][0]);
  // Copies of one value of size 1 along the axis: a broadcast of it.
  if (copies) return parts_rule({{0, a & ~bit(c), 1.0, 0, -1}});
  const bool along = (a & bit(c)) != 0;
  Rule r;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const double share = along ? double(in_shape(n, int(k))[c]) / double(out[c]) : 1.0;
    r.parts.push_back({int(k), a, share, along ? 0 : tag_of(n, int(k)), -1});
  }
  return r;
}

// --- Norms and center ------------------------------------------------------------------

// mean_a(x - mean_b(x)) = mean_a(x) - mean_{a∪b}(x): zero when b ⊆ a.
Rule Analyzer::center_mean(int32_t n, Mask a) {
  const Mask b = norm_axes(n) & ~size1_mask(out_shape(n));
  if (subset(b, a)) return zero_rule();
  return parts_rule({{0, a, 1.0, 0, -1}, {0, a | b, -1.0, 0, -1}});
}

Rule Analyzer::layer_norm_mean(int32_t n, Mask a) {
  const Node& node = g_.nodes[n];
  const Mask b = norm_axes(n) & ~size1_mask(out_shape(n));
  if (!node.weight.empty()) return opaque_mean(n, a, IssueKind::norm_with_weight);
  if (!subset(b, a)) {
    // Over part of its axes, a = a_b ∪ (axes outside b), a_b ⊂ b: with m, s the input's
    // mean and inverse deviation over b (constant along b), mean_a_b(LN(x) - bias) =
    // s·(mean_a_b(x) - m), and m = mean_b(x) is a mean of mean_a_b(x): zero when the
    // input is zero-mean over a_b by construction (an LN over [1, 2] of rows already
    // centered over 2 stays centered over 2).
    const Mask a_b = a & b;
    if (a_b == 0 || pool_.size(operand_mean(n, 0, a_b)) != 0)
      return opaque_mean(n, a, IssueKind::norm_other_axes);
  }
  if (node.bias.empty()) return zero_rule();
  Rule r;
  r.extra.push_back(norm_bias_leaf(n, a));
  return r;
}

// Without affine, an RMSNorm only rescales rows (by s, constant along its axes b):
// mean_a(x·s) is a mean of s·mean_{a∩b}(x), zero when the input is zero-mean over a∩b -
// over all of b or over part of it.
Rule Analyzer::rms_norm_mean(int32_t n, Mask a) {
  const Node& node = g_.nodes[n];
  const Mask a_b = a & norm_axes(n) & ~size1_mask(out_shape(n));
  if (node.weight.empty() && node.bias.empty() && a_b != 0 &&
      pool_.size(operand_mean(n, 0, a_b)) == 0)
    return zero_rule();
  return opaque_mean(n, a, IssueKind::rms_norm_output);
}

}  // namespace lnv::analysis::detail
