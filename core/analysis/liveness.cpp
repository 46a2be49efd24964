// The analyzer's readings of "zero" and "live" (analyzer.h): structural zeros, values no
// graph output depends on (also through cancelling sums), the axes along which a value is
// uniform, and the check that swapping dead LayerNorms together with a plan reaches no
// output. Which LayerNorms' zero-mean outputs a reading may trust is a Trust.
#include <algorithm>

#include "core/analysis/analyzer.h"

namespace lnv::analysis::detail {

Analyzer::Analyzer(const Graph& g, Mode mode) : g_(g), mode_(mode) {
  const size_t n = g.nodes.size();
  // Axis sets are 64-bit masks: checked before any is built.
  for (size_t i = 0; i < n; ++i)
    if (g.node_shapes[i].size() > 63)
      throw ModelError(g.nodes[i].name, "the analysis supports tensors of rank up to 63");
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
  strict_sums_ = SumForms(n);
  for (bool strict : {true, false}) {
    std::vector<bool>& zero = strict ? zero_strict_ : zero_;
    std::vector<bool>& live = strict ? live_strict_ : live_;
    const Trust trust{.lns = !strict};
    zero.assign(n, false);
    std::vector<Mask>& uniform = strict ? uniform_strict_ : uniform_;
    uniform.assign(n, 0);
    SumForms default_sums(n);
    SumForms& sums = strict ? strict_sums_ : default_sums;
    for (int32_t v : g.order) {
      zero[v] = structurally_zero(v, zero, trust);
      // Uniform axes of each reading, in the same order (an LN of a value uniform along
      // its axes outputs its bias).
      sums.add(g, v, zero, mode);
      uniform[v] = uniform_axes(v, zero, uniform, sums);
      // A mean that is one constant is uniform along every axis.
      if (constant_mean(v, trust))
        uniform[v] = (Mask(1) << g.node_shapes[v].size()) - 1;  // rank <= 63: checked above
    }
    // Live: some graph output depends on it. A structurally zero node depends on nothing.
    live.assign(n, false);
    // cut[c]: c is live, but only through means of it that are one constant whatever its
    // input (constant_mean): c's own value (its bias) matters, its input does not.
    std::vector<bool> cut(n, false);
    for (auto it = g.order.rbegin(); it != g.order.rend(); ++it) {
      const int32_t v = *it;
      bool l = is_output_[v];
      for (auto [c, k] : uses_[v])
        l = l || (live[c] && !cut[c] && !ignores_inputs(c, zero, trust));
      live[v] = l && !zero[v];
      cut[v] = live[v] && only_constant_means(v, live, zero, trust);
    }
  }
  // An LN can also be dead because its contributions cancel between routes
  // (`sub(a, add(a, c))`): such an LN is dead in both readings.
  const std::vector<bool> through_sums =
      live_through_sums(strict_sums_, zero_strict_, Trust{.lns = false});
  for (size_t v = 0; v < n; ++v)
    if (g.nodes[v].op == Op::layer_norm && !through_sums[v]) live_strict_[v] = live_[v] = false;
}

std::vector<bool> Analyzer::live_through_sums(const SumForms& sums, const std::vector<bool>& zero,
                                              const Trust& trust) const {
  const size_t n = g_.nodes.size();
  // whole[v]: v's value is needed, not only a constant mean of it (constant_mean); a node
  // read only through such means is live (its own params matter), its input is not.
  std::vector<bool> live(n, false), whole(n, false);
  auto mark = [&](int32_t r, bool value) {
    auto set = [&](int32_t a) {
      live[a] = true;
      whole[a] = whole[a] || value;
    };
    if (!sums.combined[r]) {
      set(r);
      return;
    }
    for (const auto& [a, c] : sums.form[r])  // a sum passes its atoms' values
      if (a.kind == ValueRef::Kind::node) set(a.index);
  };
  for (const ValueRef& r : g_.output_refs)
    if (r.kind == ValueRef::Kind::node) mark(r.index, true);
  for (auto it = g_.order.rbegin(); it != g_.order.rend(); ++it) {
    const int32_t v = *it;
    if (sums.combined[v] || !whole[v] || ignores_inputs(v, zero, trust)) continue;
    const bool constant = constant_mean(v, trust);
    for (const ValueRef& r : g_.node_inputs[v])
      if (r.kind == ValueRef::Kind::node) mark(r.index, !constant);
  }
  return live;
}

bool Analyzer::swap_reaches_output(const std::vector<char>& swapped, const std::vector<char>& folded,
                                   const std::vector<char>& centered, std::vector<int32_t>* blame) const {
  const size_t n = g_.nodes.size();
  std::vector<bool> zero(n, false);
  std::vector<char> changed(n, 0), unzeroed(n, 0), distrusted(n, 0);
  // zero_over[v] = B (not unzeroed): v may have changed, but is zero-mean over every axis
  // set that contains B - the output of a center, an LN without affine, or y - mean(y)
  // over B, and linear combinations of such values; over other axes (a center over the
  // tokens, for a fold over the features) its zero mean may be lost.
  std::vector<Mask> zero_over(n, 0);
  const Trust trust{.lns = true, .distrusted = &distrusted, .consulted = blame};
  for (int32_t v : g_.order) {
    const Node& node = g_.nodes[v];
    if (swapped[v]) {
      changed[v] = unzeroed[v] = distrusted[v] = 1;
    } else {
      // A folded LN whose input may have lost the zero mean its fold relied on is an
      // RMSNorm of an uncentered value: trust neither its zero-mean output nor its
      // ignoring a uniform input (an RMSNorm of a uniform row is not its bias) - decided
      // before its own zero and ignoring are read.
      bool input_unzeroed = false;
      for (const ValueRef& r : g_.node_inputs[v])
        if (r.kind == ValueRef::Kind::node)
          input_unzeroed |= unzeroed[r.index] != 0 ||
                            (node.op == Op::layer_norm && (zero_over[r.index] & ~norm_axes(v)) != 0);
      const bool broken_fold = node.op == Op::layer_norm && folded[v] && input_unzeroed;
      if (broken_fold) distrusted[v] = 1;
      zero[v] = structurally_zero(v, zero, trust);
      // Sums of values of v's shape, identities and scales keep a zero mean over B.
      const bool linear = ((node.op == Op::add || node.op == Op::sub) &&
                           g_.shape_of(g_.node_inputs[v][0]) == g_.node_shapes[v] &&
                           g_.shape_of(g_.node_inputs[v][1]) == g_.node_shapes[v]) ||
                          node.op == Op::scale ||
                          (node.op == Op::dropout && (mode_ == Mode::inference || node.p == 0.0));
      if (!ignores_inputs(v, zero, trust) && !constant_mean(v, trust))
        for (const ValueRef& r : g_.node_inputs[v])
          if (r.kind == ValueRef::Kind::node) {
            changed[v] |= changed[r.index];
            unzeroed[v] |= unzeroed[r.index];
            if (zero_over[r.index] == 0) continue;
            if (linear) zero_over[v] |= zero_over[r.index];
            else unzeroed[v] = 1;
          }
      // As a center: y - mean(y) is zero-mean whatever changed in y.
      Mask resets = 0;
      if (node.op == Op::center ||
          (node.op == Op::layer_norm && node.weight.empty() && node.bias.empty() && !broken_fold))
        resets = norm_axes(v);
      if (const int32_t m = own_mean_subtracted(v); m >= 0) resets = norm_axes(m);
      if (centered[v]) {
        unzeroed[v] = 0;
        zero_over[v] = 0;
      } else if (resets != 0 && (unzeroed[v] || zero_over[v])) {
        unzeroed[v] = 0;
        zero_over[v] = resets & ~analysis::size1_mask(g_.node_shapes[v]);
      }
    }
    if (changed[v] && is_output_[v]) return true;
  }
  return false;
}

bool Analyzer::zero_mean_within(const ValueRef& x, const Axes& axes, const Trust& trust,
                                int& budget) const {
  if (x.kind != ValueRef::Kind::node || --budget < 0) return false;
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
  if (const int32_t m = own_mean_subtracted(x.index); m >= 0) return inside(g_.nodes[m].axes);
  if (n.cbwc && (n.op == Op::linear || n.op == Op::embedding || n.op == Op::attention))
    return inside({-1});
  // The mean over B is linear: an identity (inference dropout), a scale, or a sum or
  // difference of same-shape operands that are each zero-mean over B keeps it zero.
  const auto& in = g_.node_inputs[x.index];
  const bool identity = n.op == Op::scale ||
                        (n.op == Op::dropout && (mode_ == Mode::inference || n.p == 0.0));
  if (identity) return zero_mean_within(in[0], axes, trust, budget);
  if (n.op == Op::add || n.op == Op::sub) {
    for (const ValueRef& r : in)
      if (g_.shape_of(r) != s || !zero_mean_within(r, axes, trust, budget)) return false;
    return true;
  }
  // Linear maps along other axes: mean_B(x Wᵀ) = mean_B(x) Wᵀ without a bias when B avoids
  // the feature axis; a 2-D param multiplying from the left mixes rows only, from the right
  // columns only; a transpose permutes B.
  const int64_t R = int64_t(s.size());
  const Mask real = b & ~analysis::size1_mask(s);
  auto same_rank = [&](const ValueRef& r) { return int64_t(g_.shape_of(r).size()) == R; };
  auto is_param2 = [&](const ValueRef& r) {
    return r.kind == ValueRef::Kind::param && g_.shape_of(r).size() == 2;
  };
  if (n.op == Op::linear && n.bias.empty() && !(real & bit(R - 1)) && same_rank(in[0]))
    return zero_mean_within(in[0], axes, trust, budget);
  if (n.op == Op::matmul && R >= 2) {
    if (is_param2(in[0]) && same_rank(in[1]) && !n.transpose_b && !(real & bit(R - 2)))
      return zero_mean_within(in[1], axes, trust, budget);
    if (is_param2(in[1]) && same_rank(in[0]) && !(real & bit(R - 1)))
      return zero_mean_within(in[0], axes, trust, budget);
  }
  // a·b averaged over the columns j: Σ_k a[.., i, k] · mean_j b[.., k, j], zero when b is
  // zero-mean along j, or when that mean is one constant and a is zero-mean along k (a
  // right operand whose columns sum to one, such as a softmax along j); averaged over the
  // rows i: Σ_k mean_i a[.., i, k] · b[.., k, j], zero when a is zero-mean along i.
  if (n.op == Op::matmul && R >= 2 && same_rank(in[0]) && same_rank(in[1])) {
    const int64_t b_cols = n.transpose_b ? R - 2 : R - 1;
    if ((real & bit(R - 1)) && zero_mean_within(in[1], {b_cols}, trust, budget)) return true;
    if ((real & bit(R - 1)) && in[1].kind == ValueRef::Kind::node &&
        constant_mean_over(in[1].index, bit(b_cols), trust) &&
        zero_mean_within(in[0], {R - 1}, trust, budget))
      return true;
    if ((real & bit(R - 2)) && zero_mean_within(in[0], {R - 2}, trust, budget)) return true;
  }
  // A mean over A of a value zero-mean over some of A ∪ B (B seen in the input's axes).
  if (n.op == Op::mean) {
    const int64_t Ri = int64_t(g_.shape_of(in[0]).size());
    const Mask reduced = analysis::mask_of(normalize_axes(n.axes, Ri, n.name));
    Axes inner;
    for (int64_t a = 0, o = 0; a < Ri; ++a) {
      const bool kept = n.keepdims || !(reduced & bit(a));
      if ((reduced & bit(a)) || (kept && (b & bit(o)))) inner.push_back(a);
      if (kept) ++o;
    }
    return zero_mean_within(in[0], inner, trust, budget);
  }
  // Through a reshape: a block averaged whole is the mean over its input axes (a block
  // averaged in part is not a mean over whole input axes: no).
  if (n.op == Op::reshape) {
    Mask inner = 0;
    for (const auto& blk : analysis::reshape_blocks(g_.shape_of(in[0]), s)) {
      if ((blk.out & real) == 0) continue;
      if (!subset(blk.out, b)) return false;
      inner |= blk.in;
    }
    return zero_mean_within(in[0], analysis::axes_of(inner), trust, budget);
  }
  if (n.op == Op::transpose) {
    Axes permuted;
    for (int64_t i = 0; i < R; ++i)
      if (b & bit(i)) permuted.push_back(normalize_axis(n.perm[size_t(i)], R, n.name));
    return zero_mean_within(in[0], permuted, trust, budget);
  }
  return false;
}

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
  std::vector<std::pair<Atom, double>> terms;
  for (auto [k, c] : operands) {
    const ValueRef& r = g.node_inputs[v][k];
    if (r.kind == ValueRef::Kind::node && combined[r.index] &&
        g.node_shapes[r.index] == g.node_shapes[v]) {
      for (auto [a, ca] : form[r.index]) terms.push_back({a, c * ca});
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
    for (; i < terms.size() && terms[i].first == a; ++i) c += terms[i].second;
    if (c != 0.0) f.push_back({a, c});
  }
  if (f.size() > kMaxAtoms) return;
  form[v] = std::move(f);
  combined[v] = 1;
}

Mask Analyzer::uniform_axes(int32_t v, const std::vector<bool>& zero,
                             const std::vector<Mask>& uniform, const SumForms& sums) const {
  const Node& n = g_.nodes[v];
  const Shape& out = g_.node_shapes[v];
  const size_t R = out.size();
  const Mask all = R >= 64 ? ~Mask(0) : (Mask(1) << R) - 1;
  if (zero[v]) return all;
  const auto& in = g_.node_inputs[v];
  auto own = [&](const ValueRef& r) -> Mask {  // r's uniform axes, in r's own axes
    return r.kind == ValueRef::Kind::node ? uniform[r.index]
                                           : analysis::size1_mask(g_.shape_of(r));
  };
  auto mapped = [&](const ValueRef& r) -> Mask {  // r's uniform axes, broadcast to v's shape
    const Shape& s = g_.shape_of(r);
    return analysis::operand_to_out(own(r), s.size(), R) | analysis::broadcast_const_axes(s, R);
  };
  // A sum is uniform along the axes all its atoms are uniform along ((a + c) - a = c).
  Mask from_sums = 0;
  if (sums.combined[v]) {
    from_sums = all;
    for (const auto& [a, c] : sums.form[v]) from_sums &= mapped(a);
  }
  // sub(a, center(a, B)) is the mean of a over B: uniform along B too.
  if (n.op == Op::sub)
    for (const ValueRef& a : in)
      if (a.kind == ValueRef::Kind::node)
        if (const int32_t cn = center_partner(v, a.index); cn >= 0)
          return ((uniform[a.index] | norm_axes(cn) | from_sums) & all) | analysis::size1_mask(out);
  Mask m = 0;
  switch (n.op) {
    case Op::relu:
    case Op::gelu:
    case Op::tanh:
    case Op::sigmoid:
    case Op::silu:
    case Op::exp:
    case Op::scale:
      m = mapped(in[0]);
      break;
    case Op::dropout:
      m = mode_ == Mode::training && n.p > 0.0 ? 0 : mapped(in[0]);
      break;
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
      m = mapped(in[0]) & mapped(in[1]);
      break;
    case Op::linear:
      m = mapped(in[0]) & ~bit(int64_t(R) - 1);
      break;
    case Op::conv1d:
    case Op::conv2d:
      m = own(in[0]) & conv_constant_axes(n, R);  // same rank; not along the channels
      break;
    // out[.., i, j] = Σ_k a[.., i, k] b[.., k, j]: uniform along a batch axis where both
    // operands are, along the rows where a is, along the columns where b is.
    case Op::matmul: {
      if (R < 2 || g_.shape_of(in[0]).size() < 2 || g_.shape_of(in[1]).size() < 2) break;
      const Mask ma = mapped(in[0]), mb = mapped(in[1]);
      const Mask rows = bit(int64_t(R) - 2), cols = bit(int64_t(R) - 1);
      const bool b_cols = (mb & (n.transpose_b ? rows : cols)) != 0;
      m = (ma & mb & ~(rows | cols)) | (ma & rows) | (b_cols ? cols : 0);
      break;
    }
    // Row-wise over axes A: uniform along the axes outside A where the input is; along A
    // as well when the input is and nothing the node adds varies along A (a row constant
    // along A normalizes to 0 under LayerNorm, to c / sqrt(c^2 + eps) under RMSNorm - so
    // also when one is swapped for the other - centers to 0, softmaxes to 1/|A|; an affine
    // weight or bias varies along A).
    case Op::layer_norm:
    case Op::rms_norm:
      m = mapped(in[0]) & (n.weight.empty() && n.bias.empty() ? all : ~norm_axes(v));
      break;
    case Op::center:
    case Op::softmax:
      m = mapped(in[0]);
      break;
    case Op::transpose: {
      const Mask in_uniform = own(in[0]);  // same rank as v
      for (size_t i = 0; i < R; ++i)
        if (in_uniform & bit(normalize_axis(n.perm[i], int64_t(R), n.name))) m |= bit(int64_t(i));
      break;
    }
    // Reshape: a block's output axes are uniform when all its input axes are (its elements
    // are then constant); size-1 axes are uniform anyway.
    case Op::reshape: {
      const Mask in_uniform = own(in[0]);
      for (const auto& blk : analysis::reshape_blocks(g_.shape_of(in[0]), out))
        if (subset(blk.in, in_uniform)) m |= blk.out;
      break;
    }
    // A reduction over axes A: uniform along each kept axis the input is uniform along.
    case Op::mean:
    case Op::max: {
      const Shape& s = g_.shape_of(in[0]);
      const Mask in_uniform = own(in[0]);
      const Mask reduced = analysis::mask_of(normalize_axes(n.axes, int64_t(s.size()), n.name));
      int64_t o = 0;
      for (size_t a = 0; a < s.size(); ++a) {
        if (!n.keepdims && (reduced & bit(int64_t(a)))) continue;
        if ((in_uniform & bit(int64_t(a))) && !(reduced & bit(int64_t(a)))) m |= bit(o);
        ++o;
      }
      break;
    }
    case Op::concat: {
      const Mask along = bit(normalize_axis(n.axis, int64_t(R), n.name));
      m = all & ~along;
      for (const ValueRef& r : in) m &= mapped(r);
      break;
    }
    default:
      m = 0;
  }
  return ((m | from_sums) & all) | analysis::size1_mask(out);
}

bool Analyzer::ignores_inputs(int32_t c, const std::vector<bool>& zero, const Trust& trust) const {
  const Node& n = g_.nodes[c];
  const Shape& s = g_.node_shapes[c];
  if (zero[c]) return true;
  if (n.op == Op::softmax) return s[normalize_axis(n.axis, int64_t(s.size()), n.name)] == 1;
  if (n.op == Op::layer_norm) return ln_of_uniform(c, trust);
  if (n.op == Op::center) {
    for (int64_t a : normalize_axes(n.axes, int64_t(s.size()), n.name))
      if (s[a] != 1) return false;
    return true;
  }
  return false;
}

bool Analyzer::constant_mean(int32_t c, const Trust& trust) const {
  const Node& m = g_.nodes[c];
  const ValueRef& x = g_.node_inputs[c][0];
  if (m.op != Op::mean || x.kind != ValueRef::Kind::node) return false;
  const Shape& s = g_.node_shapes[x.index];
  return constant_mean_over(x.index, analysis::mask_of(normalize_axes(m.axes, int64_t(s.size()), m.name)),
                            trust);
}

bool Analyzer::constant_mean_over(int32_t v, Mask axes, const Trust& trust) const {
  const Node& n = g_.nodes[v];
  const Shape& s = g_.node_shapes[v];
  const int64_t R = int64_t(s.size());
  // The mean over the node's own axes is constant, so is its mean over any superset.
  auto own_inside = [&] {
    const Mask own = analysis::mask_of(normalize_axes(n.axes, R, n.name)) & ~analysis::size1_mask(s);
    return subset(own, axes);
  };
  switch (n.op) {
    case Op::softmax:
      return (axes & bit(normalize_axis(n.axis, R, n.name))) != 0;
    case Op::center:
      return own_inside();
    case Op::layer_norm:
      return n.weight.empty() && own_inside() && trusts(trust, v);
    default:
      return false;
  }
}

bool Analyzer::only_constant_means(int32_t v, const std::vector<bool>& live,
                                   const std::vector<bool>& zero, const Trust& trust) const {
  if (is_output_[v]) return false;
  bool any = false;
  for (auto [c, k] : uses_[v]) {
    if (!live[c] || ignores_inputs(c, zero, trust)) continue;
    if (!constant_mean(c, trust)) return false;
    any = true;
  }
  return any;
}

bool Analyzer::ln_of_uniform(int32_t v, const Trust& trust) const {
  const Node& n = g_.nodes[v];
  const ValueRef& in = g_.node_inputs[v][0];
  if (!trusts(trust, v)) return false;
  // A plan check (some LNs distrusted) reads the strict uniform axes, which no swap changes.
  const std::vector<Mask>& uniform = trust.distrusted ? uniform_strict_ : uniform_;
  const Shape& s = g_.node_shapes[v];
  const Mask axes = analysis::mask_of(normalize_axes(n.axes, int64_t(s.size()), n.name)) &
                    ~analysis::size1_mask(s);
  if (axes == 0) return true;
  return in.kind == ValueRef::Kind::node && size_t(in.index) < uniform.size() &&
         subset(axes, uniform[in.index]);
}

bool Analyzer::structurally_zero(int32_t v, const std::vector<bool>& zero, const Trust& trust) const {
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
      // LN of a value uniform along its axes is its bias (here none), whatever the value;
      // an RMSNorm is not, so only a reading that trusts this LN uses it.
      if (n.bias.empty() && ln_of_uniform(v, trust)) return true;
      return z(0) && n.bias.empty();
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

}  // namespace lnv::analysis::detail
