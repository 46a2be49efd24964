// The reader of onnx/onnx_model.h: load_onnx parses a file (its large raw_data left in
// the mapped file by the wire walk of onnx/wire_format.h), checks it (onnx_checker.h),
// binds its input dims and infers shapes (shape_inference.h), then decodes it
// (proto_codec.h); input_dim_symbols reads only the graph inputs' dims.
#include <onnx/onnx_pb.h>
#include <onnx/proto_utils.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string_view>

#include "core/error.h"
#include "onnx/onnx_checker.h"
#include "onnx/onnx_model.h"
#include "onnx/proto_codec.h"
#include "onnx/shape_inference.h"
#include "onnx/wire_format.h"

namespace lnv::onnx_import {

namespace fs = std::filesystem;
namespace ox = ::onnx;

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
  check_onnx_model(mp, ctx.model_dir, file, OnnxCheck::checker);
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
  check_onnx_model(mp, ctx.model_dir, name, OnnxCheck::checker);
  bind_input_dims(*mp.mutable_graph(), dims, name);
  run_shape_inference(mp, name);
  return decode_model(mp, path, ctx);
}
}  // namespace lnv::onnx_import
