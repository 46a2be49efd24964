// The LibTorch fidelity run, shared by `lnverify fidelity` and `lnverify check --engine
// torch` (defined in cmd_fidelity.cpp; only in builds with LibTorch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/mode.h"

namespace lnv::cli {

struct FidelityArgs {
  std::string model, json;
  std::vector<std::string> dims;  // --dim NAME=VALUE of an ONNX model
  Mode mode = Mode::inference;
  int trials = 16;    // float32 random inputs
  int trials64 = 2;   // float64 random inputs
  uint64_t seed = 0;
  double tol = 1e-9;  // float64 relative difference allowed
  int threads = 0;    // LibTorch intra-op threads (0: its own default)
};

// Folds the model in args.mode and measures the fold on the LibTorch engine; prints the
// report and returns the exit code (0 within tol, 1 beyond).
int run_fidelity(const FidelityArgs& args);

}  // namespace lnv::cli
