// The op table: what each op of docs/spec/format.md (section "Ops") is called, how many
// inputs it takes, which family it belongs to and which JSON attributes it has (kind,
// required or optional). Every op is one row of core/ops.def; the enum, the name table,
// the attribute lists and the family predicates here are expanded from those rows.
//
// What an op computes, its shape rule, gradient and the analysis' rules are `switch`es over
// its family (op_family) and, where the members of a family differ, over that family's
// member enum below, each without a `default:` (every target builds with -Werror=switch):
// an op added to ops.def fails to compile until each rule that differs within its family
// handles it, and takes its family's rule everywhere else. docs/adding_an_op.md lists them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <string_view>

#include "core/error.h"

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

// The members of one family, as an enum of their own: a rule that differs between the
// members of a family is a `switch` over that enum (exhaustive, no `default:`), which lists
// that family's ops only, and a rule the same for the whole family is one case of a
// `switch (op_family(op))`. Each enumerator has its Op enumerator's value; family_member
// converts. Families of one op (scale, dropout, softmax, select, concat, center, opaque)
// need none. Expanded from the family column of ops.def: LNV_MEMBER_<family>(name) is
// empty except for the family an enum is being declared for.
#define LNV_MEMBER_weighted_producer(name)
#define LNV_MEMBER_elementwise_binary(name)
#define LNV_MEMBER_scale(name)
#define LNV_MEMBER_dropout(name)
#define LNV_MEMBER_unary_nonlinearity(name)
#define LNV_MEMBER_softmax(name)
#define LNV_MEMBER_reduction(name)
#define LNV_MEMBER_shape_op(name)
#define LNV_MEMBER_select(name)
#define LNV_MEMBER_concat(name)
#define LNV_MEMBER_center(name)
#define LNV_MEMBER_norm(name)
#define LNV_MEMBER_opaque(name)
#define LNV_MEMBER(name) name = static_cast<uint8_t>(Op::name),

#undef LNV_MEMBER_weighted_producer
#define LNV_MEMBER_weighted_producer(name) LNV_MEMBER(name)
#define LNV_OP(name, min_inputs, max_inputs, family) LNV_MEMBER_##family(name)
enum class WeightedOp : uint8_t {
#include "core/ops.def"
};
#undef LNV_MEMBER_weighted_producer
#define LNV_MEMBER_weighted_producer(name)

#undef LNV_MEMBER_elementwise_binary
#define LNV_MEMBER_elementwise_binary(name) LNV_MEMBER(name)
#define LNV_OP(name, min_inputs, max_inputs, family) LNV_MEMBER_##family(name)
enum class BinaryOp : uint8_t {
#include "core/ops.def"
};
#undef LNV_MEMBER_elementwise_binary
#define LNV_MEMBER_elementwise_binary(name)

#undef LNV_MEMBER_unary_nonlinearity
#define LNV_MEMBER_unary_nonlinearity(name) LNV_MEMBER(name)
#define LNV_OP(name, min_inputs, max_inputs, family) LNV_MEMBER_##family(name)
enum class UnaryOp : uint8_t {
#include "core/ops.def"
};
#undef LNV_MEMBER_unary_nonlinearity
#define LNV_MEMBER_unary_nonlinearity(name)

#undef LNV_MEMBER_reduction
#define LNV_MEMBER_reduction(name) LNV_MEMBER(name)
#define LNV_OP(name, min_inputs, max_inputs, family) LNV_MEMBER_##family(name)
enum class ReductionOp : uint8_t {
#include "core/ops.def"
};
#undef LNV_MEMBER_reduction
#define LNV_MEMBER_reduction(name)

#undef LNV_MEMBER_shape_op
#define LNV_MEMBER_shape_op(name) LNV_MEMBER(name)
#define LNV_OP(name, min_inputs, max_inputs, family) LNV_MEMBER_##family(name)
enum class ShapeOp : uint8_t {
#include "core/ops.def"
};
#undef LNV_MEMBER_shape_op
#define LNV_MEMBER_shape_op(name)

#undef LNV_MEMBER_norm
#define LNV_MEMBER_norm(name) LNV_MEMBER(name)
#define LNV_OP(name, min_inputs, max_inputs, family) LNV_MEMBER_##family(name)
enum class NormOp : uint8_t {
#include "core/ops.def"
};

#undef LNV_MEMBER_weighted_producer
#undef LNV_MEMBER_elementwise_binary
#undef LNV_MEMBER_scale
#undef LNV_MEMBER_dropout
#undef LNV_MEMBER_unary_nonlinearity
#undef LNV_MEMBER_softmax
#undef LNV_MEMBER_reduction
#undef LNV_MEMBER_shape_op
#undef LNV_MEMBER_select
#undef LNV_MEMBER_concat
#undef LNV_MEMBER_center
#undef LNV_MEMBER_norm
#undef LNV_MEMBER_opaque
#undef LNV_MEMBER

// The family each member enum belongs to.
constexpr OpFamily family_of(WeightedOp) { return OpFamily::weighted_producer; }
constexpr OpFamily family_of(BinaryOp) { return OpFamily::elementwise_binary; }
constexpr OpFamily family_of(UnaryOp) { return OpFamily::unary_nonlinearity; }
constexpr OpFamily family_of(ReductionOp) { return OpFamily::reduction; }
constexpr OpFamily family_of(ShapeOp) { return OpFamily::shape_op; }
constexpr OpFamily family_of(NormOp) { return OpFamily::norm; }

// `op` as a member of its family's enum; `op` must belong to that family (a bug otherwise).
template <class Member>
constexpr Member family_member(Op op) {
  if (op_family(op) != family_of(Member{}))
    throw InternalError("family_member: " + std::string(op_name(op)) +
                        " is not of the family asked for");
  return static_cast<Member>(op);
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
