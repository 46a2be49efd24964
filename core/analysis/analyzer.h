// The analyzer behind detect_foldable (core/analysis/detect.cpp): its bookkeeping types
// and the Analyzer, which holds per graph and mode
//
//  * the readings of "zero" and "live" (structural zeros, dead values, the LayerNorms whose
//    zero-mean output each reading trusts) and the swap check of dead folds;
//  * mean forms (forward, on demand, memoized per (value, axes)): the mean of a value over
//    a set of its axes as a sparse linear combination of atoms (mean_form.h), built by the
//    per-op rules in mean_rules.cpp;
//  * deviation safety (forward from each term, memoized per (value, constant axes U)),
//    built by the edge rules in safety.cpp: centering a term adds a deviation δ constant
//    along U; it must be absorbed or cancelled before every graph output, along every path.
//
// Internal to core/analysis: only detect.cpp, mean_rules.cpp and safety.cpp include it.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/analysis/axes_mask.h"
#include "core/analysis/fold_plan.h"
#include "core/analysis/mean_form.h"
#include "core/error.h"

namespace lnv::analysis::detail {

struct KeyHash {
  size_t operator()(const std::pair<int32_t, Mask>& k) const {
    return std::hash<uint64_t>()(k.second * 0x9E3779B97F4A7C15ull ^ uint64_t(k.first));
  }
};
using Key = std::pair<int32_t, Mask>;

// Why a deviation stops being harmless at a node.
enum class BreakKind : uint8_t {
  output,       // the node is a graph output
  nonlinear,    // elementwise nonlinearity
  norm_axes,    // layer_norm / softmax / center-free norm over axes the shift varies along
  max_axes,     // max over axes the shift varies along
  rms_norm,     // an original rms_norm (does not subtract the mean)
  gate,         // enters attention scores or a recurrence
  denominator,  // enters a divisor
  index,        // enters an index operand
};

struct Safety {
  bool ok = true;
  int32_t break_node = -1;  // the node where it breaks
  BreakKind kind = BreakKind::output;
  Key next{-1, 0};           // the successor on the failing route (-1: breaks right here)
  bool next_dropped = false;  // the edge into `next` lost constant axes
};

enum class IssueKind : uint8_t {
  graph_input,
  nonlinear_output,
  dropout_training,
  norm_with_weight,
  norm_other_axes,
  rms_norm_output,
  feature_mismatch,
  grouped_conv,
  cbwc_other_axes,
  per_feature_factor,
  reshape_blocks,
  matmul_mixing,
};

struct Issue {
  IssueKind kind;
  int32_t node = -1;   // the node responsible (or -1 with `input` for a graph input)
  int32_t input = -1;  // graph input index
  Mask feature = 0;    // feature axes (producer coordinates)
  Mask mean = 0;       // axes of the mean (producer coordinates)
};

struct Term {
  CenterTerm term;
  Safety safety;
  int32_t producer = -1;                 // producer terms: the producer node
  int32_t use_node = -1, use_slot = -1;  // param terms: the edge the deviation enters by
  Mask use_mask = 0;
  bool pending = false;  // its safety is being computed
};

struct EdgeResult {
  enum Kind { absorb, pass, brk } kind = pass;
  Mask u = 0;
  BreakKind why = BreakKind::output;
  bool dropped = false;
};

struct Part {
  int k = 0;             // operand index
  Mask mask = 0;         // axes in the operand's coordinates
  double coeff = 1.0;
  uint64_t tag = 0;      // requalify with this tag (0: keep keys)
  int32_t issue = -1;    // turn terms into bad terms explained by this issue
};

struct Rule {
  std::optional<Entry> leaf;  // an atom (no parts)
  bool zero = false;          // the mean vanishes by construction
  std::vector<Part> parts;
  std::vector<Form> extra;    // param terms added directly (a norm's bias)
};

// Which LayerNorms a reading of "zero" trusts to keep a zero-mean output (an LN without
// affine over B has mean 0 over B). The strict reading (lns = false) trusts none: a rewrite
// may swap any LN. The default reading trusts every LN (each stays an LN or is folded
// exactly). A plan check trusts all but `distrusted`, and collects in `consulted` the
// distrusted LNs whose zero mean a zero would have needed.
struct Trust {
  bool lns = true;
  const std::vector<char>* distrusted = nullptr;
  std::vector<int32_t>* consulted = nullptr;
};

// The axes of a conv's output along which it keeps a value constant when its input is
// constant along them: the batch axis, and each spatial axis without padding (a window
// that reaches into the padding sees zeros). Output rank `rank`.
inline Mask conv_constant_axes(const Node& conv, size_t rank) {
  Mask m = analysis::bit(0);
  for (size_t s = 2; s < rank; ++s) {
    const int64_t pad = conv.padding.size() == 1 ? conv.padding[0] : conv.padding[s - 2];
    if (pad == 0) m |= analysis::bit(int64_t(s));
  }
  return m;
}

// Sums, differences, scales and identities of values of one shape as linear combinations
// of "atoms" (the other nodes, params and graph inputs; an operand broadcast to the
// result's shape stays one atom, its broadcast fixed by the shapes) with exact
// coefficients, so `(a + c) - a` is `c`. A combination of more than kMaxAtoms atoms is not
// kept (the node is then an atom itself). Filled in topological order.
struct SumForms {
  using Atom = ValueRef;
  static constexpr size_t kMaxAtoms = 8;
  std::vector<std::vector<std::pair<Atom, double>>> form;
  std::vector<char> combined;  // form[v] holds v's combination (empty: v is 0)
  explicit SumForms(size_t n) : form(n), combined(n, 0) {}
  void add(const Graph& g, int32_t v, const std::vector<bool>& zero, Mode mode);
};

class Analyzer {
 public:
  Analyzer(const Graph& g, Mode mode);

  const Graph& graph() const { return g_; }
  Mode mode() const { return mode_; }
  FormPool& pool() { return pool_; }
  const std::vector<Term>& terms() const { return terms_; }
  const std::vector<Issue>& issues() const { return issues_; }
  bool live(int32_t v) const { return live_[v]; }
  // Whether swapping LN v itself could change an output (see the constructor).
  bool live_strict(int32_t v) const { return live_strict_[v]; }

  bool trusts(const Trust& t, int32_t ln) const {
    if (!t.lns) return false;
    if (t.distrusted && (*t.distrusted)[ln]) {
      if (t.consulted) t.consulted->push_back(ln);
      return false;
    }
    return true;
  }

  // Which nodes a graph output depends on when sums are expanded (`sums`, built on `zero`):
  // `sub(a, add(a, c))` does not depend on `a`. Only atoms' entries are meaningful.
  std::vector<bool> live_through_sums(const SumForms& sums, const std::vector<bool>& zero,
                                      const Trust& trust) const;

  // Whether swapping the LayerNorms in `swapped` for RMSNorms with nothing centered (so
  // each outputs something else) changes a graph output, given the plan's other folds:
  // `folded` LNs and `centered` producers. Two marks flow forward from the swapped LNs:
  // `changed` (the value may differ) and `unzeroed` (a mean that some zero-mean output
  // relied on may differ). A centered producer's output keeps its zero mean whatever its
  // input, and so do a `center` and an LN without affine that is kept; a folded LN keeps
  // it only while no `unzeroed` mark reaches it. A zero that needs the zero mean of an LN
  // that lost it no longer cuts; `blame` collects such LNs. Linear in the graph.
  bool swap_reaches_output(const std::vector<char>& swapped, const std::vector<char>& folded,
                           const std::vector<char>& centered, std::vector<int32_t>* blame) const;

  bool stale() const { return stale_; }

  // The mean over `mask` (axes of the operand) of operand k of node n.
  Form operand_mean(int32_t n, int k, Mask mask) {
    const ValueRef& r = g_.node_inputs[n][k];
    mask &= ~analysis::size1_mask(g_.shape_of(r));
    if (r.kind == ValueRef::Kind::node) return node_mean(r.index, mask);
    if (r.kind == ValueRef::Kind::input) {
      Entry e;
      e.atom = atom_of_input(r.index);
      e.mask = mask;
      e.coeff = 1.0;
      e.status = EntryStatus::opaque;
      e.issue = add_issue({IssueKind::graph_input, -1, r.index, 0, 0});
      return pool_.leaf(e);
    }
    return param_term_leaf(n, k, mask);
  }

  Form node_mean(int32_t v, Mask mask) {
    mask &= ~analysis::size1_mask(g_.node_shapes[v]);
    auto found = means_.find({v, mask});
    if (found != means_.end()) return found->second;
    std::vector<Key> stack{{v, mask}};
    while (!stack.empty()) {
      const Key key = stack.back();
      if (means_.count(key)) {
        stack.pop_back();
        continue;
      }
      Rule rule = mean_rule(key.first, key.second);
      bool ready = true;
      for (const Part& p : rule.parts) {
        const ValueRef& r = g_.node_inputs[key.first][p.k];
        if (r.kind != ValueRef::Kind::node) continue;
        const Key child{r.index, p.mask & ~analysis::size1_mask(g_.node_shapes[r.index])};
        if (!means_.count(child)) {
          stack.push_back(child);
          ready = false;
        }
      }
      if (!ready) continue;
      stack.pop_back();
      means_.emplace(key, combine(key.first, rule));
    }
    return means_.at({v, mask});
  }

  // Safety of a deviation constant along U at the output of node v.
  const Safety& safety(int32_t v, Mask u) {
    u = canon_u(v, u);
    std::vector<Key> stack{{v, u}};
    while (!stack.empty()) {
      const Key key = stack.back();
      if (safe_.count(key)) {
        stack.pop_back();
        continue;
      }
      Expansion ex = expand(key.first, key.second);
      if (!ex.immediate.ok) {
        safe_.emplace(key, ex.immediate);
        stack.pop_back();
        continue;
      }
      bool ready = true;
      for (const auto& [child, dropped] : ex.children)
        if (!safe_.count(child)) {
          stack.push_back(child);
          ready = false;
        }
      if (!ready) continue;
      stack.pop_back();
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
      safe_.emplace(key, s);
    }
    return safe_.at({v, u});
  }

  const Safety* safety_of(const Key& k) const {
    auto it = safe_.find(k);
    return it == safe_.end() ? nullptr : &it->second;
  }

  // The deviation of a param term entering node c by operand k (or the norm's bias slot,
  // k = -1) constant along u (operand coordinates; output coordinates for k = -1).
  Safety injected_safety(int32_t c, int k, Mask u) {
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

  Mask canon_u(int32_t v, Mask u) const { return u | analysis::size1_mask(g_.node_shapes[v]); }

  EdgeResult edge(int32_t c, int k, Mask u);

 private:
  struct Expansion {
    Safety immediate;                          // !ok: breaks at once
    std::vector<std::pair<Key, bool>> children;  // (successor, edge dropped axes)
  };

  const Graph& g_;
  Mode mode_;
  FormPool pool_;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> uses_;
  std::vector<bool> is_output_, live_, zero_, live_strict_, zero_strict_;
  std::vector<Mask> uniform_, uniform_strict_;  // per reading, like zero_ / zero_strict_
  // The strict reading's sum forms: identities no rewrite changes (the safety pass reads
  // them to cancel a deviation between routes through sums).
  SumForms strict_sums_{0};

  // Concats along `axis` of copies of one value carry that value's deviation everywhere
  // when it is constant along the axis: the value they copy.
  ValueRef copy_root(ValueRef x, int64_t axis) const {
    x = alias(x);
    while (x.kind == ValueRef::Kind::node && g_.nodes[x.index].op == Op::concat) {
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

  // Whether x is zero-mean over `axes` by construction (the local patterns: a norm without
  // affine or a center over some of them, a producer already centered over them).
  // (Through identities and sums of zero-mean operands, visiting at most kZeroMeanVisits
  // nodes per question: a DAG of sums that reuse their operands has exponentially many
  // paths.)
  static constexpr int kZeroMeanVisits = 64;
  bool zero_mean_over(const ValueRef& x, const Axes& axes, const Trust& trust) const {
    int budget = kZeroMeanVisits;
    return zero_mean_within(x, axes, trust, budget);
  }
  // The keepdims mean m when v = sub(y, m) with m = mean(y, B), of y's shape (v is then
  // zero-mean over B whatever y is); -1 otherwise.
  int32_t own_mean_subtracted(int32_t v) const {
    if (g_.nodes[v].op != Op::sub) return -1;
    const ValueRef& y = g_.node_inputs[v][0];
    const ValueRef& m = g_.node_inputs[v][1];
    if (m.kind != ValueRef::Kind::node || g_.nodes[m.index].op != Op::mean ||
        !g_.nodes[m.index].keepdims || !(g_.node_inputs[m.index][0] == y) ||
        !(g_.node_shapes[v] == g_.shape_of(y)))
      return -1;
    return m.index;
  }
  bool zero_mean_within(const ValueRef& x, const Axes& axes, const Trust& trust,
                        int& budget) const;

  // Axes along which a node's value is the same everywhere by construction (it does not
  // depend on the position there): zero values, and what is computed from them.
  Mask uniform_axes(int32_t v, const std::vector<bool>& zero, const std::vector<Mask>& uniform,
                    const SumForms& sums) const;

  // The value a ref equals by construction: through identities (an inference dropout, a
  // dropout with p = 0, a scale by 1).
  ValueRef alias(ValueRef r) const {
    while (r.kind == ValueRef::Kind::node) {
      const Node& n = g_.nodes[r.index];
      const bool identity = (n.op == Op::dropout && (mode_ == Mode::inference || n.p == 0.0)) ||
                            (n.op == Op::scale && n.factor == 1.0);
      if (!identity) break;
      r = g_.node_inputs[r.index][0];
    }
    return r;
  }

  // Whether a mean form is one constant: only param terms averaged over all their axes.
  bool is_constant(const Form& f) const {
    bool constant = true;
    pool_.visit(f, [&](const Entry& e) {
      if (!constant) return;
      if (e.status == EntryStatus::opaque || e.ref < 0 || e.qual != 0 ||
          terms_[e.ref].term.kind != CenterTerm::Kind::param) {
        constant = false;
        return;
      }
      const Shape& ps = g_.params[g_.param_index(terms_[e.ref].term.param)].shape;
      constant = subset(~analysis::size1_mask(ps) & ((Mask(1) << ps.size()) - 1), e.mask);
    });
    return constant;
  }

  // Whether node c's output does not depend on its inputs at all: a softmax over an axis of
  // size 1 (constant 1), a norm or center over axes of size 1 (constant bias or zero).
  bool ignores_inputs(int32_t c, const std::vector<bool>& zero, const Trust& trust) const;

  // Whether the mean of node v over `axes` (a mask of v's axes) is the same whatever v's
  // input: v is a softmax along one of them (its rows sum to 1), a center over some of
  // them (0), or a LayerNorm without weight over some of them that the reading trusts to
  // stay one (the mean of its bias - which a centering of that bias does change: v's
  // input is irrelevant to such a mean, v itself is not; an RMSNorm's mean is not
  // constant).
  bool constant_mean_over(int32_t v, Mask axes, const Trust& trust) const;
  // Whether node c is a mean of its input node over axes that make it constant_mean_over.
  bool constant_mean(int32_t c, const Trust& trust) const;
  // Whether v, not a graph output, reaches the outputs only through constant means of it
  // (among its uses that are live and read their inputs): then v's input does not matter.
  bool only_constant_means(int32_t v, const std::vector<bool>& live,
                           const std::vector<bool>& zero, const Trust& trust) const;

  // Whether node v is identically zero whatever the inputs and (generic) params:
  // sub(a, a), a scale by 0, and ops that map zero inputs to zero (no bias added).
  bool structurally_zero(int32_t v, const std::vector<bool>& zero, const Trust& trust) const;
  // Whether LN v outputs its bias whatever its input, in a reading: its input is uniform
  // along its axes (or they have size 1), and the reading trusts v to stay a LayerNorm
  // (an RMSNorm of a uniform value is not its bias).
  bool ln_of_uniform(int32_t v, const Trust& trust) const;
  std::unordered_map<Key, Form, KeyHash> means_;
  std::unordered_map<Key, Safety, KeyHash> safe_;
  std::vector<Term> terms_;
  std::vector<Issue> issues_;
  std::unordered_map<int32_t, int32_t> producer_terms_;
  std::map<std::tuple<int32_t, int, Mask>, int32_t> param_terms_;
  std::map<std::pair<int32_t, int>, int32_t> param_atoms_;

  int32_t atom_of_input(int32_t i) const { return int32_t(g_.nodes.size()) + i; }
  int32_t atom_of_param_use(int32_t node, int slot) {
    auto [it, inserted] = param_atoms_.try_emplace(
        {node, slot}, int32_t(g_.nodes.size() + g_.inputs.size() + param_atoms_.size()));
    return it->second;
  }
  // A term's safety as known now. Asked while that very safety is being computed (a
  // deviation whose fate depends on a mean containing the term), the answer may be stale:
  // verdicts then re-check every term (stale()).
  bool term_safe_now(int32_t ref) {
    if (terms_[ref].pending) stale_ = true;
    return terms_[ref].safety.ok;
  }
  bool stale_ = false;

  int32_t add_issue(const Issue& i) {
    issues_.push_back(i);
    return int32_t(issues_.size() - 1);
  }

  const Shape& in_shape(int32_t n, int k) const { return g_.shape_of(g_.node_inputs[n][k]); }
  const Shape& out_shape(int32_t n) const { return g_.node_shapes[n]; }
  bool input_is_param(int32_t n, int k) const {
    return g_.node_inputs[n][k].kind == ValueRef::Kind::param;
  }
  Mask norm_axes(int32_t n) const {
    return analysis::mask_of(normalize_axes(g_.nodes[n].axes, int64_t(out_shape(n).size()),
                                            g_.nodes[n].name));
  }

  // --- mean forms ---
  Rule mean_rule(int32_t n, Mask a);
  Form combine(int32_t n, const Rule& rule) {
    if (rule.zero) return Form{};
    if (rule.leaf) return pool_.leaf(*rule.leaf);
    Form f;
    for (const Part& p : rule.parts) {
      Form part = operand_mean(n, p.k, p.mask);
      if (p.tag != 0 || p.issue >= 0) part = pool_.requalify(part, p.tag, p.issue);
      f = pool_.add(f, part, p.coeff);
    }
    for (const Form& e : rule.extra) f = pool_.add(f, e, 1.0);
    return f;
  }
  Rule producer_rule(int32_t n, Mask a, Mask feature);
  bool pointwise_conv(int32_t n) const;
  Entry opaque_entry(int32_t n, Mask a, IssueKind kind) {
    Entry e;
    e.atom = n;
    e.mask = a;
    e.coeff = 1.0;
    e.status = EntryStatus::opaque;
    e.issue = add_issue({kind, n, -1, 0, 0});
    return e;
  }
  Form param_term_leaf(int32_t n, int k, Mask mask);
  // The leaf of a param use registered as term `ref`, averaged over `mask`.
  Form term_leaf(int32_t atom, Mask mask, int32_t ref) {
    Entry e;
    e.atom = atom;
    e.mask = mask;
    e.coeff = 1.0;
    e.status = EntryStatus::term;
    e.ref = ref;
    e.safe = term_safe_now(ref);
    return pool_.leaf(e);
  }
  Form norm_bias_leaf(int32_t n, Mask a);
  int32_t producer_term(int32_t n, Mask feature);

  // --- safety ---
  Expansion expand(int32_t v, Mask u);
  // The region through which v's deviation δ (constant along u) cancels, taken together:
  // the add / sub / scale / identity nodes reached from v or another member through an
  // operand of their own shape, and the keepdims means and maxes of members over axes
  // along which δ is constant (each passes its input's deviation unchanged). Every
  // member's deviation through the region is coef·δ: for a sum, its strict sum form with
  // each atom that is v or a member replaced by that atom's coef (the rest of its atoms
  // carry routes expand follows on their own); for a mean, its input's. Empty - expand
  // then follows every route on its own - unless v is an atom, some member's coef is 0
  // (v cancels, as in `add(v, sub(w, v))` or `sub(v, mean(v))` beside another sum), the
  // region stays small, and no member is read by a concat, a center, or a mean or max the
  // region cannot take (the routes expand treats specially).
  struct CancelRegion {
    std::vector<int32_t> nodes;  // the members other than v
    std::vector<double> coef;    // coef[i]: nodes[i]'s deviation is coef[i]·δ
    bool has(int32_t c) const { return std::find(nodes.begin(), nodes.end(), c) != nodes.end(); }
  };
  CancelRegion cancelling_region(int32_t v, Mask u) const;
  static constexpr size_t kMaxCancelRegion = 32;
  bool is_mean_of(int32_t m, int32_t v, Mask u) const {
    const Node& node = g_.nodes[m];
    // A mean or max with keepdims over axes along which the deviation is constant passes
    // it unchanged, so subtracting the result from v cancels it.
    if ((node.op != Op::mean && node.op != Op::max) || !node.keepdims) return false;
    const ValueRef& r = g_.node_inputs[m][0];
    if (r.kind != ValueRef::Kind::node || r.index != v) return false;
    return subset(norm_axes(m), u);
  }
  // The slot by which p = add(v, z), add(z, v) or sub(v, z) (z not v, same shape as v)
  // passes a deviation of v constant along u unchanged; -1 if it is not such a node.
  int carrier_slot(int32_t p, int32_t v, Mask u) {
    const Node& node = g_.nodes[p];
    if ((node.op != Op::add && node.op != Op::sub) || zero_[p]) return -1;
    if (!(out_shape(p) == out_shape(v))) return -1;
    const auto& in = g_.node_inputs[p];
    auto is_v = [&](int k) { return in[k].kind == ValueRef::Kind::node && in[k].index == v; };
    for (int k = 0; k < 2; ++k) {
      if (!is_v(k) || is_v(1 - k) || (node.op == Op::sub && k == 1)) continue;
      const EdgeResult e = edge(p, k, u);
      if (e.kind != EdgeResult::pass || e.dropped) return -1;
      return k;
    }
    return -1;
  }
  // Whether c concatenates, along an axis of u, parts that are v, carriers of v (above) or
  // keepdims means / maxes of v over axes of u (is_mean_of), at least one not v itself: a
  // deviation of v constant along u lands on every part alike.
  bool same_shift_concat(int32_t c, int32_t v, Mask u) {
    const Node& node = g_.nodes[c];
    if (node.op != Op::concat) return false;
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
  // sub(v, m) or sub(m, v) with m = mean or max(v, B ⊆ u, keepdims): the deviation cancels.
  // The center node cn when s = sub(v, cn) or sub(cn, v) with cn = center(v, B), s of v's
  // shape (s is then ±mean_B(v)); -1 otherwise.
  int32_t center_partner(int32_t s, int32_t v) const {
    if (g_.nodes[s].op != Op::sub || !(out_shape(s) == out_shape(v))) return -1;
    const auto& in = g_.node_inputs[s];
    for (int k = 0; k < 2; ++k) {
      const ValueRef& a = in[k];
      const ValueRef& b = in[1 - k];
      if (a.kind == ValueRef::Kind::node && a.index == v && b.kind == ValueRef::Kind::node &&
          g_.nodes[b.index].op == Op::center && g_.node_inputs[b.index][0].kind == ValueRef::Kind::node &&
          g_.node_inputs[b.index][0].index == v)
        return b.index;
    }
    return -1;
  }
  bool cancels_with_mean(int32_t c, int32_t v, Mask u) const {
    if (g_.nodes[c].op != Op::sub) return false;
    const auto& in = g_.node_inputs[c];
    for (int k = 0; k < 2; ++k)
      if (in[k].kind == ValueRef::Kind::node && in[k].index == v &&
          in[1 - k].kind == ValueRef::Kind::node && is_mean_of(in[1 - k].index, v, u))
        return true;
    return false;
  }
};

}  // namespace lnv::analysis::detail
