// A model.json graph as an ONNX model (opset 17), for ONNX runtimes (docs/onnx.md, "Export").
//
// Every op of docs/spec/format.md but `opaque` maps onto opset-17 nodes computing the same
// function in float32 (or, with ExportOptions::float64, in double): params become float32
// (double) initializers holding the values lnverify
// evaluates (seeded `init` draws, `file` tensors, centering of `cbwc` producers and of
// inference rewrites applied), graph inputs and outputs keep their names, shapes and
// dtypes (index inputs are int64), and each node's ONNX nodes carry its name (the node
// computing its value is named as it; helper values and nodes get `<name>.<step>`).
// layer_norm is LayerNormalization, rms_norm the Pow/ReduceMean/Add/Sqrt/Div/Mul/Add
// spelling the importer (onnx/import_patterns.cpp) reads back as rms_norm.
#pragma once

#include <cstdint>
#include <string>

#include "core/graph.h"

namespace lnv::onnx_export {

inline constexpr int64_t kOpset = 17;

struct ExportOptions {
  // When non-empty: initializers of at least kMinExternalNumel elements are stored in
  // this external data file (a path relative to the model file's folder), the rest inline.
  std::string external_data;
  // Double tensors throughout, every constant exact in double where the op allows: params
  // hold exactly the values lnverify evaluates, every norm is the decomposed spelling with
  // its epsilon as a double initializer, HardSigmoid is Mul/Add/Clip unless alpha and beta
  // are float32 numbers (docs/onnx.md "Export", docs/spec/decisions.md).
  bool float64 = false;
};

// Initializers smaller than this stay inline when the others go to external data.
inline constexpr int64_t kMinExternalNumel = 1024;

struct ExportedModel {
  std::string model;  // the serialized ModelProto
  std::string data;   // the external data file's bytes (empty without external data)
  int64_t nodes = 0, initializers = 0, initializer_bytes = 0;
};

// Builds the ONNX model of the finalized graph `g` and checks it with ONNX's checker and
// strict shape inference. Throws ModelError naming the node for what opset 17 cannot hold
// (an `opaque` node; an op this exporter does not know yet) and, in float32, the param
// for a value beyond float32's range.
ExportedModel export_onnx(const Graph& g, const ExportOptions& options = {});

// The param bytes export_onnx would write for `g` at the options' float width (each param
// once): what decides external data.
int64_t initializer_bytes(const Graph& g, const ExportOptions& options = {});

}  // namespace lnv::onnx_export
