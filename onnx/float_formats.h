// IEEE half (float16) and bfloat16 bit patterns to and from double, rounding to nearest,
// ties to even, as ONNX's Cast and numpy do.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace lnv::onnx_import {

inline double half_bits_to_double(uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(static_cast<double>(mant), -24);
  else if (exp == 31) v = mant ? std::numeric_limits<double>::quiet_NaN()
                               : std::numeric_limits<double>::infinity();
  else v = std::ldexp(static_cast<double>(mant | 0x400), exp - 25);
  return sign ? -v : v;
}

inline uint16_t double_to_half_bits(double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | 0x7e00;
  const double a = std::fabs(x);
  if (a >= 65520.0) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.0, -14)) {          // subnormal: units of 2^-24
    const double units = std::nearbyint(std::ldexp(a, 24));  // ties to even (default mode)
    return sign | static_cast<uint16_t>(units);
  }
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  // 11 significant bits: units of 2^(e-11).
  double m = std::nearbyint(std::ldexp(a, 11 - e));
  if (m >= 2048) { m /= 2; ++e; }
  const int biased = e - 1 + 15;
  if (biased >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>((biased << 10) | (static_cast<int>(m) - 1024));
}

inline double round_to_half(double x) { return half_bits_to_double(double_to_half_bits(x)); }

inline double bfloat16_bits_to_double(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t double_to_bfloat16_bits(double x) {
  const float f = static_cast<float>(x);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline double round_to_bfloat16(double x) {
  return bfloat16_bits_to_double(double_to_bfloat16_bits(x));
}

}  // namespace lnv::onnx_import
