// One libFuzzer executable per target of targets.h: built with
// -DLNV_FUZZ_TARGET=<function name> (fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>

#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return lnv::fuzz::LNV_FUZZ_TARGET(data, size);
}
