// Sum forms (analyzer.h, SumForms): sums, differences, scales and identities of values of
// one shape as exact combinations of atoms, so that `(a + c) - a` is seen to be `c`
// (docs/spec/semantics.md, "Means": atoms can cancel).
#include <algorithm>

#include "core/analysis/analyzer.h"

namespace lnv::analysis::detail {

void SumForms::add(const Graph& g, int32_t v, const std::vector<bool>& zero, Mode mode) {
  const Node& node = g.nodes[v];
  if (zero[v]) {
    combined[v] = 1;
    return;
  }
  std::vector<std::pair<size_t, double>> operands;  // (input slot, coefficient)
  if (node.op == Op::add || node.op == Op::sub) {
    operands = {{0, 1.0}, {1, node.op == Op::sub ? -1.0 : 1.0}};
  } else if (node.op == Op::scale) {
    operands = {{0, node.factor}};
  } else if (node.op == Op::dropout && (mode == Mode::inference || node.p == 0.0)) {
    operands = {{0, 1.0}};
  } else {
    return;
  }
  // Coefficients are kept exact: a combination whose arithmetic rounds is left alone (v
  // stays an atom), so a cancellation is only ever claimed where it is exact.
  bool inexact = false;
  std::vector<std::pair<Atom, double>> terms;
  for (auto [k, c] : operands) {
    const ValueRef& r = g.node_inputs[v][k];
    if (r.kind == ValueRef::Kind::node && combined[r.index] &&
        g.node_shapes[r.index] == g.node_shapes[v]) {
      for (auto [a, ca] : form[r.index]) terms.push_back({a, exact_mul(c, ca, inexact)});
    } else {
      terms.push_back({r, c});
    }
  }
  auto key = [](const Atom& a) { return std::make_pair(int(a.kind), a.index); };
  std::sort(terms.begin(), terms.end(),
            [&](const auto& x, const auto& y) { return key(x.first) < key(y.first); });
  std::vector<std::pair<Atom, double>> f;
  for (size_t i = 0; i < terms.size();) {
    double c = 0;
    const Atom a = terms[i].first;
    for (; i < terms.size() && terms[i].first == a; ++i) c = exact_sum(c, terms[i].second, inexact);
    if (c != 0.0) f.push_back({a, c});
  }
  if (inexact || f.size() > kMaxAtoms) return;
  form[v] = std::move(f);
  combined[v] = 1;
}

}  // namespace lnv::analysis::detail
