// detect_foldable: the foldability analysis of docs/spec/semantics.md ("Foldability").
// The analyzer (analyzer.h lists its files) computes mean forms and the safety of
// centering terms; this file turns them into verdicts, reasons a person can read, and the
// plan: the terms to center and the LNs to swap. A "no" relative to the plan (dead folds
// behind other LNs) follows docs/spec/decisions.md.
//
// Both passes use explicit stacks (memo_walk.h: a 10^6-node residual stream must not
// overflow the call stack) and share structure, so the whole analysis is O(n log n) on a
// deep pre-norm stack.
#include <algorithm>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "core/analysis/analyzer.h"

namespace lnv {

size_t FoldPlan::foldable_count(Mode m) const {
  size_t n = 0;
  for (const LnVerdict& v : layer_norms) n += v.foldable[static_cast<int>(m)] ? 1 : 0;
  return n;
}

namespace {

using namespace analysis::detail;
using analysis::bit;
using analysis::Entry;
using analysis::EntryStatus;
using analysis::Form;
using analysis::FormPool;
using analysis::Mask;
using analysis::subset;

// ---------------------------------------------------------------------------------------
// Verdicts and reasons.

std::string quote(const std::string& s) { return "`" + s + "`"; }

std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

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
    const Node& node = g_.nodes[n];
    if (node.op == Op::opaque) return quote(node.name) + " (opaque op " + quote(node.op_type) + ")";
    return quote(node.name) + " (" + std::string(op_name(node.op)) + ")";
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
        return per_feature_factor_text(is.node, ln);
      case IssueKind::reshape_blocks:
        return who + " splits or merges the normalized axes of " + quote(ln) +
               " across blocks of its input, so their mean is not a mean of whole features";
      case IssueKind::slice_axes:
        return who + " takes only part of the axes " + quote(ln) +
               " normalizes, so their mean is not a mean of whole features that centering "
               "zeroes";
      case IssueKind::pad_value:
        return who + " pads with the nonzero value " + number_text(g_.nodes[is.node].value) +
               ", a constant in the mean of " + quote(ln) + "'s input that no centering removes";
      case IssueKind::where_mixes:
        return who + " picks between its inputs by a condition that varies along every axis " +
               quote(ln) + " normalizes, so the mean of its input mixes parts of rows, and the "
               "rules know no centering that makes it vanish";
      case IssueKind::opaque_op:
        return "the mean of " + quote(ln) + "'s input over its normalized axes keeps the output of " +
               who + ", an op lnverify does not model, so no centering is known to remove it";
      case IssueKind::matmul_mixing:
        return who + " multiplies two activations along the normalized axes of " + quote(ln) +
               ", so its mean is not a combination of centerable terms";
    }
    return "";
  }

  // A product whose factor varies along the normalized axes. A constant factor may still
  // fold as a LayerScale where its shape and producer fit; the text says which part of
  // that rule the product misses, never that no centering exists.
  std::string per_feature_factor_text(int32_t n, const std::string& ln) const {
    const std::string head = describe(n) + " multiplies by a factor that varies along the axes " +
                             quote(ln) + " normalizes";
    const Node& node = g_.nodes[n];
    int constant = -1;
    for (int k = 0; k < 2 && node.op == Op::mul; ++k)
      if (g_.node_inputs[n][k].kind == ValueRef::Kind::param) constant = k;
    if (constant < 0)
      return head + ", a factor computed from the input (or a division): its mean is no "
                    "combination of centerable terms the rules know";
    return head + ", a constant factor (param " + quote(node.inputs[size_t(constant)]) +
           ") that the rules do not fold as a LayerScale: that needs it to vary along one "
           "axis only, the feature axis of a centerable producer whose output reaches this "
           "product alone (through transposes, reshapes keeping that axis, and bias adds); "
           "the rules know no other centering that makes the mean vanish";
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
      case BreakKind::opaque:
        return head + "enters " + describe(b) +
               ", an op lnverify does not model, which is not known to absorb it" + lost;
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
  v.form = an.operand_mean(n, 0, an.norm_axes(n));
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

// LayerNorms that no output depends on only because of other LNs: their outputs' zero
// mean (a mean over the axes of an LN without affine cuts them off) or their ignoring an
// input uniform along their axes (an LN then outputs its bias; an RMSNorm does not).
// Swapped alone, such an LN changes no output, with nothing centered; but its RMSNorm no
// longer outputs what the LN did (a zero mean, a zero), and an LN folded downstream of it
// may have relied on that, and then no longer cuts the paths that made this one dead. So
// each is checked against the plan, downstream first (its check swaps every dead fold
// accepted so far with it, so the last acceptance checks them all together): foldable if
// the swaps still reach no output with the plan's folded LNs trusted only where nothing
// swapped reaches them; otherwise "no", naming the folded
// LNs it would break (the verdict is relative to the plan: docs/spec/decisions.md).
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
                   "end at " + (list.empty() ? std::string("other LayerNorms") : list) +
                   ": the zero mean of a LayerNorm's output, or a LayerNorm that ignores an "
                   "input uniform along its axes), but folding it together with the plan does: "
                   "the folded LayerNorms downstream of it are exact only while `" + v->name +
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
  std::vector<char> seen_nodes;
  std::vector<char> centered_terms;  // per term of the plan's analyzer: given to add_center
  // Per mode: the producers centered for the LNs foldable in that mode.
  std::array<std::vector<char>, 2> centered_producers{std::vector<char>(g.nodes.size(), 0),
                                                      std::vector<char>(g.nodes.size(), 0)};
  std::array<std::vector<char>, 2> seen_by_mode;
  std::vector<int32_t> ln_nodes;  // per entry of plan.layer_norms: its node (-1: an rnn's norm)
  const size_t norm_count = size_t(std::count_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) {
    return n.op == Op::layer_norm || n.op == Op::rnn;
  }));
  plan.layer_norms.reserve(norm_count);  // each LN's verdict is filled in place
  ln_nodes.reserve(norm_count);
  // A term is added once per key: a producer term per node (`producer`, its node), a
  // param term per (node, param, slot).
  std::vector<char> producer_centered(g.nodes.size(), 0);
  std::set<std::tuple<std::string, std::string, std::string>> param_keys;
  auto add_center = [&](const CenterTerm& t, int32_t producer) {
    if (t.kind == CenterTerm::Kind::producer) {
      if (!producer_centered[size_t(producer)]) plan.center.push_back(t);
      producer_centered[size_t(producer)] = 1;
    } else if (param_keys.insert({t.node, t.param, t.slot}).second) {
      plan.center.push_back(t);
    } else {
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
        add_center(t, n);
      }
      v.term_count = v.terms.size();
      plan.layer_norms.push_back(std::move(v));
      ln_nodes.push_back(-1);
      continue;
    }
    if (node.op != Op::layer_norm) continue;
    LnVerdict& v = plan.layer_norms.emplace_back();
    ln_nodes.push_back(n);
    v.name = node.name;
    v.node = node.name;
    Form plan_form;
    for (int m = 0; m < 2; ++m) {
      if (m == 1 && same_modes) continue;  // copied from inference after the dead-fold pass
      ModeVerdict mv = judge_ln(*by_mode[m], *reasoners[m], n, node.name);
      v.foldable[m] = mv.foldable;
      v.reason[m] = std::move(mv.reason);
      v.path[m] = std::move(mv.path);
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
      // A term added once is added again without effect (its key is known, and merging a
      // param term into what it already merged into changes nothing): skipped.
      an.pool().visit_unseen(plan_form, seen_nodes, [&](const Entry& e) {
        if (e.ref < 0) return;
        if (size_t(e.ref) >= centered_terms.size()) centered_terms.resize(an.terms().size(), 0);
        if (centered_terms[size_t(e.ref)]) return;
        centered_terms[size_t(e.ref)] = 1;
        const Term& t = an.terms()[e.ref];
        add_center(t.term, t.producer);
      });
    }
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
  plan_bias_moves(g, plan, ln_nodes);
  return plan;
}

}  // namespace lnv
