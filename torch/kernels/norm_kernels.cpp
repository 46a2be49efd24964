// Fused CPU norm kernels (see norm_kernels.h).
//
// Each row is read from memory once: a first pass over the row reduces it (sum of
// squares; for LayerNorm the mean, then the squared deviations), a last pass writes it.
// A row of a transformer activation (768..4096 floats) stays in L1 between the passes,
// so the memory traffic is the same as a copy and the extra passes cost only arithmetic.
// Inner loops use GCC vector extensions on 32-byte vectors (AVX2 with the flags that
// torch/CMakeLists.txt sets on this file) and several accumulators so the FMA latency is
// hidden; rows run in parallel with OpenMP.
#include "torch/kernels/norm_kernels.h"

#include <cmath>
#include <cstring>

namespace lnv::kernels {
namespace {

// 32-byte vectors (the attribute does not apply to a dependent type, hence the trait).
template <class T>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(32)));
};
template <class T>
using Vec = typename VecOf<T>::type;

template <class T>
constexpr int64_t kLanes = 32 / sizeof(T);

// Below this many elements a call runs on one thread: waking the team costs more.
constexpr int64_t kMinParallelElements = 1 << 15;

template <class T>
inline Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
inline void store(T* p, Vec<T> v) {
  std::memcpy(p, &v, sizeof v);
}

template <class T>
inline Vec<T> splat(T s) {
  return Vec<T>{} + s;
}

template <class V>
inline auto horizontal_sum(V v) {
  auto s = v[0];
  for (size_t i = 1; i < sizeof(V) / sizeof(s); ++i) s += v[i];
  return s;
}

template <class RowFn>
void for_each_row(int64_t rows, int64_t cols, RowFn row_fn) {
  const bool parallel = rows > 1 && rows * cols >= kMinParallelElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) row_fn(r);
}

// sum_j (x[j] - shift)^2, four independent accumulators.
template <class T>
T sum_squares(const T* x, T shift, int64_t n) {
  constexpr int64_t W = kLanes<T>;
  const Vec<T> c = splat(shift);
  Vec<T> a0{}, a1{}, a2{}, a3{};
  int64_t j = 0;
  for (; j + 4 * W <= n; j += 4 * W) {
    Vec<T> v0 = load(x + j) - c, v1 = load(x + j + W) - c;
    Vec<T> v2 = load(x + j + 2 * W) - c, v3 = load(x + j + 3 * W) - c;
    a0 += v0 * v0;
    a1 += v1 * v1;
    a2 += v2 * v2;
    a3 += v3 * v3;
  }
  for (; j + W <= n; j += W) {
    Vec<T> v = load(x + j) - c;
    a0 += v * v;
  }
  T s = horizontal_sum((a0 + a1) + (a2 + a3));
  for (; j < n; ++j) s += (x[j] - shift) * (x[j] - shift);
  return s;
}

template <class T>
T sum(const T* x, int64_t n) {
  constexpr int64_t W = kLanes<T>;
  Vec<T> a0{}, a1{}, a2{}, a3{};
  int64_t j = 0;
  for (; j + 4 * W <= n; j += 4 * W) {
    a0 += load(x + j);
    a1 += load(x + j + W);
    a2 += load(x + j + 2 * W);
    a3 += load(x + j + 3 * W);
  }
  for (; j + W <= n; j += W) a0 += load(x + j);
  T s = horizontal_sum((a0 + a1) + (a2 + a3));
  for (; j < n; ++j) s += x[j];
  return s;
}

// s = x + r written to `s`, returns sum_j s[j]^2.
inline float add_and_sum_squares(const float* x, const float* r, float* s, int64_t n) {
  constexpr int64_t W = kLanes<float>;
  Vec<float> a0{}, a1{};
  int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    Vec<float> v0 = load(x + j) + load(r + j), v1 = load(x + j + W) + load(r + j + W);
    store(s + j, v0);
    store(s + j + W, v1);
    a0 += v0 * v0;
    a1 += v1 * v1;
  }
  for (; j + W <= n; j += W) {
    Vec<float> v = load(x + j) + load(r + j);
    store(s + j, v);
    a0 += v * v;
  }
  float acc = horizontal_sum(a0 + a1);
  for (; j < n; ++j) {
    s[j] = x[j] + r[j];
    acc += s[j] * s[j];
  }
  return acc;
}

// y = (x - shift) * scale [* w] [+ b]; the variants are separate instantiations so the
// inner loop carries no branch.
template <bool kWeight, bool kBias, bool kShift, class T>
void write_row(const T* x, T shift, T scale, const T* w, const T* b, T* y, int64_t n) {
  constexpr int64_t W = kLanes<T>;
  const Vec<T> c = splat(shift), k = splat(scale);
  auto one = [&](int64_t j) {
    Vec<T> v = load(x + j);
    if constexpr (kShift) v -= c;
    v *= k;
    if constexpr (kWeight) v *= load(w + j);
    if constexpr (kBias) v += load(b + j);
    store(y + j, v);
  };
  int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    one(j);
    one(j + W);
  }
  for (; j + W <= n; j += W) one(j);
  for (; j < n; ++j) {
    T v = x[j];
    if constexpr (kShift) v -= shift;
    v *= scale;
    if constexpr (kWeight) v *= w[j];
    if constexpr (kBias) v += b[j];
    y[j] = v;
  }
}

template <bool kShift, class T>
void write_row_affine(const T* x, T shift, T scale, const T* w, const T* b, T* y,
                      int64_t n) {
  if (w && b) return write_row<true, true, kShift>(x, shift, scale, w, b, y, n);
  if (w) return write_row<true, false, kShift>(x, shift, scale, w, b, y, n);
  if (b) return write_row<false, true, kShift>(x, shift, scale, w, b, y, n);
  write_row<false, false, kShift>(x, shift, scale, w, b, y, n);
}

template <class T>
T inverse_rms(T sum_sq, int64_t n, T eps) {
  return T(1) / std::sqrt(sum_sq / T(n) + eps);
}

template <class T>
void rms_norm_rows(const T* x, const T* w, const T* b, T* out, int64_t rows, int64_t cols,
                   T eps) {
  for_each_row(rows, cols, [=](int64_t r) {
    const T* xr = x + r * cols;
    const T scale = inverse_rms(sum_squares(xr, T(0), cols), cols, eps);
    write_row_affine<false>(xr, T(0), scale, w, b, out + r * cols, cols);
  });
}

// Two-pass moments over the L1-resident row: the mean, then the squared deviations from
// it (no cancellation, unlike E[x^2] - E[x]^2).
template <class T>
void layer_norm_rows(const T* x, const T* w, const T* b, T* out, int64_t rows,
                     int64_t cols, T eps) {
  for_each_row(rows, cols, [=](int64_t r) {
    const T* xr = x + r * cols;
    const T mean = sum(xr, cols) / T(cols);
    const T scale = inverse_rms(sum_squares(xr, mean, cols), cols, eps);
    write_row_affine<true>(xr, mean, scale, w, b, out + r * cols, cols);
  });
}

}  // namespace

void rms_norm(const float* x, const float* weight, const float* bias, float* out,
              int64_t rows, int64_t cols, float eps) {
  rms_norm_rows(x, weight, bias, out, rows, cols, eps);
}

void rms_norm(const double* x, const double* weight, const double* bias, double* out,
              int64_t rows, int64_t cols, double eps) {
  rms_norm_rows(x, weight, bias, out, rows, cols, eps);
}

void layer_norm(const float* x, const float* weight, const float* bias, float* out,
                int64_t rows, int64_t cols, float eps) {
  layer_norm_rows(x, weight, bias, out, rows, cols, eps);
}

void layer_norm(const double* x, const double* weight, const double* bias, double* out,
                int64_t rows, int64_t cols, double eps) {
  layer_norm_rows(x, weight, bias, out, rows, cols, eps);
}

void add_rms_norm(const float* x, const float* residual, const float* weight,
                  const float* bias, float* sum_out, float* out, int64_t rows,
                  int64_t cols, float eps) {
  for_each_row(rows, cols, [=](int64_t r) {
    float* sr = sum_out + r * cols;
    const float scale = inverse_rms(
        add_and_sum_squares(x + r * cols, residual + r * cols, sr, cols), cols, eps);
    write_row_affine<false>(sr, 0.0f, scale, weight, bias, out + r * cols, cols);
  });
}

void copy_rows(const float* x, float* out, int64_t rows, int64_t cols) {
  constexpr int64_t W = kLanes<float>;
  for_each_row(rows, cols, [=](int64_t r) {
    const float* xr = x + r * cols;
    float* yr = out + r * cols;
    int64_t j = 0;
    for (; j + 2 * W <= cols; j += 2 * W) {
      store(yr + j, load(xr + j));
      store(yr + j + W, load(xr + j + W));
    }
    for (; j < cols; ++j) yr[j] = xr[j];
  });
}

}  // namespace lnv::kernels
