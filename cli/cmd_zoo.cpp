// `lnverify zoo NAME [size options] -o MODEL.json`: writes a named architecture
// (generators/architectures.h) as a model.json, weights as `init` params, or with
// --safetensors in a side file MODEL.safetensors (float32) next to the model.
#include <filesystem>
#include <iostream>
#include <map>

#include "cli/command.h"
#include "core/error.h"
#include "core/model_json.h"
#include "core/safetensors.h"
#include "generators/architectures.h"

namespace lnv::cli {
namespace {

namespace fs = std::filesystem;

// Moves every param of `g` into a float32 safetensors file at `side_path` and points the
// params at it (values rounded to float32, so the model and the file agree exactly).
void move_weights_to_safetensors(Graph& g, const std::string& model_path,
                                 const std::string& side_path) {
  std::map<std::string, SafetensorsEntry> tensors;
  for (Param& p : g.params) {
    for (double& v : p.values) v = static_cast<float>(v);
    p.source = ParamSource::file;
    p.file = {fs::path(side_path).filename().string(), p.name};
    tensors.emplace(p.name, SafetensorsEntry{p.shape, p.values, SafetensorsDType::f32});
  }
  g.base_dir = fs::path(model_path).parent_path().string();
  write_safetensors(side_path, tensors);
}

void list_architectures() {
  for (const zoo::ArchInfo& a : zoo::architectures())
    std::cout << "  " << a.name << std::string(a.name.size() < 10 ? 10 - a.name.size() : 1, ' ')
              << a.summary << "\n";
}

Action setup(CLI::App& sub) {
  struct State {
    std::string name, out;
    zoo::ArchOptions o;
    int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, batch = 0, image = 0,
            patch = 0, window = 0, classes = 0;
    double dropout = -1;
    bool safetensors = false;
  };
  auto st = std::make_shared<State>();
  sub.add_option("NAME", st->name, "architecture; omit to list them");
  sub.add_option("-o,--output", st->out, "model.json to write");
  sub.add_option("--layers", st->layers, "blocks (RNN layers; blocks per stage for swin/convnext)");
  sub.add_option("--hidden", st->hidden, "width (first-stage width for swin/convnext)");
  sub.add_option("--heads", st->heads, "attention heads (first stage for swin)");
  sub.add_option("--seq", st->seq, "tokens per sequence (text models)");
  sub.add_option("--vocab", st->vocab, "vocabulary size (text models)");
  sub.add_option("--batch", st->batch, "batch size (default 1)");
  sub.add_option("--image", st->image, "image side in pixels (vision models)");
  sub.add_option("--patch", st->patch, "patch side in pixels (vision models)");
  sub.add_option("--window", st->window, "window side in patches (swin)");
  sub.add_option("--classes", st->classes, "classifier outputs (vision models)");
  sub.add_option("--depths", st->o.depths, "blocks per stage (swin/convnext), e.g. 2,2,6,2")
      ->delimiter(',');
  sub.add_option("--dropout", st->dropout, "dropout p (0: no dropout nodes; default 0.1)");
  sub.add_option("--init-std", st->o.init_std, "std of the normal init (default 0.02)");
  sub.add_option("--seed", st->o.seed, "the model's init seed (default 0)");
  sub.add_flag("--safetensors", st->safetensors,
               "write the weights to MODEL.safetensors (float32) beside the model");
  return [st, &sub]() -> int {
    if (st->name.empty()) {
      std::cout << "architectures (lnverify zoo NAME -o MODEL.json):\n";
      list_architectures();
      return kOk;
    }
    if (st->out.empty()) throw ModelError("zoo/-o", "an output path is required (-o MODEL.json)");
    auto set = [&](const char* opt, int64_t v, std::optional<int64_t>& field) {
      if (sub.count(opt)) field = v;
    };
    set("--layers", st->layers, st->o.layers);
    set("--hidden", st->hidden, st->o.hidden);
    set("--heads", st->heads, st->o.heads);
    set("--seq", st->seq, st->o.seq);
    set("--vocab", st->vocab, st->o.vocab);
    set("--batch", st->batch, st->o.batch);
    set("--image", st->image, st->o.image);
    set("--patch", st->patch, st->o.patch);
    set("--window", st->window, st->o.window);
    set("--classes", st->classes, st->o.classes);
    if (sub.count("--dropout")) st->o.dropout = st->dropout;

    Graph g = zoo::build_architecture(st->name, st->o);
    int64_t count = 0;
    for (const Param& p : g.params) count += numel(p.shape);
    std::string side;
    if (st->safetensors) {
      side = (fs::path(st->out).parent_path() / fs::path(st->out).stem()).string() +
             ".safetensors";
      move_weights_to_safetensors(g, st->out, side);
    }
    save_model(g, st->out);
    int lns = 0;
    for (const Node& n : g.nodes) lns += n.op == Op::layer_norm || (n.op == Op::rnn && n.norm);
    std::cout << "wrote " << st->out << (side.empty() ? "" : " and " + side) << ": "
              << st->name << ", " << g.nodes.size() << " nodes, " << g.params.size()
              << " params (" << count << " values), " << lns << " LayerNorms\n";
    return kOk;
  };
}

const bool kRegistered =
    register_command({"zoo", "write a named architecture (gpt2, bert, vit, ...) as a model.json",
                      setup});

}  // namespace
}  // namespace lnv::cli
