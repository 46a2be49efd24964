// The property tests' default seed comes from tests/rc_default_seed.h alone: a test binary
// run without RC_PARAMS (by ctest, scripts/test.sh or by hand) checks with that seed.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "tests/rc_default_seed.h"

namespace lnv::testing_support {
namespace {

TEST(RapidCheckSeed, WithoutRcParamsTheDefaultSeedIsUsed) {
  if (kRcParamsFromUser) GTEST_SKIP() << "RC_PARAMS is set: " << std::getenv("RC_PARAMS");
  EXPECT_EQ(rc::detail::configuration().testParams.seed, kRapidCheckDefaultSeed);
}

}  // namespace
}  // namespace lnv::testing_support
