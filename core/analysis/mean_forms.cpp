// Mean forms (docs/spec/semantics.md, "Means"): the mean of a value over a set of its axes
// as a sparse linear combination of atoms (mean_form.h), built on demand from the per-op
// rules (mean_rules.cpp) and memoized per (value, axes).
#include "core/analysis/analyzer.h"
#include "core/analysis/memo_walk.h"

namespace lnv::analysis::detail {

Form Analyzer::operand_mean(int32_t n, int k, Mask mask) {
  const ValueRef& r = g_.node_inputs[n][k];
  if (r.kind == ValueRef::Kind::node) return node_mean(r.index, mask);
  mask &= ~size1_mask(g_.shape_of(r));
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

Form Analyzer::node_mean(int32_t v, Mask mask) {
  mask &= ~size1_of(v);
  if (const Form* found = means_.find({v, mask})) return *found;
  memo_walk(
      means_, Key{v, mask}, [&](const Key& key) { return mean_rule(key.first, key.second); },
      [&](const Key& key, const Rule& rule, auto&& need) {
        for (const Part& p : rule.parts) {
          const ValueRef& r = g_.node_inputs[key.first][p.k];
          if (r.kind == ValueRef::Kind::node)
            need(Key{r.index, p.mask & ~size1_of(r.index)});
        }
      },
      [&](const Key& key, const Rule& rule) { return combine(key.first, rule); });
  return means_.at({v, mask});
}

Form Analyzer::combine(int32_t n, const Rule& rule) {
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

bool Analyzer::is_constant(const Form& f) const {
  bool constant = true;
  pool_.visit(f, [&](const Entry& e) {
    if (!constant) return;
    if (e.status == EntryStatus::opaque || e.ref < 0 || e.qual != 0 ||
        terms_[e.ref].term.kind != CenterTerm::Kind::param) {
      constant = false;
      return;
    }
    const Shape& ps = g_.params[g_.param_index(terms_[e.ref].term.param)].shape;
    constant = subset(~size1_mask(ps) & all_axes(ps.size()), e.mask);
  });
  return constant;
}

}  // namespace lnv::analysis::detail
