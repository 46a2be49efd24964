// Private to lnv_onnx (includes ONNX's protobuf types). ONNX shape inference, run with the
// schemas of onnx/newer_opsets.h: the reader (after binding the input dims), infer_shapes,
// the fold writer and the exporter all call it here.
#pragma once

#include <string>

#include <onnx/onnx_pb.h>

#include "onnx/onnx_model.h"

namespace lnv::onnx_import {

enum class InferenceCheck {
  lenient,  // a node it cannot type is left untyped; nothing is thrown for it
  strict,   // ONNX's full check: types checked, an op whose inputs do not fit its schema or
            // an inferred shape that disagrees with a declared one throws
};

// ONNX shape inference over `mp`, without data propagation; its results land in the
// graph's value_info (and the outputs' types). Throws ONNX's exceptions (std::exception)
// unchanged: each caller says whose error it is.
void infer_onnx_shapes(::onnx::ModelProto& mp, InferenceCheck check);

// Every symbolic dim of the graph's (non-initializer) inputs gets its value from `dims`;
// outputs and value_info take the same values where they use the same names. Throws
// lnv::ModelError naming `file` and the input for a dim that stays unbound or a binding
// no input uses.
void bind_input_dims(::onnx::GraphProto& gp, const DimBindings& dims, const std::string& file);

// infer_onnx_shapes(mp, lenient), its failure a lnv::ModelError naming `file`.
void run_shape_inference(::onnx::ModelProto& mp, const std::string& file);

}  // namespace lnv::onnx_import
