// Standalone kernel table (the same as the first part of `lnverify bench`):
//   bench_norm_kernels [REPEATS] [THREADS] [wall|cpu]
// REPEATS: rounds of interleaved samples (default 21); THREADS: ATen/OpenMP threads
// (default: LibTorch's); the clock: wall (default) or process CPU time.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include <ATen/Parallel.h>

#include "torch/blas_info.h"
#include "torch/kernel_bench.h"

int main(int argc, char** argv) {
  using namespace lnv::torch;
  KernelBenchOptions opt;
  if (argc > 1) opt.repeats = std::atoi(argv[1]);
  if (argc > 2) at::set_num_threads(std::atoi(argv[2]));
  if (argc > 3 && std::string(argv[3]) == "cpu") opt.clock = Clock::cpu;
  reuse_freed_memory();
  std::cout << opt.repeats << " rounds, " << at::get_num_threads() << " thread(s), "
            << clock_name(opt.clock) << " clock, ~" << opt.sample_seconds * 1e3
            << " ms per sample\n";
  const BlasInfo blas = detect_blas();
  std::cout << describe(blas) << "\n" << blas_warning(blas) << "\n";
  std::cout << format_kernel_table(bench_norm_kernels(default_kernel_shapes(), opt));
}
