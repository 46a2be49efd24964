// Decoding: ONNX's protobuf messages into the IR of onnx/onnx_model.h (proto_codec.h):
// tensors held inline, as raw_data or in external data files (whose location is checked
// to lie in the model's folder, and whose large float data stay in their file until
// stored_floats reads them), attributes, graphs and the model.
#include <onnx/onnx_pb.h>
#include <onnx/proto_utils.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "onnx/float_formats.h"
#include "onnx/fold_ops.h"
#include "onnx/onnx_model.h"
#include "onnx/proto_codec.h"

namespace lnv::onnx_import {
namespace {

namespace fs = std::filesystem;
namespace ox = ::onnx;

// A tensor larger than this many elements is refused (a .onnx file is under 2 GiB; an
// external data file of 2^34 elements is not a model lnverify can evaluate exactly).
constexpr int64_t kMaxElements = int64_t{1} << 34;

}  // namespace

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
namespace {

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
}  // namespace

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
namespace {

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
}  // namespace

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
namespace {

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
}  // namespace

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
}  // namespace lnv::onnx_import
