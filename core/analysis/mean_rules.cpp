// The mean-form rules of the analyzer (analyzer.h): for each op, the mean of its output
// over a set of axes in terms of its operands' means, producer terms and param terms.
#include <algorithm>

#include "core/analysis/analyzer.h"

namespace lnv::analysis::detail {

int32_t Analyzer::producer_term(int32_t n, Mask feature) {
  auto [it, inserted] = producer_terms_.try_emplace(n, int32_t(terms_.size()));
  if (!inserted) return it->second;
  Term t;
  t.term.kind = CenterTerm::Kind::producer;
  t.term.node = g_.nodes[n].name;
  t.producer = n;
  // δ = -mean_f(t) is as uniform as t itself.
  feature |= uniform_[n];
  t.pending = true;
  terms_.push_back(t);
  Safety s = safety(n, feature);
  terms_[it->second].safety = s;
  terms_[it->second].pending = false;
  return it->second;
}

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

Rule Analyzer::producer_rule(int32_t n, Mask a, Mask feature) {
  const Node& node = g_.nodes[n];
  feature &= ~analysis::size1_mask(out_shape(n));
  Rule r;
  // A mean over axes the weight does not touch passes through the product (without a
  // bias): mean_A(x Wᵀ) = mean_A(x) Wᵀ.
  if (a != 0 && (feature & a) == 0) {
    const size_t R = out_shape(n).size();
    const uint64_t tag = (uint64_t(uint32_t(n)) << 8) + 1;
    if ((node.op == Op::linear && node.bias.empty()) || pointwise_conv(n)) {
      r.parts.push_back({0, a, 1.0, tag, -1});
      return r;
    }
    if (node.op == Op::matmul) {
      const int act = input_is_param(n, 1) ? 0 : 1;
      if (!input_is_param(n, act) && !(act == 1 && node.transpose_b) &&
          in_shape(n, 1 - act).size() == 2 &&
          in_shape(n, act).size() == R) {
        r.parts.push_back({act, a, 1.0, tag, -1});
        return r;
      }
    }
  }
  // A mean over the features and other axes: mean_F(mean_rest(x) Wᵀ), zero when the
  // input's mean over the rest vanishes by construction.
  if ((a & ~feature) != 0 && (feature & a) != 0) {
    const size_t R = out_shape(n).size();
    int act = -1;
    if ((node.op == Op::linear && node.bias.empty()) || pointwise_conv(n)) act = 0;
    if (node.op == Op::matmul) {
      const int candidate = input_is_param(n, 1) ? 0 : 1;
      if (!input_is_param(n, candidate) && !(candidate == 1 && node.transpose_b) &&
          in_shape(n, 1 - candidate).size() == 2 && in_shape(n, candidate).size() == R)
        act = candidate;
    }
    if (act >= 0) {
      const Form rest = operand_mean(n, act, a & ~feature);
      if (pool_.size(rest) == 0) {
        r.zero = true;
        return r;
      }
      // Centering this producer over its features would not be safe, but the input's mean
      // over the other axes is a combination of sound terms: zeroing it (centering those
      // terms) zeroes the whole mean, a linear function of it - center them instead.
      const int32_t producer = producer_term(n, feature);
      if (!term_safe_now(producer) && pool_.first_bad(rest) == nullptr) {
        // Its own tag (+3: the matmul rules' tag_of(k) use +1 and +2): the transport
        // mean_F(· Wᵀ) differs from the pass-through above.
        r.parts.push_back({act, a & ~feature, 1.0, (uint64_t(uint32_t(n)) << 8) + 3, -1});
        return r;
      }
    }
  }
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
  const bool grouped = (node.op == Op::conv1d || node.op == Op::conv2d) && node.groups != 1 &&
                       !zero_input && !same_input_per_group;
  if (node.cbwc && node.op != Op::rnn) {
    if (subset(feature, a) && feature != 0 && !grouped) {
      r.zero = true;
      return r;
    }
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

Form Analyzer::param_term_leaf(int32_t n, int k, Mask mask) {
  const Shape& ps = in_shape(n, k);
  const Param& p = g_.params[g_.node_inputs[n][k].index];
  const auto key = std::make_tuple(n, k, mask);
  auto [it, inserted] = param_terms_.try_emplace(key, int32_t(terms_.size()));
  if (inserted) {
    Term t;
    t.term.kind = CenterTerm::Kind::param;
    t.term.node = g_.nodes[n].name;
    t.term.param = p.name;
    t.term.slot = "inputs/" + std::to_string(k);
    t.term.axes = analysis::axes_of(mask);
    t.term.remove = mask == 0;
    t.use_node = n;
    t.use_slot = k;
    t.use_mask = mask | analysis::size1_mask(ps);
    t.pending = true;
    terms_.push_back(t);
    terms_[it->second].safety = injected_safety(n, k, mask | analysis::size1_mask(ps));
    terms_[it->second].pending = false;
  }
  return term_leaf(atom_of_param_use(n, k), mask, it->second);
}

// The bias of a norm without weight, over the norm's axes `b` (output coordinates); the
// LN's mean is over `a`.
Form Analyzer::norm_bias_leaf(int32_t n, Mask a) {
  const Node& node = g_.nodes[n];
  const Mask b = norm_axes(n);
  const size_t rank = out_shape(n).size();
  // Bias axis i is the i-th axis of b.
  Mask bias_mask = 0;
  int i = 0;
  for (size_t ax = 0; ax < rank; ++ax)
    if (b & bit(int64_t(ax))) {
      if ((a & bit(int64_t(ax))) && out_shape(n)[ax] != 1) bias_mask |= bit(i);
      ++i;
    }
  const auto key = std::make_tuple(n, -1, bias_mask);
  auto [it, inserted] = param_terms_.try_emplace(key, int32_t(terms_.size()));
  if (inserted) {
    Term t;
    t.term.kind = CenterTerm::Kind::param;
    t.term.node = node.name;
    t.term.param = node.bias;
    t.term.slot = "bias";
    t.term.axes = analysis::axes_of(bias_mask);
    t.term.remove = bias_mask == 0;
    t.use_node = n;
    t.use_slot = -1;
    // The centered bias varies only along the norm axes it is not centered over.
    const Mask varying = b & ~a;
    t.use_mask = canon_u(n, ~varying & ((rank >= 64) ? ~Mask(0) : ((Mask(1) << rank) - 1)));
    t.pending = true;
    terms_.push_back(t);
    terms_[it->second].safety = injected_safety(n, -1, terms_[it->second].use_mask);
    terms_[it->second].pending = false;
  }
  return term_leaf(atom_of_param_use(n, -1), bias_mask, it->second);
}

Rule Analyzer::mean_rule(int32_t n, Mask a) {
  const Node& node = g_.nodes[n];
  const Shape& out = out_shape(n);
  const size_t R = out.size();
  Rule r;
  if (zero_[n]) {
    r.zero = true;
    return r;
  }
  auto operand_mask = [&](int k, Mask m) {
    return analysis::out_to_operand(m, in_shape(n, k).size(), R) &
           ~analysis::size1_mask(in_shape(n, k));
  };
  auto tag_of = [&](int k) { return (uint64_t(uint32_t(n)) << 8 | uint64_t(k)) + 1; };
  switch (node.op) {
    case Op::linear:
    case Op::embedding:
    case Op::attention:
      return producer_rule(n, a, bit(int64_t(R) - 1));
    case Op::conv1d:
    case Op::conv2d:
      return producer_rule(n, a, bit(1));
    case Op::matmul: {
      const bool pa = input_is_param(n, 0), pb = input_is_param(n, 1);
      // A product of two params constant along every averaged axis is a param term the
      // LN absorbs, like a broadcast param: removed by zeroing its second operand.
      if (pa && pb && a == 0) {
        r.parts.push_back({1, 0, 1.0, tag_of(1), -1});
        return r;
      }
      if (pb) return producer_rule(n, a, bit(int64_t(R) - 1));
      if (pa) return producer_rule(n, a, bit(int64_t(R) - 2));
      // Two activations: mean over the columns is a·mean(b), over the rows mean(a)·b.
      const size_t ra = in_shape(n, 0).size(), rb = in_shape(n, 1).size();
      if (a == bit(int64_t(R) - 1) && rb >= 2) {
        const Mask bm = node.transpose_b ? bit(int64_t(rb) - 2) : bit(int64_t(rb) - 1);
        // b a softmax along the columns: mean_j(b) = 1/J everywhere, so the mean over the
        // columns is K/J times a's mean over its last axis (k, of size K), in the same
        // coordinates when a has the output's shape but for that axis.
        const ValueRef bref = alias(g_.node_inputs[n][1]);
        if (bref.kind == ValueRef::Kind::node && g_.nodes[bref.index].op == Op::softmax &&
            ra == R && rb == R &&
            bm == bit(normalize_axis(g_.nodes[bref.index].axis, int64_t(rb),
                                     g_.nodes[bref.index].name))) {
          Shape rows = in_shape(n, 0), out_rows = out;
          rows.pop_back();
          out_rows.pop_back();
          if (rows == out_rows) {
            const double K = double(in_shape(n, 0)[ra - 1]), J = double(out[R - 1]);
            r.parts.push_back({0, operand_mask(0, bit(int64_t(R) - 1)), K / J, 0, -1});
            return r;
          }
        }
        r.parts.push_back({1, bm, 1.0, tag_of(1), -1});
        return r;
      }
      if (a == bit(int64_t(R) - 2) && ra >= 2) {
        r.parts.push_back({0, bit(int64_t(ra) - 2), 1.0, tag_of(0), -1});
        return r;
      }
      // Over the rows (or columns) and more: mean_rest(mean_rows(a)·b), zero when a's mean
      // over its rows (or b's over its columns) vanishes by construction.
      if (ra >= 2 && (a & bit(int64_t(R) - 2)) && pool_.size(operand_mean(n, 0, bit(int64_t(ra) - 2))) == 0) {
        r.zero = true;
        return r;
      }
      if (rb >= 2 && (a & bit(int64_t(R) - 1)) &&
          pool_.size(operand_mean(n, 1, node.transpose_b ? bit(int64_t(rb) - 2) : bit(int64_t(rb) - 1))) == 0) {
        r.zero = true;
        return r;
      }
      r.leaf = opaque_entry(n, a, IssueKind::matmul_mixing);
      return r;
    }
    case Op::rnn:
    case Op::relu:
    case Op::gelu:
    case Op::tanh:
    case Op::sigmoid:
    case Op::silu:
    case Op::exp:
    case Op::softmax:
      r.leaf = opaque_entry(n, a, IssueKind::nonlinear_output);
      return r;
    case Op::max: {
      const size_t rin = in_shape(n, 0).size();
      const Mask b = analysis::mask_of(normalize_axes(node.axes, int64_t(rin), node.name));
      if (!subset(b, analysis::size1_mask(in_shape(n, 0)))) {
        r.leaf = opaque_entry(n, a, IssueKind::nonlinear_output);
        return r;
      }
      // A max over axes of size 1 is the identity.
      r.parts.push_back({0, node.keepdims ? a : analysis::insert_axes(a, b, rin), 1.0, 0, -1});
      return r;
    }
    case Op::rms_norm: {
      // Without affine, an RMSNorm only rescales rows (by s, constant along its axes b):
      // mean_a(x·s) is a mean of s·mean_{a∩b}(x), zero when the input is zero-mean over
      // a∩b - over all of b or over part of it.
      const Mask a_b = a & norm_axes(n) & ~analysis::size1_mask(out);
      if (node.weight.empty() && node.bias.empty() && a_b != 0 &&
          pool_.size(operand_mean(n, 0, a_b)) == 0) {
        r.zero = true;
        return r;
      }
      r.leaf = opaque_entry(n, a, IssueKind::rms_norm_output);
      return r;
    }
    case Op::add:
    case Op::sub:
      r.parts.push_back({0, operand_mask(0, a), 1.0, 0, -1});
      r.parts.push_back({1, operand_mask(1, a), node.op == Op::sub ? -1.0 : 1.0, 0, -1});
      return r;
    case Op::scale:
      if (node.factor == 0.0) {
        r.zero = true;
        return r;
      }
      r.parts.push_back({0, a, node.factor, 0, -1});
      return r;
    case Op::dropout:
      if (mode_ == Mode::training && node.p > 0.0) {
        r.leaf = opaque_entry(n, a, IssueKind::dropout_training);
        return r;
      }
      r.parts.push_back({0, a, 1.0, 0, -1});
      return r;
    case Op::mul:
    case Op::div: {
      const Mask va = ~analysis::broadcast_const_axes(in_shape(n, 0), R);
      const Mask vb = ~analysis::broadcast_const_axes(in_shape(n, 1), R);
      // mean_A(a·b) = mean_{A∩Vb}(b · mean_{A∖Vb}(a)): linear in a's mean over the axes
      // along which b is constant. The outer mean over A∩Vb is part of the transport: the
      // tag keeps it, so mean_{A}(a·b) and mean_{A'}(a·b) cancel only when A∩Vb = A'∩Vb
      // (center over axes of Vb outside A: mean_A(a·b) - mean_{A∪B}(a·b) is not zero).
      auto outer_tag = [&](int k, Mask outer) {
        if (outer == 0) return tag_of(k);
        uint64_t z = uint64_t(outer) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
        return tag_of(k) ^ (z ^ (z >> 29));
      };
      if ((a & vb) == 0 || (a & ~vb) != 0) {
        r.parts.push_back({0, operand_mask(0, a & ~vb), 1.0, outer_tag(0, a & vb), -1});
      } else if (node.op == Op::mul && (a & ~va) != 0) {
        r.parts.push_back({1, operand_mask(1, a & ~va), 1.0, outer_tag(1, a & va), -1});
      } else {
        const int32_t issue = add_issue({IssueKind::per_feature_factor, n, -1, 0, a});
        if (node.op == Op::mul && input_is_param(n, 0) && !input_is_param(n, 1))
          r.parts.push_back({1, operand_mask(1, a), 1.0, tag_of(1), issue});
        else
          r.parts.push_back({0, operand_mask(0, a), 1.0, tag_of(0), issue});
        // The product itself is a new atom nobody can center.
        Entry e = opaque_entry(n, a, IssueKind::per_feature_factor);
        e.issue = issue;
        r.extra.push_back(pool_.leaf(e));
      }
      return r;
    }
    case Op::center: {
      const Mask b = norm_axes(n) & ~analysis::size1_mask(out);
      if (subset(b, a)) {
        r.zero = true;
        return r;
      }
      r.parts.push_back({0, a, 1.0, 0, -1});
      r.parts.push_back({0, a | b, -1.0, 0, -1});
      return r;
    }
    case Op::mean: {
      const size_t rin = in_shape(n, 0).size();
      const Mask b = analysis::mask_of(normalize_axes(node.axes, int64_t(rin), node.name));
      const Mask a_in = node.keepdims ? a : analysis::insert_axes(a, b, rin);
      r.parts.push_back({0, a_in | b, 1.0, 0, -1});
      return r;
    }
    case Op::transpose: {
      // The mean over the averaged axes is a tensor over the others; when the transpose
      // reorders those (of size > 1), it is a permuted tensor: a transport that qualifies
      // the atoms (by the permutation), so it does not cancel against the unpermuted one.
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
      r.parts.push_back({0, a_in, 1.0, kept ? 0 : (order << 8) + 0xfe, -1});
      return r;
    }
    case Op::reshape: {
      // A block averaged whole is the mean over its input axes. A block averaged in part
      // is not a mean over whole input axes (center over 4 rows, then [4, 3] -> [2, 6]:
      // a group of 6 holds 2 of the rows); when its averaged output axes are the block's
      // innermost, with P elements, each group of P holds whole runs of the innermost
      // input axes whose sizes multiply to a divisor of P, so it is an average of their
      // mean: the part averages over those, and the rest is marked.
      const Shape& in = in_shape(n, 0);
      Mask a_in = 0;
      bool whole = true;
      for (const auto& blk : analysis::reshape_blocks(in, out)) {
        const Mask s = blk.out & a;
        if (s == 0) continue;
        if (subset(blk.out, a)) {
          a_in |= blk.in;
          continue;
        }
        whole = false;
        const int64_t lowest = analysis::axes_of(s).front();
        bool innermost = true;
        int64_t P = 1;
        for (int64_t j : analysis::axes_of(blk.out)) {
          if (j >= lowest && !(s & bit(j))) innermost = false;
          if (s & bit(j)) P *= out[size_t(j)];
        }
        if (!innermost) continue;
        const std::vector<int64_t> ins = analysis::axes_of(blk.in);
        int64_t Q = 1;
        for (auto it = ins.rbegin(); it != ins.rend(); ++it) {
          Q *= in[size_t(*it)];
          if (P % Q != 0) break;
          a_in |= bit(*it);
        }
      }
      if (whole) {
        r.parts.push_back({0, a_in, 1.0, 0, -1});
      } else {
        r.parts.push_back(
            {0, a_in, 1.0, tag_of(0), add_issue({IssueKind::reshape_blocks, n, -1, 0, a})});
      }
      return r;
    }
    case Op::concat: {
      const int64_t c = normalize_axis(node.axis, int64_t(R), node.name);
      bool copies = in_shape(n, 0)[c] == 1;
      for (const ValueRef& x : g_.node_inputs[n]) copies = copies && alias(x) == alias(g_.node_inputs[n][0]);
      if (copies) {
        // Copies of one value of size 1 along the axis: a broadcast of it.
        r.parts.push_back({0, a & ~bit(c), 1.0, 0, -1});
        return r;
      }
      const bool along = (a & bit(c)) != 0;
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        const double share = along ? double(in_shape(n, int(k))[c]) / double(out[c]) : 1.0;
        r.parts.push_back({int(k), a, share, along ? 0 : tag_of(int(k)), -1});
      }
      return r;
    }
    case Op::layer_norm: {
      const Mask b = norm_axes(n) & ~analysis::size1_mask(out);
      if (!node.weight.empty()) {
        r.leaf = opaque_entry(n, a, IssueKind::norm_with_weight);
        return r;
      }
      if (!subset(b, a)) {
        // Over part of its axes, a = a_b ∪ (axes outside b), a_b ⊂ b: with m, s the input's
        // mean and inverse deviation over b (constant along b), mean_a_b(LN(x) - bias) =
        // s·(mean_a_b(x) - m), and m = mean_b(x) is a mean of mean_a_b(x): zero when the
        // input is zero-mean over a_b by construction (an LN over [1, 2] of rows already
        // centered over 2 stays centered over 2).
        const Mask a_b = a & b;
        if (a_b == 0 || pool_.size(operand_mean(n, 0, a_b)) != 0) {
          r.leaf = opaque_entry(n, a, IssueKind::norm_other_axes);
          return r;
        }
      }
      if (!node.bias.empty()) r.extra.push_back(norm_bias_leaf(n, a));
      else r.zero = true;
      return r;
    }
    case Op::kCount:
      break;
  }
  throw InternalError("mean_rule: unknown op");
}

}  // namespace lnv::analysis::detail
