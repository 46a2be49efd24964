// Structural zeros (docs/spec/semantics.md, "Foldability"): values that are zero whatever
// the inputs and the (generic) params, in one reading of "zero".
#include "core/analysis/analyzer.h"

namespace lnv::analysis::detail {

bool Analyzer::structurally_zero(int32_t v, const std::vector<bool>& zero, const Trust& trust) const {
  const Node& n = g_.nodes[v];
  const auto& in = g_.node_inputs[v];
  auto z = [&](size_t k) { return in[k].kind == ValueRef::Kind::node && zero[in[k].index]; };
  auto all_zero = [&]() {
    for (size_t k = 0; k < in.size(); ++k)
      if (!z(k)) return false;
    return true;
  };
  switch (op_family(op_of(v))) {
    case OpFamily::weighted_producer:
      switch (family_member<WeightedOp>(op_of(v))) {
        case WeightedOp::matmul:
          return z(0) || z(1);
        case WeightedOp::linear:
        case WeightedOp::conv1d:
        case WeightedOp::conv2d:
          return z(0) && n.bias.empty();
        case WeightedOp::attention:
          return z(0) && n.bv.empty() && n.bo.empty();
        case WeightedOp::rnn:
          // h_t = act(N(W_ih·0 + W_hh·h_{t-1})) stays 0 from h_0 = 0 when nothing adds a bias.
          return z(0) && n.bias.empty() && (!n.norm || n.norm->bias.empty());
        case WeightedOp::lstm:
          // From zero states, x = 0 and no bias: every gate is σ(0) = 1/2 and c~ = tanh(0) = 0,
          // so C' = C/2 + 0 and H' = tanh(C')/2 stay 0.
        case WeightedOp::gru:
          // From h = 0, x = 0 and no bias: n = tanh(0) = 0 and H' = n/2 + h/2 stays 0.
          return z(0) && n.bias.empty() && n.initial_h.empty() && n.initial_c.empty();
        case WeightedOp::embedding:
          return false;
      }
      return false;
    case OpFamily::elementwise_binary:
      switch (family_member<BinaryOp>(op_of(v))) {
        case BinaryOp::add:
          return all_zero();
        case BinaryOp::sub:
          return alias(in[0]) == alias(in[1]) || all_zero();
        case BinaryOp::mul:
          return z(0) || z(1);
        case BinaryOp::div:
          return z(0);
      }
      return false;
    case OpFamily::scale:
      return n.factor == 0.0 || all_zero();
    case OpFamily::unary_nonlinearity:
      switch (family_member<UnaryOp>(op_of(v))) {
        case UnaryOp::relu:
        case UnaryOp::gelu:
        case UnaryOp::tanh:
        case UnaryOp::silu:
        case UnaryOp::sqrt:
        case UnaryOp::erf:
        case UnaryOp::sin:  // sin(0) = 0
        case UnaryOp::atan:  // atan(0) = 0
        case UnaryOp::hard_swish:
          return all_zero();
        case UnaryOp::clip:  // clip(0) = 0 when 0 lies within the bounds
          return n.min <= 0.0 && n.max >= 0.0 && all_zero();
        case UnaryOp::hard_sigmoid:  // hard_sigmoid(0) = clamp(beta, 0, 1)
          return n.beta <= 0.0 && all_zero();
        case UnaryOp::sigmoid:
        case UnaryOp::exp:
        case UnaryOp::log:  // log(0) is not a value: never zero
        case UnaryOp::cos:
        case UnaryOp::reciprocal:  // 1/0 is not a value: never zero
          return false;
      }
      return false;
    case OpFamily::reduction:
      switch (family_member<ReductionOp>(op_of(v))) {
        case ReductionOp::mean:
          return all_zero() ||
                 zero_mean_over(
                     in[0], normalize_axes(n.axes, int64_t(g_.shape_of(in[0]).size()), n.name),
                     trust);
        case ReductionOp::max:
          return all_zero();
      }
      return false;
    case OpFamily::shape_op:
      switch (family_member<ShapeOp>(op_of(v))) {
        case ShapeOp::transpose:
        case ShapeOp::reshape:
        case ShapeOp::slice:
        case ShapeOp::expand:
          return all_zero();
        case ShapeOp::pad:  // zero padded with zeros
          return (n.value == 0.0 || pad_axes(g_, v) == 0) && all_zero();
      }
      return false;
    case OpFamily::dropout:
    case OpFamily::concat:
    case OpFamily::center:
      return all_zero();
    case OpFamily::select: {  // zero wherever it picks from
      const WhereSelect& w = select_of(v);
      return (!w.picks[0] || z(0)) && (!w.picks[1] || z(1));
    }
    case OpFamily::norm:
      switch (family_member<NormOp>(op_of(v))) {
        case NormOp::layer_norm:
          // LN of a value uniform along its axes is its bias (here none), whatever the
          // value; an RMSNorm is not, so only a reading that trusts this LN uses it.
          if (n.bias.empty() && ln_of_uniform(v, trust)) return true;
          return z(0) && n.bias.empty();
        case NormOp::rms_norm:
          return z(0) && n.bias.empty();
      }
      return false;
    case OpFamily::softmax:
    case OpFamily::opaque:  // unknown: never assumed zero
      return false;
  }
  return false;
}

}  // namespace lnv::analysis::detail
