// The evaluators' MPFR precision: 256 bits (rounded up to whole decimal digits: 257) until
// set, reported truthfully, and stable when saved and restored. Its own binary, so that no
// other test has set the precision first.
#include <gtest/gtest.h>

#include "core/eval/evaluator.h"

namespace lnv {
namespace {

using eval::Mpfr;

TEST(EvalPrecision, DefaultsTo256BitsAndRoundTrips) {
  EXPECT_EQ(eval::mpfr_bits(), 257u);  // before any set_mpfr_bits
  EXPECT_EQ(Mpfr(1).precision(), Mpfr::default_precision());
  EXPECT_EQ(mpfr_get_prec(Mpfr(1).backend().data()), 257);

  for (unsigned bits : {53u, 100u, 256u, 1000u}) {
    eval::set_mpfr_bits(bits);
    const unsigned got = eval::mpfr_bits();
    EXPECT_GE(got, bits);
    EXPECT_LT(got, bits + 4);  // one decimal digit is about 3.3 bits
    EXPECT_EQ(mpfr_get_prec(Mpfr(3).backend().data()), static_cast<long>(got));
    eval::set_mpfr_bits(got);  // what a caller does to restore a saved precision
    EXPECT_EQ(eval::mpfr_bits(), got);
  }
}

}  // namespace
}  // namespace lnv
