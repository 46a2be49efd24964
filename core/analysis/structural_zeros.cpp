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
    case Op::sqrt:
    case Op::erf:
    case Op::sin:  // sin(0) = 0
    case Op::atan:  // atan(0) = 0
    case Op::hard_swish:
    case Op::max:
    case Op::transpose:
    case Op::reshape:
    case Op::slice:
    case Op::expand:
    case Op::concat:
    case Op::center:
      return all_zero();
    case Op::pad:  // zero padded with zeros
      return (n.value == 0.0 || pad_axes(g_, v) == 0) && all_zero();
    case Op::where: {  // zero wherever it picks from
      const WhereSelect& w = select_of(v);
      return (!w.picks[0] || z(0)) && (!w.picks[1] || z(1));
    }
    case Op::clip:  // clip(0) = 0 when 0 lies within the bounds
      return n.min <= 0.0 && n.max >= 0.0 && all_zero();
    case Op::hard_sigmoid:  // hard_sigmoid(0) = clamp(beta, 0, 1)
      return n.beta <= 0.0 && all_zero();
    case Op::rnn:
      // h_t = act(N(W_ih·0 + W_hh·h_{t-1})) stays 0 from h_0 = 0 when nothing adds a bias.
      return z(0) && n.bias.empty() && (!n.norm || n.norm->bias.empty());
    case Op::lstm:
      // From zero states, x = 0 and no bias: every gate is σ(0) = 1/2 and c~ = tanh(0) = 0,
      // so C' = C/2 + 0 and H' = tanh(C')/2 stay 0.
    case Op::gru:
      // From h = 0, x = 0 and no bias: n = tanh(0) = 0 and H' = n/2 + h/2 stays 0.
      return z(0) && n.bias.empty() && n.initial_h.empty() && n.initial_c.empty();
    case Op::embedding:
    case Op::sigmoid:
    case Op::exp:
    case Op::log:  // log(0) is not a value: never zero
    case Op::cos:
    case Op::reciprocal:  // 1/0 is not a value: never zero
    case Op::softmax:
    case Op::opaque:  // unknown: never assumed zero
    case Op::kCount:
      return false;
  }
  return false;
}

}  // namespace lnv::analysis::detail
