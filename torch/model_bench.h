// The model part of `lnverify bench`: a model and its inference fold
// (apply_fold(g, detect_foldable(g, Mode::inference))) run by the LibTorch engine in
// float32, forward only, interleaved and repeated, with the time inside every norm call
// attributed to its node.
//
// The end-to-end share of the norms is small on a CPU (a GPT-2 forward is dominated by
// its matrix products), below the run-to-run noise of a whole forward, which is why the
// per-call norm times are reported next to the end-to-end medians.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "torch/bench_stats.h"
#include "torch/engine.h"

namespace lnv::torch {

struct ModelBenchOptions {
  int repeats = 7;  // timed forwards per variant (after one warm-up each)
  Clock clock = Clock::wall;
  uint64_t seed = 1;  // random inputs
  // Called after each timed pair of forwards with (pairs done, repeats); a progress bar.
  std::function<void(int64_t done, int64_t total)> progress;
};

struct VariantResult {
  Timing seconds;             // per forward
  double tokens_per_s = 0;    // tokens_per_forward / median
  Timing norm_seconds;        // per forward, summed over the norm calls of that forward
  // Per norm node, summed over the timed forwards (calls = repeats).
  std::vector<torch_engine::NormTiming> norms;
  // Per norm node (parallel to `norms`): seconds per call, one sample per forward. Its
  // median is what the table shows: on a shared machine one preempted call can hold
  // up a parallel region for a whole scheduler tick and would dominate a mean.
  std::vector<Timing> norm_call_seconds;
  // Sum over norm nodes of (median seconds per call x calls per forward): the norm time
  // of a typical forward, robust to the odd preempted call that inflates norm_seconds.
  double norm_seconds_typical = 0;
};

struct ModelBenchResult {
  std::string model;
  int64_t tokens_per_forward = 0;
  size_t layer_norms = 0;  // in the original
  size_t folded = 0;       // of them, swapped for rms_norm by the inference fold
  // Moved biases (docs/spec/semantics.md, "Moving the bias") the engine took into the bias
  // of the linear before them, so the folded model runs no separate add for them.
  size_t biases_absorbed = 0;
  VariantResult original, folded_model;
};

// Precondition: g is finalized. Throws ModelError for a graph the engine cannot run.
ModelBenchResult bench_model(const Graph& g, const ModelBenchOptions& opt);

// Tokens of one forward: the elements of the first index input (token ids), else the rows
// of the first norm, else the batch (first dimension of the first input).
int64_t tokens_per_forward(const Graph& g);

std::string format_model_bench(const ModelBenchResult& r);

void to_json(nlohmann::json& j, const ModelBenchResult& r);

}  // namespace lnv::torch
