// Fused CPU norm kernels (see norm_kernels.h). Simple first version: rows in parallel
// with OpenMP, inner loops left to the compiler's vectorizer.
#include "torch/kernels/norm_kernels.h"

#include <cmath>
#include <cstring>

namespace lnv::kernels {
namespace {

template <class T>
void affine_scale_row(const T* x, T scale, T shift, const T* w, const T* b, T* y,
                      int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) {
    T v = (x[j] - shift) * scale;
    if (w) v *= w[j];
    if (b) v += b[j];
    y[j] = v;
  }
}

template <class T>
void rms_norm_impl(const T* x, const T* w, const T* b, T* out, int64_t rows, int64_t cols,
                   T eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T ss = 0;
    for (int64_t j = 0; j < cols; ++j) ss += xr[j] * xr[j];
    T scale = T(1) / std::sqrt(ss / T(cols) + eps);
    affine_scale_row(xr, scale, T(0), w, b, out + r * cols, cols);
  }
}

template <class T>
void layer_norm_impl(const T* x, const T* w, const T* b, T* out, int64_t rows,
                     int64_t cols, T eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += xr[j];
    T mean = sum / T(cols);
    T ss = 0;
    for (int64_t j = 0; j < cols; ++j) ss += (xr[j] - mean) * (xr[j] - mean);
    T scale = T(1) / std::sqrt(ss / T(cols) + eps);
    affine_scale_row(xr, scale, mean, w, b, out + r * cols, cols);
  }
}

}  // namespace

void rms_norm(const float* x, const float* weight, const float* bias, float* out,
              int64_t rows, int64_t cols, float eps) {
  rms_norm_impl(x, weight, bias, out, rows, cols, eps);
}

void rms_norm(const double* x, const double* weight, const double* bias, double* out,
              int64_t rows, int64_t cols, double eps) {
  rms_norm_impl(x, weight, bias, out, rows, cols, eps);
}

void layer_norm(const float* x, const float* weight, const float* bias, float* out,
                int64_t rows, int64_t cols, float eps) {
  layer_norm_impl(x, weight, bias, out, rows, cols, eps);
}

void layer_norm(const double* x, const double* weight, const double* bias, double* out,
                int64_t rows, int64_t cols, double eps) {
  layer_norm_impl(x, weight, bias, out, rows, cols, eps);
}

void add_rms_norm(const float* x, const float* residual, const float* weight,
                  const float* bias, float* sum_out, float* out, int64_t rows,
                  int64_t cols, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    const float* rr = residual + r * cols;
    float* sr = sum_out + r * cols;
    float ss = 0;
    for (int64_t j = 0; j < cols; ++j) {
      sr[j] = xr[j] + rr[j];
      ss += sr[j] * sr[j];
    }
    float scale = 1.0f / std::sqrt(ss / float(cols) + eps);
    affine_scale_row(sr, scale, 0.0f, weight, bias, out + r * cols, cols);
  }
}

void copy_rows(const float* x, float* out, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out + r * cols, x + r * cols, sizeof(float) * size_t(cols));
}

}  // namespace lnv::kernels
