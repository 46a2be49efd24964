// Everything that touches ONNX's protobuf types: reading and writing .onnx files,
// decoding tensors (inline and external data), the checker and shape inference.
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/proto_utils.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "onnx/float_formats.h"
#include "onnx/fold_ops.h"
#include "onnx/newer_opsets.h"
#include "onnx/onnx_model.h"
#include "onnx/wire_format.h"

namespace lnv::onnx_import {
namespace {

namespace fs = std::filesystem;
namespace ox = ::onnx;

// A tensor larger than this many elements is refused (a .onnx file is under 2 GiB; an
// external data file of 2^34 elements is not a model lnverify can evaluate exactly).
constexpr int64_t kMaxElements = int64_t{1} << 34;

// Shape inference gets the data of float initializers up to this size (Resize's scales,
// say) and only the type and dims of larger ones (weights).
constexpr int64_t kSmallFloatTensor = 4096;

struct FileContext {
  std::string file;  // prefixes errors
  fs::path model_dir;
  // Initializers whose raw_data was left in the model file (strip_raw_data): by name, as
  // external data at `own_location`, the model file's name.
  std::map<std::string, StoredData> in_file;
  std::string own_location;
};

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

size_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::Uint8: case ElemType::Int8: case ElemType::Bool: return 1;
    case ElemType::Uint16: case ElemType::Int16: case ElemType::Float16:
    case ElemType::BFloat16: return 2;
    case ElemType::Float: case ElemType::Int32: case ElemType::Uint32: return 4;
    case ElemType::Double: case ElemType::Int64: case ElemType::Uint64: return 8;
    default: return 0;
  }
}

ElemType to_elem_type(int32_t data_type) {
  if (data_type < 0 || data_type > static_cast<int32_t>(ElemType::BFloat16))
    return ElemType::Undefined;
  return static_cast<ElemType>(data_type);
}

template <class T>
T read_le(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

void decode_bytes(const char* p, int64_t n, Tensor& t) {
  const size_t es = elem_size(t.type);
  if (t.is_float()) t.floats.resize(static_cast<size_t>(n));
  else t.ints.resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k, p += es) {
    const size_t i = static_cast<size_t>(k);
    switch (t.type) {
      case ElemType::Float: t.floats[i] = read_le<float>(p); break;
      case ElemType::Double: t.floats[i] = read_le<double>(p); break;
      case ElemType::Float16: t.floats[i] = half_bits_to_double(read_le<uint16_t>(p)); break;
      case ElemType::BFloat16: t.floats[i] = bfloat16_bits_to_double(read_le<uint16_t>(p)); break;
      case ElemType::Int64: t.ints[i] = read_le<int64_t>(p); break;
      case ElemType::Int32: t.ints[i] = read_le<int32_t>(p); break;
      case ElemType::Uint32: t.ints[i] = read_le<uint32_t>(p); break;
      case ElemType::Int16: t.ints[i] = read_le<int16_t>(p); break;
      case ElemType::Uint16: t.ints[i] = read_le<uint16_t>(p); break;
      case ElemType::Int8: t.ints[i] = read_le<int8_t>(p); break;
      case ElemType::Uint8: t.ints[i] = read_le<uint8_t>(p); break;
      case ElemType::Bool: t.ints[i] = read_le<uint8_t>(p) != 0; break;
      default: LNV_INTERNAL_ASSERT(false, "decode_bytes: unsupported type");
    }
  }
}

int64_t parse_nonnegative(const std::string& s, const std::string& where, const std::string& key) {
  int64_t v = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0)
    throw ModelError(where, "external data " + key + " " + in_quotes(s) +
                                " is not a non-negative integer");
  return v;
}

// True when `p` lies inside `dir` (both made absolute and free of symlinks and "..").
bool path_inside(const fs::path& p, const fs::path& dir) {
  std::error_code ec;
  const fs::path cp = fs::weakly_canonical(p, ec);
  if (ec) return false;
  const fs::path cd = fs::weakly_canonical(dir, ec);
  if (ec) return false;
  auto [dir_end, p_it] = std::mismatch(cd.begin(), cd.end(), cp.begin(), cp.end());
  return dir_end == cd.end();
}

std::string external_location(const ox::TensorProto& tp) {
  for (const auto& kv : tp.external_data())
    if (kv.key() == "location") return kv.value();
  return "";
}

// The external data file of `tp`, refused unless it lies inside the model's folder
// (no absolute path, no "..", no symlink leading out).
fs::path external_path(const ox::TensorProto& tp, const std::string& where, const fs::path& model_dir) {
  const std::string location = external_location(tp);
  if (location.empty()) throw ModelError(where, "external data without a location");
  const fs::path loc(location);
  bool escapes = loc.is_absolute() || loc.has_root_name() || loc.has_root_directory();
  for (const fs::path& part : loc)
    if (part == "..") escapes = true;
  const fs::path full = model_dir / loc;
  if (escapes || !path_inside(full, model_dir))
    throw ModelError(where, "external data location " + in_quotes(location) +
                                " is outside the model's folder; refused");
  return full;
}

// external_path for every tensor of `g` stored externally: initializers, and tensors in
// node attributes (Constant values, subgraphs), recursively.
void check_external_locations(const ox::GraphProto& g, const fs::path& model_dir,
                              const std::string& file,
                              const std::map<std::string, StoredData>& in_file) {
  auto check = [&](const ox::TensorProto& t, const std::string& where) {
    if (t.data_location() == ox::TensorProto::EXTERNAL) external_path(t, where, model_dir);
  };
  for (const auto& t : g.initializer())
    if (!in_file.count(t.name())) check(t, file + ": initializer " + in_quotes(t.name()));
  for (const auto& n : g.node()) {
    const std::string where = file + ": node " + in_quotes(n.name()) + " (" + n.op_type() + ")";
    for (const auto& a : n.attribute()) {
      check(a.t(), where);
      for (const auto& t : a.tensors()) check(t, where);
      check(a.sparse_tensor().values(), where);
      check(a.sparse_tensor().indices(), where);
      if (a.has_g()) check_external_locations(a.g(), model_dir, file, {});
      for (const auto& sub : a.graphs()) check_external_locations(sub, model_dir, file, {});
    }
  }
}

// Where the data of external tensor `tp` lie: its file (inside the model's folder, and
// present), offset and length, checked against the file's size and the `expected_bytes`
// its type and dims need. Nothing is read.
StoredData locate_external_data(const ox::TensorProto& tp, const std::string& where,
                                const FileContext& ctx, int64_t expected_bytes) {
  if (auto it = ctx.in_file.find(tp.name()); it != ctx.in_file.end() &&
                                             external_location(tp) == ctx.own_location) {
    StoredData d = it->second;
    d.where = where;
    if (d.length != expected_bytes)
      throw ModelError(where, "raw_data holds " + std::to_string(d.length) + " bytes; " +
                                  elem_type_name(to_elem_type(tp.data_type())) +
                                  " of these dims needs " + std::to_string(expected_bytes));
    return d;
  }
  int64_t offset = 0;
  std::optional<int64_t> length;
  for (const auto& kv : tp.external_data()) {
    if (kv.key() == "offset") offset = parse_nonnegative(kv.value(), where, "offset");
    else if (kv.key() == "length") length = parse_nonnegative(kv.value(), where, "length");
  }
  const std::string location = external_location(tp);
  const fs::path full = external_path(tp, where, ctx.model_dir);
  std::error_code ec;
  if (!fs::is_regular_file(full, ec))
    throw ModelError(where, "external data file " + in_quotes(location) + " is missing");
  const int64_t size = static_cast<int64_t>(fs::file_size(full, ec));
  if (ec) throw ModelError(where, "external data file " + in_quotes(location) + " cannot be read");
  if (offset > size)
    throw ModelError(where, "external data file " + in_quotes(location) + " has " +
                                std::to_string(size) + " bytes, less than the offset " +
                                std::to_string(offset));
  const int64_t len = length.value_or(size - offset);
  if (len != expected_bytes)
    throw ModelError(where, "external data holds " + std::to_string(len) + " bytes; the tensor's " +
                                "type and dims need " + std::to_string(expected_bytes));
  if (offset + len > size)
    throw ModelError(where, "external data file " + in_quotes(location) + " is too short: " +
                                std::to_string(size) + " bytes, the tensor ends at byte " +
                                std::to_string(offset + len));
  return StoredData{full, offset, len, to_elem_type(tp.data_type()), where};
}

std::string read_stored_bytes(const StoredData& d) {
  const std::string file = in_quotes(d.file.filename().string());
  std::ifstream in(d.file, std::ios::binary);
  if (!in) throw ModelError(d.where, "data file " + file + " cannot be opened");
  in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(in.tellg());
  if (size < d.offset + d.length)
    throw ModelError(d.where, "data file " + file + " is too short: " + std::to_string(size) +
                                  " bytes, the tensor ends at byte " +
                                  std::to_string(d.offset + d.length) +
                                  " (the file changed since it was loaded)");
  std::string bytes(static_cast<size_t>(d.length), '\0');
  in.seekg(d.offset);
  in.read(bytes.data(), d.length);
  if (!in) throw ModelError(d.where, "data file " + file + " cannot be read");
  return bytes;
}

template <class Field>
void check_count(const Field& field, int64_t n, const std::string& where, const char* field_name) {
  if (static_cast<int64_t>(field.size()) != n)
    throw ModelError(where, std::string(field_name) + " holds " + std::to_string(field.size()) +
                                " values; the dims need " + std::to_string(n));
}

Tensor decode_tensor(const ox::TensorProto& tp, const std::string& where, const FileContext& ctx) {
  Tensor t;
  t.type = to_elem_type(tp.data_type());
  if (!is_supported_type(t.type))
    throw ModelError(where, std::string("element type ") + elem_type_name(t.type) +
                                " (" + std::to_string(tp.data_type()) + ") is not supported");
  t.dims.assign(tp.dims().begin(), tp.dims().end());
  int64_t n = 0;
  try {
    n = t.numel();
  } catch (const ModelError& e) {
    throw ModelError(where, e.what());
  }
  if (n > kMaxElements)
    throw ModelError(where, "tensor of " + std::to_string(n) + " elements is too large");
  if (tp.has_segment()) throw ModelError(where, "segmented tensors are not supported");
  const int64_t bytes = n * static_cast<int64_t>(elem_size(t.type));
  if (tp.data_location() == ox::TensorProto::EXTERNAL) {
    StoredData stored = locate_external_data(tp, where, ctx, bytes);
    if (t.is_float() && n > kSmallFloatTensor) {
      t.stored = std::make_shared<const StoredData>(std::move(stored));
      return t;
    }
    const std::string data = read_stored_bytes(stored);
    decode_bytes(data.data(), n, t);
    return t;
  }
  if (tp.has_raw_data()) {
    if (static_cast<int64_t>(tp.raw_data().size()) != bytes)
      throw ModelError(where, "raw_data holds " + std::to_string(tp.raw_data().size()) +
                                  " bytes; " + elem_type_name(t.type) + " of these dims needs " +
                                  std::to_string(bytes));
    decode_bytes(tp.raw_data().data(), n, t);
    return t;
  }
  const size_t count = static_cast<size_t>(n);
  switch (t.type) {
    case ElemType::Float:
      check_count(tp.float_data(), n, where, "float_data");
      t.floats.assign(tp.float_data().begin(), tp.float_data().end());
      break;
    case ElemType::Double:
      check_count(tp.double_data(), n, where, "double_data");
      t.floats.assign(tp.double_data().begin(), tp.double_data().end());
      break;
    case ElemType::Int64:
      check_count(tp.int64_data(), n, where, "int64_data");
      t.ints.assign(tp.int64_data().begin(), tp.int64_data().end());
      break;
    case ElemType::Uint32:
      check_count(tp.uint64_data(), n, where, "uint64_data");
      t.ints.resize(count);
      for (size_t i = 0; i < count; ++i) t.ints[i] = wrap_to(t.type, static_cast<int64_t>(tp.uint64_data(i)));
      break;
    case ElemType::Float16:
    case ElemType::BFloat16:
      check_count(tp.int32_data(), n, where, "int32_data");
      t.floats.resize(count);
      for (size_t i = 0; i < count; ++i) {
        const auto bits = static_cast<uint16_t>(tp.int32_data(static_cast<int>(i)));
        t.floats[i] = t.type == ElemType::Float16 ? half_bits_to_double(bits)
                                                  : bfloat16_bits_to_double(bits);
      }
      break;
    default:  // the small integer types and bool live in int32_data
      check_count(tp.int32_data(), n, where, "int32_data");
      t.ints.resize(count);
      for (size_t i = 0; i < count; ++i) t.ints[i] = wrap_to(t.type, tp.int32_data(static_cast<int>(i)));
      break;
  }
  return t;
}

ValueInfo decode_value_info(const ox::ValueInfoProto& vp) {
  ValueInfo v;
  v.name = vp.name();
  v.doc_string = vp.doc_string();
  if (!vp.type().has_tensor_type()) return v;
  const auto& tt = vp.type().tensor_type();
  v.type = to_elem_type(tt.elem_type());
  if (!tt.has_shape()) return v;
  std::vector<Dim> dims;
  for (const auto& d : tt.shape().dim()) {
    Dim dim;
    if (d.has_dim_value()) dim.value = d.dim_value();
    else if (d.has_dim_param()) dim.param = d.dim_param();
    dims.push_back(dim);
  }
  v.shape = std::move(dims);
  return v;
}

Graph decode_graph(const ox::GraphProto& gp, const FileContext& ctx);

SparseTensor decode_sparse(const ox::SparseTensorProto& sp, const std::string& where,
                           const FileContext& ctx) {
  SparseTensor s;
  s.values = decode_tensor(sp.values(), where + " values", ctx);
  s.indices = decode_tensor(sp.indices(), where + " indices", ctx);
  s.dims.assign(sp.dims().begin(), sp.dims().end());
  return s;
}

std::string type_text(const ox::TypeProto& tp) {
  if (tp.has_tensor_type())
    return std::string("tensor(") + elem_type_name(to_elem_type(tp.tensor_type().elem_type())) + ")";
  if (tp.has_sequence_type()) return "seq(" + type_text(tp.sequence_type().elem_type()) + ")";
  if (tp.has_optional_type()) return "optional(" + type_text(tp.optional_type().elem_type()) + ")";
  if (tp.has_map_type()) return "map(...)";
  return "type";
}

Attribute decode_attribute(const ox::AttributeProto& ap, const std::string& where,
                           const FileContext& ctx) {
  Attribute a;
  a.name = ap.name();
  a.ref_attr_name = ap.ref_attr_name();
  a.doc_string = ap.doc_string();
  const std::string at = where + " attribute " + in_quotes(ap.name());
  using AP = ox::AttributeProto;
  switch (ap.type()) {
    case AP::FLOAT: a.kind = AttrKind::Float; a.f = ap.f(); break;
    case AP::INT: a.kind = AttrKind::Int; a.i = ap.i(); break;
    case AP::STRING: a.kind = AttrKind::String; a.s = ap.s(); break;
    case AP::TENSOR: a.kind = AttrKind::Tensor; a.t = decode_tensor(ap.t(), at, ctx); break;
    case AP::GRAPH:
      a.kind = AttrKind::Graph;
      a.g = std::make_shared<Graph>(decode_graph(ap.g(), ctx));
      break;
    case AP::SPARSE_TENSOR:
      a.kind = AttrKind::SparseTensor;
      a.sparse = decode_sparse(ap.sparse_tensor(), at, ctx);
      break;
    case AP::TYPE_PROTO: a.kind = AttrKind::TypeProto; a.type_proto = type_text(ap.tp()); break;
    case AP::FLOATS: a.kind = AttrKind::Floats; a.floats.assign(ap.floats().begin(), ap.floats().end()); break;
    case AP::INTS: a.kind = AttrKind::Ints; a.ints.assign(ap.ints().begin(), ap.ints().end()); break;
    case AP::STRINGS: a.kind = AttrKind::Strings; a.strings.assign(ap.strings().begin(), ap.strings().end()); break;
    case AP::TENSORS:
      a.kind = AttrKind::Tensors;
      for (const auto& t : ap.tensors()) a.tensors.push_back(decode_tensor(t, at, ctx));
      break;
    case AP::GRAPHS:
      a.kind = AttrKind::Graphs;
      for (const auto& g : ap.graphs()) a.graphs.push_back(std::make_shared<Graph>(decode_graph(g, ctx)));
      break;
    case AP::SPARSE_TENSORS:
      a.kind = AttrKind::SparseTensors;
      for (const auto& s : ap.sparse_tensors()) a.sparse_tensors.push_back(decode_sparse(s, at, ctx));
      break;
    case AP::TYPE_PROTOS:
      a.kind = AttrKind::TypeProtos;
      for (const auto& t : ap.type_protos()) a.type_protos.push_back(type_text(t));
      break;
    default:
      throw ModelError(at, "attribute has no type");
  }
  return a;
}

Graph decode_graph(const ox::GraphProto& gp, const FileContext& ctx) {
  Graph g;
  g.name = gp.name();
  g.doc_string = gp.doc_string();
  for (const auto& v : gp.input()) g.inputs.push_back(decode_value_info(v));
  for (const auto& v : gp.output()) g.outputs.push_back(decode_value_info(v));
  for (const auto& v : gp.value_info()) g.value_info.push_back(decode_value_info(v));
  for (const auto& t : gp.initializer())
    g.initializers.push_back({t.name(), decode_tensor(t, ctx.file + ": initializer " + in_quotes(t.name()), ctx)});
  if (gp.sparse_initializer_size() > 0)
    throw ModelError(ctx.file, "graph " + in_quotes(gp.name()) + ": sparse initializers are not supported");
  for (int k = 0; k < gp.node_size(); ++k) {
    const auto& np = gp.node(k);
    Node n;
    n.name = np.name();
    n.op_type = np.op_type();
    n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
    n.doc_string = np.doc_string();
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    const std::string where = ctx.file + ": " + n.describe(static_cast<size_t>(k));
    for (const auto& ap : np.attribute()) n.attributes.push_back(decode_attribute(ap, where, ctx));
    g.nodes.push_back(std::move(n));
  }
  return g;
}

// --- writing ---------------------------------------------------------------------------

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

// --- loading ---------------------------------------------------------------------------


// A cycle among the main graph's nodes is refused naming them: ONNX's checker would
// report it as a node out of topological order.
void refuse_cycles(const ox::GraphProto& g, const std::string& file) {
  const int n = g.node_size();
  std::unordered_map<std::string, int> producer;
  for (int k = 0; k < n; ++k)
    for (const auto& out : g.node(k).output())
      if (!out.empty()) producer.emplace(out, k);
  auto label = [&](int k) {
    const auto& node = g.node(k);
    return (node.name().empty() ? "#" + std::to_string(k) : in_quotes(node.name())) + " (" +
           node.op_type() + ")";
  };
  // Iterative depth-first search over "reads the output of"; state 1: on the path.
  std::vector<int> state(static_cast<size_t>(n), 0), path;
  std::vector<int> next_input(static_cast<size_t>(n), 0);
  for (int root = 0; root < n; ++root) {
    if (state[root]) continue;
    path.push_back(root);
    state[root] = 1;
    while (!path.empty()) {
      const int k = path.back();
      const auto& node = g.node(k);
      if (next_input[k] == node.input_size()) {
        state[k] = 2;
        path.pop_back();
        continue;
      }
      auto it = producer.find(node.input(next_input[k]++));
      if (it == producer.end() || state[it->second] == 2) continue;
      if (state[it->second] == 1) {
        std::string cycle;
        const auto from = std::find(path.begin(), path.end(), it->second);
        for (auto p = from; p != path.end(); ++p) cycle += label(*p) + " reads ";
        throw ModelError(file + ": node " + label(it->second),
                         "the graph has a cycle: " + cycle + label(it->second));
      }
      state[it->second] = 1;
      path.push_back(it->second);
    }
  }
}

// ONNX's check_model(ModelProto), with the schemas of opsets newer than this ONNX release
// knows (onnx/newer_opsets.h) visible to it.
void run_checker(const ox::ModelProto& mp, const fs::path& model_dir, const std::string& file) {
  try {
    if (!mp.ir_version()) throw ox::checker::ValidationError("The model does not have an ir_version set properly.");
    if (mp.ir_version() > ox::IR_VERSION) throw ox::checker::ValidationError("Your model ir_version is higher than the checker's.");
    std::unordered_map<std::string, int> opsets;
    for (const auto& o : mp.opset_import()) opsets[o.domain()] = static_cast<int>(o.version());
    if (opsets.empty()) throw ox::checker::ValidationError("model with IR version >= 3 must specify opset_import for ONNX");
    ox::checker::CheckerContext ctx;
    ctx.set_ir_version(static_cast<int>(mp.ir_version()));
    ctx.set_opset_imports(opsets);
    ctx.set_schema_registry(newer_opset_registry());
    ctx.set_model_dir(model_dir.string());
    ox::checker::LexicalScopeContext lex;
    ox::checker::check_graph(mp.graph(), ctx, lex);
    if (ctx.get_ir_version() >= 8) ox::checker::check_model_local_functions(mp, ctx, lex);
  } catch (const std::exception& e) {
    throw ModelError(file, e.what());
  }
}

void bind_dims(ox::ValueInfoProto& vp, const DimBindings& dims, const std::string& file,
               bool required) {
  const std::string where = file + ": input " + in_quotes(vp.name());
  if (!vp.type().has_tensor_type()) {
    if (required) throw ModelError(where, "is not a tensor");
    return;
  }
  auto* tt = vp.mutable_type()->mutable_tensor_type();
  if (!tt->has_shape()) {
    if (required) throw ModelError(where, "has no shape (its rank is unknown)");
    return;
  }
  for (int k = 0; k < tt->shape().dim_size(); ++k) {
    auto* d = tt->mutable_shape()->mutable_dim(k);
    const std::string dim = "dim " + std::to_string(k);
    if (d->has_dim_value()) {
      if (d->dim_value() < 0)
        throw ModelError(where, dim + " is negative (" + std::to_string(d->dim_value()) + ")");
      continue;
    }
    if (!d->has_dim_param() || d->dim_param().empty()) {
      if (required)
        throw ModelError(where, dim + " has neither a size nor a name, so no --dim can bind it");
      continue;
    }
    auto it = dims.find(d->dim_param());
    if (it == dims.end()) {
      if (required)
        throw ModelError(where, dim + " is the symbol " + in_quotes(d->dim_param()) +
                                    ", which is not bound (pass --dim " + d->dim_param() + "=VALUE)");
      continue;
    }
    if (it->second < 0)
      throw ModelError(where, dim + ": --dim " + it->first + "=" + std::to_string(it->second) +
                                  " is negative");
    d->set_dim_value(it->second);
  }
}

// Every symbolic dim of the graph's (non-initializer) inputs gets its value from `dims`;
// outputs and value_info take the same values where they use the same names.
void bind_input_dims(ox::GraphProto& gp, const DimBindings& dims, const std::string& file) {
  std::set<std::string> initializers;
  for (const auto& t : gp.initializer()) initializers.insert(t.name());
  std::set<std::string> symbols;
  for (const auto& v : gp.input())
    if (!initializers.count(v.name()) && v.type().has_tensor_type() && v.type().tensor_type().has_shape())
      for (const auto& d : v.type().tensor_type().shape().dim())
        if (d.has_dim_param()) symbols.insert(d.dim_param());
  for (const auto& [name, value] : dims)
    if (!symbols.count(name)) {
      std::string known;
      for (const std::string& s : symbols) known += (known.empty() ? "" : ", ") + s;
      throw ModelError(file, "--dim " + name + ": no graph input has a dim named " + in_quotes(name) +
                                 (known.empty() ? " (its inputs have no symbolic dims)"
                                                : " (its symbolic dims: " + known + ")"));
    }
  for (auto& v : *gp.mutable_input())
    if (!initializers.count(v.name())) bind_dims(v, dims, file, true);
  for (auto& v : *gp.mutable_output()) bind_dims(v, dims, file, false);
  for (auto& v : *gp.mutable_value_info()) bind_dims(v, dims, file, false);
}

void run_shape_inference(ox::ModelProto& mp, const std::string& file) {
  try {
    // No data propagation: ONNX 1.12's Shape propagator dereferences a missing input
    // type (a Split with bad sizes made it crash). The folder propagates shape values
    // itself and runs inference again after each round.
    ox::ShapeInferenceOptions options(/*check_type=*/false, /*error_mode=*/0,
                                      /*enable_data_propagation=*/false);
    ox::shape_inference::InferShapes(mp, newer_opset_registry(), options);
  } catch (const std::exception& e) {
    throw ModelError(file, std::string("ONNX shape inference failed: ") + e.what());
  }
}

Model decode_model(const ox::ModelProto& mp, const fs::path& path, const FileContext& ctx) {
  Model m;
  m.path = path;
  m.ir_version = mp.ir_version();
  for (const auto& o : mp.opset_import())
    m.opset_imports.push_back({o.domain() == "ai.onnx" ? "" : o.domain(), o.version()});
  m.producer_name = mp.producer_name();
  m.producer_version = mp.producer_version();
  m.domain = mp.domain();
  m.model_version = mp.model_version();
  m.doc_string = mp.doc_string();
  for (const auto& p : mp.metadata_props()) m.metadata.emplace_back(p.key(), p.value());
  m.graph = decode_graph(mp.graph(), ctx);
  return m;
}

}  // namespace

std::string read_onnx_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError(path.string(), "cannot open the file");
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw ModelError(path.string(), "cannot read the file's size");
  if (size >= (uint64_t{2} << 30))
    throw ModelError(path.string(), "the file is 2 GiB or more; ONNX files keep weights that "
                                    "large in external data files");
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (!in) throw ModelError(path.string(), "cannot read the file");
  return bytes;
}

std::optional<std::vector<std::string>> input_dim_symbols(const fs::path& path) {
  try {
    const MappedFile mapped(path);
    const auto model = wire_fields(std::string_view(mapped.data(), mapped.size()));
    if (!model) return std::nullopt;
    // ModelProto.graph 7; GraphProto.initializer 5 (TensorProto.name 8), GraphProto.input 11.
    std::set<std::string> initializers;
    std::vector<ox::ValueInfoProto> inputs;
    for (const WireField& g : *model) {
      if (g.number != 7 || g.wire_type != 2) continue;
      const auto graph = wire_fields(g.payload);
      if (!graph) return std::nullopt;
      for (const WireField& f : *graph) {
        if (f.wire_type != 2) continue;
        if (f.number == 11 && !inputs.emplace_back().ParseFromArray(f.payload.data(), int(f.payload.size())))
          return std::nullopt;
        if (f.number != 5) continue;
        const auto tensor = wire_fields(f.payload);
        if (!tensor) return std::nullopt;
        for (const WireField& t : *tensor)
          if (t.number == 8 && t.wire_type == 2) initializers.insert(std::string(t.payload));
      }
    }
    std::vector<std::string> symbols;
    for (const ox::ValueInfoProto& v : inputs)
      if (!initializers.count(v.name()) && v.type().has_tensor_type())
        for (const auto& d : v.type().tensor_type().shape().dim())
          if (d.has_dim_param() && !d.dim_param().empty() &&
              std::find(symbols.begin(), symbols.end(), d.dim_param()) == symbols.end())
            symbols.push_back(d.dim_param());
    return symbols;
  } catch (const ModelError&) {
    return std::nullopt;  // load_onnx says what is wrong with the file
  }
}

Model load_onnx(const fs::path& path, const DimBindings& dims, const ProgressFn& progress) {
  const std::string file = path.string();
  FileContext ctx{file, path.parent_path().empty() ? fs::path(".") : path.parent_path(), {},
                  path.filename().string()};
  ox::ModelProto mp;
  report_progress(progress, "parse model", "", 0, 0);
  {
    const MappedFile mapped(path);
    const std::optional<std::string> stripped = strip_raw_data(mapped, ctx.own_location, ctx.in_file);
    const std::string_view bytes = stripped ? std::string_view(*stripped)
                                            : std::string_view(mapped.data(), mapped.size());
    if (!ox::ParseProtoFromBytes(&mp, bytes.data(), bytes.size()))
      throw ModelError(file, "not an ONNX model: the bytes do not parse as an ONNX ModelProto "
                             "(truncated, or not ONNX)");
  }
  for (auto& [name, stored] : ctx.in_file) stored.file = path;
  for (const auto& t : mp.graph().initializer())
    if (auto it = ctx.in_file.find(t.name()); it != ctx.in_file.end())
      it->second.type = to_elem_type(t.data_type());
  // Before the checker, which looks for external data files: none may lie outside the
  // model's folder.
  report_progress(progress, "check model", "", 0, 0);
  check_external_locations(mp.graph(), ctx.model_dir, file, ctx.in_file);
  refuse_cycles(mp.graph(), file);
  run_checker(mp, ctx.model_dir, file);
  report_progress(progress, "infer shapes", "", 0, 0);
  bind_input_dims(*mp.mutable_graph(), dims, file);
  run_shape_inference(mp, file);
  report_progress(progress, "decode model", "", 0, 0);
  return decode_model(mp, path, ctx);
}

Model load_onnx_bytes(std::string_view bytes, const std::string& name, const DimBindings& dims) {
  const fs::path path(name);
  FileContext ctx{name, fs::path("."), {}, {}};
  ox::ModelProto mp;
  if (!ox::ParseProtoFromBytes(&mp, bytes.data(), bytes.size()))
    throw ModelError(name, "not an ONNX model: the bytes do not parse as an ONNX ModelProto "
                           "(truncated, or not ONNX)");
  // Bytes in memory have no folder: external data cannot be found from them.
  for (const auto& t : mp.graph().initializer())
    if (t.data_location() == ox::TensorProto::EXTERNAL)
      throw ModelError(name + ": initializer " + in_quotes(t.name()),
                       "keeps its data in an external file, which ONNX bytes in memory cannot "
                       "refer to");
  refuse_cycles(mp.graph(), name);
  run_checker(mp, ctx.model_dir, name);
  bind_input_dims(*mp.mutable_graph(), dims, name);
  run_shape_inference(mp, name);
  return decode_model(mp, path, ctx);
}

std::vector<double> stored_floats(const Tensor& t) {
  if (!t.stored) return t.floats;
  const StoredData& d = *t.stored;
  const std::string bytes = read_stored_bytes(d);
  Tensor decoded;
  decoded.type = t.type;
  decode_bytes(bytes.data(), d.length / static_cast<int64_t>(elem_size(t.type)), decoded);
  return std::move(decoded.floats);
}

std::vector<double> finite_floats(const Tensor& t, const std::string& where) {
  std::vector<double> values = stored_floats(t);
  for (size_t k = 0; k < values.size(); ++k)
    if (!std::isfinite(values[k]))
      throw ModelError(t.stored ? t.stored->where : where,
                       "holds a non-finite value (" + std::to_string(values[k]) +
                           ") at flat index " + std::to_string(k));
  return values;
}

void load_stored(Tensor& t) {
  if (!t.stored) return;
  t.floats = stored_floats(t);
  t.stored.reset();
}

Tensor load_tensor_pb(const fs::path& path) {
  const std::string bytes = read_onnx_bytes(path);
  ox::TensorProto tp;
  if (!ox::ParseProtoFromBytes(&tp, bytes.data(), bytes.size()))
    throw ModelError(path.string(), "not a serialized ONNX TensorProto");
  const FileContext ctx{path.string(), path.parent_path(), {}, {}};
  Tensor t = decode_tensor(tp, path.string(), ctx);
  load_stored(t);
  return t;
}

void save_onnx(const Model& model, const fs::path& path) {
  const ox::ModelProto mp = encode_model(model, /*float_data=*/true);
  std::ofstream out(path, std::ios::binary);
  if (!out || !mp.SerializeToOstream(&out))
    throw ModelError(path.string(), "cannot write the file");
}

void infer_shapes(Model& model) {
  ox::ModelProto mp = encode_model(model, /*float_data=*/false);
  mp.mutable_graph()->clear_value_info();
  run_shape_inference(mp, model.path.string());
  model.graph.value_info.clear();
  for (const auto& v : mp.graph().value_info()) model.graph.value_info.push_back(decode_value_info(v));
  for (int k = 0; k < mp.graph().output_size(); ++k)
    model.graph.outputs[static_cast<size_t>(k)] = decode_value_info(mp.graph().output(k));
}

}  // namespace lnv::onnx_import
