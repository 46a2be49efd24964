#include "checkers/agreement.h"

#include <condition_variable>
#include <mutex>

#include "core/eval/evaluator.h"

namespace lnv::check {

using report::Outcome;

namespace {

// A readers-writer gate over the process-wide precision, the writer first: while a thread
// waits to change the precision, no thread starts evaluating at the old one.
class PrecisionGate {
 public:
  void lock_shared() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !changing_ && waiting_ == 0; });
    ++evaluating_;
  }
  void unlock_shared() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --evaluating_;
    }
    changed_.notify_all();
  }
  void lock() {
    std::unique_lock<std::mutex> lock(mutex_);
    ++waiting_;
    changed_.wait(lock, [&] { return !changing_ && evaluating_ == 0; });
    --waiting_;
    changing_ = true;
  }
  void unlock() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      changing_ = false;
    }
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int evaluating_ = 0;  // threads holding a SharedPrecision
  int waiting_ = 0;     // threads waiting to change the precision
  bool changing_ = false;
};

PrecisionGate& gate() {
  static PrecisionGate g;
  return g;
}

thread_local int t_shared = 0;    // SharedPrecision scopes open on this thread
thread_local int t_changing = 0;  // Precision scopes open on this thread inside one

}  // namespace

Precision::Precision(unsigned bits) {
  if (t_shared > 0 && t_changing++ == 0) {
    gate().unlock_shared();
    gate().lock();
  }
  saved_ = eval::mpfr_bits();
  eval::set_mpfr_bits(bits);
}

Precision::~Precision() {
  eval::set_mpfr_bits(saved_);
  if (t_shared > 0 && --t_changing == 0) {
    gate().unlock();
    gate().lock_shared();
  }
}

SharedPrecision::SharedPrecision() {
  if (t_shared++ == 0) gate().lock_shared();
}

SharedPrecision::~SharedPrecision() {
  if (--t_shared == 0) gate().unlock_shared();
}

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
