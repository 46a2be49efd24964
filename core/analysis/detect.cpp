// detect_foldable: the foldability analysis of DESIGN.md ("The semantics the detector must
// implement"), as two cooperating passes over a finalized graph:
//
//  * mean forms (forward, on demand, memoized per (value, axes)): the mean of a value over
//    a set of its axes as a sparse linear combination of atoms (mean_form.h). An LN over A
//    asks for the mean of its input over A; every surviving atom must be a centerable term.
//  * deviation safety (forward from each term, memoized per (value, constant axes U)):
//    centering a term adds a deviation δ constant along U; it must be absorbed or
//    cancelled before every graph output, along every path.
//
// Both passes use explicit stacks (a 10^6-node residual stream must not overflow the call
// stack) and share structure, so the whole analysis is O(n log n) on a deep pre-norm stack.
#include <algorithm>
#include <tuple>
#include <optional>
#include <set>
#include <unordered_map>

#include "core/analysis/axes_mask.h"
#include "core/analysis/fold_plan.h"
#include "core/analysis/mean_form.h"
#include "core/error.h"

namespace lnv {

size_t FoldPlan::foldable_count(Mode m) const {
  size_t n = 0;
  for (const LnVerdict& v : layer_norms) n += v.foldable[static_cast<int>(m)] ? 1 : 0;
  return n;
}

namespace {

using analysis::bit;
using analysis::Entry;
using analysis::EntryStatus;
using analysis::Form;
using analysis::FormPool;
using analysis::Mask;
using analysis::subset;

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

class Analyzer {
 public:
  Analyzer(const Graph& g, Mode mode) : g_(g), mode_(mode) {
    const size_t n = g.nodes.size();
    uses_.assign(n, {});
    for (size_t c = 0; c < n; ++c)
      for (size_t k = 0; k < g.node_inputs[c].size(); ++k) {
        const ValueRef& r = g.node_inputs[c][k];
        if (r.kind == ValueRef::Kind::node) uses_[r.index].push_back({int32_t(c), int32_t(k)});
      }
    is_output_.assign(n, false);
    for (const ValueRef& r : g.output_refs)
      if (r.kind == ValueRef::Kind::node) is_output_[r.index] = true;
    // Two readings of "zero" and "live": `strict` trusts only what no rewrite changes
    // (sub(a, a), scale 0, center, cbwc); the other also trusts LayerNorms, which stay
    // LayerNorms or are folded exactly — except the LN being judged, whose own fold must
    // not be justified by its own zero-mean output (hence LN deadness uses strict).
    for (bool strict : {true, false}) {
      std::vector<bool>& zero = strict ? zero_strict_ : zero_;
      std::vector<bool>& live = strict ? live_strict_ : live_;
      const Trust trust{.lns = !strict};
      zero.assign(n, false);
      for (int32_t v : g.order) zero[v] = structurally_zero(v, zero, trust);
      // Live: some graph output depends on it. A structurally zero node depends on nothing.
      live.assign(n, false);
      for (auto it = g.order.rbegin(); it != g.order.rend(); ++it) {
        const int32_t v = *it;
        bool l = is_output_[v];
        for (auto [c, k] : uses_[v]) l = l || (live[c] && !ignores_inputs(c, zero, trust));
        live[v] = l && !zero[v];
      }
    }
    // An LN can also be dead because its contributions cancel between routes
    // (`sub(a, add(a, c))`): such an LN is dead in both readings.
    const std::vector<bool> through_sums = live_through_sums(zero_strict_, Trust{.lns = false});
    for (size_t v = 0; v < n; ++v)
      if (g.nodes[v].op == Op::layer_norm && !through_sums[v]) live_strict_[v] = live_[v] = false;
    uniform_.assign(n, 0);
    for (int32_t v : g.order) uniform_[v] = uniform_axes(v);
    for (size_t i = 0; i < n; ++i)
      if (g.node_shapes[i].size() > 63)
        throw ModelError(g.nodes[i].name, "the analysis supports tensors of rank up to 63");
  }

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

  // Which nodes a graph output depends on when sums are expanded: a sum, difference, scale
  // or identity of values of its own shape is a linear combination of the other nodes
  // ("atoms") with exact coefficients, so `sub(a, add(a, c))` does not depend on `a`. An
  // operand broadcast to the result's shape stays one atom (its broadcast is fixed by the
  // shape); a combination of more than kMaxAtoms atoms is an atom itself. Params and graph
  // inputs are left out (only nodes' liveness is asked). Only atoms' entries are meaningful.
  std::vector<bool> live_through_sums(const std::vector<bool>& zero, const Trust& trust) const {
    constexpr size_t kMaxAtoms = 8;
    using Combination = std::vector<std::pair<int32_t, double>>;  // sorted by node
    const size_t n = g_.nodes.size();
    std::vector<Combination> form(n);
    std::vector<char> combined(n, 0);
    for (int32_t v : g_.order) {
      const Node& node = g_.nodes[v];
      if (zero[v]) {
        combined[v] = 1;
        continue;
      }
      const auto& in = g_.node_inputs[v];
      std::vector<std::pair<size_t, double>> operands;  // (input slot, coefficient)
      if (node.op == Op::add || node.op == Op::sub) {
        operands = {{0, 1.0}, {1, node.op == Op::sub ? -1.0 : 1.0}};
      } else if (node.op == Op::scale) {
        operands = {{0, node.factor}};
      } else if (node.op == Op::dropout && (mode_ == Mode::inference || node.p == 0.0)) {
        operands = {{0, 1.0}};
      } else {
        continue;
      }
      Combination terms;
      for (auto [k, c] : operands) {
        const ValueRef& r = in[k];
        if (r.kind != ValueRef::Kind::node) continue;
        if (combined[r.index] && g_.node_shapes[r.index] == g_.node_shapes[v]) {
          for (auto [a, ca] : form[r.index]) terms.push_back({a, c * ca});
        } else {
          terms.push_back({r.index, c});
        }
      }
      std::sort(terms.begin(), terms.end(),
                [](const auto& x, const auto& y) { return x.first < y.first; });
      Combination f;
      for (size_t i = 0; i < terms.size();) {
        double c = 0;
        const int32_t a = terms[i].first;
        for (; i < terms.size() && terms[i].first == a; ++i) c += terms[i].second;
        if (c != 0.0) f.push_back({a, c});
      }
      if (f.size() > kMaxAtoms) continue;
      form[v] = std::move(f);
      combined[v] = 1;
    }
    std::vector<bool> live(n, false);
    auto mark = [&](int32_t r) {
      if (!combined[r]) {
        live[r] = true;
        return;
      }
      for (auto [a, c] : form[r]) live[a] = true;
    };
    for (const ValueRef& r : g_.output_refs)
      if (r.kind == ValueRef::Kind::node) mark(r.index);
    for (auto it = g_.order.rbegin(); it != g_.order.rend(); ++it) {
      const int32_t v = *it;
      if (combined[v] || !live[v] || ignores_inputs(v, zero, trust)) continue;
      for (const ValueRef& r : g_.node_inputs[v])
        if (r.kind == ValueRef::Kind::node) mark(r.index);
    }
    return live;
  }

  // Whether swapping the LayerNorms in `swapped` for RMSNorms with nothing centered (so
  // each outputs something else) changes a graph output, given the plan's other folds:
  // `folded` LNs and `centered` producers. Two marks flow forward from the swapped LNs:
  // `changed` (the value may differ) and `unzeroed` (a mean that some zero-mean output
  // relied on may differ). A centered producer's output keeps its zero mean whatever its
  // input, and so do a `center` and an LN without affine that is kept; a folded LN keeps
  // it only while no `unzeroed` mark reaches it. A zero that needs the zero mean of an LN
  // that lost it no longer cuts; `blame` collects such LNs. Linear in the graph.
  bool swap_reaches_output(const std::vector<char>& swapped, const std::vector<char>& folded,
                           const std::vector<char>& centered, std::vector<int32_t>* blame) const {
    const size_t n = g_.nodes.size();
    std::vector<bool> zero(n, false);
    std::vector<char> changed(n, 0), unzeroed(n, 0), distrusted(n, 0);
    const Trust trust{.lns = true, .distrusted = &distrusted, .consulted = blame};
    for (int32_t v : g_.order) {
      const Node& node = g_.nodes[v];
      if (swapped[v]) {
        changed[v] = unzeroed[v] = distrusted[v] = 1;
      } else {
        zero[v] = structurally_zero(v, zero, trust);
        if (!ignores_inputs(v, zero, trust))
          for (const ValueRef& r : g_.node_inputs[v])
            if (r.kind == ValueRef::Kind::node) {
              changed[v] |= changed[r.index];
              unzeroed[v] |= unzeroed[r.index];
            }
        const bool keeps_zero_mean =
            centered[v] || node.op == Op::center ||
            (node.op == Op::layer_norm && node.weight.empty() && node.bias.empty() &&
             !(folded[v] && unzeroed[v]));
        if (node.op == Op::layer_norm && folded[v] && unzeroed[v]) distrusted[v] = 1;
        if (keeps_zero_mean) unzeroed[v] = 0;
      }
      if (changed[v] && is_output_[v]) return true;
    }
    return false;
  }

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
  std::vector<Mask> uniform_;

  // Concats along `axis` of copies of one value carry that value's deviation everywhere
  // when it is constant along the axis: the value they copy.
  ValueRef copy_root(ValueRef x, int64_t axis) const {
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
  bool zero_mean_over(const ValueRef& x, const Axes& axes, const Trust& trust) const {
    if (x.kind != ValueRef::Kind::node) return false;
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
    if (n.op == Op::sub) {
      const ValueRef& m = g_.node_inputs[x.index][1];
      if (m.kind == ValueRef::Kind::node && g_.nodes[m.index].op == Op::mean &&
          g_.nodes[m.index].keepdims && g_.node_inputs[m.index][0] == g_.node_inputs[x.index][0] &&
          s == g_.shape_of(g_.node_inputs[x.index][0]))
        return inside(g_.nodes[m.index].axes);
    }
    if (n.cbwc && (n.op == Op::linear || n.op == Op::embedding || n.op == Op::attention))
      return inside({-1});
    return false;
  }

  // Axes along which a node's value is the same everywhere by construction (it does not
  // depend on the position there): zero values, and what is computed from them.
  Mask uniform_axes(int32_t v) const {
    const Node& n = g_.nodes[v];
    const Shape& out = g_.node_shapes[v];
    const size_t R = out.size();
    const Mask all = R >= 64 ? ~Mask(0) : (Mask(1) << R) - 1;
    if (zero_[v]) return all;
    const auto& in = g_.node_inputs[v];
    auto of = [&](size_t k) -> Mask {
      const ValueRef& r = in[k];
      const Shape& s = g_.shape_of(r);
      const Mask own = r.kind == ValueRef::Kind::node ? uniform_[r.index] : analysis::size1_mask(s);
      return analysis::operand_to_out(own, s.size(), R) | analysis::broadcast_const_axes(s, R);
    };
    Mask m = 0;
    switch (n.op) {
      case Op::relu:
      case Op::gelu:
      case Op::tanh:
      case Op::sigmoid:
      case Op::silu:
      case Op::exp:
      case Op::scale:
        m = of(0);
        break;
      case Op::dropout:
        m = mode_ == Mode::training && n.p > 0.0 ? 0 : of(0);
        break;
      case Op::add:
      case Op::sub:
      case Op::mul:
      case Op::div:
        m = of(0) & of(1);
        break;
      case Op::linear:
        m = of(0) & ~bit(int64_t(R) - 1);
        break;
      default:
        m = 0;
    }
    return (m & all) | analysis::size1_mask(out);
  }

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
  bool ignores_inputs(int32_t c, const std::vector<bool>& zero, const Trust& trust) const {
    const Node& n = g_.nodes[c];
    const Shape& s = g_.node_shapes[c];
    if (zero[c]) return true;
    if (n.op == Op::softmax) return s[normalize_axis(n.axis, int64_t(s.size()), n.name)] == 1;
    if (n.op == Op::layer_norm || n.op == Op::center) {
      for (int64_t a : normalize_axes(n.axes, int64_t(s.size()), n.name))
        if (s[a] != 1) return false;
      return n.op == Op::center || trusts(trust, c);
    }
    return false;
  }

  // Whether node v is identically zero whatever the inputs and (generic) params:
  // sub(a, a), a scale by 0, and ops that map zero inputs to zero (no bias added).
  bool structurally_zero(int32_t v, const std::vector<bool>& zero, const Trust& trust) const {
    const Node& n = g_.nodes[v];
    const auto& in = g_.node_inputs[v];
    auto z = [&](size_t k) { return in[k].kind == ValueRef::Kind::node && zero[in[k].index]; };
    auto all_zero = [&]() {
      for (size_t k = 0; k < in.size(); ++k)
        if (!z(k)) return false;
      return true;
    };
    switch (n.op) {
      case Op::sub:
        return alias(in[0]) == alias(in[1]) || all_zero();
      case Op::scale:
        return n.factor == 0.0 || all_zero();
      case Op::mul:
      case Op::matmul:
        return z(0) || z(1);
      case Op::div:
        return z(0);
      case Op::linear:
      case Op::conv1d:
      case Op::conv2d:
        return z(0) && n.bias.empty();
      case Op::layer_norm:
      case Op::rms_norm:
        return z(0) && n.bias.empty();
      case Op::attention:
        return z(0) && n.bv.empty() && n.bo.empty();
      case Op::mean:
        return all_zero() ||
               zero_mean_over(in[0],
                              normalize_axes(n.axes, int64_t(g_.shape_of(in[0]).size()), n.name),
                              trust);
      case Op::add:
      case Op::dropout:
      case Op::relu:
      case Op::gelu:
      case Op::tanh:
      case Op::silu:
      case Op::max:
      case Op::transpose:
      case Op::reshape:
      case Op::concat:
      case Op::center:
        return all_zero();
      case Op::rnn:
        // h_t = act(N(W_ih·0 + W_hh·h_{t-1})) stays 0 from h_0 = 0 when nothing adds a bias.
        return z(0) && n.bias.empty() && (!n.norm || n.norm->bias.empty());
      case Op::embedding:
      case Op::sigmoid:
      case Op::exp:
      case Op::softmax:
      case Op::kCount:
        return false;
    }
    return false;
  }
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
  // Whether c concatenates, along an axis of u, parts that are v or carriers of v (above),
  // at least one a carrier: a deviation of v constant along u lands on every part alike.
  bool same_shift_concat(int32_t c, int32_t v, Mask u) {
    const Node& node = g_.nodes[c];
    if (node.op != Op::concat) return false;
    const int64_t ax = normalize_axis(node.axis, int64_t(out_shape(c).size()), node.name);
    if ((u & bit(ax)) == 0 || out_shape(c).size() != out_shape(v).size()) return false;
    bool carrier = false;
    for (const ValueRef& x : g_.node_inputs[c]) {
      if (x.kind != ValueRef::Kind::node) return false;
      if (x.index == v) continue;
      if (carrier_slot(x.index, v, u) < 0) return false;
      carrier = true;
    }
    return carrier;
  }
  // sub(v, m) or sub(m, v) with m = mean or max(v, B ⊆ u, keepdims): the deviation cancels.
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

// ---------------------------------------------------------------------------------------
// Mean rules: the mean over `a` (canonical axes of n's output) of node n.

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

Rule Analyzer::producer_rule(int32_t n, Mask a, Mask feature) {
  const Node& node = g_.nodes[n];
  feature &= ~analysis::size1_mask(out_shape(n));
  Rule r;
  // A mean over axes the weight does not touch passes through the product (without a
  // bias): mean_A(x Wᵀ) = mean_A(x) Wᵀ.
  if (a != 0 && (feature & a) == 0) {
    const size_t R = out_shape(n).size();
    const uint64_t tag = (uint64_t(uint32_t(n)) << 8) + 1;
    if (node.op == Op::linear && node.bias.empty()) {
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
    if (node.op == Op::linear && node.bias.empty()) act = 0;
    if (node.op == Op::matmul) {
      const int candidate = input_is_param(n, 1) ? 0 : 1;
      if (!input_is_param(n, candidate) && !(candidate == 1 && node.transpose_b) &&
          in_shape(n, 1 - candidate).size() == 2 && in_shape(n, candidate).size() == R)
        act = candidate;
    }
    if (act >= 0 && pool_.size(operand_mean(n, act, a & ~feature)) == 0) {
      r.zero = true;
      return r;
    }
  }
  Entry e;
  e.atom = n;
  e.mask = a;
  e.coeff = 1.0;
  // A grouped conv centered over all its output channels is not zero-mean over them, unless
  // its input is structurally zero: then it outputs its bias, which centering does center.
  const ValueRef& x = g_.node_inputs[n][0];
  const bool zero_input = x.kind == ValueRef::Kind::node && zero_[x.index];
  const bool grouped =
      (node.op == Op::conv1d || node.op == Op::conv2d) && node.groups != 1 && !zero_input;
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
      // Without affine, an RMSNorm only rescales rows: a zero-mean input stays zero-mean.
      const Mask b = norm_axes(n) & ~analysis::size1_mask(out);
      if (node.weight.empty() && node.bias.empty() && b != 0 && subset(b, a) &&
          pool_.size(operand_mean(n, 0, b)) == 0) {
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
      for (const ValueRef& x : g_.node_inputs[n]) copies = copies && x == g_.node_inputs[n][0];
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
        r.leaf = opaque_entry(n, a, IssueKind::norm_other_axes);
        return r;
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

// ---------------------------------------------------------------------------------------
// Deviation edges: a deviation constant along u (operand k's coordinates) entering node c.

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
      Mask m = u & bit(0);
      for (size_t s = 2; s < r; ++s) {
        const int64_t pad = node.padding.size() == 1 ? node.padding[0] : node.padding[s - 2];
        if ((u & bit(int64_t(s))) && pad == 0) m |= bit(int64_t(s));
      }
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
  if (!live_[v]) return ex;
  if (is_output_[v]) {
    ex.immediate.ok = false;
    ex.immediate.break_node = v;
    ex.immediate.kind = BreakKind::output;
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
    else if (carrier_slot(c, v, u) == k)
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
          ex.immediate.ok = false;
          ex.immediate.break_node = c;
          ex.immediate.kind = BreakKind::output;
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
        ex.immediate.ok = false;
        ex.immediate.break_node = c;
        ex.immediate.kind = BreakKind::output;
        return ex;
      }
      const Mask um = canon_u(c, edge(c, 0, u).u);
      for (auto [c2, k2] : uses_[c]) {
        if (cancels_with_mean(c2, v, u)) continue;
        if (!follow(c2, k2, um)) return ex;
      }
      continue;
    }
    if (!follow(c, k, u)) return ex;
  }
  return ex;
}

// ---------------------------------------------------------------------------------------
// Verdicts and reasons.

std::string quote(const std::string& s) { return "`" + s + "`"; }

std::string axes_text(Mask m) {
  std::string s = "[";
  bool first = true;
  for (int64_t a : analysis::axes_of(m)) {
    s += (first ? "" : ", ") + std::to_string(a);
    first = false;
  }
  return s + "]";
}

class Reasoner {
 public:
  Reasoner(Analyzer& an) : an_(an), g_(an.graph()) {}

  std::string describe(int32_t n) const {
    return quote(g_.nodes[n].name) + " (" + std::string(op_name(g_.nodes[n].op)) + ")";
  }

  // A shortest route of node names from `from` to `to` along consumers (bounded search).
  std::vector<std::string> route(int32_t from, int32_t to) const {
    std::vector<std::string> out;
    if (from < 0 || to < 0) return out;
    std::unordered_map<int32_t, int32_t> parent{{from, -1}};
    std::vector<int32_t> queue{from};
    bool found = from == to;
    for (size_t head = 0; head < queue.size() && !found && queue.size() < 200000; ++head)
      for (int32_t c : g_.consumers[queue[head]])
        if (parent.emplace(c, queue[head]).second) {
          queue.push_back(c);
          if (c == to) {
            found = true;
            break;
          }
        }
    if (!found) return {g_.nodes[from].name, g_.nodes[to].name};
    for (int32_t x = to; x != -1; x = parent.at(x)) out.push_back(g_.nodes[x].name);
    std::reverse(out.begin(), out.end());
    return out;
  }

  // The nearest producer upstream of `n` (for the dropout message).
  int32_t producer_above(int32_t n) const {
    std::vector<int32_t> queue{n};
    std::set<int32_t> seen{n};
    for (size_t head = 0; head < queue.size() && head < 10000; ++head) {
      for (const ValueRef& r : g_.node_inputs[queue[head]]) {
        if (r.kind != ValueRef::Kind::node || !seen.insert(r.index).second) continue;
        if (is_weighted(g_.nodes[r.index].op)) return r.index;
        queue.push_back(r.index);
      }
    }
    return -1;
  }

  std::string dropout_between(int32_t drop, const std::string& ln_name) const {
    const int32_t p = producer_above(drop);
    return quote(g_.nodes[drop].name) + " (dropout, active in training) lies between " +
           (p >= 0 ? quote(g_.nodes[p].name) : std::string("the model's input")) + " and " +
           quote(ln_name) + "; its mask makes the input of " + quote(ln_name) +
           " not zero-mean";
  }

  std::string issue_text(const Issue& is, const std::string& ln) const {
    const std::string who = is.node >= 0 ? describe(is.node) : std::string();
    switch (is.kind) {
      case IssueKind::graph_input:
        return "the mean of " + quote(ln) + "'s input over its normalized axes keeps graph input " +
               quote(g_.inputs[is.input].name) + ", which no centering can remove";
      case IssueKind::nonlinear_output:
        return "the mean of " + quote(ln) + "'s input over its normalized axes keeps the output of " +
               who + ", which is not a linear function of centerable terms";
      case IssueKind::dropout_training:
        return dropout_between(is.node, ln);
      case IssueKind::norm_with_weight:
        return "the mean of " + quote(ln) + "'s input keeps the output of " + who +
               ", a norm with a weight, which is not zero-mean";
      case IssueKind::norm_other_axes:
        return who + " is zero-mean only over its own axes, not over the axes " + quote(ln) +
               " normalizes";
      case IssueKind::rms_norm_output:
        return "the mean of " + quote(ln) + "'s input keeps the output of " + who +
               ", which is not zero-mean";
      case IssueKind::feature_mismatch:
        return who + " produces its features on axes " + axes_text(is.feature) +
               " of its output, but " + quote(ln) + " averages over axes " + axes_text(is.mean) +
               " of it; it would be foldable if " + quote(g_.nodes[is.node].name) +
               "'s output features were laid out on exactly the normalized axes (a different "
               "weight layout)";
      case IssueKind::grouped_conv:
        return who + " is a grouped convolution (groups=" +
               std::to_string(g_.nodes[is.node].groups) +
               "): centering its weight over all output channels does not make its output "
               "zero-mean; it would be foldable if made dense (groups=1)";
      case IssueKind::cbwc_other_axes:
        return who + " is already centered (cbwc) over axes " + axes_text(is.feature) +
               " of its output, not over the axes " + quote(ln) + " averages";
      case IssueKind::per_feature_factor:
        return who + " multiplies by a factor that varies along the axes " + quote(ln) +
               " normalizes, so no centering makes the mean of its input vanish";
      case IssueKind::reshape_blocks:
        return who + " splits or merges the normalized axes of " + quote(ln) +
               " across blocks of its input, so their mean is not a mean of whole features";
      case IssueKind::matmul_mixing:
        return who + " multiplies two activations along the normalized axes of " + quote(ln) +
               ", so its mean is not a combination of centerable terms";
    }
    return "";
  }

  std::string term_name(const Term& t) const {
    if (t.term.kind == CenterTerm::Kind::producer) return quote(t.term.node);
    return "param " + quote(t.term.param) + " (read by " + quote(t.term.node) + ")";
  }

  // Walks the failing route of a term: the nodes from the term to the break, and the last
  // node where the deviation stopped being constant along some axes.
  struct Route {
    std::vector<int32_t> nodes;
    int32_t lost_at = -1;
  };
  Route failing_route(const Term& t) const {
    Route r;
    const Safety* s = &t.safety;
    if (t.term.kind == CenterTerm::Kind::producer) r.nodes.push_back(g_.node_index(t.term.node));
    else r.nodes.push_back(t.use_node);
    while (s != nullptr && s->next.first >= 0) {
      r.nodes.push_back(s->next.first);
      if (s->next_dropped) r.lost_at = s->next.first;
      s = an_.safety_of(s->next);
    }
    if (t.safety.break_node >= 0 && r.nodes.back() != t.safety.break_node)
      r.nodes.push_back(t.safety.break_node);
    return r;
  }

  std::string unsafe_text(const Term& t, const std::string& ln, const Route& route) const {
    const int32_t b = t.safety.break_node;
    const std::string head = "centering " + term_name(t) + " (a term of " + quote(ln) +
                             ") is not exact: its shift ";
    std::string lost;
    if (route.lost_at >= 0) {
      const Node& ln_node = g_.nodes[route.lost_at];
      if (ln_node.op == Op::dropout && an_.mode() == Mode::training)
        return quote(ln_node.name) + " (dropout, active in training) lies between " +
               quote(t.term.node) + " and " + describe(b) + "; its mask makes the shift of " +
               term_name(t) + " vary, so " + quote(g_.nodes[b].name) + " no longer absorbs it";
      lost = " (it stops being constant at " + describe(route.lost_at) + ")";
    }
    switch (t.safety.kind) {
      case BreakKind::output:
        return head + "reaches graph output " + quote(g_.nodes[b].name) + lost;
      case BreakKind::nonlinear:
        return head + "enters " + describe(b) + " nonlinearly, and " + quote(g_.nodes[b].name) +
               " reaches a graph output" + lost;
      case BreakKind::norm_axes:
        return head + "reaches " + describe(b) +
               " without being constant over the axes it normalizes" + lost;
      case BreakKind::max_axes:
        return head + "reaches " + describe(b) +
               ", a max over axes along which the shift is not constant" + lost;
      case BreakKind::rms_norm:
        return head + "reaches " + describe(b) + ", an RMSNorm, which does not remove a mean" + lost;
      case BreakKind::gate:
        return head + "enters the scores or recurrence of " + describe(b) + " nonlinearly" + lost;
      case BreakKind::denominator:
        return head + "enters the divisor of " + describe(b) + lost;
      case BreakKind::index:
        return head + "enters the index operand of " + describe(b) + lost;
    }
    return head + "is not absorbed";
  }

 private:
  Analyzer& an_;
  const Graph& g_;
};

struct ModeVerdict {
  bool foldable = false;
  std::string reason;
  std::vector<std::string> path;
  Form form;
  bool opaque = false;
};

ModeVerdict judge_ln(Analyzer& an, Reasoner& why, int32_t n, const std::string& ln_name) {
  const Graph& g = an.graph();
  ModeVerdict v;
  if (!an.live_strict(n)) {
    // No output depends on it: swapping it changes nothing, with nothing centered.
    v.foldable = true;
    return v;
  }
  const Mask b =
      analysis::mask_of(normalize_axes(g.nodes[n].axes, int64_t(g.node_shapes[n].size()),
                                       g.nodes[n].name));
  v.form = an.operand_mean(n, 0, b);
  FormPool& pool = an.pool();
  v.opaque = pool.opaque_count(v.form) > 0;
  if (const Entry* e = pool.first_bad(v.form)) {
    const Issue& is = an.issues()[e->issue];
    v.reason = why.issue_text(is, ln_name);
    v.path = why.route(is.node >= 0 ? is.node : n, n);
    if (is.node < 0) v.path.insert(v.path.begin(), g.inputs[is.input].name);
    return v;
  }
  int32_t unsafe = -1;
  if (const Entry* e = pool.first_unsafe(v.form)) unsafe = e->ref;
  if (unsafe < 0 && an.stale())
    pool.visit(v.form, [&](const Entry& e) {
      if (unsafe < 0 && e.ref >= 0 && !an.terms()[e.ref].safety.ok) unsafe = e.ref;
    });
  if (unsafe >= 0) {
    const Term& t = an.terms()[unsafe];
    Reasoner::Route r = why.failing_route(t);
    v.reason = why.unsafe_text(t, ln_name, r);
    // breaking node back to the term, then on to this LN.
    for (auto it = r.nodes.rbegin(); it != r.nodes.rend(); ++it) v.path.push_back(g.nodes[*it].name);
    std::vector<std::string> onward = why.route(r.nodes.front(), n);
    v.path.insert(v.path.end(), onward.begin() + (onward.empty() ? 0 : 1), onward.end());
    return v;
  }
  v.foldable = true;
  return v;
}

// Adds a term to a list of terms, one per (producer) or (param use). A param use wanted
// centered over nested axis sets is centered over the smallest: that zeroes its mean over
// every larger set too.
void merge_term(std::vector<CenterTerm>& terms, const CenterTerm& t) {
  for (CenterTerm& have : terms) {
    if (have.kind != t.kind || have.node != t.node || have.param != t.param || have.slot != t.slot)
      continue;
    if (t.remove || std::includes(have.axes.begin(), have.axes.end(), t.axes.begin(), t.axes.end()))
      have = t;
    return;
  }
  terms.push_back(t);
}

std::vector<CenterTerm> terms_of(Analyzer& an, const Form& f) {
  std::vector<CenterTerm> out;
  std::set<int32_t> seen;
  an.pool().visit(f, [&](const Entry& e) {
    if (e.ref >= 0 && seen.insert(e.ref).second) merge_term(out, an.terms()[e.ref].term);
  });
  return out;
}

// LayerNorms that no output depends on only because other LNs' outputs have a zero mean
// (a mean over the axes of an LN without affine cuts them off). Swapped alone, such an LN
// changes no output, with nothing centered; but its RMSNorm no longer outputs a zero mean,
// and an LN folded downstream of it may have relied on that, and then no longer cuts the
// paths that made this one dead. So each is checked against the plan, downstream first
// (its check swaps every dead fold accepted so far with it, so the last acceptance checks
// them all together): foldable if the swaps still reach no output with the plan's folded
// LNs trusted only where nothing swapped reaches them; otherwise "no", naming the folded
// LNs it would break (the verdict is relative to the plan: docs/DECISIONS.md).
void fold_dead_behind_lns(const Analyzer& an, int m, const std::vector<char>& centered,
                          const std::vector<int32_t>& ln_nodes, FoldPlan& plan) {
  const Graph& g = an.graph();
  const size_t N = g.nodes.size();
  std::vector<char> folded(N, 0), swapped(N, 0);
  std::vector<std::pair<int32_t, LnVerdict*>> candidates;
  for (size_t i = 0; i < plan.layer_norms.size(); ++i) {
    LnVerdict& v = plan.layer_norms[i];
    const int32_t n = ln_nodes[i];
    if (n < 0) continue;  // the norm inside an rnn
    if (v.foldable[m]) {
      // A dead fold (!live_strict) changes its output, but nothing that reaches an output
      // depends on it even without any LN's zero mean, so it need not be swapped here.
      folded[n] = 1;
    } else if (an.live_strict(n) && !an.live(n)) {
      candidates.push_back({n, &v});
    }
  }
  const std::vector<char> none(N, 0);
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    const auto [n, v] = *it;
    std::vector<char> alone(N, 0);
    alone[n] = 1;
    if (an.swap_reaches_output(alone, none, none, nullptr)) continue;  // live through its own zero mean
    swapped[n] = folded[n] = 1;
    std::vector<int32_t> blame;
    if (!an.swap_reaches_output(swapped, folded, centered, &blame)) {
      v->foldable[m] = true;
      v->reason[m].clear();
      v->path[m].clear();
      v->terms.clear();
      v->term_count = 0;
      v->opaque = false;
      continue;
    }
    swapped[n] = folded[n] = 0;
    std::vector<std::string>& names = v->conflicts[m];
    for (int32_t b : blame) {
      const std::string& name = g.nodes[b].name;
      if (b != n && std::find(names.begin(), names.end(), name) == names.end())
        names.push_back(name);
    }
    std::string list;
    for (const std::string& name : names) list += (list.empty() ? "`" : ", `") + name + "`";
    v->reason[m] = "swapping `" + v->name + "` alone changes no output (its paths to the outputs "
                   "end in the zero mean of " + (list.empty() ? std::string("other LayerNorms") : list) +
                   "), but folding it together with the plan does: the folded LayerNorms "
                   "downstream of it keep a zero-mean output only while `" + v->name +
                   "` stays a LayerNorm, so it is kept";
    v->path[m] = {names.empty() ? v->name : names.front(), v->name};
  }
}

}  // namespace

FoldPlan detect_foldable(const Graph& g, Mode mode) { return detect_foldable(g, mode, {}); }

FoldPlan detect_foldable(const Graph& g, Mode mode, const DetectOptions& options) {
  LNV_INTERNAL_ASSERT(g.finalized(), "detect_foldable needs a finalized graph");
  // Without an active dropout the two modes are the same function: analyse once.
  const bool same_modes = std::none_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) {
    return n.op == Op::dropout && n.p > 0.0;
  });
  Analyzer inference(g, Mode::inference);
  std::optional<Analyzer> training_only;
  if (!same_modes) training_only.emplace(g, Mode::training);
  Analyzer& training = same_modes ? inference : *training_only;
  Analyzer* const by_mode[2] = {&inference, &training};
  Reasoner why_inf(inference), why_tr(training);
  Reasoner* const reasoners[2] = {&why_inf, &why_tr};
  const int pm = same_modes ? 0 : static_cast<int>(mode);

  FoldPlan plan;
  plan.mode = mode;
  std::vector<bool> seen_nodes;
  // Per mode: the producers centered for the LNs foldable in that mode.
  std::array<std::vector<char>, 2> centered_producers{std::vector<char>(g.nodes.size(), 0),
                                                      std::vector<char>(g.nodes.size(), 0)};
  std::array<std::vector<bool>, 2> seen_by_mode;
  std::vector<int32_t> ln_nodes;  // per entry of plan.layer_norms: its node (-1: an rnn's norm)
  std::set<std::tuple<int, std::string, std::string, std::string>> center_keys;
  auto add_center = [&](const CenterTerm& t) {
    if (center_keys.insert({int(t.kind), t.node, t.param, t.slot}).second) {
      plan.center.push_back(t);
    } else if (t.kind == CenterTerm::Kind::param) {
      merge_term(plan.center, t);  // rare: the same param use under several LNs
    }
  };
  for (int32_t n : g.order) {
    const Node& node = g.nodes[n];
    if (node.op == Op::rnn && node.norm && node.norm->kind == Op::layer_norm) {
      // The norm inside an rnn sees only the pre-activation W_ih x + W_hh h + b, a producer
      // whose centering stays inside the rnn: always foldable.
      LnVerdict v;
      v.name = node.name + ".norm";
      v.node = node.name;
      v.foldable = {true, true};
      if (!node.cbwc) {
        CenterTerm t;
        t.kind = CenterTerm::Kind::producer;
        t.node = node.name;
        v.terms.push_back(t);
        add_center(t);
      }
      v.term_count = v.terms.size();
      plan.layer_norms.push_back(v);
      ln_nodes.push_back(-1);
      plan.fold.push_back(v.name);
      continue;
    }
    if (node.op != Op::layer_norm) continue;
    LnVerdict v;
    v.name = node.name;
    v.node = node.name;
    Form plan_form;
    for (int m = 0; m < 2; ++m) {
      if (m == 1 && same_modes) {
        v.foldable[1] = v.foldable[0];
        v.reason[1] = v.reason[0];
        v.path[1] = v.path[0];
        continue;
      }
      ModeVerdict mv = judge_ln(*by_mode[m], *reasoners[m], n, node.name);
      v.foldable[m] = mv.foldable;
      v.reason[m] = mv.reason;
      v.path[m] = mv.path;
      if (mv.foldable) {
        Analyzer& am = *by_mode[m];
        am.pool().visit_unseen(mv.form, seen_by_mode[m], [&](const Entry& e) {
          if (e.ref < 0) return;
          const int32_t p = am.terms()[e.ref].producer;
          if (p >= 0) centered_producers[m][p] = 1;
        });
      }
      if (m == pm) {
        plan_form = mv.form;
        v.opaque = mv.opaque;
      }
    }
    Analyzer& an = *by_mode[pm];
    v.term_count = an.pool().size(plan_form) - an.pool().opaque_count(plan_form);
    if (options.list_terms) v.terms = terms_of(an, plan_form);
    if (v.foldable[pm]) {
      plan.fold.push_back(v.name);
      an.pool().visit_unseen(plan_form, seen_nodes, [&](const Entry& e) {
        if (e.ref >= 0) add_center(an.terms()[e.ref].term);
      });
    }
    plan.layer_norms.push_back(std::move(v));
    ln_nodes.push_back(n);
  }
  for (int m = 0; m < (same_modes ? 1 : 2); ++m)
    fold_dead_behind_lns(*by_mode[m], m, centered_producers[m], ln_nodes, plan);
  if (same_modes)
    for (LnVerdict& v : plan.layer_norms) {
      v.foldable[1] = v.foldable[0];
      v.reason[1] = v.reason[0];
      v.path[1] = v.path[0];
      v.conflicts[1] = v.conflicts[0];
    }
  plan.fold.clear();
  for (const LnVerdict& v : plan.layer_norms)
    if (v.foldable[pm]) plan.fold.push_back(v.name);
  return plan;
}

}  // namespace lnv
