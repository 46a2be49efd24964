// `lnverify eval MODEL.json [--bits N] [--mode inference|training] [--seed S] [--grad]
// [--json FILE]`: evaluates the model on the random inputs of the seed with the reference
// evaluator (MPFR at N bits, default 256; `--bits 53` runs in double) and prints each
// output's shape, leading values and L2 norm; with --grad also the loss of
// docs/spec/format.md and the L2 norm of its gradient for every param and float input.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/model_input.h"
#include "cli/output_paths.h"
#include "core/error.h"
#include "core/eval/evaluator.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "reports/eval_report.h"

namespace lnv::cli {
namespace {

struct Options {
  std::string model, mode = "inference", json;
  std::vector<std::string> dims;
  unsigned bits = 256;
  uint64_t seed = 0;
  bool grad = false;
};

template <class T>
report::EvalTensor eval_tensor(const std::string& name, const Tensor<T>& t) {
  using std::sqrt;
  report::EvalTensor out{name, t.shape, {}, 0};
  T s(0);
  for (const T& v : t.data) {
    out.data.push_back(static_cast<double>(v));
    s += v * v;
  }
  out.l2_norm = static_cast<double>(T(sqrt(s)));
  return out;
}

template <class T>
int run(const Graph& g, const Options& opt, const std::string& precision) {
  const eval::RunOptions ro{opt.mode == "training" ? Mode::training : Mode::inference, opt.seed};
  const eval::Evaluation<T> ev = eval::evaluate(g, eval::random_inputs<T>(g, opt.seed), ro);
  report::EvalReport rep;
  rep.model = g.name;
  rep.mode = opt.mode;
  rep.precision = precision;
  rep.seed = opt.seed;
  rep.bits = opt.bits;
  rep.inputs = g.inputs.size();
  rep.params = g.params.size();
  rep.nodes = g.nodes.size();
  for (size_t k = 0; k < g.outputs.size(); ++k)
    rep.outputs.push_back(eval_tensor(g.outputs[k], ev.outputs[k]));
  std::cout << report::eval_outputs_text(rep);

  if (opt.grad) {
    const eval::Gradients<T> gr = eval::gradients(g, ev, ro);
    rep.has_gradients = true;
    rep.loss = static_cast<double>(gr.loss);
    for (size_t k = 0; k < g.params.size(); ++k)
      rep.param_gradients.push_back(eval_tensor(g.params[k].name, gr.params[k]));
    for (size_t k = 0; k < g.inputs.size(); ++k)
      if (g.inputs[k].dtype != DType::index)
        rep.input_gradients.push_back(eval_tensor(g.inputs[k].name, gr.inputs[k]));
    std::cout << report::eval_gradients_text(rep);
  }
  if (!opt.json.empty()) {
    write_file_atomically(opt.json, nlohmann::json(rep).dump(2) + "\n");
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
