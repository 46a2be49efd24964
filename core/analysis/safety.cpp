// Safety (docs/spec/semantics.md, "Safety"): whether the deviation a centered term adds
// dies - absorbed or cancelled - before every graph output, along every route. The safety
// of a deviation constant along U at a value is memoized per (value, U); expand turns a key
// into the keys its routes reach through the deviation rules (deviation_rules.cpp), taking
// together the routes that cancel (a region of sums, a sub of a mean or a center, concats
// of copies).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/analysis/analyzer.h"
#include "core/analysis/memo_walk.h"

namespace lnv::analysis::detail {

const Safety& Analyzer::safety(int32_t v, Mask u) {
  u = canon_u(v, u);
  memo_walk(
      safe_, Key{v, u}, [&](const Key& key) { return expand(key.first, key.second); },
      [&](const Key&, const Expansion& ex, auto&& need) {
        if (!ex.immediate.ok) return;  // breaks at once: no successor matters
        for (const auto& [child, dropped] : ex.children) need(child);
      },
      [&](const Key&, const Expansion& ex) {
        if (!ex.immediate.ok) return ex.immediate;
        // The first successor whose route breaks, if any.
        Safety s;
        for (const auto& [child, dropped] : ex.children) {
          const Safety& cs = safe_.at(child);
          if (!cs.ok) {
            s = cs;
            s.next = child;
            s.next_dropped = dropped;
            break;
          }
        }
        return s;
      });
  return safe_.at({v, u});
}

const Safety* Analyzer::safety_of(const Key& k) const {
  return k.first < 0 ? nullptr : safe_.find(k);
}

Safety Analyzer::injected_safety(int32_t c, int k, Mask u) {
  if (k < 0) return safety(c, u);
  EdgeResult e = edge(c, k, u);
  Safety s;
  if (e.kind == EdgeResult::absorb || !live_[c]) return s;
  if (e.kind == EdgeResult::brk) {
    s.ok = false;
    s.break_node = c;
    s.kind = e.why;
    return s;
  }
  const Safety& cs = safety(c, e.u);
  if (cs.ok) return s;
  s = cs;
  s.next = {c, canon_u(c, e.u)};
  s.next_dropped = e.dropped;
  return s;
}

Analyzer::Expansion Analyzer::expand(int32_t v, Mask u) {
  Expansion ex;
  if (!live_[v]) return ex;
  if (is_output_[v]) {
    break_at_output(ex, v);
    return ex;
  }
  // v's deviation through a region where it cancels (cancelling_region): taken together.
  if (const CancelRegion reg = cancelling_region(v, u); !reg.nodes.empty()) {
    expand_region(ex, v, u, reg);
    return ex;
  }
  Bundles bundles;
  bundles.concats = same_shift_concats(v, u);
  for (auto [c, k] : uses(v))
    if (!expand_use(ex, bundles, v, u, c, k)) return ex;
  return ex;
}

void Analyzer::break_at_output(Expansion& ex, int32_t c) const {
  ex.immediate.ok = false;
  ex.immediate.break_node = c;
  ex.immediate.kind = BreakKind::output;
}

bool Analyzer::follow(Expansion& ex, int32_t c, int k, Mask u) {
  // A LayerNorm may be swapped for an RMSNorm: only strict deadness excuses it.
  if (!(op_of(c) == Op::layer_norm ? live_strict_[c] : live_[c])) return true;
  EdgeResult e = edge(c, k, u);
  if (e.kind == EdgeResult::absorb) return true;
  if (e.kind == EdgeResult::brk) {
    ex.immediate.ok = false;
    ex.immediate.break_node = c;
    ex.immediate.kind = e.why;
    return false;
  }
  ex.children.push_back({{c, canon_u(c, e.u)}, e.dropped});
  return true;
}

void Analyzer::expand_region(Expansion& ex, int32_t v, Mask u, const CancelRegion& reg) {
  for (auto [c, k] : uses(v))
    if (!reg.has(c) && !follow(ex, c, k, u)) return;
  for (size_t i = 0; i < reg.nodes.size(); ++i) {
    const int32_t x = reg.nodes[i];
    if (reg.coef[i] == 0.0 || !live_[x]) continue;
    if (is_output_[x]) {
      break_at_output(ex, x);
      return;
    }
    const Mask ux = canon_u(x, u);
    for (auto [c, k] : uses(x))
      if (!reg.has(c) && !follow(ex, c, k, ux)) return;
  }
}

// Concats along an axis of u whose parts all carry v's deviation unchanged (v itself, or
// a sum/difference with v in the + slot): the routes from v into their parts together
// put the same constant shift on every part, so they are followed as one route into
// the concat. The other operands of those sums, and the parts' other uses, keep their own
// routes (deviations are linear, so this only regroups routes).
std::vector<int32_t> Analyzer::same_shift_concats(int32_t v, Mask u) {
  std::vector<int32_t> concats;
  auto consider = [&](int32_t c) {
    if (std::find(concats.begin(), concats.end(), c) == concats.end() &&
        same_shift_concat(c, v, u))
      concats.push_back(c);
  };
  for (auto [c, k] : uses(v)) {
    if (op_of(c) == Op::concat) consider(c);
    else if (carrier_slot(c, v, u) == k || is_mean_of(c, v, u))
      for (auto [c2, k2] : uses(c))
        if (op_of(c2) == Op::concat) consider(c2);
  }
  return concats;
}

void Analyzer::follow_bundle(Expansion& ex, Bundles& bundles, int32_t c, Mask u) const {
  if (bundles.followed_already(c)) return;
  bundles.followed.push_back(c);
  if (live_[c]) ex.children.push_back({{c, canon_u(c, u)}, false});
}

bool Analyzer::expand_use(Expansion& ex, Bundles& bundles, int32_t v, Mask u, int32_t c, int k) {
  if (!bundles.concats.empty()) {
    if (bundles.has(c)) {
      follow_bundle(ex, bundles, c, u);
      return true;
    }
    bool feeds_bundle = false;
    if (carrier_slot(c, v, u) == k)
      for (auto [c2, k2] : uses(c)) feeds_bundle = feeds_bundle || bundles.has(c2);
    if (feeds_bundle) {
      // A carrier of v into a bundled concat: the concat is one route, its other uses
      // go on.
      if (!live_[c]) return true;
      if (is_output_[c]) {
        break_at_output(ex, c);
        return false;
      }
      const Mask up = canon_u(c, edge(c, k, u).u);
      for (auto [c2, k2] : uses(c)) {
        if (bundles.has(c2)) {
          follow_bundle(ex, bundles, c2, u);
          continue;
        }
        if (!follow(ex, c2, k2, up)) return false;
      }
      return true;
    }
  }
  if (is_mean_of(c, v, u) && live_[c]) {
    // mean/max(v, B ⊆ u, keepdims): its subtractions from v cancel; other uses go on.
    if (is_output_[c]) {
      break_at_output(ex, c);
      return false;
    }
    const Mask um = canon_u(c, edge(c, 0, u).u);
    for (auto [c2, k2] : uses(c)) {
      if (cancels_with_mean(c2, v, u)) continue;
      if (bundles.has(c2)) {
        follow_bundle(ex, bundles, c2, u);
        continue;
      }
      if (!follow(ex, c2, k2, um)) return false;
    }
    return true;
  }
  // sub(v, center(v, B)) is mean_B(v): its two routes from v together carry mean_B(δ),
  // constant along u and B. A center of v keeps its other uses' routes.
  if (const int32_t cn = center_partner(c, v); cn >= 0) return follow(ex, c, k, u | norm_axes(cn));
  if (op_of(c) == Op::center) {
    bool paired = false;
    for (auto [c2, k2] : uses(c)) paired = paired || center_partner(c2, v) == c;
    if (paired) {
      if (!live_[c]) return true;
      const EdgeResult e = edge(c, k, u);
      if (e.kind == EdgeResult::absorb) return true;  // the center's output is unchanged
      if (is_output_[c]) {
        break_at_output(ex, c);
        return false;
      }
      const Mask uc = canon_u(c, e.u);
      for (auto [c2, k2] : uses(c))
        if (center_partner(c2, v) != c && !follow(ex, c2, k2, uc)) return false;
      return true;
    }
  }
  return follow(ex, c, k, u);
}

Analyzer::CancelRegion Analyzer::cancelling_region(int32_t v, Mask u) const {
  const SumForms& sums = strict_sums_;
  if (sums.combined[v]) return {};
  CancelRegion reg;
  std::vector<int32_t> todo{v};
  while (!todo.empty()) {
    const int32_t x = todo.back();
    todo.pop_back();
    for (auto [c, k] : uses(x)) {
      const Op op = op_of(c);
      if (!live_[c] && op != Op::layer_norm) continue;  // no output reads it (follow skips it)
      if (op == Op::concat || op == Op::center) return {};
      bool member = false;
      if (op == Op::mean || op == Op::max) {
        // δ is constant along u and along x's size-1 axes (every member has v's rank).
        if (!g_.nodes[c].keepdims || !subset(norm_axes(c), canon_u(x, u))) return {};
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
  if (reg.nodes.empty()) return {};  // nothing to cancel against
  // The coefficients, each from its inputs' (members are upstream of what reads them).
  reg.coef.assign(reg.nodes.size(), std::numeric_limits<double>::quiet_NaN());
  auto index_of = [&](int32_t c) {
    return size_t(std::find(reg.nodes.begin(), reg.nodes.end(), c) - reg.nodes.begin());
  };
  bool inexact = false;  // a coefficient was rounded: its zero proves no cancellation
  auto coef = [&](auto& self, int32_t x) -> double {
    if (x == v) return 1.0;
    const size_t i = index_of(x);
    if (i == reg.nodes.size()) return 0.0;  // not a member: its routes are followed apart
    if (!std::isnan(reg.coef[i])) return reg.coef[i];
    double k = 0.0;
    const Op op = op_of(x);
    if (op == Op::mean || op == Op::max) {
      k = self(self, g_.node_inputs[x][0].index);
    } else {
      for (const auto& [a, ca] : sums.form(x))
        if (a.kind == ValueRef::Kind::node)
          k = exact_sum(k, exact_mul(ca, self(self, a.index), inexact), inexact);
    }
    reg.coef[i] = k;
    return k;
  };
  bool cancels = false;
  for (int32_t x : reg.nodes) cancels = coef(coef, x) == 0.0 || cancels;
  if (!cancels || inexact) return {};
  return reg;
}


bool Analyzer::is_mean_of(int32_t m, int32_t v, Mask u) const {
  if ((op_of(m) != Op::mean && op_of(m) != Op::max) || !g_.nodes[m].keepdims) return false;
  const ValueRef& r = g_.node_inputs[m][0];
  if (r.kind != ValueRef::Kind::node || r.index != v) return false;
  return subset(norm_axes(m), u);
}

int Analyzer::carrier_slot(int32_t p, int32_t v, Mask u) {
  const Op op = op_of(p);
  if ((op != Op::add && op != Op::sub) || zero_[p]) return -1;
  if (!(out_shape(p) == out_shape(v))) return -1;
  const auto& in = g_.node_inputs[p];
  auto is_v = [&](int k) { return in[k].kind == ValueRef::Kind::node && in[k].index == v; };
  for (int k = 0; k < 2; ++k) {
    if (!is_v(k) || is_v(1 - k) || (op == Op::sub && k == 1)) continue;
    const EdgeResult e = edge(p, k, u);
    if (e.kind != EdgeResult::pass || e.dropped) return -1;
    return k;
  }
  return -1;
}

bool Analyzer::same_shift_concat(int32_t c, int32_t v, Mask u) {
  if (op_of(c) != Op::concat) return false;
  const Node& node = g_.nodes[c];
  const int64_t ax = normalize_axis(node.axis, int64_t(out_shape(c).size()), node.name);
  if ((u & bit(ax)) == 0 || out_shape(c).size() != out_shape(v).size()) return false;
  bool carrier = false;
  for (const ValueRef& x : g_.node_inputs[c]) {
    if (x.kind != ValueRef::Kind::node) return false;
    if (x.index == v) continue;
    if (carrier_slot(x.index, v, u) < 0 && !is_mean_of(x.index, v, u)) return false;
    carrier = true;
  }
  return carrier;
}

int32_t Analyzer::center_partner(int32_t s, int32_t v) const {
  if (op_of(s) != Op::sub || !(out_shape(s) == out_shape(v))) return -1;
  const auto& in = g_.node_inputs[s];
  for (int k = 0; k < 2; ++k) {
    const ValueRef& a = in[k];
    const ValueRef& b = in[1 - k];
    if (a.kind == ValueRef::Kind::node && a.index == v && b.kind == ValueRef::Kind::node &&
        op_of(b.index) == Op::center && g_.node_inputs[b.index][0].kind == ValueRef::Kind::node &&
        g_.node_inputs[b.index][0].index == v)
      return b.index;
  }
  return -1;
}

bool Analyzer::cancels_with_mean(int32_t c, int32_t v, Mask u) const {
  if (op_of(c) != Op::sub) return false;
  const auto& in = g_.node_inputs[c];
  for (int k = 0; k < 2; ++k)
    if (in[k].kind == ValueRef::Kind::node && in[k].index == v &&
        in[1 - k].kind == ValueRef::Kind::node && is_mean_of(in[1 - k].index, v, u))
      return true;
  return false;
}

}  // namespace lnv::analysis::detail
