// Terms (docs/spec/semantics.md, "Terms"): the producers and param uses a fold may center,
// registered once each with the safety of the deviation centering it adds ("Safety"), and
// the atoms and issues the mean forms refer to.
#include <string>

#include "core/analysis/analyzer.h"

namespace lnv::analysis::detail {

int32_t Analyzer::atom_of_param_use(int32_t node, int slot) {
  auto [it, inserted] = param_atoms_.try_emplace(
      {node, slot}, int32_t(g_.nodes.size() + g_.inputs.size() + param_atoms_.size()));
  return it->second;
}

int32_t Analyzer::add_issue(const Issue& i) {
  issues_.push_back(i);
  return int32_t(issues_.size() - 1);
}

Entry Analyzer::opaque_entry(int32_t n, Mask a, IssueKind kind) {
  Entry e;
  e.atom = n;
  e.mask = a;
  e.coeff = 1.0;
  e.status = EntryStatus::opaque;
  e.issue = add_issue({kind, n, -1, 0, 0});
  return e;
}

bool Analyzer::term_safe_now(int32_t ref) {
  if (terms_[ref].pending) stale_ = true;
  return terms_[ref].safety.ok;
}

Form Analyzer::term_leaf(int32_t atom, Mask mask, int32_t ref) {
  Entry e;
  e.atom = atom;
  e.mask = mask;
  e.coeff = 1.0;
  e.status = EntryStatus::term;
  e.ref = ref;
  e.safe = term_safe_now(ref);
  return pool_.leaf(e);
}

int32_t Analyzer::producer_term(int32_t n, Mask feature) {
  if (producer_terms_[size_t(n)] >= 0) return producer_terms_[size_t(n)];
  const int32_t index = int32_t(terms_.size());
  producer_terms_[size_t(n)] = index;
  Term t;
  t.term.kind = CenterTerm::Kind::producer;
  t.term.node = g_.nodes[n].name;
  t.producer = n;
  // δ = -mean_f(t) is as uniform as t itself.
  feature |= uniform_[n];
  t.pending = true;
  terms_.push_back(std::move(t));
  Safety s = safety(n, feature);
  terms_[index].safety = s;
  terms_[index].pending = false;
  return index;
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
    t.term.axes = axes_of(mask);
    t.term.remove = mask == 0;
    t.use_node = n;
    t.use_slot = k;
    t.use_mask = mask | size1_mask(ps);
    t.pending = true;
    terms_.push_back(std::move(t));
    terms_[it->second].safety = injected_safety(n, k, mask | size1_mask(ps));
    terms_[it->second].pending = false;
  }
  return term_leaf(atom_of_param_use(n, k), mask, it->second);
}

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
    t.term.axes = axes_of(bias_mask);
    t.term.remove = bias_mask == 0;
    t.use_node = n;
    t.use_slot = -1;
    // The centered bias varies only along the norm axes it is not centered over.
    const Mask varying = b & ~a;
    t.use_mask = canon_u(n, ~varying & all_axes(rank));
    t.pending = true;
    terms_.push_back(std::move(t));
    terms_[it->second].safety = injected_safety(n, -1, terms_[it->second].use_mask);
    terms_[it->second].pending = false;
  }
  return term_leaf(atom_of_param_use(n, -1), bias_mask, it->second);
}

}  // namespace lnv::analysis::detail
