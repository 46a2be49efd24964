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
//
// A block's reduction pass reads only and its write pass mostly writes, so without help
// the reads of block b+1 start only when block b is written and the memory sits idle
// in between; a copy reads and writes all the time. For tensors that come from memory
// (not the caches) and short rows, the kernels therefore go row by row (blocks of one
// row: one read and one write stream, like a copy - 4-row blocks keep 4 of each going,
// which measured 3-14 points of copy bandwidth slower from memory in most of our runs,
// though not in all) and each write pass
// prefetches the next row (prefetches_next_block() says when; the measurements that
// chose the rule are in docs/kernels.md).
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

// The prefetching path (rows one at a time, the next row prefetched) is taken only for
// inputs of at least kPrefetchMinBytes (smaller ones stay in the L2/L3 caches, where the
// hardware prefetchers keep up, the prefetch instructions only cost load slots - 8-10
// points of copy bandwidth at 512x768 - and the 4-row blocks' shared weight/bias loads
// pay) and rows of at most kPrefetchMaxRowBytes (long rows are long sequential streams
// the hardware prefetchers follow on their own: prefetching lost 5-10 points at
// 2048x4096).
constexpr int64_t kPrefetchMinBytes = int64_t(8) << 20;
constexpr int64_t kPrefetchMaxRowBytes = int64_t(4) << 10;

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

// Calls block_fn(first_row, count) for consecutive blocks of up to block_rows rows,
// blocks in parallel.
template <class BlockFn>
void for_each_block(int64_t rows, int64_t cols, int64_t block_rows, BlockFn block_fn) {
  const int64_t blocks = (rows + block_rows - 1) / block_rows;
  const bool parallel = blocks > 1 && rows * cols >= kMinParallelElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = b * block_rows;
    block_fn(r0, std::min<int64_t>(block_rows, rows - r0));
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

// Accumulators per row in the reductions: eight independent chains in all (Zen 3 and
// Haswell-class cores retire two vector FMAs or adds per cycle at a latency of 3-4, so
// fewer chains leave the reduction latency-bound: a single row with two chains ran at a
// quarter of the load ports' rate), and at least two per row.
template <int R>
constexpr int kChains = R >= 4 ? 2 : 8 / R;

// The sum of a row's accumulators, pairwise (A is a power of two).
template <int A, class V>
inline V fold_chains(const V (&a)[A]) {
  static_assert(A > 0 && (A & (A - 1)) == 0);
  V t[A];
  for (int q = 0; q < A; ++q) t[q] = a[q];
  for (int half = A / 2; half >= 1; half /= 2)
    for (int q = 0; q < half; ++q) t[q] += t[q + half];
  return t[0];
}

// out[r] = sum_j (x[r][j] - shift[r])^2 for the R rows.
template <int R, bool kShift, class T>
void sum_squares(Rows<const T> x, const T* shift, int64_t n, T* out) {
  constexpr int64_t W = kLanes<T>;
  constexpr int A = kChains<R>;
  Vec<T> c[R], acc[R][A];
  for (int r = 0; r < R; ++r) {
    c[r] = splat(kShift ? shift[r] : T(0));
    for (int q = 0; q < A; ++q) acc[r][q] = Vec<T>{};
  }
  int64_t j = 0;
  for (; j + A * W <= n; j += A * W)
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < A; ++q) {
        Vec<T> v = load(x[r] + j + q * W);
        if constexpr (kShift) v -= c[r];
        acc[r][q] += v * v;
      }
  for (; j + W <= n; j += W)
    for (int r = 0; r < R; ++r) {
      Vec<T> v = load(x[r] + j);
      if constexpr (kShift) v -= c[r];
      acc[r][0] += v * v;
    }
  for (int r = 0; r < R; ++r) {
    T s = horizontal_sum(fold_chains(acc[r]));
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
  constexpr int A = kChains<R>;
  Vec<T> acc[R][A];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < A; ++q) acc[r][q] = Vec<T>{};
  int64_t j = 0;
  for (; j + A * W <= n; j += A * W)
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < A; ++q) acc[r][q] += load(x[r] + j + q * W);
  for (; j + W <= n; j += W)
    for (int r = 0; r < R; ++r) acc[r][0] += load(x[r] + j);
  for (int r = 0; r < R; ++r) {
    T s = horizontal_sum(fold_chains(acc[r]));
    for (int64_t k = j; k < n; ++k) s += x[r][k];
    out[r] = s;
  }
}

// s[r] = x[r] + res[r] (written), out[r] = sum_j s[r][j]^2.
template <int R>
void add_and_sum_squares(Rows<const float> x, Rows<const float> res, Rows<float> s,
                         int64_t n, float* out) {
  constexpr int64_t W = kLanes<float>;
  constexpr int A = kChains<R>;
  Vec<float> acc[R][A];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < A; ++q) acc[r][q] = Vec<float>{};
  int64_t j = 0;
  for (; j + A * W <= n; j += A * W)
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < A; ++q) {
        const Vec<float> v = load(x[r] + j + q * W) + load(res[r] + j + q * W);
        store(s[r] + j + q * W, v);
        acc[r][q] += v * v;
      }
  for (; j + W <= n; j += W)
    for (int r = 0; r < R; ++r) {
      const Vec<float> v = load(x[r] + j) + load(res[r] + j);
      store(s[r] + j, v);
      acc[r][0] += v * v;
    }
  for (int r = 0; r < R; ++r) {
    float a = horizontal_sum(fold_chains(acc[r]));
    for (int64_t k = j; k < n; ++k) {
      s[r][k] = x[r][k] + res[r][k];
      a += s[r][k] * s[r][k];
    }
    out[r] = a;
  }
}

// The next block's input rows to prefetch during a write pass: up to two tensors (x, and
// the residual of add_rms_norm), each a contiguous run of the block's bytes; null = none.
struct Prefetch {
  const char* a = nullptr;
  const char* b = nullptr;
};

// Each vector step of a write pass covers 32 bytes of each of the block's R rows, so
// prefetching R * 32 bytes of the next block per step (R / 2 lines; for R = 1, a line
// every other step) fetches a block of the same shape in the same number of steps. Locality 1 (prefetcht1): on
// Zen 3 as good as or better than prefetcht0 in our runs.
template <int R>
inline void prefetch_step(Prefetch pf, int64_t step) {
  if constexpr (R % 2 != 0)
    if (step % 2) return;  // R * 32 bytes per step: one line every other step for odd R
  const int64_t at = step * R * 32;
  for (int q = 0; q < R * 32; q += 64) {
    __builtin_prefetch(pf.a + at + q, 0, 1);
    if (pf.b) __builtin_prefetch(pf.b + at + q, 0, 1);
  }
}

// y[r] = (x[r] - shift[r]) * scale[r] [* w] [+ b]; each variant is its own instantiation
// so the inner loop carries no branch.
template <int R, bool kWeight, bool kBias, bool kShift, bool kPrefetch, class T>
void write_rows(Rows<const T> x, const T* shift, const T* scale, const T* w, const T* b,
                Rows<T> y, int64_t n, Prefetch pf) {
  constexpr int64_t W = kLanes<T>;
  Vec<T> c[R], k[R];
  for (int r = 0; r < R; ++r) c[r] = splat(kShift ? shift[r] : T(0)), k[r] = splat(scale[r]);
  int64_t j = 0;
  for (int64_t step = 0; j + W <= n; j += W, ++step) {
    if constexpr (kPrefetch) prefetch_step<R>(pf, step);
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

template <int R, bool kShift, bool kPrefetch, class T>
void write_rows_affine(Rows<const T> x, const T* shift, const T* scale, const T* w,
                       const T* b, Rows<T> y, int64_t n, Prefetch pf) {
  if (w && b) return write_rows<R, true, true, kShift, kPrefetch>(x, shift, scale, w, b, y, n, pf);
  if (w) return write_rows<R, true, false, kShift, kPrefetch>(x, shift, scale, w, b, y, n, pf);
  if (b) return write_rows<R, false, true, kShift, kPrefetch>(x, shift, scale, w, b, y, n, pf);
  write_rows<R, false, false, kShift, kPrefetch>(x, shift, scale, w, b, y, n, pf);
}

// The write pass, prefetching when pf.a is set.
template <int R, bool kShift, class T>
void write_block(Rows<const T> x, const T* shift, const T* scale, const T* w, const T* b,
                 Rows<T> y, int64_t n, Prefetch pf) {
  if (pf.a) return write_rows_affine<R, kShift, true>(x, shift, scale, w, b, y, n, pf);
  write_rows_affine<R, kShift, false>(x, shift, scale, w, b, y, n, pf);
}

// What to prefetch while writing the block of R rows starting at `first`: the next R rows
// of each given input, when the call prefetches and those rows exist.
template <int R, class T>
Prefetch next_block(bool enabled, int64_t first, int64_t rows, int64_t cols, const T* x,
                    const T* x2 = nullptr) {
  if (!enabled || first + 2 * R > rows) return {};
  const int64_t at = (first + R) * cols;
  return {reinterpret_cast<const char*>(x + at),
          x2 ? reinterpret_cast<const char*>(x2 + at) : nullptr};
}

// Rows per block: kBlock, or one on the prefetching path (see the top of the file).
inline int64_t block_rows(bool prefetch) { return prefetch ? 1 : kBlock; }

template <class T>
T inverse_rms(T sum_sq, int64_t n, T eps) {
  return T(1) / std::sqrt(sum_sq / T(n) + eps);
}

template <class T>
void rms_norm_rows(const T* x, const T* w, const T* b, T* out, int64_t rows, int64_t cols,
                   T eps) {
  const bool pf = prefetches_next_block(rows, cols, sizeof(T));
  for_each_block(rows, cols, block_rows(pf), [=](int64_t r0, int64_t count) {
    dispatch_block(r0, count, [=]<int R>(int64_t first) {
      const Rows<const T> xr{x + first * cols, cols};
      T scale[R];
      sum_squares<R, false>(xr, static_cast<const T*>(nullptr), cols, scale);
      for (int r = 0; r < R; ++r) scale[r] = inverse_rms(scale[r], cols, eps);
      write_block<R, false>(xr, static_cast<const T*>(nullptr), scale, w, b,
                            Rows<T>{out + first * cols, cols}, cols,
                            next_block<R>(pf, first, rows, cols, x));
    });
  });
}

// Two-pass moments over the cache-resident rows: the mean, then the squared deviations
// from it (no cancellation, unlike E[x^2] - E[x]^2).
template <class T>
void layer_norm_rows(const T* x, const T* w, const T* b, T* out, int64_t rows,
                     int64_t cols, T eps) {
  const bool pf = prefetches_next_block(rows, cols, sizeof(T));
  for_each_block(rows, cols, block_rows(pf), [=](int64_t r0, int64_t count) {
    dispatch_block(r0, count, [=]<int R>(int64_t first) {
      const Rows<const T> xr{x + first * cols, cols};
      T mean[R], scale[R];
      sums<R>(xr, cols, mean);
      for (int r = 0; r < R; ++r) mean[r] /= T(cols);
      sum_squares<R, true>(xr, mean, cols, scale);
      for (int r = 0; r < R; ++r) scale[r] = inverse_rms(scale[r], cols, eps);
      write_block<R, true>(xr, mean, scale, w, b, Rows<T>{out + first * cols, cols}, cols,
                           next_block<R>(pf, first, rows, cols, x));
    });
  });
}

}  // namespace

bool prefetches_next_block(int64_t rows, int64_t cols, int64_t elem_bytes) {
  return rows >= 2 && rows * cols * elem_bytes >= kPrefetchMinBytes &&
         cols * elem_bytes <= kPrefetchMaxRowBytes;
}

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
  // On the prefetching path the write pass reads the row's sums from the cache and
  // prefetches the next row of both x and residual.
  const bool pf = prefetches_next_block(rows, cols, sizeof(float));
  for_each_block(rows, cols, block_rows(pf), [=](int64_t r0, int64_t count) {
    dispatch_block(r0, count, [=]<int R>(int64_t first) {
      const int64_t at = first * cols;
      const Rows<float> sum{sum_out + at, cols};
      float scale[R];
      add_and_sum_squares<R>({x + at, cols}, {residual + at, cols}, sum, cols, scale);
      for (int r = 0; r < R; ++r) scale[r] = inverse_rms(scale[r], cols, eps);
      write_block<R, false>(Rows<const float>{sum_out + at, cols},
                            static_cast<const float*>(nullptr), scale, weight, bias,
                            Rows<float>{out + at, cols}, cols,
                            next_block<R>(pf, first, rows, cols, x, residual));
    });
  });
}

// A block's rows are contiguous: one memcpy each (glibc's, at least as fast as a vector
// loop here, so the yardstick is not a weak one).
void copy_rows(const float* x, float* out, int64_t rows, int64_t cols) {
  for_each_block(rows, cols, kBlock, [=](int64_t r0, int64_t count) {
    std::memcpy(out + r0 * cols, x + r0 * cols, sizeof(float) * size_t(count * cols));
  });
}

}  // namespace lnv::kernels
