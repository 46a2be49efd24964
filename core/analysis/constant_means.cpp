// Outputs and means that do not depend on a node's input (docs/spec/semantics.md,
// "Foldability"): a softmax along an axis of size 1, a center or norm over axes of size 1,
// an LN of a value uniform along its axes, and means that are one constant (a softmax's
// rows, a center's, an LN without weight's). What reaches the outputs only through them
// does not make the input live.
#include "core/analysis/analyzer.h"

namespace lnv::analysis::detail {

bool Analyzer::ignores_inputs(int32_t c, const std::vector<bool>& zero, const Trust& trust) const {
  if (zero[c]) return true;
  const Op op = op_of(c);
  if (op != Op::softmax && op != Op::layer_norm && op != Op::center) return false;
  const Node& n = g_.nodes[c];
  const Shape& s = g_.node_shapes[c];
  if (op == Op::softmax) return s[normalize_axis(n.axis, int64_t(s.size()), n.name)] == 1;
  if (op == Op::layer_norm) return ln_of_uniform(c, trust);
  return subset(norm_axes(c), analysis::size1_mask(s));  // a center over axes of size 1
}

bool Analyzer::constant_mean(int32_t c, const Trust& trust) const {
  if (op_of(c) != Op::mean) return false;  // an opaque node may have no input at all
  const Node& m = g_.nodes[c];
  const ValueRef& x = g_.node_inputs[c][0];
  if (x.kind != ValueRef::Kind::node) return false;
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
    const Mask own = norm_axes(v) & ~analysis::size1_mask(s);  // a center or a norm
    return subset(own, axes);
  };
  switch (op_family(op_of(v))) {
    case OpFamily::softmax:
      return (axes & bit(normalize_axis(n.axis, R, n.name))) != 0;
    case OpFamily::center:
      return own_inside();
    case OpFamily::norm:
      switch (family_member<NormOp>(op_of(v))) {
        case NormOp::layer_norm:
          return n.weight.empty() && own_inside() && trusts(trust, v);
        case NormOp::rms_norm:
          return false;
      }
      return false;
    case OpFamily::weighted_producer:
    case OpFamily::elementwise_binary:
    case OpFamily::scale:
    case OpFamily::dropout:
    case OpFamily::unary_nonlinearity:
    case OpFamily::reduction:
    case OpFamily::shape_op:
    case OpFamily::select:
    case OpFamily::concat:
    case OpFamily::opaque:
      return false;
  }
  return false;
}

bool Analyzer::only_constant_means(int32_t v, const std::vector<bool>& live,
                                   const std::vector<bool>& zero, const Trust& trust) const {
  if (is_output_[v]) return false;
  bool any = false;
  for (auto [c, k] : uses(v)) {
    if (!live[c] || ignores_inputs(c, zero, trust)) continue;
    if (!constant_mean(c, trust)) return false;
    any = true;
  }
  return any;
}

bool Analyzer::ln_of_uniform(int32_t v, const Trust& trust) const {
  const ValueRef& in = g_.node_inputs[v][0];
  if (!trusts(trust, v)) return false;
  // A plan check (some LNs distrusted) reads the strict uniform axes, which no swap changes.
  const std::vector<Mask>& uniform = trust.distrusted ? uniform_strict_ : uniform_;
  const Shape& s = g_.node_shapes[v];
  const Mask axes = norm_axes(v) & ~analysis::size1_mask(s);
  if (axes == 0) return true;
  return in.kind == ValueRef::Kind::node && size_t(in.index) < uniform.size() &&
         subset(axes, uniform[in.index]);
}

}  // namespace lnv::analysis::detail
