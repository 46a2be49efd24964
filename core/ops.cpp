#include "core/ops.h"

#include "core/error.h"

namespace lnv {
namespace {

const std::vector<OpInfo>& table() {
  static const std::vector<OpInfo> t = {
      {Op::linear, "linear", 1, 1, {"weight"}, {"bias", "cbwc"}},
      {Op::matmul, "matmul", 2, 2, {}, {"transpose_b", "cbwc"}},
      {Op::embedding, "embedding", 1, 1, {"weight"}, {"cbwc"}},
      {Op::conv1d, "conv1d", 1, 1, {"weight"},
       {"bias", "stride", "padding", "dilation", "groups", "cbwc"}},
      {Op::conv2d, "conv2d", 1, 1, {"weight"},
       {"bias", "stride", "padding", "dilation", "groups", "cbwc"}},
      {Op::rnn, "rnn", 1, 1, {"weight_ih", "weight_hh"}, {"bias", "activation", "norm", "cbwc"}},
      {Op::attention, "attention", 1, 1, {"wq", "wk", "wv", "wo", "heads"},
       {"bq", "bk", "bv", "bo", "causal", "cbwc"}},
      {Op::add, "add", 2, 2, {}, {}},
      {Op::sub, "sub", 2, 2, {}, {}},
      {Op::mul, "mul", 2, 2, {}, {}},
      {Op::div, "div", 2, 2, {}, {}},
      {Op::scale, "scale", 1, 1, {"factor"}, {}},
      {Op::dropout, "dropout", 1, 1, {"p"}, {}},
      {Op::relu, "relu", 1, 1, {}, {}},
      {Op::gelu, "gelu", 1, 1, {}, {}},
      {Op::tanh, "tanh", 1, 1, {}, {}},
      {Op::sigmoid, "sigmoid", 1, 1, {}, {}},
      {Op::silu, "silu", 1, 1, {}, {}},
      {Op::exp, "exp", 1, 1, {}, {}},
      {Op::softmax, "softmax", 1, 1, {"axis"}, {}},
      {Op::mean, "mean", 1, 1, {"axes"}, {"keepdims"}},
      {Op::max, "max", 1, 1, {"axes"}, {"keepdims"}},
      {Op::transpose, "transpose", 1, 1, {"perm"}, {}},
      {Op::reshape, "reshape", 1, 1, {"shape"}, {}},
      {Op::concat, "concat", 1, -1, {"axis"}, {}},
      {Op::center, "center", 1, 1, {"axes"}, {}},
      {Op::layer_norm, "layer_norm", 1, 1, {"axes"}, {"eps", "weight", "bias"}},
      {Op::rms_norm, "rms_norm", 1, 1, {"axes"}, {"eps", "weight", "bias"}},
  };
  return t;
}

}  // namespace

const OpInfo& op_info(Op op) {
  static_assert(static_cast<int>(Op::kCount) == 28, "update kOpTable with the enum");
  const auto& t = table();
  LNV_INTERNAL_ASSERT(t.size() == static_cast<size_t>(Op::kCount), "op table size");
  const OpInfo& info = t[static_cast<size_t>(op)];
  LNV_INTERNAL_ASSERT(info.op == op, "op table order");
  return info;
}

std::optional<Op> op_from_name(std::string_view name) {
  for (const OpInfo& info : table())
    if (info.name == name) return info.op;
  return std::nullopt;
}

std::string_view op_name(Op op) { return op_info(op).name; }

bool is_unary_nonlinearity(Op op) {
  return op == Op::relu || op == Op::gelu || op == Op::tanh || op == Op::sigmoid ||
         op == Op::silu || op == Op::exp;
}

bool is_weighted(Op op) {
  return op == Op::linear || op == Op::matmul || op == Op::embedding || op == Op::conv1d ||
         op == Op::conv2d || op == Op::rnn || op == Op::attention;
}

}  // namespace lnv
