// The result of `lnverify eval` as a plain struct, with JSON (`"format": "lnverify.eval"`,
// docs/spec/reports.md) and text: each output's shape, leading values and L2 norm, and
// with gradients the loss and each gradient's L2 norm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/shape.h"

namespace lnv::report {

// A named tensor as doubles, with its L2 norm computed at the evaluation's precision.
struct EvalTensor {
  std::string name;
  Shape shape;
  std::vector<double> data;
  double l2_norm = 0;
};

struct EvalReport {
  std::string model, mode, precision;  // precision: "double" or "<bits>-bit MPFR"
  uint64_t seed = 0;
  unsigned bits = 0;
  size_t inputs = 0, params = 0, nodes = 0;  // the model's counts
  std::vector<EvalTensor> outputs;
  bool has_gradients = false;  // --grad: the fields below
  double loss = 0;
  std::vector<EvalTensor> param_gradients, input_gradients;  // float inputs only
};

void to_json(nlohmann::json& j, const EvalReport& r);

// The model line, then one line per output: shape, the leading values, the L2 norm.
std::string eval_outputs_text(const EvalReport& r);
// The loss, then one line per param and float input: the L2 norm of its gradient.
std::string eval_gradients_text(const EvalReport& r);

}  // namespace lnv::report
