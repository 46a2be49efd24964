// Which nodes are producers and where their features lie (producers.h;
// docs/spec/semantics.md, "Op rules", "Producers").
#include "core/analysis/producers.h"

namespace lnv::analysis {

namespace {

bool is_param(const Graph& g, int32_t n, int k) {
  return g.node_inputs[n][k].kind == ValueRef::Kind::param;
}

}  // namespace

int64_t producer_feature_axis(const Graph& g, int32_t n) {
  const int64_t R = int64_t(g.node_shapes[n].size());
  switch (g.nodes[n].op) {
    case Op::linear:
    case Op::embedding:
    case Op::attention:
      return R - 1;
    case Op::conv1d:
    case Op::conv2d:
      return 1;
    case Op::matmul:
      if (is_param(g, n, 1)) return R - 1;
      if (is_param(g, n, 0)) return R - 2;
      return -1;
    case Op::rnn:
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::scale:
    case Op::dropout:
    case Op::relu:
    case Op::gelu:
    case Op::tanh:
    case Op::sigmoid:
    case Op::silu:
    case Op::exp:
    case Op::sqrt:
    case Op::reciprocal:
    case Op::erf:
    case Op::hard_sigmoid:
    case Op::hard_swish:
    case Op::clip:
    case Op::softmax:
    case Op::mean:
    case Op::max:
    case Op::transpose:
    case Op::reshape:
    case Op::slice:
    case Op::expand:
    case Op::pad:
    case Op::where:
    case Op::concat:
    case Op::center:
    case Op::layer_norm:
    case Op::rms_norm:
    case Op::opaque:
    case Op::kCount:
      return -1;
  }
  return -1;
}

bool centering_zeroes_features(const Graph& g, int32_t n) {
  const Node& node = g.nodes[n];
  return !((node.op == Op::conv1d || node.op == Op::conv2d) && node.groups != 1);
}

bool is_centerable_producer(const Graph& g, int32_t n) {
  if (g.nodes[n].op == Op::rnn) return true;
  if (producer_feature_axis(g, n) < 0 || !centering_zeroes_features(g, n)) return false;
  return !(g.nodes[n].op == Op::matmul && is_param(g, n, 0) && is_param(g, n, 1));
}

}  // namespace lnv::analysis
