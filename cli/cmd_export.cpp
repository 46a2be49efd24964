// `lnverify export MODEL.json -o MODEL.onnx [--dtype float32|float64] [--external-data]`:
// the model as an ONNX model (opset 17, float32 or double; onnx/export.h, docs/onnx.md
// "Export").
//
// Weights go into an external data file `<OUT>.data` beside the model when their float32
// bytes exceed kExternalAbove (protobuf refuses messages of 2 GiB, and a model near that
// size is better read by mapping its weights), or always with --external-data. The model
// and its data file are written all or nothing (commit_together) and never over the input
// model or a weights file it reads.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/model_input.h"
#include "cli/output_paths.h"
#include "core/error.h"
#include "core/file_io.h"
#include "onnx/export.h"

namespace lnv::cli {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kExternalAbove = int64_t(1) << 30;  // 1 GiB of weights

Action setup(CLI::App& sub) {
  struct State {
    std::string model, out, dtype = "float32";
    std::vector<std::string> dims;
    bool external = false;
  };
  auto st = std::make_shared<State>();
  add_model_input(sub, st->model, st->dims, "the model to export (model.json or .onnx)");
  sub.add_option("-o,--output", st->out, "where to write the ONNX model")->required();
  sub.add_option("--dtype", st->dtype,
                 "float32 (what ONNX runtimes run) or float64 (every param and constant exact in "
                 "double, so that `equiv` proves the re-import equal)")
      ->check(CLI::IsMember({"float32", "float64"}))
      ->capture_default_str();
  sub.add_flag("--external-data", st->external,
               "store initializers of 1024+ values in OUT.data beside the model (the default "
               "above 1 GiB of weights)");
  return [st]() -> int {
    if (same_file(st->model, st->out))
      throw ModelError(st->out, "refusing to overwrite the input model; choose another -o path");
    const Graph g = load_input(st->model, st->dims);
    refuse_input_as_output("-o", st->out, st->model, g);
    onnx_export::ExportOptions options;
    options.float64 = st->dtype == "float64";
    const bool external = st->external || onnx_export::initializer_bytes(g, options) > kExternalAbove;
    const std::string data_path = st->out + ".data";
    if (external) {
      refuse_input_as_output("-o", data_path, st->model, g);
      options.external_data = fs::path(data_path).filename().string();
    }
    const onnx_export::ExportedModel onnx = onnx_export::export_onnx(g, options);
    AtomicFileWriter model_file(st->out);
    model_file.write(onnx.model);
    if (external) {
      AtomicFileWriter data_file(data_path);
      data_file.write(onnx.data);
      commit_together({&data_file, &model_file});
    } else {
      model_file.commit();
    }
    std::cout << "wrote " << st->out << ": ONNX opset " << onnx_export::kOpset << ", "
              << onnx.nodes << " nodes, " << onnx.initializers << " initializers ("
              << onnx.initializer_bytes << " bytes of " << (options.float64 ? "float64" : "float32")
              << (external ? ", " + std::to_string(onnx.data.size()) + " bytes in " + data_path : "")
              << ")\n";
    return kOk;
  };
}

const bool kRegistered = register_command(
    {"export", "write the model as ONNX (opset 17) for ONNX runtimes", setup});

}  // namespace
}  // namespace lnv::cli
