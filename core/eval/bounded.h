// A double that carries a rigorous bound on its distance from the exact value: the scalar
// of the checks' double pre-pass (docs/verification.md, "Settling a difference in double").
//
//   Bounded x = ...;            // x.v: the double computed, x.e: |x.v - exact| <= x.e
//   reset_uncertain_branches();
//   ... evaluate<Bounded>(g, inputs, ro) ...
//   if (!uncertain_branches()) { every e bounds its value's distance from exact }
//
// Every arithmetic operation computes v in double (round to nearest) and an e that bounds
// the propagated input bounds plus the operation's own rounding, itself rounded upward by a
// margin (up()). Comparisons compare v; when the bounds leave the answer open (the exact
// values could compare the other way) the thread's "uncertain branch" flag is set, since
// the exact evaluation may then take another branch and the bounds no longer describe it.
// So the bounds hold for a whole evaluation exactly when the flag stays clear.
//
// Transcendental functions come from the C library, which is not correctly rounded; their
// own error is taken as at most kLibmUlps units in the last place (glibc's documented
// worst cases for exp, tanh and erf on x86-64 are 1-2 ulps).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace lnv::eval {

namespace bounded_detail {

inline constexpr double kU = 0x1p-53;          // unit roundoff of round to nearest
inline constexpr double kTiny = 0x1p-1060;     // covers an underflow's absolute error
inline constexpr double kLibmUlps = 4.0;       // C library error, in ulps (see above)
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// e's own computation rounds a few times (each a relative error <= kU on a nonnegative
// value): inflate by 2^-48 (256 kU, more than a dozen roundings need) and add kTiny.
inline double up(double e) { return e * (1 + 0x1p-48) + kTiny; }

// The rounding error of one correctly rounded operation whose result is v.
inline double rounding(double v) { return 2 * kU * std::fabs(v); }

// The error of a C library function whose result is v.
inline double libm(double v) { return 2 * kLibmUlps * kU * std::fabs(v) + kTiny; }

inline thread_local bool g_uncertain = false;

}  // namespace bounded_detail

inline void reset_uncertain_branches() { bounded_detail::g_uncertain = false; }
inline bool uncertain_branches() { return bounded_detail::g_uncertain; }

struct Bounded {
  double v = 0.0;
  double e = 0.0;

  Bounded() = default;
  Bounded(double x) : v(x) {}  // an exact constant (NOLINT: implicit, like a double)
  Bounded(int x) : v(x) {}
  Bounded(int64_t x) : v(static_cast<double>(x)) {
    if (static_cast<int64_t>(v) != x) e = bounded_detail::rounding(v);
  }
  Bounded(double value, double bound) : v(value), e(bound) {}

  explicit operator double() const { return v; }
  explicit operator int64_t() const {
    if (e != 0 && std::trunc(v - e) != std::trunc(v + e)) bounded_detail::g_uncertain = true;
    return static_cast<int64_t>(v);
  }

  Bounded operator-() const { return {-v, e}; }
  Bounded& operator+=(const Bounded& b) { return *this = *this + b; }
  Bounded& operator-=(const Bounded& b) { return *this = *this - b; }
  Bounded& operator*=(const Bounded& b) { return *this = *this * b; }
  Bounded& operator/=(const Bounded& b) { return *this = *this / b; }

  friend Bounded operator+(const Bounded& a, const Bounded& b) {
    using namespace bounded_detail;
    const double v = a.v + b.v;
    return {v, up(a.e + b.e + rounding(v))};
  }
  friend Bounded operator-(const Bounded& a, const Bounded& b) { return a + (-b); }
  // |ab - xy| <= |a| |b - y| + |b| |a - x| + |a - x| |b - y|
  friend Bounded operator*(const Bounded& a, const Bounded& b) {
    using namespace bounded_detail;
    const double v = a.v * b.v;
    if (a.e == 0 && b.e == 0) return {v, up(rounding(v))};
    return {v, up(std::fabs(a.v) * b.e + std::fabs(b.v) * a.e + a.e * b.e + rounding(v))};
  }
  // |a/b - x/y| = |a (y - b) + b (a - x)| / |b y| <= (|a| eb + |b| ea) / (|b| (|b| - eb))
  friend Bounded operator/(const Bounded& a, const Bounded& b) {
    using namespace bounded_detail;
    const double v = a.v / b.v;
    if (!(std::fabs(b.v) > b.e)) return {v, kInf};
    if (a.e == 0 && b.e == 0) return {v, up(rounding(v))};
    const double lower = (std::fabs(b.v) - b.e) * (1 - 0x1p-50);  // <= |y|
    const double prop = (std::fabs(a.v) * b.e + std::fabs(b.v) * a.e) / (std::fabs(b.v) * lower);
    return {v, up(prop + rounding(v))};
  }

  // The exact values compare like v when the bounds separate them; otherwise the branch
  // taken on v may not be the exact evaluation's.
  static bool decided(const Bounded& a, const Bounded& b) {
    const double gap = std::fabs(a.v - b.v) * (1 - 0x1p-50);
    const double spread = a.e + b.e;
    if (spread == 0) return true;
    return gap > bounded_detail::up(spread);
  }
  static bool note(bool result, const Bounded& a, const Bounded& b) {
    if (!decided(a, b)) bounded_detail::g_uncertain = true;
    return result;
  }
  friend bool operator<(const Bounded& a, const Bounded& b) { return note(a.v < b.v, a, b); }
  friend bool operator>(const Bounded& a, const Bounded& b) { return note(a.v > b.v, a, b); }
  friend bool operator<=(const Bounded& a, const Bounded& b) { return note(a.v <= b.v, a, b); }
  friend bool operator>=(const Bounded& a, const Bounded& b) { return note(a.v >= b.v, a, b); }
  friend bool operator==(const Bounded& a, const Bounded& b) { return note(a.v == b.v, a, b); }
  friend bool operator!=(const Bounded& a, const Bounded& b) { return note(a.v != b.v, a, b); }
};

// sqrt(x) for |x - a| <= e: |sqrt(a) - sqrt(x)| <= min(sqrt(e), e / sqrt(a)).
inline Bounded sqrt(const Bounded& a) {
  using namespace bounded_detail;
  const double v = std::sqrt(a.v);
  if (a.e == 0) return {v, up(rounding(v))};
  double prop = std::sqrt(a.e) * (1 + 0x1p-50);
  if (a.v > 0) prop = std::min(prop, a.e / v);
  return {v, up(prop + rounding(v))};
}

// exp(x) <= exp(a) exp(e): |exp(a) - exp(x)| <= exp(a) expm1(e).
inline Bounded exp(const Bounded& a) {
  using namespace bounded_detail;
  const double v = std::exp(a.v);
  const double exact_v = std::fabs(v) * (1 + 2 * kLibmUlps * kU);  // >= exp(a)
  return {v, up(exact_v * std::expm1(a.e) * (1 + 0x1p-50) + libm(v))};
}

// 1-Lipschitz.
inline Bounded tanh(const Bounded& a) {
  using namespace bounded_detail;
  const double v = std::tanh(a.v);
  return {v, up(std::min(a.e, 2.0) + libm(v))};
}

// Lipschitz 2 / sqrt(pi) < 1.1284.
inline Bounded erf(const Bounded& a) {
  using namespace bounded_detail;
  const double v = std::erf(a.v);
  return {v, up(std::min(1.1284 * a.e, 2.0) + libm(v))};
}

// |log(a) - log(x)| <= e / (a - e) for x, a >= a - e > 0; unbounded when a - e <= 0.
inline Bounded log(const Bounded& a) {
  using namespace bounded_detail;
  const double v = std::log(a.v);
  const double low = a.v - a.e * (1 + 0x1p-50);
  const double prop = a.e == 0 ? 0.0 : (low > 0 ? a.e / low * (1 + 0x1p-50) : kInf);
  return {v, up(prop + libm(v))};
}

// sin, cos and atan are 1-Lipschitz, and sin and cos lie in [-1, 1].
inline Bounded sin(const Bounded& a) {
  using namespace bounded_detail;
  const double v = std::sin(a.v);
  return {v, up(std::min(a.e, 2.0) + libm(v))};
}

inline Bounded cos(const Bounded& a) {
  using namespace bounded_detail;
  const double v = std::cos(a.v);
  return {v, up(std::min(a.e, 2.0) + libm(v))};
}

inline Bounded atan(const Bounded& a) {
  using namespace bounded_detail;
  const double v = std::atan(a.v);
  return {v, up(std::min(a.e, 4.0) + libm(v))};
}

// Only at an exact argument (the backward pass takes acos(-1) for pi).
inline Bounded acos(const Bounded& a) {
  using namespace bounded_detail;
  const double v = std::acos(a.v);
  return {v, a.e == 0 ? up(libm(v)) : kInf};
}

inline Bounded abs(const Bounded& a) { return {std::fabs(a.v), a.e}; }

inline Bounded floor(const Bounded& a) {
  if (a.e != 0 && std::floor(a.v - a.e) != std::floor(a.v + a.e))
    bounded_detail::g_uncertain = true;
  return {std::floor(a.v), 0.0};
}

inline bool isfinite(const Bounded& a) { return std::isfinite(a.v) && std::isfinite(a.e); }

}  // namespace lnv::eval
