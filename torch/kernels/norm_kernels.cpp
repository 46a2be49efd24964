// Fused CPU norm kernels (see norm_kernels.h).
//
// Each row is read from memory once: a first pass over the row reduces it (sum of
// squares; for LayerNorm the mean, then the squared deviations), a last pass writes it.
// The rows being processed stay in L1/L2 between the passes, so the memory traffic is
// that of a copy and the extra passes cost only loads from cache and arithmetic.
//
// Rows go in blocks of kBlock: the reductions of a block's rows interleave (independent
// FMA chains hide the FMA latency) and its write pass loads each weight and bias vector
// once for all the block's rows, which brings the loads per output vector from 3 down to
// 1.5 - the load ports, not the arithmetic, are what separates a norm from a copy when
// the data is in cache. Inner loops use GCC vector extensions on 32-byte vectors (AVX2
// with the flags that torch/CMakeLists.txt sets on this file); blocks of rows run in
// parallel with OpenMP.
#include "torch/kernels/norm_kernels.h"

#include <algorithm>
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

constexpr int kBlock = 4;

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

// Calls block_fn(first_row, count) for consecutive blocks of up to kBlock rows, blocks in
// parallel.
template <class BlockFn>
void for_each_block(int64_t rows, int64_t cols, BlockFn block_fn) {
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
  const bool parallel = blocks > 1 && rows * cols >= kMinParallelElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = b * kBlock;
    block_fn(r0, std::min<int64_t>(kBlock, rows - r0));
  }
}

// Runs fn.template operator()<R>(r0) as one block of R = kBlock rows, or row by row
// (R = 1) for a short last block.
template <class Fn>
void dispatch_block(int64_t r0, int64_t count, Fn fn) {
  if (count == kBlock) return fn.template operator()<kBlock>(r0);
  for (int64_t r = r0; r < r0 + count; ++r) fn.template operator()<1>(r);
}

// Row r of the block: rows are `cols` apart.
template <class T>
struct Rows {
  T* base;
  int64_t cols;
  T* operator[](int r) const { return base + r * cols; }
};

// out[r] = sum_j (x[r][j] - shift[r])^2 for the R rows, two accumulators per row.
template <int R, bool kShift, class T>
void sum_squares(Rows<const T> x, const T* shift, int64_t n, T* out) {
  constexpr int64_t W = kLanes<T>;
  Vec<T> c[R], a0[R], a1[R];
  for (int r = 0; r < R; ++r) c[r] = splat(kShift ? shift[r] : T(0)), a0[r] = a1[r] = Vec<T>{};
  int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W)
    for (int r = 0; r < R; ++r) {
      Vec<T> v0 = load(x[r] + j), v1 = load(x[r] + j + W);
      if constexpr (kShift) v0 -= c[r], v1 -= c[r];
      a0[r] += v0 * v0;
      a1[r] += v1 * v1;
    }
  for (; j + W <= n; j += W)
    for (int r = 0; r < R; ++r) {
      Vec<T> v = load(x[r] + j);
      if constexpr (kShift) v -= c[r];
      a0[r] += v * v;
    }
  for (int r = 0; r < R; ++r) {
    T s = horizontal_sum(a0[r] + a1[r]);
    for (int64_t k = j; k < n; ++k) {
      const T d = kShift ? x[r][k] - shift[r] : x[r][k];
      s += d * d;
    }
    out[r] = s;
  }
}

// out[r] = sum_j x[r][j].
template <int R, class T>
void sums(Rows<const T> x, int64_t n, T* out) {
  constexpr int64_t W = kLanes<T>;
  Vec<T> a0[R], a1[R];
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = Vec<T>{};
  int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W)
    for (int r = 0; r < R; ++r) {
      a0[r] += load(x[r] + j);
      a1[r] += load(x[r] + j + W);
    }
  for (; j + W <= n; j += W)
    for (int r = 0; r < R; ++r) a0[r] += load(x[r] + j);
  for (int r = 0; r < R; ++r) {
    T s = horizontal_sum(a0[r] + a1[r]);
    for (int64_t k = j; k < n; ++k) s += x[r][k];
    out[r] = s;
  }
}

// s[r] = x[r] + res[r] (written), out[r] = sum_j s[r][j]^2.
template <int R>
void add_and_sum_squares(Rows<const float> x, Rows<const float> res, Rows<float> s,
                         int64_t n, float* out) {
  constexpr int64_t W = kLanes<float>;
  Vec<float> a[R];
  for (int r = 0; r < R; ++r) a[r] = Vec<float>{};
  int64_t j = 0;
  for (; j + W <= n; j += W)
    for (int r = 0; r < R; ++r) {
      const Vec<float> v = load(x[r] + j) + load(res[r] + j);
      store(s[r] + j, v);
      a[r] += v * v;
    }
  for (int r = 0; r < R; ++r) {
    float acc = horizontal_sum(a[r]);
    for (int64_t k = j; k < n; ++k) {
      s[r][k] = x[r][k] + res[r][k];
      acc += s[r][k] * s[r][k];
    }
    out[r] = acc;
  }
}

// y[r] = (x[r] - shift[r]) * scale[r] [* w] [+ b]; each variant is its own instantiation
// so the inner loop carries no branch.
template <int R, bool kWeight, bool kBias, bool kShift, class T>
void write_rows(Rows<const T> x, const T* shift, const T* scale, const T* w, const T* b,
                Rows<T> y, int64_t n) {
  constexpr int64_t W = kLanes<T>;
  Vec<T> c[R], k[R];
  for (int r = 0; r < R; ++r) c[r] = splat(kShift ? shift[r] : T(0)), k[r] = splat(scale[r]);
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    Vec<T> wv{}, bv{};
    if constexpr (kWeight) wv = load(w + j);
    if constexpr (kBias) bv = load(b + j);
    for (int r = 0; r < R; ++r) {
      Vec<T> v = load(x[r] + j);
      if constexpr (kShift) v -= c[r];
      v *= k[r];
      if constexpr (kWeight) v *= wv;
      if constexpr (kBias) v += bv;
      store(y[r] + j, v);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int64_t i = j; i < n; ++i) {
      T v = x[r][i];
      if constexpr (kShift) v -= shift[r];
      v *= scale[r];
      if constexpr (kWeight) v *= w[i];
      if constexpr (kBias) v += b[i];
      y[r][i] = v;
    }
}

template <int R, bool kShift, class T>
void write_rows_affine(Rows<const T> x, const T* shift, const T* scale, const T* w,
                       const T* b, Rows<T> y, int64_t n) {
  if (w && b) return write_rows<R, true, true, kShift>(x, shift, scale, w, b, y, n);
  if (w) return write_rows<R, true, false, kShift>(x, shift, scale, w, b, y, n);
  if (b) return write_rows<R, false, true, kShift>(x, shift, scale, w, b, y, n);
  write_rows<R, false, false, kShift>(x, shift, scale, w, b, y, n);
}

template <class T>
T inverse_rms(T sum_sq, int64_t n, T eps) {
  return T(1) / std::sqrt(sum_sq / T(n) + eps);
}

template <class T>
void rms_norm_rows(const T* x, const T* w, const T* b, T* out, int64_t rows, int64_t cols,
                   T eps) {
  for_each_block(rows, cols, [=](int64_t r0, int64_t count) {
    dispatch_block(r0, count, [=]<int R>(int64_t first) {
      const Rows<const T> xr{x + first * cols, cols};
      T scale[R];
      sum_squares<R, false>(xr, static_cast<const T*>(nullptr), cols, scale);
      for (int r = 0; r < R; ++r) scale[r] = inverse_rms(scale[r], cols, eps);
      write_rows_affine<R, false>(xr, static_cast<const T*>(nullptr), scale, w, b,
                                  Rows<T>{out + first * cols, cols}, cols);
    });
  });
}

// Two-pass moments over the cache-resident rows: the mean, then the squared deviations
// from it (no cancellation, unlike E[x^2] - E[x]^2).
template <class T>
void layer_norm_rows(const T* x, const T* w, const T* b, T* out, int64_t rows,
                     int64_t cols, T eps) {
  for_each_block(rows, cols, [=](int64_t r0, int64_t count) {
    dispatch_block(r0, count, [=]<int R>(int64_t first) {
      const Rows<const T> xr{x + first * cols, cols};
      T mean[R], scale[R];
      sums<R>(xr, cols, mean);
      for (int r = 0; r < R; ++r) mean[r] /= T(cols);
      sum_squares<R, true>(xr, mean, cols, scale);
      for (int r = 0; r < R; ++r) scale[r] = inverse_rms(scale[r], cols, eps);
      write_rows_affine<R, true>(xr, mean, scale, w, b, Rows<T>{out + first * cols, cols},
                                 cols);
    });
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
  for_each_block(rows, cols, [=](int64_t r0, int64_t count) {
    dispatch_block(r0, count, [=]<int R>(int64_t first) {
      const int64_t at = first * cols;
      const Rows<float> sum{sum_out + at, cols};
      float scale[R];
      add_and_sum_squares<R>({x + at, cols}, {residual + at, cols}, sum, cols, scale);
      for (int r = 0; r < R; ++r) scale[r] = inverse_rms(scale[r], cols, eps);
      write_rows_affine<R, false>(Rows<const float>{sum_out + at, cols},
                                  static_cast<const float*>(nullptr), scale, weight, bias,
                                  Rows<float>{out + at, cols}, cols);
    });
  });
}

// A block's rows are contiguous: one memcpy each (glibc's, at least as fast as a vector
// loop here, so the yardstick is not a weak one).
void copy_rows(const float* x, float* out, int64_t rows, int64_t cols) {
  for_each_block(rows, cols, [=](int64_t r0, int64_t count) {
    std::memcpy(out + r0 * cols, x + r0 * cols, sizeof(float) * size_t(count * cols));
  });
}

}  // namespace lnv::kernels
