// The report of `lnverify bench` (`"format": "lnverify.bench"`, docs/spec/reports.md): the
// BLAS and threads the timings ran with, then the kernel table and each model's timings
// (torch/kernel_bench.h, torch/model_bench.h), which `kernels` and `models` hold as JSON.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace lnv::report {

struct BenchSetup {
  std::string blas_kind, blas_library, blas_loaded_as, blas_config;
  int blas_threads = -1;  // -1: not reported
  int threads = 0;        // ATen intra-op and OpenMP
  int default_threads = 0;  // LibTorch's default here
  std::string clock;        // "wall" or "cpu"
};

// The report without kernels and with no model yet: {"format", "version", "blas",
// "threads", "clock", "models": []}.
nlohmann::json bench_json(const BenchSetup& s);

// "threads: N (ATen intra-op and OpenMP; LibTorch's default here: D), clock: C"
std::string bench_threads_line(const BenchSetup& s);

}  // namespace lnv::report
