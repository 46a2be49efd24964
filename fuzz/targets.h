// The fuzz targets, as plain functions: each takes one input's bytes, returns 0, and lets
// only findings escape (fuzz_support.h). fuzz_main.cpp wraps one as a libFuzzer target;
// tests/test_fuzz_regressions.cpp replays the kept inputs through the same functions in
// the normal build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lnv::fuzz {

// model.json text: strict JSON parse, model reader, validation and shape inference, and
// the written-back model read again.
int model_json(const uint8_t* data, size_t size);
// A safetensors file: header, spans, values, raw bytes, non-finite scan.
int safetensors(const uint8_t* data, size_t size);
// model.json text through audit, fold and double evaluation (small models only).
int pipeline(const uint8_t* data, size_t size);
#if LNV_HAVE_ONNX
// An .onnx file through the ONNX reader and constant folding (onnx/).
int onnx(const uint8_t* data, size_t size);
#endif

struct Target {
  const char* name;  // as in fuzz_<name> and tests/regressions/fuzz/<name>/
  int (*run)(const uint8_t* data, size_t size);
};
inline const std::vector<Target>& all_targets() {
  static const std::vector<Target> t = {
      {"model_json", model_json}, {"safetensors", safetensors}, {"pipeline", pipeline},
#if LNV_HAVE_ONNX
      {"onnx", onnx},
#endif
  };
  return t;
}

}  // namespace lnv::fuzz
