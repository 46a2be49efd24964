// Fused CPU norm kernels (see norm_kernels.h).
//
// Each row is read from memory once: a first pass over the row reduces it (sum of
// squares; for LayerNorm the mean, then the squared deviations), a last pass writes it.
// The rows being processed stay in L1/L2 between the passes, so the memory traffic is
// that of a copy and the extra passes cost only loads from cache and arithmetic.
//
// Rows go in blocks: the reductions of a block's rows interleave (eight independent
// accumulator chains in all hide the FMA latency) and its write pass loads each weight
// and bias vector once for all the block's rows. Inner loops use GCC vector extensions on
// 32-byte vectors (AVX2 with the flags that torch/CMakeLists.txt sets on this file); rows
// run in parallel with OpenMP.
//
// A block's reduction pass reads only and its write pass mostly writes, so left alone the
// reads of block b+1 start only when block b is written, where a copy reads and writes all
// the time. row_path() picks one of three ways around that (the measurements that chose
// them are in docs/kernels.md):
// - short rows (<= 4 KiB) in cache (input < 8 MiB): each thread's share of the rows in
//   blocks of 2, software-pipelined - the write pass of block b also reduces block b+1;
// - short rows from memory: rows one at a time (one read and one write stream, like a
//   copy), each write pass prefetching the next row;
// - long rows: blocks of 4 rows (long sequential streams, which the hardware prefetchers
//   follow on their own).
#include "torch/kernels/norm_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <omp.h>

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
// hardware prefetchers keep up and prefetch instructions only cost load slots - 8-10
// points of copy bandwidth at 512x768) and, like the pipelined path, only for rows of at
// most kShortRowBytes (long rows are long sequential streams the hardware prefetchers
// follow on their own: prefetching lost 5-10 points at 2048x4096).
constexpr int64_t kPrefetchMinBytes = int64_t(8) << 20;
constexpr int64_t kShortRowBytes = int64_t(4) << 10;

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

// Calls share_fn(begin, end) once per thread with its contiguous share of the rows
// (shares are whole multiples of `unit` rows but for the last), in parallel.
template <class ShareFn>
void for_each_share(int64_t rows, int64_t cols, int64_t unit, ShareFn share_fn) {
  const bool parallel = rows > unit && rows * cols >= kMinParallelElements;
#pragma omp parallel if (parallel)
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t units = (rows + unit - 1) / unit;
    const int64_t begin = std::min(rows, units * t / threads * unit);
    const int64_t end = std::min(rows, units * (t + 1) / threads * unit);
    if (begin < end) share_fn(begin, end);
  }
}

// Calls block_fn(first_row, count) for consecutive blocks of up to block_rows rows, each
// thread's share of the blocks in order.
template <class BlockFn>
void for_each_block(int64_t rows, int64_t cols, int64_t block_rows, BlockFn block_fn) {
  for_each_share(rows, cols, block_rows, [&](int64_t begin, int64_t end) {
    for (int64_t r0 = begin; r0 < end; r0 += block_rows)
      block_fn(r0, std::min(block_rows, end - r0));
  });
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

// What a reduction sums: squares (RMSNorm; LayerNorm's deviations) or plain values
// (LayerNorm's mean).
enum class Reduction { squares, sums };

// One value (a vector or a scalar) into a reduction's accumulator.
template <Reduction kReduce, class V>
inline V accumulate(V acc, V u) {
  if constexpr (kReduce == Reduction::squares) return acc + u * u;
  return acc + u;
}

// out[r] = sum_j f(x[r][j] - shift[r]) for the R rows, f the square or the identity
// (shift only with kShift).
template <int R, Reduction kReduce, bool kShift, class T>
void reduce_rows(Rows<const T> x, const T* shift, int64_t n, T* out) {
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
        acc[r][q] = accumulate<kReduce>(acc[r][q], v);
      }
  for (; j + W <= n; j += W)
    for (int r = 0; r < R; ++r) {
      Vec<T> v = load(x[r] + j);
      if constexpr (kShift) v -= c[r];
      acc[r][0] = accumulate<kReduce>(acc[r][0], v);
    }
  for (int r = 0; r < R; ++r) {
    T s = horizontal_sum(fold_chains(acc[r]));
    for (int64_t k = j; k < n; ++k)
      s = accumulate<kReduce>(s, kShift ? x[r][k] - shift[r] : x[r][k]);
    out[r] = s;
  }
}

// out[r] = sum_j (x[r][j] - shift[r])^2 for the R rows.
template <int R, bool kShift, class T>
void sum_squares(Rows<const T> x, const T* shift, int64_t n, T* out) {
  reduce_rows<R, Reduction::squares, kShift>(x, shift, n, out);
}

// out[r] = sum_j x[r][j].
template <int R, class T>
void sums(Rows<const T> x, int64_t n, T* out) {
  reduce_rows<R, Reduction::sums, false>(x, static_cast<const T*>(nullptr), n, out);
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
// every other step) fetches a block of the same shape in the same number of steps.
// Locality 1, which GCC emits as prefetcht2: on Zen 3 as good as or better than prefetcht0
// in our runs, and the same as prefetcht1.
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

// The scalar tail of a write pass: columns [from, n) of the R rows.
template <int R, bool kWeight, bool kBias, bool kShift, class T>
void write_tail(Rows<const T> x, const T* shift, const T* scale, const T* w, const T* b,
                Rows<T> y, int64_t from, int64_t n) {
  for (int r = 0; r < R; ++r)
    for (int64_t i = from; i < n; ++i) {
      T v = x[r][i];
      if constexpr (kShift) v -= shift[r];
      v *= scale[r];
      if constexpr (kWeight) v *= w[i];
      if constexpr (kBias) v += b[i];
      y[r][i] = v;
    }
}

// Calls fn.template operator()<kWeight, kBias>() for the affine parameters present.
template <class Fn>
void with_affine(const void* w, const void* b, Fn fn) {
  if (w && b) return fn.template operator()<true, true>();
  if (w) return fn.template operator()<true, false>();
  if (b) return fn.template operator()<false, true>();
  fn.template operator()<false, false>();
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
  write_tail<R, kWeight, kBias, kShift>(x, shift, scale, w, b, y, j, n);
}

// The write pass, prefetching when pf.a is set.
template <int R, bool kShift, class T>
void write_block(Rows<const T> x, const T* shift, const T* scale, const T* w, const T* b,
                 Rows<T> y, int64_t n, Prefetch pf) {
  with_affine(w, b, [&]<bool kWeight, bool kBias>() {
    if (pf.a) return write_rows<R, kWeight, kBias, kShift, true>(x, shift, scale, w, b, y, n, pf);
    write_rows<R, kWeight, kBias, kShift, false>(x, shift, scale, w, b, y, n, pf);
  });
}

// (v - c) * k [* w] [+ b], one vector of a write pass.
template <bool kWeight, bool kBias, bool kShift, class V>
inline V normalized(V v, V c, V k, V wv, V bv) {
  if constexpr (kShift) v -= c;
  v *= k;
  if constexpr (kWeight) v *= wv;
  if constexpr (kBias) v += bv;
  return v;
}

// The write pass of block x -> y (as write_rows) fused with the reduction of the next
// block's rows `next` into next_out[r], so that the next block streams in from the caches
// while this one is written (a copy reads and writes all the time; a norm whose passes
// take turns leaves the reads idle while it writes). Two chains per row, each fed once
// per two-vector step, which the step's stores outlast. kReduce: squares for RMSNorm,
// sums for LayerNorm's mean (its squared deviations need the mean first and take a pass
// of their own, over rows this loop has just brought into L1).
template <int R, Reduction kReduce, bool kWeight, bool kBias, bool kShift, class T>
void write_rows_reducing_next(Rows<const T> x, const T* shift, const T* scale, const T* w,
                              const T* b, Rows<T> y, int64_t n, Rows<const T> next,
                              T* next_out) {
  constexpr int64_t W = kLanes<T>;
  Vec<T> c[R], k[R], acc[R][2];
  for (int r = 0; r < R; ++r) {
    c[r] = splat(kShift ? shift[r] : T(0));
    k[r] = splat(scale[r]);
    acc[r][0] = acc[r][1] = Vec<T>{};
  }
  // Plain functions of values: lambdas capturing the accumulators by reference kept them
  // in memory (53-63 us against 48-56 us per 512x768 call in a microbenchmark).
  int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    Vec<T> w0{}, w1{}, b0{}, b1{};
    if constexpr (kWeight) w0 = load(w + j), w1 = load(w + j + W);
    if constexpr (kBias) b0 = load(b + j), b1 = load(b + j + W);
    for (int r = 0; r < R; ++r) {
      store(y[r] + j, normalized<kWeight, kBias, kShift>(load(x[r] + j), c[r], k[r], w0, b0));
      store(y[r] + j + W,
            normalized<kWeight, kBias, kShift>(load(x[r] + j + W), c[r], k[r], w1, b1));
      acc[r][0] = accumulate<kReduce>(acc[r][0], load(next[r] + j));
      acc[r][1] = accumulate<kReduce>(acc[r][1], load(next[r] + j + W));
    }
  }
  for (; j + W <= n; j += W) {
    Vec<T> wv{}, bv{};
    if constexpr (kWeight) wv = load(w + j);
    if constexpr (kBias) bv = load(b + j);
    for (int r = 0; r < R; ++r) {
      store(y[r] + j, normalized<kWeight, kBias, kShift>(load(x[r] + j), c[r], k[r], wv, bv));
      acc[r][0] = accumulate<kReduce>(acc[r][0], load(next[r] + j));
    }
  }
  write_tail<R, kWeight, kBias, kShift>(x, shift, scale, w, b, y, j, n);
  for (int r = 0; r < R; ++r) {
    T a = horizontal_sum(acc[r][0] + acc[r][1]);
    for (int64_t i = j; i < n; ++i) a = accumulate<kReduce>(a, next[r][i]);
    next_out[r] = a;
  }
}

template <int R, Reduction kReduce, bool kShift, class T>
void write_block_reducing_next(Rows<const T> x, const T* shift, const T* scale, const T* w,
                               const T* b, Rows<T> y, int64_t n, Rows<const T> next,
                               T* next_out) {
  with_affine(w, b, [&]<bool kWeight, bool kBias>() {
    write_rows_reducing_next<R, kReduce, kWeight, kBias, kShift>(x, shift, scale, w, b, y, n,
                                                                 next, next_out);
  });
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

// The in-cache path for short rows (row_path() == pipelined_pairs): each thread takes
// its contiguous share of the rows in blocks of kPipeRows, and the write pass of block b
// reduces block b+1 (write_rows_reducing_next), so that reading overlaps writing. Rows
// left over at the end of a share go one at a time, unpipelined.
constexpr int kPipeRows = 2;

// Per block of kPipeRows rows starting at `first`: reduce(first, stats) fills the block's
// statistics from a pass of its own (the first block of a share), write_and_reduce_next(
// first, stats, next) writes the block with `stats` and reduces the next block into
// `next`, write(first, stats) writes the last block of a share; single_row(r) does all of
// one left-over row. Stats is a struct with what a block's write pass needs.
template <class Stats, class ReduceFn, class WriteReduceFn, class WriteFn, class SingleRowFn>
void pipeline_rows(int64_t rows, int64_t cols, ReduceFn reduce,
                   WriteReduceFn write_and_reduce_next, WriteFn write, SingleRowFn single_row) {
  for_each_share(rows, cols, kPipeRows, [&](int64_t begin, int64_t end) {
    const int64_t full_end = begin + (end - begin) / kPipeRows * kPipeRows;
    if (begin < full_end) {
      Stats stats;
      reduce(begin, stats);
      for (int64_t first = begin; first < full_end; first += kPipeRows) {
        if (first + kPipeRows < full_end) {
          Stats next;
          write_and_reduce_next(first, stats, next);
          stats = next;
        } else {
          write(first, stats);
        }
      }
    }
    for (int64_t r = full_end; r < end; ++r) single_row(r);
  });
}

template <class T>
T inverse_rms(T sum_sq, int64_t n, T eps) {
  return T(1) / std::sqrt(sum_sq / T(n) + eps);
}

// The unpipelined paths: block.template operator()<R>(first, pf) over blocks of 4 rows,
// or of one row when prefetching (pf), in parallel.
template <class BlockFn>
void run_blocks(int64_t rows, int64_t cols, bool pf, BlockFn block) {
  for_each_block(rows, cols, block_rows(pf), [=](int64_t r0, int64_t count) {
    dispatch_block(r0, count, [=]<int R>(int64_t first) { block.template operator()<R>(first, pf); });
  });
}

template <class T>
void rms_norm_rows(const T* x, const T* w, const T* b, T* out, int64_t rows, int64_t cols,
                   T eps) {
  const T* none = nullptr;
  // One block of R rows, unpipelined: reduce, then write (prefetching when asked).
  const auto block = [=]<int R>(int64_t first, bool pf) {
    const Rows<const T> xr{x + first * cols, cols};
    T scale[R];
    sum_squares<R, false>(xr, none, cols, scale);
    for (int r = 0; r < R; ++r) scale[r] = inverse_rms(scale[r], cols, eps);
    write_block<R, false>(xr, none, scale, w, b, Rows<T>{out + first * cols, cols}, cols,
                          next_block<R>(pf, first, rows, cols, x));
  };
  const RowPath path = row_path(rows, cols, sizeof(T));
  if (path == RowPath::pipelined_pairs) {
    constexpr int R = kPipeRows;
    struct Stats {
      T scale[R];
    };
    const auto rows_at = [=](int64_t first) { return Rows<const T>{x + first * cols, cols}; };
    const auto to_scale = [=](Stats& s) {
      for (int r = 0; r < R; ++r) s.scale[r] = inverse_rms(s.scale[r], cols, eps);
    };
    return pipeline_rows<Stats>(
        rows, cols,
        [=](int64_t first, Stats& s) {
          sum_squares<R, false>(rows_at(first), none, cols, s.scale);
          to_scale(s);
        },
        [=](int64_t first, const Stats& s, Stats& next) {
          write_block_reducing_next<R, Reduction::squares, false>(
              rows_at(first), none, s.scale, w, b, Rows<T>{out + first * cols, cols}, cols,
              rows_at(first + R), next.scale);
          to_scale(next);
        },
        [=](int64_t first, const Stats& s) {
          write_block<R, false>(rows_at(first), none, s.scale, w, b,
                                Rows<T>{out + first * cols, cols}, cols, {});
        },
        [=](int64_t r) { block.template operator()<1>(r, false); });
  }
  run_blocks(rows, cols, path == RowPath::prefetching, block);
}

// Two-pass moments over the cache-resident rows: the mean, then the squared deviations
// from it (no cancellation, unlike E[x^2] - E[x]^2).
template <class T>
void layer_norm_rows(const T* x, const T* w, const T* b, T* out, int64_t rows,
                     int64_t cols, T eps) {
  // mean[] holds the rows' sums on entry; on return it holds the means and scale[] the
  // inverse standard deviations.
  const auto finish_moments = [=]<int R>(Rows<const T> xr, T* mean, T* scale) {
    for (int r = 0; r < R; ++r) mean[r] /= T(cols);
    sum_squares<R, true>(xr, mean, cols, scale);
    for (int r = 0; r < R; ++r) scale[r] = inverse_rms(scale[r], cols, eps);
  };
  const auto block = [=]<int R>(int64_t first, bool pf) {
    const Rows<const T> xr{x + first * cols, cols};
    T mean[R], scale[R];
    sums<R>(xr, cols, mean);
    finish_moments.template operator()<R>(xr, mean, scale);
    write_block<R, true>(xr, mean, scale, w, b, Rows<T>{out + first * cols, cols}, cols,
                         next_block<R>(pf, first, rows, cols, x));
  };
  const RowPath path = row_path(rows, cols, sizeof(T));
  if (path == RowPath::pipelined_pairs) {
    constexpr int R = kPipeRows;
    struct Stats {
      T mean[R], scale[R];
    };
    const auto rows_at = [=](int64_t first) { return Rows<const T>{x + first * cols, cols}; };
    return pipeline_rows<Stats>(
        rows, cols,
        [=](int64_t first, Stats& s) {
          sums<R>(rows_at(first), cols, s.mean);
          finish_moments.template operator()<R>(rows_at(first), s.mean, s.scale);
        },
        [=](int64_t first, const Stats& s, Stats& next) {
          write_block_reducing_next<R, Reduction::sums, true>(
              rows_at(first), s.mean, s.scale, w, b, Rows<T>{out + first * cols, cols}, cols,
              rows_at(first + R), next.mean);
          finish_moments.template operator()<R>(rows_at(first + R), next.mean, next.scale);
        },
        [=](int64_t first, const Stats& s) {
          write_block<R, true>(rows_at(first), s.mean, s.scale, w, b,
                               Rows<T>{out + first * cols, cols}, cols, {});
        },
        [=](int64_t r) { block.template operator()<1>(r, false); });
  }
  run_blocks(rows, cols, path == RowPath::prefetching, block);
}

}  // namespace

RowPath row_path(int64_t rows, int64_t cols, int64_t elem_bytes) {
  if (cols * elem_bytes > kShortRowBytes) return RowPath::blocks_of_4;
  if (rows >= 2 && rows * cols * elem_bytes >= kPrefetchMinBytes) return RowPath::prefetching;
  return RowPath::pipelined_pairs;
}

bool prefetches_next_block(int64_t rows, int64_t cols, int64_t elem_bytes) {
  return row_path(rows, cols, elem_bytes) == RowPath::prefetching;
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
