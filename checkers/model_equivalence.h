// Whether two models compute the same function, by exact evaluation: `lnverify equiv`.
//
//   require_same_interface(a, "A.json", b, "B.onnx", opt.mode);   // ModelError if not
//   report::EquivReport r = equiv_models(a, b, opt);
//
// Both models run on opt.trials shared random inputs (trial k: run seed opt.seed + k; the
// inputs are A's random inputs of docs/spec/format.md, drawn by input name, so B gets the
// same values whatever its input order). In training mode the dropout masks are shared by
// node name: a mask is the stream of the dropout node's name (format.md), so same-named
// dropouts of A and B draw the same mask, and require_same_interface demands that their
// dropouts pair up that way (docs/spec/decisions.md). Each output (matched by name) and,
// with opt.grad, the gradient of the loss of format.md (cotangents drawn by A's output
// names, each B output getting those of the A output it pairs with)
// with respect to each float input is compared element by element. The rounding bound is
// rounding_bound() (equivalence.h) of the larger of the two graphs for the largest
// magnitude either evaluation produced, and each quantity is judged by judge_agreement()
// (agreement.h): equal, different (a difference that stays at twice the precision), or
// inconclusive. A stable difference within the weight-storage allowance is equal up to
// weight storage (docs/spec/decisions.md), unless opt.strict or the two models store the
// same weights (same names, equal values). The allowance is measured: each model evaluated
// again, 2 times per trial, with every param the two do not store identically perturbed
// by w·(1 + u·2^-W), u uniform in [-1, 1) (stream "<param>#storage#<r>"), W the precision
// those params are stored in (Param::stored_bits, the least among them) or opt.weight_bits;
// the allowance is 16 times the largest change either model shows, plus the rounding bound.
#pragma once

#include <cstdint>
#include <string>

#include "core/graph.h"
#include "core/mode.h"
#include "reports/equiv_report.h"

namespace lnv::check {

struct EquivOptions {
  Mode mode = Mode::inference;
  unsigned bits = 256;  // MPFR precision of the evaluations
  int trials = 3;       // shared random inputs (and dropout masks)
  uint64_t seed = 0;    // run seed of trial 0
  bool grad = false;    // also compare the gradients of the loss w.r.t. the float inputs
  // with grad: also w.r.t. every param both models hold under the same name and shape (the
  // stored values, before center_axes / cbwc): a training fold's parameters
  bool grad_params = false;
  // A difference that stays at twice the precision but is within the allowance measured
  // with the differing weights perturbed at weight_bits (a fold's centered weights saved in
  // double, or in float32) is "equal up to weight storage"; strict: different. 0: the
  // precision the weights that differ are stored in.
  unsigned weight_bits = 0;
  bool strict = false;
  std::string a_name, b_name;  // for the report
};

// Throws ModelError (naming the input, output or dropout node and both models) unless a
// and b have the same inputs by name with the same shape, dtype and (index inputs) range,
// the same outputs by name with the same shapes, and, in training mode, dropout nodes
// that pair up by name with the same shapes.
void require_same_interface(const Graph& a, const std::string& a_name, const Graph& b,
                            const std::string& b_name, Mode mode);

// Compares a and b (finalized, with the same interface). An op the evaluators cannot
// compute throws NotEvaluableError.
report::EquivReport equiv_models(const Graph& a, const Graph& b, const EquivOptions& opt);

}  // namespace lnv::check
