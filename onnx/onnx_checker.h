// Private to lnv_onnx (includes ONNX's protobuf types). The checks a model passes: no cycle
// among its nodes, and ONNX's checker with the schemas of onnx/newer_opsets.h, which the
// reader, the fold writer's check of its file and the exporter all run here.
#pragma once

#include <filesystem>
#include <string>

#include <onnx/onnx_pb.h>

namespace lnv::onnx_import {

// A cycle among the main graph's nodes is refused naming them: ONNX's checker would
// report it as a node out of topological order.
void refuse_cycles(const ::onnx::GraphProto& g, const std::string& file);

enum class OnnxCheck {
  checker,  // ONNX's check_model(ModelProto)
  full,     // check_model with full_check: the checker, then strict shape inference (an
            // op whose inputs do not fit its schema, or an inferred shape that disagrees
            // with a declared one, fails); the inferred value_info is left in `mp`
};

// ONNX's check of `mp`, with the schemas of opsets newer than this ONNX release knows
// (onnx/newer_opsets.h) visible to it. External data files are looked for in `model_dir`.
// The one wording of a failure, whoever runs it: lnv::ModelError(file, "fails ONNX's
// checker: " + ONNX's message).
void check_onnx_model(::onnx::ModelProto& mp, const std::filesystem::path& model_dir,
                      const std::string& file, OnnxCheck check);

}  // namespace lnv::onnx_import
