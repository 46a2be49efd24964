// Private to lnv_onnx (includes ONNX's schema header). The schema registry the checker
// and shape inference use: ONNX 1.12's own (opsets up to 17), plus the opset-18/19
// signatures of the ops whose inputs or attributes changed there and that exporters
// emit (ReduceMean & co. take axes as an input from 18, Split takes num_outputs, Cast
// takes saturate). Other ops of a newer opset resolve to their opset-17 schema.
#pragma once

#include <string>

#include <onnx/defs/schema.h>

namespace lnv::onnx_import {

const ::onnx::ISchemaRegistry* newer_opset_registry();

// The schema of ONNX Runtime's com.microsoft op `op` when lnverify imports it
// (onnx/contrib_schemas.cpp), else nullptr.
const ::onnx::OpSchema* contrib_schema(const std::string& op);

}  // namespace lnv::onnx_import
