#include "checkers/agreement.h"

#include "core/eval/evaluator.h"

namespace lnv::check {

using report::Outcome;

Precision::Precision(unsigned bits) : saved_(eval::mpfr_bits()) { eval::set_mpfr_bits(bits); }
Precision::~Precision() { eval::set_mpfr_bits(saved_); }

Agreement judge_agreement(unsigned requested_bits, const std::string& pair,
                          const std::function<Measured()>& measure) {
  Agreement a;
  a.bits = eval::mpfr_bits();
  const Measured first = measure();
  a.decisive = first;
  if (!first.finite) {
    a.outcome = Outcome::inconclusive;
    a.detail = "a value of " + pair + " is not finite";
    return a;
  }
  // "Within the bound" proves agreement only when the bound is far below the values: at
  // too few bits a genuine difference fits under it.
  if (first.bound > kCoarsestBound * first.scale) {
    a.outcome = Outcome::inconclusive;
    a.detail = "at " + std::to_string(a.bits) + " bits the rounding bound (" +
               std::to_string(first.bound) + ") is not far below the values (" +
               std::to_string(first.scale) + "): it cannot tell a genuine difference from "
               "rounding; use more --bits";
    return a;
  }
  if (first.worst_ratio <= 1.0) return a;
  // Above the bound: rounding (vanishes with more precision) or genuine (stays)?
  Precision more(2 * requested_bits);
  const Measured second = measure();
  if (second.finite && second.worst_ratio <= 1.0) {
    a.remeasured = true;
    a.decisive = second;
    a.detail = "above the bound at " + std::to_string(a.bits) + " bits, within it at " +
               std::to_string(eval::mpfr_bits());
    a.bits = eval::mpfr_bits();
    return a;
  }
  if (second.finite && second.max_abs >= 0.5 * first.max_abs) {
    a.outcome = Outcome::fails;
    return a;
  }
  a.outcome = Outcome::inconclusive;
  a.detail = "difference " + std::to_string(first.max_abs) +
             " exceeds the bound but shrinks with precision without vanishing";
  return a;
}

}  // namespace lnv::check
