// Whether two exact evaluations agree, judged against rounding_bound() (equivalence.h)
// and never a hand-picked tolerance: the rule `check` applies to a rewrite and `equiv` to
// two models.
//
//   Agreement a = judge_agreement(opt.bits, "the original or the rewrite",
//                                 [&] { return measure(); });
//
// `measure` compares the two evaluations at the current MPFR precision. Within the bound
// they agree. Above it the difference is measured again at twice the precision: rounding
// error shrinks by about 2^-bits there, a genuine difference does not. So they differ only
// by a difference that stays (at least half of it) with more precision, and the outcome is
// inconclusive when neither explanation fits, when a value is not finite, or when the bound
// is not far below the values (too few bits to tell a genuine difference from rounding).
#pragma once

#include <functional>
#include <string>

#include "reports/check_report.h"

namespace lnv::check {

// Sets the MPFR precision (eval::set_mpfr_bits) for a scope.
//
// The precision is one process-wide number (Boost 1.74 keeps MPFR's default precision in a
// static), read by every Mpfr the evaluators create. Threads that evaluate side by side at
// the current precision each hold a SharedPrecision; a Precision made on such a thread
// first waits until no other thread holds one (they finish their work at the old
// precision, and none starts until it is done), so the change is seen by its own thread
// alone, and the others resume at the old precision when it ends. On a thread without a
// SharedPrecision, a Precision just sets the precision, as before there were threads.
class Precision {
 public:
  explicit Precision(unsigned bits);
  ~Precision();
  Precision(const Precision&) = delete;
  Precision& operator=(const Precision&) = delete;

 private:
  unsigned saved_ = 0;
};

// Evaluations at the current precision on this thread, side by side with other threads
// holding one; see Precision.
class SharedPrecision {
 public:
  SharedPrecision();
  ~SharedPrecision();
  SharedPrecision(const SharedPrecision&) = delete;
  SharedPrecision& operator=(const SharedPrecision&) = delete;
};

// A difference measured between two evaluations at one precision.
struct Measured {
  bool finite = true;       // every value of both evaluations is finite
  double max_abs = 0.0;     // the largest absolute difference
  double bound = 0.0;       // the rounding bound it is judged against
  double scale = 0.0;       // the largest magnitude the bound was computed for
  double worst_ratio = 0.0; // the largest difference / bound (per trial, per quantity)
};

struct Agreement {
  report::Outcome outcome = report::Outcome::holds;  // holds: they agree; fails: they differ
  unsigned bits = 0;       // the precision the outcome was reached at
  bool remeasured = false; // the outcome rests on the measurement at twice the precision
  Measured decisive;       // the measurement the outcome rests on
  std::string detail;      // why, for an inconclusive outcome or one reached remeasured
};

// The largest bound, relative to the values' scale, under which a difference counts as
// rounding: a genuine difference can be as small as this without being missed.
inline constexpr double kCoarsestBound = 0x1p-16;

// Judges at the current precision (set from `requested_bits`) and, when needed, at
// 2 * requested_bits. `pair` names the two evaluations in a detail ("the original or the
// rewrite").
Agreement judge_agreement(unsigned requested_bits, const std::string& pair,
                          const std::function<Measured()>& measure);

}  // namespace lnv::check
