// The op table: what each op of docs/spec/format.md (section "Ops") is called, how many
// inputs it takes, which family it belongs to and which JSON attributes it has (kind,
// required or optional). Every op is one row of core/ops.def; the enum, the name table,
// the attribute lists and the family predicates here are expanded from those rows.
//
// What an op computes, its shape rule, gradient and the analysis' rules are `switch`es over
// Op without a `default:` (every target builds with -Werror=switch), so an op added to
// ops.def fails to compile until each of them handles it. docs/adding_an_op.md lists them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <string_view>

namespace lnv {

enum class Op : uint8_t {
#define LNV_OP(name, min_inputs, max_inputs, family) name,
#include "core/ops.def"
  kCount
};

inline constexpr std::string_view kOpNames[] = {
#define LNV_OP(name, min_inputs, max_inputs, family) #name,
#include "core/ops.def"
};
static_assert(std::size(kOpNames) == static_cast<size_t>(Op::kCount),
              "one name per Op enumerator");

// What kind of computation an op is; the analysis and the generator reason per family.
enum class OpFamily : uint8_t {
  weighted_producer,   // a weight mixes features: linear, matmul, embedding, conv, rnn, attention
  elementwise_binary,  // add, sub, mul, div (with broadcasting)
  scale,               // multiplication by a constant factor
  dropout,             // identity at inference, a random mask when training
  unary_nonlinearity,  // elementwise relu, gelu, tanh, sigmoid, silu, exp, sqrt,
                       // reciprocal, erf, hard_sigmoid, hard_swish, clip,
                       // log, sin, cos, atan
  softmax,
  reduction,           // mean, max over axes
  shape_op,            // transpose, reshape, slice, expand, pad: moves or copies elements
                       // (pad: and fills with a constant), computes nothing
  select,              // where: picks each element from one of two inputs by a constant mask
  concat,
  center,              // x - mean(x) over axes
  norm,                // layer_norm, rms_norm
  opaque,              // an op lnverify does not model (imported): a shape, nothing else
};

// The JSON type of an attribute's value, and so how model_json reads and writes it.
enum class AttrKind : uint8_t {
  param,            // the name of a param (non-empty string)
  boolean,
  integer,
  integer_list,     // [int, ...]
  integer_or_list,  // int, or a non-empty [int, ...] (conv stride, padding, dilation)
  number,           // a finite number
  string,
  rnn_norm,         // the `norm` object of an rnn: {kind, eps, weight, bias}
};

enum class AttrPresence : uint8_t {
  required,
  optional,                 // written when it differs from its default
  optional_always_written,  // read as optional, always written (a norm's eps)
};

struct OpAttr {
  Op op;
  std::string_view key;
  AttrKind kind;
  AttrPresence presence;
};

// Every op's attributes, grouped by op in ops.def order.
inline constexpr OpAttr kOpAttrs[] = {
#define LNV_ATTR(op, key, kind, presence, default_value) \
  {Op::op, #key, AttrKind::kind, AttrPresence::presence},
#include "core/ops.def"
};

namespace detail {
// The attributes of `op`: the rows of kOpAttrs that name it (they are adjacent).
constexpr std::span<const OpAttr> attrs_of(Op op) {
  size_t first = 0;
  while (first < std::size(kOpAttrs) && kOpAttrs[first].op != op) ++first;
  size_t last = first;
  while (last < std::size(kOpAttrs) && kOpAttrs[last].op == op) ++last;
  return std::span<const OpAttr>(kOpAttrs).subspan(first, last - first);
}

// Whether every op's attributes are adjacent rows with distinct keys.
constexpr bool attrs_grouped_and_unique() {
  for (size_t i = 0; i < std::size(kOpAttrs); ++i)
    for (size_t j = 0; j < i; ++j) {
      if (kOpAttrs[j].op != kOpAttrs[i].op) continue;
      if (kOpAttrs[j].key == kOpAttrs[i].key) return false;
      for (size_t k = j + 1; k < i; ++k)
        if (kOpAttrs[k].op != kOpAttrs[i].op) return false;
    }
  return true;
}
}  // namespace detail
static_assert(detail::attrs_grouped_and_unique(),
              "core/ops.def: an op's attributes follow its row, each key once");

struct OpInfo {
  Op op;
  std::string_view name;
  int min_inputs;
  int max_inputs;  // -1: any number (concat)
  OpFamily family;
  std::span<const OpAttr> attrs;  // JSON attributes besides name/op/inputs
};

inline constexpr OpInfo kOpTable[] = {
#define LNV_OP(name, min_inputs, max_inputs, family) \
  {Op::name, #name, min_inputs, max_inputs, OpFamily::family, detail::attrs_of(Op::name)},
#include "core/ops.def"
};
static_assert(std::size(kOpTable) == static_cast<size_t>(Op::kCount),
              "one table row per Op enumerator");

constexpr const OpInfo& op_info(Op op) { return kOpTable[static_cast<size_t>(op)]; }
constexpr std::string_view op_name(Op op) { return kOpNames[static_cast<size_t>(op)]; }
constexpr OpFamily op_family(Op op) { return op_info(op).family; }

constexpr std::optional<Op> op_from_name(std::string_view name) {
  for (const OpInfo& info : kOpTable)
    if (info.name == name) return info.op;
  return std::nullopt;
}

// The attribute `key` of `op`, or nullptr when the op has no such attribute.
constexpr const OpAttr* op_attr(Op op, std::string_view key) {
  for (const OpAttr& a : op_info(op).attrs)
    if (a.key == key) return &a;
  return nullptr;
}

// Elementwise unary nonlinearities (relu, gelu, tanh, sigmoid, silu, exp, sqrt, reciprocal,
// erf, hard_sigmoid, hard_swish, clip, log, sin, cos, atan).
constexpr bool is_unary_nonlinearity(Op op) {
  return op_family(op) == OpFamily::unary_nonlinearity;
}
// Ops with a weight matrix that CBWC can center (linear, matmul, embedding, conv, rnn,
// attention). Whether a particular node qualifies (groups = 1, a param operand) is the
// analysis' decision.
constexpr bool is_weighted(Op op) { return op_family(op) == OpFamily::weighted_producer; }

}  // namespace lnv
