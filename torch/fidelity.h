// Fidelity of a fold on real-size models, measured with the LibTorch engine: does the
// folded model (RMSNorm + centered weights) compute what the original computes?
//
//  - float32: the max abs / rel difference of the outputs of original and fold, against
//    the float32 noise floor of the original itself (its float32 vs float64 outputs), and
//    the top-1 agreement of the predictions (argmax over the last axis of the first
//    output, every row) over `trials` random inputs;
//  - float64: the relative difference of the outputs and, in training mode, of the
//    gradients of the loss with respect to every input and every original param (the
//    training rewrite keeps the params, so they line up by name), relative to the largest
//    gradient entry.
//
// Trial k uses run seed `seed + k` for the random inputs and the dropout masks, the same
// for the original and the fold.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "core/mode.h"

namespace lnv::torch_engine {

struct FidelityOptions {
  Mode mode = Mode::inference;  // the fold's mode, and the mode the models run in
  int trials = 16;              // float32 trials (top-1 agreement, abs/rel differences)
  int trials_f64 = 2;           // float64 trials (outputs, and gradients in training mode)
  uint64_t seed = 0;
  // Called after each trial with (trials done, trials in all); a progress bar.
  std::function<void(int64_t done, int64_t total)> progress;
};

struct FidelityReport {
  std::string model;
  Mode mode = Mode::inference;
  int64_t layer_norms = 0, folded = 0;
  int trials = 0, trials_f64 = 0;
  // float32, original vs fold, over all trials and outputs
  double f32_max_abs = 0, f32_max_rel = 0;  // rel: max |a - b| / max |a| per output
  double f32_noise_abs = 0, f32_noise_rel = 0;  // original float32 vs original float64
  int64_t top1_agree = 0, top1_total = 0;
  // float64, original vs fold
  double f64_output_rel = 0;
  double f64_grad_rel = -1;  // -1: not measured (inference mode)
  double seconds = 0;
};

// Precondition: `original` and `folded` are finalized, folded = apply_fold(original, plan)
// for a plan of `options.mode` (same inputs and outputs).
FidelityReport measure_fidelity(const Graph& original, const Graph& folded,
                                const FidelityOptions& options);

void to_json(nlohmann::json& j, const FidelityReport& r);
std::string to_text(const FidelityReport& r);

}  // namespace lnv::torch_engine
