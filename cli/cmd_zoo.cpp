// `lnverify zoo NAME [size options] -o MODEL.json`: writes a named architecture
// (generators/architectures.h) as a model.json, weights as `init` params, or with
// --safetensors in a side file MODEL.safetensors (float32) next to the model.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "core/safetensors.h"
#include "generators/architectures.h"

namespace lnv::cli {
namespace {

namespace fs = std::filesystem;

// "2,2,6,2" as blocks per stage. Read here rather than by CLI11's list option, which
// quotes the wrong tokens when an entry is empty.
std::vector<int64_t> parse_depths(const std::string& text) {
  std::vector<int64_t> depths;
  for (size_t begin = 0; begin <= text.size();) {
    const size_t end = std::min(text.find(',', begin), text.size());
    int64_t d = 0;
    const auto [stop, ec] = std::from_chars(text.data() + begin, text.data() + end, d);
    if (ec != std::errc() || stop != text.data() + end)
      throw ModelError("zoo/--depths", "expected blocks per stage separated by commas (e.g. "
                                       "2,2,6,2), got '" + text + "'");
    depths.push_back(d);
    begin = end + 1;
  }
  return depths;
}

// Points every param of `g` at its tensor in the float32 side file `side` (values
// rounded to float32, so the model and the file agree exactly) and returns the file's
// layout, in key order.
std::vector<SafetensorsWriter::Tensor> move_weights_to_side_file(Graph& g,
                                                                 const std::string& out,
                                                                 const std::string& side) {
  std::vector<SafetensorsWriter::Tensor> layout;
  for (Param& p : g.params) {
    for (double& v : p.values) v = static_cast<float>(v);
    if (!std::ranges::all_of(p.values, [](double v) { return std::isfinite(v); }))
      throw ModelError("zoo/--init-std", "this std draws a value beyond the float32 range of "
                                         "--safetensors for param '" + p.name + "'");
    p.source = ParamSource::file;
    p.file = {fs::path(side).filename().string(), p.name};
    // Tells save's writer that the file will hold exactly these values, so that it writes
    // the reference without reading a file that is not there yet.
    p.file_fingerprint = param_fingerprint(p);
    layout.push_back({p.name, p.shape, SafetensorsDType::f32});
  }
  g.base_dir = fs::path(out).parent_path().string();
  std::ranges::sort(layout, {}, &SafetensorsWriter::Tensor::key);
  return layout;
}

// Writes the model and its side file, both or neither. Both go into temporary files
// first. The model is renamed into place first: if the side file's rename then fails,
// removing the new model undoes everything, and a side file that was there before is
// left as it was.
void save_with_side_file(Graph& g, const std::string& out, const std::string& side) {
  const auto layout = move_weights_to_side_file(g, out, side);
  SafetensorsWriter weights(side, layout, /*finite_only=*/true);
  for (const SafetensorsWriter::Tensor& t : layout) {
    const Param& p = g.params[g.param_index(t.key)];
    weights.append(p.values.data(), p.values.size());
  }
  AtomicFileWriter model(out);
  model.write(model_to_text(g, g.base_dir));
  model.commit();
  try {
    weights.commit();
  } catch (const ModelError&) {
    std::error_code ignored;  // the side file's error is the one to report
    fs::remove(out, ignored);
    throw;
  }
}

// Refuses, before any work, an output path the model cannot be written to.
void check_output(const std::string& out, const std::string& side) {
  check_path_length(out);
  if (!side.empty()) check_path_length(side);
  std::error_code ec;
  if (fs::is_directory(out, ec))
    throw ModelError("zoo/-o", out + " is a directory; expected a model file path");
  if (!side.empty() && fs::path(side).lexically_normal() == fs::path(out).lexically_normal())
    throw ModelError("zoo/-o", "with --safetensors the weights go to " + side +
                                   ", the model file itself; name the model MODEL.json");
}

void list_architectures() {
  for (const zoo::ArchInfo& a : zoo::architectures())
    std::cout << "  " << a.name << std::string(a.name.size() < 10 ? 10 - a.name.size() : 1, ' ')
              << a.summary << "\n";
}

Action setup(CLI::App& sub) {
  struct State {
    std::string name, out, depths;
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
  sub.add_option("--depths", st->depths, "blocks per stage (swin/convnext), e.g. 2,2,6,2");
  sub.add_option("--dropout", st->dropout, "dropout p (0: no dropout nodes; default 0.1)");
  sub.add_option("--init-std", st->o.init_std, "std of the normal init (default 0.02)");
  sub.add_option("--seed", st->o.seed, "the model's init seed, 0 to 2^64 - 1 (default 0)")
      ->check(seed_range());
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
    if (sub.count("--depths")) st->o.depths = parse_depths(st->depths);
    const std::string side =
        st->safetensors ? (fs::path(st->out).parent_path() / fs::path(st->out).stem()).string() +
                              ".safetensors"
                        : "";
    check_output(st->out, side);

    Graph g = zoo::build_architecture(st->name, st->o);
    int64_t count = 0;
    for (const Param& p : g.params) count += numel(p.shape);
    if (side.empty())
      save_model(g, st->out);
    else
      save_with_side_file(g, st->out, side);
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
