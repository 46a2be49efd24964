// Private to lnv_onnx (includes ONNX's protobuf types). The checks a model read from a file
// passes before shape inference: no cycle among its nodes, then ONNX's checker with the
// schemas of onnx/newer_opsets.h.
#pragma once

#include <filesystem>
#include <string>

#include <onnx/onnx_pb.h>

namespace lnv::onnx_import {

// A cycle among the main graph's nodes is refused naming them: ONNX's checker would
// report it as a node out of topological order.
void refuse_cycles(const ::onnx::GraphProto& g, const std::string& file);

// ONNX's check_model(ModelProto), with the schemas of opsets newer than this ONNX release
// knows (onnx/newer_opsets.h) visible to it.
// External data files are looked for in `model_dir`. Throws lnv::ModelError(file, the
// checker's message).
void run_checker(const ::onnx::ModelProto& mp, const std::filesystem::path& model_dir,
                 const std::string& file);

}  // namespace lnv::onnx_import
