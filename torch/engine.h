// The LibTorch engine: runs any finalized lnv::Graph in float32 or float64 on ATen, forward
// and reverse mode, with the reference evaluator's semantics (core/eval/evaluator.h):
// dropout masks from the same SplitMix64 streams, `cbwc` producers reading centered
// weights, Param::center_axes, the loss L = sum_o sum_i o_i r_i of docs/spec/format.md.
//
// No LibTorch type appears here (heavy dependencies stay behind their own target): tensors cross this boundary as
// lnv::Tensor<double>, so including this header costs nothing.
//
//   Engine e(g, {Precision::f32});
//   auto outs = e.forward(eval::random_inputs<double>(g, seed), {Mode::inference, seed});
//
// Speed: params are converted once, at construction. In float32 without gradients the
// rms_norm nodes over trailing axes run the fused kernel lnv::kernels::rms_norm (an `add`
// of two same-shape tensors read by one runs with it as lnv::kernels::add_rms_norm), and
// rms_norm and linear outputs are written into buffers kept from one run to the next (a
// fresh large allocation page-faults on every call); layer_norm runs at::layer_norm.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/mode.h"
#include "core/tensor.h"

namespace lnv::torch_engine {

enum class Precision { f32, f64 };

struct EngineOptions {
  Precision precision = Precision::f32;
  // Float32 inference: rms_norm through the fused kernel (false: composed ATen ops).
  bool fused_rms_norm = true;
};

struct RunOptions {
  Mode mode = Mode::inference;
  uint64_t seed = 0;  // dropout masks (training) and the loss cotangents
};

struct GradResult {
  double loss = 0.0;
  std::vector<Tensor<double>> outputs;  // per graph output
  std::vector<Tensor<double>> inputs;   // dL/d(input); empty tensor for index inputs
  std::vector<Tensor<double>> params;   // dL/d(stored param), through cbwc / center_axes
};

// Time spent in one norm node (layer_norm, rms_norm) over the runs while timing was on.
struct NormTiming {
  std::string node;
  Op op = Op::layer_norm;
  int64_t rows = 0, cols = 0;  // of the last call
  int64_t calls = 0;
  double seconds = 0.0;
};

// LibTorch's intra-op thread count (at::set_num_threads / at::get_num_threads).
void set_threads(int n);
int threads();

class Engine {
 public:
  // `g` must be finalized and outlive the engine. Deferred params (values_deferred) are
  // read from their source here, one at a time, into the engine's own tensors.
  explicit Engine(const Graph& g, EngineOptions options = {});
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  const Graph& graph() const;
  Precision precision() const;

  // Forward values of the graph outputs. Inputs as eval::random_inputs gives them (index
  // ids stored as doubles). Throws ModelError for a wrong count, shape or id.
  std::vector<Tensor<double>> forward(const std::vector<Tensor<double>>& inputs,
                                      const RunOptions& run);

  // Forward, then dL/d(every input and stored param) by ATen autograd.
  GradResult gradients(const std::vector<Tensor<double>>& inputs, const RunOptions& run);

  // For benchmarks: set the inputs once, then run forward passes that keep their outputs
  // inside the engine (no conversion), and read them when needed.
  void set_inputs(const std::vector<Tensor<double>>& inputs);
  void run(const RunOptions& run);
  Tensor<double> output(size_t k) const;  // of the last run

  // The adds of a moved bias (add(R.own, R.moved_bias), a value of params only) that
  // gradient-free runs take into the bias of the linear R.own before them, computed once.
  size_t absorbed_biases() const;

  // Per-node norm timing (adds a clock read around each norm call while on).
  void set_norm_timing(bool on);
  std::vector<NormTiming> norm_timings() const;  // norm nodes in topological order
  void reset_norm_timings();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lnv::torch_engine
