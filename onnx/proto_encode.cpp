// Encoding: the IR of onnx/onnx_model.h back into ONNX's protobuf messages
// (proto_codec.h), and save_onnx, which writes the result as a .onnx file.
#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "onnx/float_formats.h"
#include "onnx/onnx_model.h"
#include "onnx/proto_codec.h"

namespace lnv::onnx_import {
namespace {

namespace fs = std::filesystem;
namespace ox = ::onnx;

template <class T>
void append_le(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

void encode_tensor(const Tensor& t, const std::string& name, bool with_data, ox::TensorProto* tp) {
  tp->set_name(name);
  tp->set_data_type(static_cast<int32_t>(t.type));
  for (int64_t d : t.dims) tp->add_dims(d);
  if (!with_data) return;
  std::string raw;
  raw.reserve(static_cast<size_t>(t.numel()) * elem_size(t.type));
  for (double v : t.stored ? stored_floats(t) : t.floats) {
    switch (t.type) {
      case ElemType::Float: append_le(raw, static_cast<float>(v)); break;
      case ElemType::Double: append_le(raw, v); break;
      case ElemType::Float16: append_le(raw, double_to_half_bits(v)); break;
      case ElemType::BFloat16: append_le(raw, double_to_bfloat16_bits(v)); break;
      default: LNV_INTERNAL_ASSERT(false, "encode_tensor: float values in an integer tensor");
    }
  }
  for (int64_t v : t.ints) {
    switch (elem_size(t.type)) {
      case 1: append_le(raw, static_cast<uint8_t>(v)); break;
      case 2: append_le(raw, static_cast<uint16_t>(v)); break;
      case 4: append_le(raw, static_cast<uint32_t>(v)); break;
      default: append_le(raw, v); break;
    }
  }
  tp->set_raw_data(raw);
}

void encode_value_info(const ValueInfo& v, ox::ValueInfoProto* vp) {
  vp->set_name(v.name);
  if (!v.doc_string.empty()) vp->set_doc_string(v.doc_string);
  if (v.type == ElemType::Undefined) return;
  auto* tt = vp->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(v.type));
  if (!v.shape) return;
  auto* shape = tt->mutable_shape();
  for (const Dim& d : *v.shape) {
    auto* dp = shape->add_dim();
    if (d.value) dp->set_dim_value(*d.value);
    else if (!d.param.empty()) dp->set_dim_param(d.param);
  }
}

void encode_graph(const Graph& g, bool float_data, ox::GraphProto* gp);

void encode_attribute(const Attribute& a, bool float_data, ox::AttributeProto* ap) {
  using AP = ox::AttributeProto;
  ap->set_name(a.name);
  if (!a.ref_attr_name.empty()) ap->set_ref_attr_name(a.ref_attr_name);
  if (!a.doc_string.empty()) ap->set_doc_string(a.doc_string);
  auto sparse = [&](const SparseTensor& s, ox::SparseTensorProto* sp) {
    encode_tensor(s.values, "", true, sp->mutable_values());
    encode_tensor(s.indices, "", true, sp->mutable_indices());
    for (int64_t d : s.dims) sp->add_dims(d);
  };
  switch (a.kind) {
    case AttrKind::Float: ap->set_type(AP::FLOAT); ap->set_f(static_cast<float>(a.f)); break;
    case AttrKind::Int: ap->set_type(AP::INT); ap->set_i(a.i); break;
    case AttrKind::String: ap->set_type(AP::STRING); ap->set_s(a.s); break;
    case AttrKind::Tensor: ap->set_type(AP::TENSOR); encode_tensor(a.t, "", true, ap->mutable_t()); break;
    case AttrKind::Graph: ap->set_type(AP::GRAPH); encode_graph(*a.g, float_data, ap->mutable_g()); break;
    case AttrKind::SparseTensor: ap->set_type(AP::SPARSE_TENSOR); sparse(a.sparse, ap->mutable_sparse_tensor()); break;
    case AttrKind::Floats:
      ap->set_type(AP::FLOATS);
      for (double f : a.floats) ap->add_floats(static_cast<float>(f));
      break;
    case AttrKind::Ints:
      ap->set_type(AP::INTS);
      for (int64_t i : a.ints) ap->add_ints(i);
      break;
    case AttrKind::Strings:
      ap->set_type(AP::STRINGS);
      for (const auto& s : a.strings) ap->add_strings(s);
      break;
    case AttrKind::Tensors:
      ap->set_type(AP::TENSORS);
      for (const auto& t : a.tensors) encode_tensor(t, "", true, ap->add_tensors());
      break;
    case AttrKind::Graphs:
      ap->set_type(AP::GRAPHS);
      for (const auto& g : a.graphs) encode_graph(*g, float_data, ap->add_graphs());
      break;
    case AttrKind::SparseTensors:
      ap->set_type(AP::SPARSE_TENSORS);
      for (const auto& s : a.sparse_tensors) sparse(s, ap->add_sparse_tensors());
      break;
    case AttrKind::TypeProto:
    case AttrKind::TypeProtos:
      // Kept for display only; the IR does not hold the full TypeProto.
      throw ModelError(a.name, "writing TYPE_PROTO attributes is not supported");
  }
}

void encode_graph(const Graph& g, bool float_data, ox::GraphProto* gp) {
  gp->set_name(g.name);
  if (!g.doc_string.empty()) gp->set_doc_string(g.doc_string);
  for (const auto& v : g.inputs) encode_value_info(v, gp->add_input());
  for (const auto& v : g.outputs) encode_value_info(v, gp->add_output());
  for (const auto& v : g.value_info) encode_value_info(v, gp->add_value_info());
  for (const auto& init : g.initializers)
    encode_tensor(init.value, init.name,
                  float_data || !init.value.is_float() || init.value.numel() <= kSmallFloatTensor,
                  gp->add_initializer());
  for (const Node& n : g.nodes) {
    auto* np = gp->add_node();
    np->set_name(n.name);
    np->set_op_type(n.op_type);
    if (!n.domain.empty()) np->set_domain(n.domain);
    if (!n.doc_string.empty()) np->set_doc_string(n.doc_string);
    for (const auto& s : n.inputs) np->add_input(s);
    for (const auto& s : n.outputs) np->add_output(s);
    for (const auto& a : n.attributes) encode_attribute(a, float_data, np->add_attribute());
  }
}
}  // namespace

ox::ModelProto encode_model(const Model& m, bool float_data) {
  ox::ModelProto mp;
  mp.set_ir_version(m.ir_version);
  for (const auto& o : m.opset_imports) {
    auto* op = mp.add_opset_import();
    op->set_domain(o.domain);
    op->set_version(o.version);
  }
  if (!m.producer_name.empty()) mp.set_producer_name(m.producer_name);
  if (!m.producer_version.empty()) mp.set_producer_version(m.producer_version);
  if (!m.domain.empty()) mp.set_domain(m.domain);
  if (m.model_version) mp.set_model_version(m.model_version);
  if (!m.doc_string.empty()) mp.set_doc_string(m.doc_string);
  for (const auto& [k, v] : m.metadata) {
    auto* p = mp.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  }
  encode_graph(m.graph, float_data, mp.mutable_graph());
  return mp;
}
void save_onnx(const Model& model, const fs::path& path) {
  const ox::ModelProto mp = encode_model(model, /*float_data=*/true);
  std::ofstream out(path, std::ios::binary);
  if (!out || !mp.SerializeToOstream(&out))
    throw ModelError(path.string(), "cannot write the file");
}
}  // namespace lnv::onnx_import
