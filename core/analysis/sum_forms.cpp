// Sum forms (analyzer.h, SumForms): sums, differences, scales and identities of values of
// one shape as exact combinations of atoms, so that `(a + c) - a` is seen to be `c`
// (docs/spec/semantics.md, "Means": atoms can cancel).
#include <algorithm>

#include "core/analysis/analyzer.h"

namespace lnv::analysis::detail {

void SumForms::add(const Graph& g, int32_t v, Op op, const std::vector<bool>& zero, Mode mode) {
  if (zero[v]) {
    combined[v] = 1;
    return;
  }
  if (op != Op::add && op != Op::sub && op != Op::scale && op != Op::dropout) return;
  const Node& node = g.nodes[v];
  std::pair<size_t, double> operands[2];  // (input slot, coefficient)
  size_t n_operands = 1;
  if (op == Op::add || op == Op::sub) {
    operands[0] = {0, 1.0};
    operands[1] = {1, op == Op::sub ? -1.0 : 1.0};
    n_operands = 2;
  } else if (op == Op::scale) {
    operands[0] = {0, node.factor};
  } else if (mode == Mode::inference || node.p == 0.0) {  // a dropout
    operands[0] = {0, 1.0};
  } else {
    return;
  }
  // Coefficients are kept exact: a combination whose arithmetic rounds is left alone (v
  // stays an atom), so a cancellation is only ever claimed where it is exact.
  bool inexact = false;
  std::pair<Atom, double> terms[2 * kMaxAtoms];  // each operand adds at most kMaxAtoms
  size_t n_terms = 0;
  for (size_t o = 0; o < n_operands; ++o) {
    const auto [k, c] = operands[o];
    const ValueRef& r = g.node_inputs[v][k];
    if (r.kind == ValueRef::Kind::node && combined[r.index] &&
        g.node_shapes[r.index] == g.node_shapes[v]) {
      for (auto [a, ca] : form(r.index)) terms[n_terms++] = {a, exact_mul(c, ca, inexact)};
    } else {
      terms[n_terms++] = {r, c};
    }
  }
  auto key = [](const Atom& a) { return std::make_pair(int(a.kind), a.index); };
  std::sort(terms, terms + n_terms,
            [&](const auto& x, const auto& y) { return key(x.first) < key(y.first); });
  std::pair<Atom, double> f[2 * kMaxAtoms];
  size_t n_f = 0;
  for (size_t i = 0; i < n_terms;) {
    double c = 0;
    const Atom a = terms[i].first;
    for (; i < n_terms && terms[i].first == a; ++i) c = exact_sum(c, terms[i].second, inexact);
    if (c != 0.0) f[n_f++] = {a, c};
  }
  if (inexact || n_f > kMaxAtoms) return;
  start_[size_t(v)] = uint32_t(atoms_.size());
  count_[size_t(v)] = uint8_t(n_f);
  atoms_.insert(atoms_.end(), f, f + n_f);
  combined[v] = 1;
}

}  // namespace lnv::analysis::detail
