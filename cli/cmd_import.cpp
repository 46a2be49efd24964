// `lnverify import MODEL.onnx -o MODEL.json [--dim NAME=VALUE ...]`: the ONNX model as
// model.json (onnx/import.h; docs/onnx.md), written atomically and never over its input.
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/terminal.h"
#include "cli/model_input.h"
#include "cli/output_paths.h"
#include "core/error.h"
#include "core/model_json.h"

namespace lnv::cli {
namespace {

Action setup(CLI::App& sub) {
  struct State {
    std::string model, out;
    std::vector<std::string> dims;
  };
  auto st = std::make_shared<State>();
  add_model_input(sub, st->model, st->dims, "the ONNX model to import");
  sub.add_option("-o,--output", st->out, "where to write the model.json")->required();
  return [st]() -> int {
    if (!is_onnx_input(st->model))
      throw ModelError(st->model, "import reads an ONNX model (.onnx, or ONNX bytes); this is not one");
    if (same_file(st->model, st->out))
      throw ModelError(st->out, "refusing to overwrite the input model; choose another -o path");
    const Graph g = load_input(st->model, st->dims);
    int norms = 0;
    for (const Node& n : g.nodes) norms += n.op == Op::layer_norm || n.op == Op::rms_norm;
    {
      StepProgress progress;  // erased before the summary is printed
      SaveOptions options;
      options.progress = progress.callback();
      save_model(g, st->out, options);
    }
    std::cout << "wrote " << st->out << ": " << g.inputs.size() << " input"
              << (g.inputs.size() == 1 ? "" : "s") << ", " << g.params.size() << " params, "
              << g.nodes.size() << " nodes (" << norms << " norm" << (norms == 1 ? "" : "s")
              << ")\n";
    return kOk;
  };
}

const bool kRegistered = register_command(
    {"import", "read an ONNX model and write it as model.json", setup});

}  // namespace
}  // namespace lnv::cli
