// The protobuf-free IR's small helpers (no ONNX or protobuf headers here).
#include "onnx/onnx_model.h"

#include <limits>

#include "core/error.h"

namespace lnv::onnx_import {

const char* elem_type_name(ElemType t) {
  switch (t) {
    case ElemType::Undefined: return "UNDEFINED";
    case ElemType::Float: return "FLOAT";
    case ElemType::Uint8: return "UINT8";
    case ElemType::Int8: return "INT8";
    case ElemType::Uint16: return "UINT16";
    case ElemType::Int16: return "INT16";
    case ElemType::Int32: return "INT32";
    case ElemType::Int64: return "INT64";
    case ElemType::String: return "STRING";
    case ElemType::Bool: return "BOOL";
    case ElemType::Float16: return "FLOAT16";
    case ElemType::Double: return "DOUBLE";
    case ElemType::Uint32: return "UINT32";
    case ElemType::Uint64: return "UINT64";
    case ElemType::Complex64: return "COMPLEX64";
    case ElemType::Complex128: return "COMPLEX128";
    case ElemType::BFloat16: return "BFLOAT16";
  }
  return "UNKNOWN";
}

bool is_float_type(ElemType t) {
  return t == ElemType::Float || t == ElemType::Float16 || t == ElemType::BFloat16 ||
         t == ElemType::Double;
}

int significand_bits(ElemType t) {
  switch (t) {
    case ElemType::Float: return 24;
    case ElemType::Float16: return 11;
    case ElemType::BFloat16: return 8;
    default: return 53;
  }
}

bool is_integer_type(ElemType t) {
  switch (t) {
    case ElemType::Uint8: case ElemType::Int8: case ElemType::Uint16: case ElemType::Int16:
    case ElemType::Int32: case ElemType::Int64: case ElemType::Uint32: case ElemType::Bool:
      return true;
    default:
      return false;
  }
}

bool is_supported_type(ElemType t) { return is_float_type(t) || is_integer_type(t); }

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throw ModelError("", "negative dimension " + std::to_string(d));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      throw ModelError("", "tensor size overflows int64");
    n *= d;
  }
  return n;
}

std::optional<std::vector<int64_t>> ValueInfo::static_dims() const {
  if (!shape) return std::nullopt;
  std::vector<int64_t> out;
  for (const Dim& d : *shape) {
    if (!d.value || *d.value < 0) return std::nullopt;
    out.push_back(*d.value);
  }
  return out;
}

const Attribute* Node::attr(const std::string& attr_name) const {
  for (const Attribute& a : attributes)
    if (a.name == attr_name) return &a;
  return nullptr;
}

std::string Node::describe(size_t index) const {
  std::string who = name.empty() ? "node #" + std::to_string(index) : "node '" + name + "'";
  return who + " (" + (domain.empty() ? "" : domain + ".") + op_type + ")";
}

const Initializer* Graph::initializer(const std::string& value_name) const {
  for (const Initializer& init : initializers)
    if (init.name == value_name) return &init;
  return nullptr;
}

int64_t Model::opset(const std::string& dom) const {
  const bool onnx_domain = dom.empty() || dom == "ai.onnx";
  for (const OpsetImport& o : opset_imports)
    if (o.domain == dom || (onnx_domain && (o.domain.empty() || o.domain == "ai.onnx")))
      return o.version;
  return 0;
}

std::map<std::string, std::vector<int64_t>> static_shapes(const Graph& graph) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto* list : {&graph.inputs, &graph.value_info, &graph.outputs})
    for (const ValueInfo& v : *list)
      if (auto dims = v.static_dims()) shapes[v.name] = *dims;
  for (const Initializer& init : graph.initializers) shapes[init.name] = init.value.dims;
  return shapes;
}

}  // namespace lnv::onnx_import
