// Folds away the static shape subgraphs of an ONNX graph whose input shapes are fixed.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "onnx/onnx_model.h"

namespace lnv::onnx_import {

struct FoldStats {
  size_t nodes_before = 0;
  size_t nodes_after = 0;
  size_t nodes_folded = 0;        // evaluated and replaced by their values
  size_t dead_nodes_removed = 0;  // not folded, but nothing reads their outputs
  size_t initializers_added = 0;
  size_t initializers_removed = 0;  // read only by nodes that are gone
  size_t rounds = 0;                // fold → shape inference rounds until nothing changes
  std::map<std::string, size_t> folded_by_op;
};

struct FoldResult {
  Model model;
  FoldStats stats;
};

// Precondition: `model` comes from load_onnx, so every graph input's dims are bound and
// graph.value_info holds ONNX shape inference's results.
//
// Evaluates every default-domain node of the main graph whose inputs are all constants
// (initializers, Constant nodes, values folded before it), or, for Shape and Size, whose
// input has a static shape, with the evaluators of onnx/fold_ops.h; after each round ONNX
// shape inference runs again, since folded shapes make more shapes static. The result
// keeps the graph's inputs, outputs, metadata and the names of the nodes and values that
// remain: folded values that live nodes or graph outputs read become initializers named
// as the value, nodes no graph output depends on are removed, and initializers read only
// by removed nodes are dropped. Initializers that are also graph inputs count as
// constants. A parameter computed from stored ones as the training fold writes a
// LayerScale (a Mul that only a centering Sub(M, ReduceMean(M)) reads, and a Reshape of
// an initializer that only such Muls read) is not folded, so its factors stay parameters.
// Subgraphs (If/Loop bodies) are left as they are. Throws lnv::ModelError
// naming the node when a node is invalid on its constant inputs.
FoldResult fold_constants(const Model& model);

}  // namespace lnv::onnx_import
