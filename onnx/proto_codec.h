// Private to lnv_onnx (includes ONNX's protobuf types). The conversion between ONNX's
// protobuf messages and the protobuf-free IR of onnx/onnx_model.h: proto_decode.cpp reads
// a ModelProto into a Model (tensors inline, as raw_data or in external data files),
// proto_encode.cpp writes a Model back as a ModelProto.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include <onnx/onnx_pb.h>

#include "onnx/onnx_model.h"

namespace lnv::onnx_import {

// Shape inference gets the data of float initializers up to this size (Resize's scales,
// say) and only the type and dims of larger ones (weights).
constexpr int64_t kSmallFloatTensor = 4096;

struct FileContext {
  std::string file;  // prefixes errors
  std::filesystem::path model_dir;
  // Initializers whose raw_data was left in the model file (strip_raw_data): by name, as
  // external data at `own_location`, the model file's name.
  std::map<std::string, StoredData> in_file;
  std::string own_location;
};

inline std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

size_t elem_size(ElemType t);
ElemType to_elem_type(int32_t data_type);

// Refuses (lnv::ModelError naming the tensor) every tensor of `g` stored externally
// (initializers, and tensors in node attributes, recursively) whose location lies outside
// `model_dir`; the initializers `in_file` holds are skipped.
void check_external_locations(const ::onnx::GraphProto& g, const std::filesystem::path& model_dir,
                              const std::string& file,
                              const std::map<std::string, StoredData>& in_file);

Tensor decode_tensor(const ::onnx::TensorProto& tp, const std::string& where,
                     const FileContext& ctx);
ValueInfo decode_value_info(const ::onnx::ValueInfoProto& vp);
Model decode_model(const ::onnx::ModelProto& mp, const std::filesystem::path& path,
                   const FileContext& ctx);

// `m` as a ModelProto; float initializers over kSmallFloatTensor elements get their data
// only when `float_data` (shape inference needs their type and dims alone).
::onnx::ModelProto encode_model(const Model& m, bool float_data);

}  // namespace lnv::onnx_import
