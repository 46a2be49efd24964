#include "reports/bench_report.h"

#include <nlohmann/json.hpp>

namespace lnv::report {

nlohmann::json bench_json(const BenchSetup& s) {
  return {{"format", "lnverify.bench"},
          {"version", 1},
          {"blas",
           {{"kind", s.blas_kind},
            {"library", s.blas_library},
            {"loaded_as", s.blas_loaded_as},
            {"config", s.blas_config},
            {"blas_threads", s.blas_threads}}},
          {"threads", s.threads},
          {"clock", s.clock},
          {"models", nlohmann::json::array()}};
}

std::string bench_threads_line(const BenchSetup& s) {
  return "threads: " + std::to_string(s.threads) +
         " (ATen intra-op and OpenMP; LibTorch's default here: " +
         std::to_string(s.default_threads) + "), clock: " + s.clock;
}

}  // namespace lnv::report
