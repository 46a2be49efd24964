// `lnverify eval MODEL.json [--bits N] [--mode inference|training] [--seed S] [--grad]
// [--json FILE]`: evaluates the model on the random inputs of the seed with the reference
// evaluator (MPFR at N bits, default 256; `--bits 53` runs in double) and prints each
// output's shape, leading values and L2 norm; with --grad also the loss of
// docs/spec/format.md and the L2 norm of its gradient for every param and float input.
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/model_input.h"
#include "cli/output_paths.h"
#include "core/error.h"
#include "core/eval/evaluator.h"
#include "core/file_io.h"
#include "core/model_json.h"

namespace lnv::cli {
namespace {

struct Options {
  std::string model, mode = "inference", json;
  std::vector<std::string> dims;
  unsigned bits = 256;
  uint64_t seed = 0;
  bool grad = false;
};

constexpr int kLeading = 4;  // values printed per output

template <class T>
double l2_norm(const Tensor<T>& t) {
  using std::sqrt;
  T s(0);
  for (const T& v : t.data) s += v * v;
  return static_cast<double>(T(sqrt(s)));
}

template <class T>
nlohmann::json tensor_json(const Tensor<T>& t) {
  nlohmann::json data = nlohmann::json::array();
  for (const T& v : t.data) data.push_back(static_cast<double>(v));
  return {{"shape", t.shape}, {"data", std::move(data)}};
}

template <class T>
std::string leading(const Tensor<T>& t) {
  std::ostringstream os;
  os << std::setprecision(10);
  for (int64_t i = 0; i < std::min<int64_t>(kLeading, t.size()); ++i)
    os << (i ? ", " : "") << static_cast<double>(t.data[i]);
  if (t.size() > kLeading) os << ", ...";
  return os.str();
}

template <class T>
int run(const Graph& g, const Options& opt, const std::string& precision) {
  const eval::RunOptions ro{opt.mode == "training" ? Mode::training : Mode::inference, opt.seed};
  const eval::Evaluation<T> ev = eval::evaluate(g, eval::random_inputs<T>(g, opt.seed), ro);

  std::cout << "model '" << g.name << "': " << g.inputs.size() << " inputs, " << g.params.size()
            << " params, " << g.nodes.size() << " nodes; " << opt.mode << " mode, seed "
            << opt.seed << ", " << precision << "\n";
  nlohmann::json out = {{"format", "lnverify.eval"}, {"version", 1},  {"model", g.name},
                        {"mode", opt.mode},         {"seed", opt.seed}, {"bits", opt.bits},
                        {"precision", precision}};
  nlohmann::json outputs = nlohmann::json::object();
  std::cout << std::setprecision(10);
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const Tensor<T>& o = ev.outputs[k];
    std::cout << "output " << g.outputs[k] << " " << to_string(o.shape) << ": " << leading(o)
              << "  (L2 norm " << l2_norm(o) << ")\n";
    outputs[g.outputs[k]] = tensor_json(o);
  }
  out["outputs"] = std::move(outputs);

  if (opt.grad) {
    const eval::Gradients<T> gr = eval::gradients(g, ev, ro);
    std::cout << "loss " << static_cast<double>(gr.loss) << "\ngradient L2 norms:\n";
    nlohmann::json params = nlohmann::json::object(), inputs = nlohmann::json::object();
    for (size_t k = 0; k < g.params.size(); ++k) {
      std::cout << "  param " << g.params[k].name << " " << to_string(g.params[k].shape) << ": "
                << l2_norm(gr.params[k]) << "\n";
      params[g.params[k].name] = tensor_json(gr.params[k]);
    }
    for (size_t k = 0; k < g.inputs.size(); ++k) {
      if (g.inputs[k].dtype == DType::index) continue;
      std::cout << "  input " << g.inputs[k].name << " " << to_string(g.inputs[k].shape)
                << ": " << l2_norm(gr.inputs[k]) << "\n";
      inputs[g.inputs[k].name] = tensor_json(gr.inputs[k]);
    }
    out["loss"] = static_cast<double>(gr.loss);
    out["gradients"] = {{"params", std::move(params)}, {"inputs", std::move(inputs)}};
  }
  if (!opt.json.empty()) {
    write_file_atomically(opt.json, out.dump(2) + "\n");
    std::cout << "wrote " << opt.json << "\n";
  }
  return kOk;
}

Action setup(CLI::App& sub) {
  auto opt = std::make_shared<Options>();
  add_model_input(sub, opt->model, opt->dims, "the model to evaluate (model.json or .onnx)");
  sub.add_option("--bits", opt->bits,
                 "MPFR precision in bits (default 256); 53 evaluates in double")
      ->check(CLI::Range(8u, 1u << 20));
  sub.add_option("--mode", opt->mode, "inference (dropout off) or training (dropout masks)")
      ->check(CLI::IsMember({"inference", "training"}));
  sub.add_option("--seed", opt->seed, "seed of the random inputs, dropout masks and loss")
      ->check(seed_range());
  sub.add_flag("--grad", opt->grad, "also compute the loss and its gradients");
  sub.add_option("--json", opt->json, "write outputs (and gradients) as JSON to this file");
  return [opt]() -> int {
    const Graph g = load_input(opt->model, opt->dims);
    refuse_input_as_output("--json", opt->json, opt->model, g);
    refuse_exact_beyond_memory(g, opt->model, opt->bits, opt->grad ? 3 : 1);
    if (opt->bits == 53) return run<double>(g, *opt, "double");
    eval::set_mpfr_bits(opt->bits);
    return run<eval::Mpfr>(g, *opt, std::to_string(eval::mpfr_bits()) + "-bit MPFR");
  };
}

const bool kRegistered = register_command(
    {"eval", "evaluate a model (and its gradients) on random inputs, exactly", setup});

}  // namespace
}  // namespace lnv::cli
