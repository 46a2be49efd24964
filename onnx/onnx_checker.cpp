// The checks of onnx/onnx_checker.h: a cycle among the nodes refused naming them, and
// ONNX's checker run with the schema registry of onnx/newer_opsets.h (and, for the full
// check, strict shape inference).
#include "onnx/onnx_checker.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "onnx/newer_opsets.h"
#include "onnx/proto_codec.h"
#include "onnx/shape_inference.h"

namespace lnv::onnx_import {

namespace fs = std::filesystem;
namespace ox = ::onnx;

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

void check_onnx_model(ox::ModelProto& mp, const fs::path& model_dir, const std::string& file,
                      OnnxCheck check) {
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
    if (check == OnnxCheck::full) infer_onnx_shapes(mp, InferenceCheck::strict);
  } catch (const std::exception& e) {
    throw ModelError(file, std::string("fails ONNX's checker: ") + e.what());
  }
}
}  // namespace lnv::onnx_import
