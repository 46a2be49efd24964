// RapidCheck tests are reproducible by default: unless RC_PARAMS is set, they run with the
// seed below, so `ctest`, scripts/test.sh, CI and running a test binary directly check the
// same cases. This is the one place the seed is written. Set RC_PARAMS ("seed=N",
// "max_success=N") to explore.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

namespace lnv::testing_support {
inline constexpr uint64_t kRapidCheckDefaultSeed = 20261130;
// Both run at static initialization, in this order, before RapidCheck reads its
// configuration lazily.
[[maybe_unused]] static const bool kRcParamsFromUser = std::getenv("RC_PARAMS") != nullptr;
[[maybe_unused]] static const bool kDefaultRapidCheckSeed =
    setenv("RC_PARAMS", ("seed=" + std::to_string(kRapidCheckDefaultSeed)).c_str(), 0) == 0;
}  // namespace lnv::testing_support
