// Exact evaluation of the ONNX ops that static shape subgraphs are made of, on constant
// inputs, per the ONNX operator specification (negative axes, Slice clamping and steps,
// Gather's negative indices, numpy broadcasting). Integer tensors stay integers; float
// results are computed in double and rounded once to the element type, so +, -, *, /,
// sqrt give the correctly rounded float32/float16 result.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "onnx/onnx_model.h"

namespace lnv::onnx_import {

// The default-domain ops evaluate_node evaluates.
// The integer `v` as an element of type `t` holds it (wrapping like a C cast; bool: v != 0).
int64_t wrap_to(ElemType t, int64_t v);

const std::vector<std::string>& foldable_ops();
bool is_foldable_op(const std::string& op_type);

// Ops that read only their first input's dims (Shape, Size): that input may be a
// dims-only tensor (type Undefined, no values).
bool reads_only_dims(const std::string& op_type);

// Outputs above this many elements are not folded (the node stays in the graph).
constexpr int64_t kMaxFoldedElements = int64_t{1} << 24;

// Evaluates `node` (of the default ONNX domain at `opset`) on its inputs; a nullptr input
// is an omitted optional one. std::nullopt when the node is not folded here: an op this
// file does not evaluate, an element type or attribute it does not cover, an output over
// kMaxFoldedElements. Throws lnv::ModelError naming `where` when the node is invalid on
// these inputs (an index out of range, incompatible shapes, division by zero).
std::optional<std::vector<Tensor>> evaluate_node(const Node& node,
                                                 const std::vector<const Tensor*>& inputs,
                                                 int64_t opset, const std::string& where);

}  // namespace lnv::onnx_import
