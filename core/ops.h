// The op table: the one source of truth for every op of docs/spec/format.md v1.
//
// Each op's name, arity and JSON attributes live in kOpTable (ops.cpp), indexed by Op.
// Shape rules, evaluation, gradients and the analysis' shift rules are `switch`es over Op
// without a `default:` (core builds with -Werror=switch), so adding an op to the enum
// fails to compile until every one of them handles it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace lnv {

enum class Op : uint8_t {
  linear, matmul, embedding, conv1d, conv2d, rnn, attention,
  add, sub, mul, div, scale, dropout,
  relu, gelu, tanh, sigmoid, silu, exp,
  softmax, mean, max, transpose, reshape, concat,
  center, layer_norm, rms_norm,
  kCount
};

struct OpInfo {
  Op op;
  std::string_view name;
  int min_inputs;
  int max_inputs;  // -1: any number (concat)
  // JSON attributes besides name/op/inputs. Required ones must be present.
  std::vector<std::string_view> required;
  std::vector<std::string_view> optional;
};

const OpInfo& op_info(Op op);
std::optional<Op> op_from_name(std::string_view name);
std::string_view op_name(Op op);

// Elementwise unary nonlinearities (relu, gelu, tanh, sigmoid, silu, exp).
bool is_unary_nonlinearity(Op op);
// Ops with a weight matrix that CBWC can center (linear, matmul, embedding, conv, rnn,
// attention). Whether a particular node qualifies (groups = 1, a param operand) is the
// analysis' decision.
bool is_weighted(Op op);

}  // namespace lnv
