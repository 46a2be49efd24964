// The kernel table of `lnverify bench`: LibTorch's layer_norm against our fused kernels
// (torch/kernels/norm_kernels.h) and a plain copy, each as GB/s and as a share of the
// copy's bandwidth, so that the gain of the fold (RMSNorm vs an equally good LayerNorm)
// is separated from the gain of a better kernel (our LayerNorm vs LibTorch's).
//
// Kernels run interleaved (one sample of each in turn, the order rotating every repeat)
// so that a slow phase of a shared machine hits them all alike; every output goes to a
// buffer allocated once (fresh large allocations page-fault with glibc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "torch/bench_stats.h"

namespace lnv::torch {

struct KernelShape {
  int64_t rows = 0, cols = 0;
};

// 512x768 and 4096x768 stay in the caches, 16384x768 and 2048x4096 stream from memory.
std::vector<KernelShape> default_kernel_shapes();

struct KernelBenchOptions {
  int repeats = 21;             // samples (rounds) per kernel and shape
  double sample_seconds = 0.02; // each sample loops a kernel for about this long
  Clock clock = Clock::wall;
  // Called after each shape with (shapes done, shapes in all); a progress bar.
  std::function<void(int64_t done, int64_t total)> progress;
};

struct KernelResult {
  std::string name;
  double bytes_per_call = 0;  // bytes read + written, weights included
  Timing seconds;             // per call
  double gb_per_s = 0;        // bytes_per_call / median
  double share_of_copy = 0;   // gb_per_s / the copy's gb_per_s
};

struct KernelShapeResult {
  KernelShape shape;
  std::vector<KernelResult> kernels;  // in kernel_names() order
  double rms_over_our_ln = 0;   // our LayerNorm time / our RMSNorm time (speedup)
  double rms_over_aten_ln = 0;  // at::layer_norm time / our RMSNorm time
  // The same two speedups and our RMSNorm's share of the copy's bandwidth, taken within
  // each round of samples (the kernels of a round run back to back, so a slow phase of a
  // shared machine hits both sides of the ratio) and summarized over the rounds
  // (`samples` holds one ratio per round; median, quartiles as for times).
  Timing rms_over_our_ln_rounds, rms_over_aten_ln_rounds, rms_share_of_copy_rounds;
};

// "at::layer_norm", "our layer_norm", "our rms_norm", "our add+rms_norm", "copy".
// at::layer_norm allocates its output (and mean, rstd) on every call, as LibTorch has no
// out= variant of it; run reuse_freed_memory() first so that costs no page faults.
const std::vector<std::string>& kernel_names();

std::vector<KernelShapeResult> bench_norm_kernels(const std::vector<KernelShape>& shapes,
                                                  const KernelBenchOptions& opt);

// The table as printed by `lnverify bench`: per shape, one line per kernel (median time
// per call, interquartile range and full range of the samples relative to the median,
// best time, GB/s, % of copy), then the two speedups of our RMSNorm (ratio of the
// medians) and the per-round ratios (median and quartiles).
std::string format_kernel_table(const std::vector<KernelShapeResult>& results);

void to_json(nlohmann::json& j, const KernelShapeResult& r);

// Keep freed memory mapped (glibc: no mmap for large blocks, no trimming), so a tensor
// allocated again after being freed reuses pages instead of faulting in fresh ones; this
// gives at::layer_norm, which allocates its output every call, a fair run. Process-wide.
void reuse_freed_memory();

}  // namespace lnv::torch
