// The working precision of the Mpfr evaluators.
#include <atomic>

#include "core/eval/evaluator.h"

namespace lnv::eval {
namespace {

std::atomic<bool> g_bits_chosen{false};

}  // namespace

void set_mpfr_bits(unsigned bits) {
  // Boost 1.74 sets MPFR's precision in decimal digits d, as bits = digits10_2_2(d); take
  // the least d that gives at least `bits`.
  unsigned digits = 1;
  while (boost::multiprecision::detail::digits10_2_2(digits) < bits) ++digits;
  Mpfr::default_precision(digits);
  g_bits_chosen = true;
}

unsigned mpfr_bits() {
  detail::ensure_mpfr_default_bits();  // report the precision the evaluators will use
  return static_cast<unsigned>(
      boost::multiprecision::detail::digits10_2_2(Mpfr::default_precision()));
}

namespace detail {

void ensure_mpfr_default_bits() {
  if (!g_bits_chosen) set_mpfr_bits(256);
}

}  // namespace detail
}  // namespace lnv::eval
