// RapidCheck tests are reproducible by default: unless RC_PARAMS is set, they run with the
// seed CI uses (scripts/test.sh sets the same one), so `ctest` or running a test binary
// directly checks the same cases. Set RC_PARAMS ("seed=N", "max_success=N") to explore.
#pragma once

#include <cstdlib>

namespace lnv::testing_support {
// Runs at static initialization, before RapidCheck reads its configuration lazily.
[[maybe_unused]] static const bool kDefaultRapidCheckSeed = setenv("RC_PARAMS", "seed=20261130", 0) == 0;
}  // namespace lnv::testing_support
