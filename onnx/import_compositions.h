// Private to onnx/import*.cpp: the ONNX ops imported as compositions of model.json ops
// (onnx/import_compositions.cpp; docs/onnx.md, "Ops imported as compositions"). Each is
// a Mapper named in a LNV_ONNX_READ row of onnx/ops.def.
#pragma once

#include "onnx/import_context.h"

namespace lnv::onnx_import {

// Elementwise: relu and exp spellings of the rectifier family, trigonometric and
// hyperbolic functions over log, sin, cos, atan, exp and sqrt.
void map_abs(Importer& im, const onnx_import::Node& n, size_t i);
void map_leaky_relu(Importer& im, const onnx_import::Node& n, size_t i);
void map_prelu(Importer& im, const onnx_import::Node& n, size_t i);
void map_elu(Importer& im, const onnx_import::Node& n, size_t i);  // Elu, Selu, Celu
void map_softsign(Importer& im, const onnx_import::Node& n, size_t i);
void map_softplus(Importer& im, const onnx_import::Node& n, size_t i);
void map_trig(Importer& im, const onnx_import::Node& n, size_t i);  // Tan, Asin, Acos, Sinh, ...
// Variadic Min, Max, Sum, Mean (NumPy broadcasting).
void map_variadic(Importer& im, const onnx_import::Node& n, size_t i);
// LogSoftmax and the reductions ReduceMin, ReduceSumSquare, ReduceL1, ReduceL2,
// ReduceLogSum, ReduceLogSumExp.
void map_log_softmax(Importer& im, const onnx_import::Node& n, size_t i);
void map_reduce_composite(Importer& im, const onnx_import::Node& n, size_t i);
void map_cumsum(Importer& im, const onnx_import::Node& n, size_t i);
void map_tile(Importer& im, const onnx_import::Node& n, size_t i);
void map_instance_norm(Importer& im, const onnx_import::Node& n, size_t i);
void map_pool(Importer& im, const onnx_import::Node& n, size_t i);  // MaxPool, AveragePool
void map_einsum(Importer& im, const onnx_import::Node& n, size_t i);
void map_resize(Importer& im, const onnx_import::Node& n, size_t i);  // Resize, Upsample
void map_depth_space(Importer& im, const onnx_import::Node& n, size_t i);
void map_shrink(Importer& im, const onnx_import::Node& n, size_t i);
// Pow by exponents other than 1 and 2 (onnx/import.cpp's map_pow reads those).
void map_pow_composite(Importer& im, const onnx_import::Node& n, size_t i);
void map_mvn(Importer& im, const onnx_import::Node& n, size_t i);  // MeanVarianceNormalization
void map_lrn(Importer& im, const onnx_import::Node& n, size_t i);
void map_conv_transpose(Importer& im, const onnx_import::Node& n, size_t i);

}  // namespace lnv::onnx_import
