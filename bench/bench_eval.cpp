// Speed of the reference evaluators on one model: forward, and forward + reverse mode, in
// double and in MPFR at 256, 512 and 1024 bits.
//
//   bench_eval [MODEL.json] [MODE]   (defaults: examples/gpt2_tiny.json, inference)
//
// Each row repeats its evaluation for at least one second of CPU time and prints the mean
// CPU time per run (single-threaded code: CPU time, unlike wall time, does not grow when
// other processes share the machine).
#include <ctime>
#include <iomanip>
#include <iostream>
#include <string>

#include "core/eval/evaluator.h"
#include "core/model_json.h"

namespace {

using namespace lnv;

template <class F>
double mean_ms(F&& f) {
  const std::clock_t start = std::clock();
  int runs = 0;
  double secs = 0;
  do {
    f();
    ++runs;
    secs = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  } while (secs < 1.0);
  return 1000 * secs / runs;
}

template <class T>
void row(const Graph& g, const eval::RunOptions& opt, const std::string& label) {
  const std::vector<Tensor<T>> inputs = eval::random_inputs<T>(g, 1);
  const double fwd = mean_ms([&] { eval::evaluate(g, inputs, opt); });
  const double both = mean_ms([&] { eval::gradients(g, eval::evaluate(g, inputs, opt), opt); });
  std::cout << std::left << std::setw(16) << label << std::right << std::fixed
            << std::setprecision(2) << std::setw(16) << fwd << std::setw(20) << both << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "examples/gpt2_tiny.json";
  const std::string mode = argc > 2 ? argv[2] : "inference";
  const Graph g = load_model(path);
  int64_t values = 0;
  for (const Param& p : g.params) values += numel(p.shape);
  const eval::RunOptions opt{mode == "training" ? Mode::training : Mode::inference, 1};
  std::cout << path << ": " << g.nodes.size() << " nodes, " << values << " param values, "
            << mode << " mode\n"
            << std::left << std::setw(16) << "scalar" << std::right << std::setw(16)
            << "forward ms cpu" << std::setw(20) << "fwd+grad ms cpu" << "\n";
  row<double>(g, opt, "double");
  for (unsigned bits : {256u, 512u, 1024u}) {
    eval::set_mpfr_bits(bits);
    row<eval::Mpfr>(g, opt, "mpfr " + std::to_string(eval::mpfr_bits()) + " bits");
  }
  return 0;
}
