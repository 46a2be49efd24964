// Fused CPU norm kernels on raw row-major float buffers (no LibTorch types, so the
// header is cheap to include). Rows are independent and run in parallel; `out` is
// written, never allocated. `weight`/`bias` may be null (no affine). Each normalizes
// the last `cols` elements of each of `rows` rows.
#pragma once

#include <cstdint>

namespace lnv::kernels {

// y = x / sqrt(mean(x^2) + eps) * w + b
void rms_norm(const float* x, const float* weight, const float* bias, float* out,
              int64_t rows, int64_t cols, float eps);

// s = x + residual (written to `sum_out`), y = rms_norm(s): the pre-norm residual step.
void add_rms_norm(const float* x, const float* residual, const float* weight,
                  const float* bias, float* sum_out, float* out, int64_t rows,
                  int64_t cols, float eps);

// y = (x - mean) / sqrt(var + eps) * w + b (biased variance), the same quality of
// kernel as rms_norm so the two can be compared fairly.
void layer_norm(const float* x, const float* weight, const float* bias, float* out,
                int64_t rows, int64_t cols, float eps);

// The bandwidth yardstick: out = x, with the same threading as the norms.
void copy_rows(const float* x, float* out, int64_t rows, int64_t cols);

// How rms_norm and layer_norm walk the rows of a call over `rows` x `cols` elements of
// `elem_bytes` bytes each (per input); the measurements that chose the rule are in
// docs/kernels.md. Exposed so that tests can cover every path.
enum class RowPath {
  // Short rows (<= 4 KiB), input < 8 MiB (it stays in the caches): blocks of 2 rows, each
  // thread's rows software-pipelined - the write pass of one block reduces the next.
  pipelined_pairs,
  // Short rows, input >= 8 MiB (from memory): rows one at a time, each write pass
  // prefetching the next row.
  prefetching,
  // Rows > 4 KiB (long sequential streams the hardware prefetchers follow on their own):
  // blocks of 4 rows, the reductions of a block interleaved.
  blocks_of_4,
};
RowPath row_path(int64_t rows, int64_t cols, int64_t elem_bytes);

// row_path(...) == RowPath::prefetching. add_rms_norm takes that path by the same rule and
// blocks of 4 rows otherwise.
bool prefetches_next_block(int64_t rows, int64_t cols, int64_t elem_bytes);

// double versions, for exactness checks against the reference evaluator.
void rms_norm(const double* x, const double* weight, const double* bias, double* out,
              int64_t rows, int64_t cols, double eps);
void layer_norm(const double* x, const double* weight, const double* bias, double* out,
                int64_t rows, int64_t cols, double eps);

}  // namespace lnv::kernels
