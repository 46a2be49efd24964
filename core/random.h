// The SplitMix64 streams of docs/spec/format.md ("Random numbers"): init params, dropout
// masks, random inputs and loss cotangents all come from here, so any implementation can
// reproduce a model and a run.
#pragma once

#include <cstdint>
#include <string_view>

namespace lnv {

uint64_t fnv1a64(std::string_view bytes);

class SplitMix64 {
 public:
  // The stream of `name` under `seed`: state = seed XOR fnv1a64(name).
  SplitMix64(uint64_t seed, std::string_view name) : state_(seed ^ fnv1a64(name)) {}
  uint64_t next();
  double uniform();  // [0, 1): (z >> 11) * 2^-53
  double normal();   // Box–Muller pairs: cos first, then sin

 private:
  uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace lnv
