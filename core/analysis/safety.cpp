// The deviation-safety rules of the analyzer (analyzer.h): how each consumer passes,
// absorbs or breaks a deviation constant along U, and the expansion of a (value, U) key
// into the keys it reaches.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "core/analysis/analyzer.h"

namespace lnv::analysis::detail {

EdgeResult Analyzer::edge(int32_t c, int k, Mask u) {
  const Node& node = g_.nodes[c];
  const Shape& in = in_shape(c, k);
  const Shape& out = out_shape(c);
  const size_t R = out.size(), r = in.size();
  EdgeResult e;
  auto pass = [&](Mask m, bool dropped) {
    e.kind = EdgeResult::pass;
    e.u = m | analysis::size1_mask(out);
    e.dropped = dropped;
    return e;
  };
  auto brk = [&](BreakKind why) {
    e.kind = EdgeResult::brk;
    e.why = why;
    return e;
  };
  auto absorb = [&]() {
    e.kind = EdgeResult::absorb;
    return e;
  };
  switch (node.op) {
    case Op::linear: {
      const Mask m = u & ~bit(int64_t(r) - 1);
      return pass(m, (u & bit(int64_t(r) - 1)) != 0);
    }
    case Op::conv1d:
    case Op::conv2d: {
      const Mask m = u & conv_constant_axes(node, r);
      return pass(m, (u & ~m & ~analysis::size1_mask(in)) != 0);
    }
    case Op::matmul: {
      const Shape& other = in_shape(c, 1 - k);
      if (r < 2 || other.size() < 2) return pass(0, true);
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
        if (pool_.size(sums) == 0) return absorb();
        constant_sums = is_constant(sums);
      }
      // Batch axes: kept where the other operand is constant along them.
      const Mask other_const = constant_sums ? ~Mask(0)
                                             : analysis::broadcast_const_axes(
                                                   Shape(other.begin(), other.end() - 2), R - 2);
      Mask batch_u = analysis::operand_to_out(u & ((Mask(1) << (r - 2)) - 1), r - 2, R - 2) |
                     ((Mask(1) << (R - 2 - (r - 2))) - 1);
      Mask m = batch_u & other_const;
      if (constant_sums) m |= bit(int64_t(R) - (k == 0 ? 1 : 2));
      if (k == 0) {
        if (u & bit(int64_t(r) - 2)) m |= bit(int64_t(R) - 2);
      } else {
        const int64_t n_axis = node.transpose_b ? int64_t(r) - 2 : int64_t(r) - 1;
        if (u & bit(n_axis)) m |= bit(int64_t(R) - 1);
      }
      return pass(m, true);
    }
    case Op::embedding:
      return brk(BreakKind::index);
    case Op::rnn:
    case Op::attention:
      return brk(BreakKind::gate);
    case Op::add:
    case Op::sub: {
      const auto& ins = g_.node_inputs[c];
      if (node.op == Op::sub && alias(ins[0]) == alias(ins[1])) return absorb();
      const ValueRef& self = ins[k];
      if (self.kind == ValueRef::Kind::node && cancels_with_mean(c, self.index, u))
        return absorb();
      return pass(analysis::operand_to_out(u, r, R) |
                      analysis::broadcast_const_axes(in, R),
                  false);
    }
    case Op::mul:
    case Op::div: {
      if (node.op == Op::div && k == 1) return brk(BreakKind::denominator);
      const Mask mine = analysis::operand_to_out(u, r, R) | analysis::broadcast_const_axes(in, R);
      const Mask factor_const = analysis::broadcast_const_axes(in_shape(c, 1 - k), R);
      return pass(mine & factor_const, (mine & ~factor_const) != 0);
    }
    case Op::scale:
      if (node.factor == 0.0) return absorb();
      return pass(u, false);
    case Op::dropout:
      if (mode_ == Mode::training && node.p > 0.0) return pass(0, true);
      return pass(u, false);
    case Op::relu:
    case Op::gelu:
    case Op::tanh:
    case Op::sigmoid:
    case Op::silu:
    case Op::exp:
      return brk(BreakKind::nonlinear);
    case Op::softmax: {
      const int64_t ax = normalize_axis(node.axis, int64_t(R), node.name);
      if (u & bit(ax)) return absorb();
      return brk(BreakKind::norm_axes);
    }
    case Op::mean: {
      const Mask b = analysis::mask_of(normalize_axes(node.axes, int64_t(r), node.name));
      if (node.keepdims) return pass(u | b, false);
      return pass(analysis::drop_axes(u, b, r), false);
    }
    case Op::max: {
      const Mask b = analysis::mask_of(normalize_axes(node.axes, int64_t(r), node.name));
      if (!subset(b, u)) return brk(BreakKind::max_axes);
      if (node.keepdims) return pass(u, false);
      return pass(analysis::drop_axes(u, b, r), false);
    }
    case Op::transpose: {
      Mask m = 0;
      for (size_t i = 0; i < R; ++i) {
        const int64_t p = node.perm[i] < 0 ? node.perm[i] + int64_t(R) : node.perm[i];
        if (u & bit(p)) m |= bit(int64_t(i));
      }
      return pass(m, false);
    }
    case Op::reshape: {
      Mask m = 0;
      bool dropped = false;
      for (const auto& blk : analysis::reshape_blocks(in, out)) {
        if (subset(blk.in, u)) m |= blk.out;
        else if (blk.in & u) dropped = true;
      }
      return pass(m, dropped);
    }
    case Op::concat: {
      const int64_t ax = normalize_axis(node.axis, int64_t(R), node.name);
      bool same = true;
      for (const ValueRef& x : g_.node_inputs[c])
        same = same && copy_root(x, ax) == copy_root(g_.node_inputs[c][0], ax);
      if (same) return pass(u, false);
      return pass(u & ~bit(ax), (u & bit(ax)) != 0);
    }
    case Op::center: {
      if (subset(norm_axes(c), u)) return absorb();
      return pass(u, false);
    }
    case Op::layer_norm:
      if (subset(norm_axes(c), u)) return absorb();
      return brk(BreakKind::norm_axes);
    case Op::rms_norm:
      return brk(BreakKind::rms_norm);
    case Op::kCount:
      break;
  }
  throw InternalError("edge: unknown op");
}

Analyzer::Expansion Analyzer::expand(int32_t v, Mask u) {
  Expansion ex;
  auto break_at_output = [&](int32_t c) {
    ex.immediate.ok = false;
    ex.immediate.break_node = c;
    ex.immediate.kind = BreakKind::output;
  };
  if (!live_[v]) return ex;
  if (is_output_[v]) {
    break_at_output(v);
    return ex;
  }
  auto follow = [&](int32_t c, int k, Mask uu) -> bool {
    // A LayerNorm may be swapped for an RMSNorm: only strict deadness excuses it.
    if (!(g_.nodes[c].op == Op::layer_norm ? live_strict_[c] : live_[c])) return true;
    EdgeResult e = edge(c, k, uu);
    if (e.kind == EdgeResult::absorb) return true;
    if (e.kind == EdgeResult::brk) {
      ex.immediate.ok = false;
      ex.immediate.break_node = c;
      ex.immediate.kind = e.why;
      return false;
    }
    ex.children.push_back({{c, canon_u(c, e.u)}, e.dropped});
    return true;
  };
  // v's deviation through a region where it cancels (cancelling_region): taken together.
  if (const CancelRegion reg = cancelling_region(v, u); !reg.nodes.empty()) {
    for (auto [c, k] : uses_[v])
      if (!reg.has(c) && !follow(c, k, u)) return ex;
    for (size_t i = 0; i < reg.nodes.size(); ++i) {
      const int32_t x = reg.nodes[i];
      if (reg.coef[i] == 0.0 || !live_[x]) continue;
      if (is_output_[x]) {
        break_at_output(x);
        return ex;
      }
      const Mask ux = canon_u(x, u);
      for (auto [c, k] : uses_[x])
        if (!reg.has(c) && !follow(c, k, ux)) return ex;
    }
    return ex;
  }
  // Concats along an axis of u whose parts all carry v's deviation unchanged (v itself, or
  // a sum/difference with v in the + slot): the routes from v into their parts together
  // put the same constant shift on every part, so they are followed as one route into
  // the concat. The other operands of those sums, and the parts' other uses, keep their own
  // routes (deviations are linear, so this only regroups routes).
  std::vector<int32_t> bundles, followed;
  auto has = [](const std::vector<int32_t>& xs, int32_t x) {
    return std::find(xs.begin(), xs.end(), x) != xs.end();
  };
  auto consider = [&](int32_t c) {
    if (!has(bundles, c) && same_shift_concat(c, v, u)) bundles.push_back(c);
  };
  for (auto [c, k] : uses_[v]) {
    if (g_.nodes[c].op == Op::concat) consider(c);
    else if (carrier_slot(c, v, u) == k || is_mean_of(c, v, u))
      for (auto [c2, k2] : uses_[c])
        if (g_.nodes[c2].op == Op::concat) consider(c2);
  }
  auto follow_bundle = [&](int32_t c) {
    if (has(followed, c)) return;
    followed.push_back(c);
    if (live_[c]) ex.children.push_back({{c, canon_u(c, u)}, false});
  };
  for (auto [c, k] : uses_[v]) {
    if (!bundles.empty()) {
      if (has(bundles, c)) {
        follow_bundle(c);
        continue;
      }
      bool feeds_bundle = false;
      if (carrier_slot(c, v, u) == k)
        for (auto [c2, k2] : uses_[c]) feeds_bundle = feeds_bundle || has(bundles, c2);
      if (feeds_bundle) {
        if (!live_[c]) continue;
        if (is_output_[c]) {
          break_at_output(c);
          return ex;
        }
        const Mask up = canon_u(c, edge(c, k, u).u);
        for (auto [c2, k2] : uses_[c]) {
          if (has(bundles, c2)) {
            follow_bundle(c2);
            continue;
          }
          if (!follow(c2, k2, up)) return ex;
        }
        continue;
      }
    }
    if (is_mean_of(c, v, u) && live_[c]) {
      // mean/max(v, B ⊆ u, keepdims): its subtractions from v cancel; other uses go on.
      if (is_output_[c]) {
        break_at_output(c);
        return ex;
      }
      const Mask um = canon_u(c, edge(c, 0, u).u);
      for (auto [c2, k2] : uses_[c]) {
        if (cancels_with_mean(c2, v, u)) continue;
        if (has(bundles, c2)) {
          follow_bundle(c2);
          continue;
        }
        if (!follow(c2, k2, um)) return ex;
      }
      continue;
    }
    // sub(v, center(v, B)) is mean_B(v): its two routes from v together carry mean_B(δ),
    // constant along u and B. A center of v keeps its other uses' routes.
    if (const int32_t cn = center_partner(c, v); cn >= 0) {
      if (!follow(c, k, u | norm_axes(cn))) return ex;
      continue;
    }
    if (g_.nodes[c].op == Op::center) {
      bool paired = false;
      for (auto [c2, k2] : uses_[c]) paired = paired || center_partner(c2, v) == c;
      if (paired) {
        if (!live_[c]) continue;
        const EdgeResult e = edge(c, k, u);
        if (e.kind == EdgeResult::absorb) continue;  // the center's output is unchanged
        if (is_output_[c]) {
          break_at_output(c);
          return ex;
        }
        const Mask uc = canon_u(c, e.u);
        for (auto [c2, k2] : uses_[c])
          if (center_partner(c2, v) != c && !follow(c2, k2, uc)) return ex;
        continue;
      }
    }
    if (!follow(c, k, u)) return ex;
  }
  return ex;
}

Analyzer::CancelRegion Analyzer::cancelling_region(int32_t v, Mask u) const {
  const SumForms& sums = strict_sums_;
  if (sums.combined[v]) return {};
  CancelRegion reg;
  std::vector<int32_t> todo{v};
  while (!todo.empty()) {
    const int32_t x = todo.back();
    todo.pop_back();
    for (auto [c, k] : uses_[x]) {
      const Node& node = g_.nodes[c];
      const Op op = node.op;
      if (!live_[c] && op != Op::layer_norm) continue;  // no output reads it (follow skips it)
      if (op == Op::concat || op == Op::center) return {};
      bool member = false;
      if (op == Op::mean || op == Op::max) {
        // δ is constant along u and along x's size-1 axes (every member has v's rank).
        if (!node.keepdims || !subset(norm_axes(c), canon_u(x, u))) return {};
        member = true;
      } else {
        member = sums.combined[c] &&
                 (op == Op::add || op == Op::sub || op == Op::scale || op == Op::dropout) &&
                 g_.node_shapes[c] == g_.node_shapes[x];
      }
      if (!member || c == v || reg.has(c)) continue;
      if (reg.nodes.size() == kMaxCancelRegion) return {};
      reg.nodes.push_back(c);
      todo.push_back(c);
    }
  }
  // The coefficients, each from its inputs' (members are upstream of what reads them).
  reg.coef.assign(reg.nodes.size(), std::numeric_limits<double>::quiet_NaN());
  auto index_of = [&](int32_t c) {
    return size_t(std::find(reg.nodes.begin(), reg.nodes.end(), c) - reg.nodes.begin());
  };
  std::function<double(int32_t)> coef = [&](int32_t x) -> double {
    if (x == v) return 1.0;
    const size_t i = index_of(x);
    if (i == reg.nodes.size()) return 0.0;  // not a member: its routes are followed apart
    if (!std::isnan(reg.coef[i])) return reg.coef[i];
    double k = 0.0;
    const Op op = g_.nodes[x].op;
    if (op == Op::mean || op == Op::max) {
      k = coef(g_.node_inputs[x][0].index);
    } else {
      for (const auto& [a, ca] : sums.form[x])
        if (a.kind == ValueRef::Kind::node) k += ca * coef(a.index);
    }
    reg.coef[i] = k;
    return k;
  };
  bool cancels = false;
  for (int32_t x : reg.nodes) cancels = coef(x) == 0.0 || cancels;
  if (!cancels) return {};
  return reg;
}

}  // namespace lnv::analysis::detail
