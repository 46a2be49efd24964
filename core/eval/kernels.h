// Private to core/eval: the per-op kernels of the reference evaluators, forward and
// backward, templated on the scalar type (double or Mpfr).
//
// Plain loops over flat row-major arrays rather than Eigen: Eigen's products do not
// combine reliably with mpfr_float's expression templates on Boost 1.74, the tensors of
// an exact check are small, and one code path for both scalar types is easier to trust.
// `acc += a * b` on Mpfr is a single mpfr_fma (Boost's eval_multiply_add), so the inner
// loops allocate nothing.
//
// Never write `auto` for a scalar expression: with Mpfr it would hold an expression
// template that refers to temporaries.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/eval/evaluator.h"
#include "core/graph.h"
#include "core/random.h"
#include "core/tensor.h"

namespace lnv::eval::detail {

// ---------------------------------------------------------------- index layout

// The elements of a tensor of shape `s` grouped into fibers over `axes` (normalized,
// sorted): fiber f (row-major over the other axes, i.e. the flat index of a reduction's
// output) holds flat indices at(f, j), j row-major over `axes` (i.e. the flat index of a
// norm's weight).
struct Fibers {
  int64_t count = 0;  // number of fibers
  int64_t size = 0;   // elements per fiber
  std::vector<int64_t> flat;
  int64_t at(int64_t f, int64_t j) const { return flat[f * size + j]; }
};

inline Fibers fibers_of(const Shape& s, const Axes& axes) {
  std::vector<bool> inner(s.size(), false);
  for (int64_t a : axes) inner[a] = true;
  Fibers fb;
  fb.size = 1;
  for (size_t a = 0; a < s.size(); ++a)
    if (inner[a]) fb.size *= s[a];
  const int64_t total = numel(s);
  fb.count = total / fb.size;
  fb.flat.assign(total, 0);
  std::vector<int64_t> coord(s.size(), 0);
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t f = 0, j = 0;
    for (size_t a = 0; a < s.size(); ++a) {
      if (inner[a])
        j = j * s[a] + coord[a];
      else
        f = f * s[a] + coord[a];
    }
    fb.flat[f * fb.size + j] = flat;
    for (int64_t a = static_cast<int64_t>(s.size()) - 1; a >= 0; --a) {
      if (++coord[a] < s[a]) break;
      coord[a] = 0;
    }
  }
  return fb;
}

// Flat source index in an operand of shape `in` for every element of the broadcast
// result `out`.
inline std::vector<int64_t> broadcast_map(const Shape& out, const Shape& in) {
  std::vector<int64_t> m(numel(out));
  for (int64_t i = 0; i < static_cast<int64_t>(m.size()); ++i)
    m[i] = broadcast_source_index(i, out, in);
  return m;
}

// For every element of transpose(x, perm), its flat index in x.
inline std::vector<int64_t> transpose_map(const Shape& in, const std::vector<int64_t>& perm) {
  const int64_t r = static_cast<int64_t>(in.size());
  const std::vector<int64_t> st = strides_of(in);
  Shape out(r);
  std::vector<int64_t> src_stride(r);
  for (int64_t i = 0; i < r; ++i) {
    const int64_t a = normalize_axis(perm[i], r, "perm");
    out[i] = in[a];
    src_stride[i] = st[a];
  }
  std::vector<int64_t> m(numel(in));
  std::vector<int64_t> coord(r, 0);
  for (int64_t flat = 0; flat < static_cast<int64_t>(m.size()); ++flat) {
    int64_t src = 0;
    for (int64_t i = 0; i < r; ++i) src += coord[i] * src_stride[i];
    m[flat] = src;
    for (int64_t i = r - 1; i >= 0; --i) {
      if (++coord[i] < out[i]) break;
      coord[i] = 0;
    }
  }
  return m;
}

// ---------------------------------------------------------------- small helpers

template <class T>
void add_into(Tensor<T>& dst, const Tensor<T>& src) {
  LNV_INTERNAL_ASSERT(dst.data.size() == src.data.size(), "add_into: size mismatch");
  for (size_t i = 0; i < dst.data.size(); ++i) dst.data[i] += src.data[i];
}

// x minus its mean over `axes` (normalized). Centering is an orthogonal projection, so
// the same function maps an output gradient to the input gradient.
template <class T>
Tensor<T> centered(const Tensor<T>& x, const Axes& axes) {
  const Fibers fb = fibers_of(x.shape, axes);
  Tensor<T> y = x;
  const T n(fb.size);
  for (int64_t f = 0; f < fb.count; ++f) {
    T sum(0);
    for (int64_t j = 0; j < fb.size; ++j) sum += x.data[fb.at(f, j)];
    const T mu = sum / n;
    for (int64_t j = 0; j < fb.size; ++j) y.data[fb.at(f, j)] -= mu;
  }
  return y;
}

// x times `factors` along `axis` (one factor per index of it): a param's LayerScale
// (Param::scale). Diagonal, so the same function maps an output gradient to the input's.
template <class T>
Tensor<T> scaled_along(const Tensor<T>& x, const std::vector<double>& factors, int64_t axis) {
  int64_t inner = 1;
  for (size_t a = size_t(axis) + 1; a < x.shape.size(); ++a) inner *= x.shape[a];
  const int64_t n = x.shape[size_t(axis)];
  LNV_INTERNAL_ASSERT(int64_t(factors.size()) == n, "scaled_along: factors do not fit the axis");
  Tensor<T> y = x;
  for (size_t f = 0; f < y.data.size(); ++f) y.data[f] *= T(factors[size_t((int64_t(f) / inner) % n)]);
  return y;
}

template <class T>
int64_t to_index(const T& v) {
  return static_cast<int64_t>(v);
}

// ---------------------------------------------------------------- cbwc

// The axis CBWC centers a param attribute of a node over, or -1 when the attribute is read
// as stored (no cbwc, or an attribute CBWC leaves alone).
inline int64_t cbwc_axis(const Node& n, const std::string& attr) {
  return n.cbwc ? cbwc_attr_axis(n.op, attr) : -1;
}

// The operand a cbwc matmul centers ({-1, -1} without cbwc).
inline MatmulCentering matmul_center(const Graph& g, int32_t node) {
  return g.nodes[node].cbwc ? cbwc_matmul_operand(g, node) : MatmulCentering{};
}

// ---------------------------------------------------------------- linear

// y[r, o] = sum_i x[r, i] W[o, i] + b[o], rows r over all leading axes.
template <class T>
Tensor<T> linear_fwd(const Tensor<T>& x, const Tensor<T>& w, const Tensor<T>* b) {
  const int64_t out = w.shape[0], in = w.shape[1], rows = x.size() / in;
  Shape ys = x.shape;
  ys.back() = out;
  Tensor<T> y(ys);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      T& acc = y.data[r * out + o];
      if (b) acc = b->data[o];
      for (int64_t i = 0; i < in; ++i) acc += x.data[r * in + i] * w.data[o * in + i];
    }
  return y;
}

// Adds the gradients of linear_fwd into dx (if non-null), dw and db (if non-null).
template <class T>
void linear_bwd(const Tensor<T>& x, const Tensor<T>& w, const Tensor<T>& dy, Tensor<T>* dx,
                Tensor<T>& dw, Tensor<T>* db) {
  const int64_t out = w.shape[0], in = w.shape[1], rows = x.size() / in;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      const T& g = dy.data[r * out + o];
      if (db) db->data[o] += g;
      for (int64_t i = 0; i < in; ++i) {
        dw.data[o * in + i] += g * x.data[r * in + i];
        if (dx) dx->data[r * in + i] += g * w.data[o * in + i];
      }
    }
}

// ---------------------------------------------------------------- matmul

struct MatmulGeom {
  int64_t m = 0, k = 0, n = 0, batches = 0;
  bool tb = false;
  std::vector<int64_t> a_batch, b_batch;  // per output batch: batch index in a and b
  int64_t b_at(int64_t kk, int64_t nn) const { return tb ? nn * k + kk : kk * n + nn; }
};

inline MatmulGeom matmul_geom(const Shape& a, const Shape& b, const Shape& y, bool tb) {
  MatmulGeom g;
  g.tb = tb;
  g.m = a[a.size() - 2];
  g.k = a.back();
  g.n = y.back();
  const Shape yb(y.begin(), y.end() - 2), ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  g.batches = numel(yb);
  g.a_batch = broadcast_map(yb, ab);
  g.b_batch = broadcast_map(yb, bb);
  return g;
}

template <class T>
Tensor<T> matmul_fwd(const Tensor<T>& a, const Tensor<T>& b, const Shape& yshape, bool tb) {
  const MatmulGeom g = matmul_geom(a.shape, b.shape, yshape, tb);
  Tensor<T> y(yshape);
  for (int64_t bi = 0; bi < g.batches; ++bi) {
    const T* pa = a.data.data() + g.a_batch[bi] * g.m * g.k;
    const T* pb = b.data.data() + g.b_batch[bi] * g.k * g.n;
    T* py = y.data.data() + bi * g.m * g.n;
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j)
        for (int64_t kk = 0; kk < g.k; ++kk) py[i * g.n + j] += pa[i * g.k + kk] * pb[g.b_at(kk, j)];
  }
  return y;
}

template <class T>
void matmul_bwd(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& dy, bool tb,
                Tensor<T>* da, Tensor<T>* db) {
  const MatmulGeom g = matmul_geom(a.shape, b.shape, dy.shape, tb);
  for (int64_t bi = 0; bi < g.batches; ++bi) {
    const int64_t oa = g.a_batch[bi] * g.m * g.k, ob = g.b_batch[bi] * g.k * g.n;
    const T* pdy = dy.data.data() + bi * g.m * g.n;
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        const T& gy = pdy[i * g.n + j];
        for (int64_t kk = 0; kk < g.k; ++kk) {
          if (da) da->data[oa + i * g.k + kk] += gy * b.data[ob + g.b_at(kk, j)];
          if (db) db->data[ob + g.b_at(kk, j)] += gy * a.data[oa + i * g.k + kk];
        }
      }
  }
}

// ---------------------------------------------------------------- conv (1d as 2d, H = 1)

struct ConvGeom {
  int64_t n = 0, c = 0, h = 0, w = 0;        // input
  int64_t o = 0, cg = 0, kh = 1, kw = 1;     // weight [o, cg, kh, kw]
  int64_t oh = 1, ow = 1;                    // output spatial
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
};

inline ConvGeom conv_geom(const Node& node, const Shape& x, const Shape& wt, const Shape& y) {
  const bool two = node.op == Op::conv2d;
  auto attr = [&](const std::vector<int64_t>& v, int spatial_axis) {
    return v.size() == 1 ? v[0] : v[spatial_axis];
  };
  ConvGeom g;
  g.n = x[0];
  g.c = x[1];
  g.o = wt[0];
  g.cg = wt[1];
  g.groups = node.groups;
  if (two) {
    g.h = x[2], g.w = x[3], g.kh = wt[2], g.kw = wt[3], g.oh = y[2], g.ow = y[3];
    g.sh = attr(node.stride, 0), g.sw = attr(node.stride, 1);
    g.ph = attr(node.padding, 0), g.pw = attr(node.padding, 1);
    g.dh = attr(node.dilation, 0), g.dw = attr(node.dilation, 1);
  } else {
    g.h = 1, g.w = x[2], g.kw = wt[2], g.ow = y[2];
    g.sw = attr(node.stride, 0), g.pw = attr(node.padding, 0), g.dw = attr(node.dilation, 0);
  }
  return g;
}

// Calls f(y_flat, x_flat, w_flat) for every product term of the convolution.
template <class F>
void for_each_conv_term(const ConvGeom& g, F&& f) {
  const int64_t og = g.o / g.groups;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o) {
      const int64_t c0 = (o / og) * g.cg;
      for (int64_t yh = 0; yh < g.oh; ++yh)
        for (int64_t yw = 0; yw < g.ow; ++yw) {
          const int64_t yi = ((n * g.o + o) * g.oh + yh) * g.ow + yw;
          for (int64_t c = 0; c < g.cg; ++c)
            for (int64_t i = 0; i < g.kh; ++i) {
              const int64_t xh = yh * g.sh + i * g.dh - g.ph;
              if (xh < 0 || xh >= g.h) continue;
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t xw = yw * g.sw + j * g.dw - g.pw;
                if (xw < 0 || xw >= g.w) continue;
                f(yi, ((n * g.c + c0 + c) * g.h + xh) * g.w + xw,
                  ((o * g.cg + c) * g.kh + i) * g.kw + j);
              }
            }
        }
    }
}

template <class T>
Tensor<T> conv_fwd(const ConvGeom& g, const Shape& yshape, const Tensor<T>& x,
                   const Tensor<T>& w, const Tensor<T>* b) {
  Tensor<T> y(yshape);
  if (b) {
    const int64_t per_channel = g.oh * g.ow;
    for (int64_t i = 0; i < y.size(); ++i) y.data[i] = b->data[(i / per_channel) % g.o];
  }
  for_each_conv_term(g, [&](int64_t yi, int64_t xi, int64_t wi) {
    y.data[yi] += x.data[xi] * w.data[wi];
  });
  return y;
}

template <class T>
void conv_bwd(const ConvGeom& g, const Tensor<T>& x, const Tensor<T>& w, const Tensor<T>& dy,
              Tensor<T>* dx, Tensor<T>& dw, Tensor<T>* db) {
  if (db) {
    const int64_t per_channel = g.oh * g.ow;
    for (int64_t i = 0; i < dy.size(); ++i) db->data[(i / per_channel) % g.o] += dy.data[i];
  }
  for_each_conv_term(g, [&](int64_t yi, int64_t xi, int64_t wi) {
    dw.data[wi] += dy.data[yi] * x.data[xi];
    if (dx) dx->data[xi] += dy.data[yi] * w.data[wi];
  });
}

// ---------------------------------------------------------------- norms over one row

// LayerNorm (centered) or RMSNorm over a contiguous row of n values.
template <class T>
struct NormRow {
  bool layer = true;  // false: rms_norm
  T eps;
  const T* w = nullptr;  // affine weight, or null
  const T* b = nullptr;  // affine bias, or null
};

// Writes xhat (the normalized row) and returns the reciprocal scale r.
template <class T>
T norm_row_xhat(const NormRow<T>& nr, const T* x, int64_t n, T* xhat) {
  using std::sqrt;
  const T count(n);
  T mu(0);
  if (nr.layer) {
    for (int64_t i = 0; i < n; ++i) mu += x[i];
    mu /= count;
  }
  T ss(0);
  for (int64_t i = 0; i < n; ++i) {
    xhat[i] = x[i] - mu;
    ss += xhat[i] * xhat[i];
  }
  const T r = T(1) / sqrt(ss / count + nr.eps);
  for (int64_t i = 0; i < n; ++i) xhat[i] *= r;
  return r;
}

template <class T>
void norm_row_fwd(const NormRow<T>& nr, const T* x, int64_t n, T* y) {
  norm_row_xhat(nr, x, n, y);
  for (int64_t i = 0; i < n; ++i) {
    if (nr.w) y[i] *= nr.w[i];
    if (nr.b) y[i] += nr.b[i];
  }
}

// Adds the gradients for dy into dx, dw, db (each may be null).
template <class T>
void norm_row_bwd(const NormRow<T>& nr, const T* x, int64_t n, const T* dy, T* dx, T* dw,
                  T* db) {
  std::vector<T> xhat(n), g(n);
  const T r = norm_row_xhat(nr, x, n, xhat.data());
  const T count(n);
  T mean_g(0), mean_gx(0);
  for (int64_t i = 0; i < n; ++i) {
    g[i] = nr.w ? T(dy[i] * nr.w[i]) : dy[i];
    mean_g += g[i];
    mean_gx += g[i] * xhat[i];
    if (dw) dw[i] += dy[i] * xhat[i];
    if (db) db[i] += dy[i];
  }
  mean_g /= count;
  mean_gx /= count;
  if (!dx) return;
  for (int64_t i = 0; i < n; ++i) {
    T t = g[i] - xhat[i] * mean_gx;
    if (nr.layer) t -= mean_g;
    dx[i] += r * t;
  }
}

// ---------------------------------------------------------------- elementwise

template <class T>
T sigmoid_of(const T& x) {
  using std::exp;
  return T(1) / (T(1) + exp(-x));
}

// max(lo, min(hi, v)) with lo <= hi.
template <class T>
T clamp_to(const T& v, const T& lo, const T& hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// The unary nonlinearity of node `n` at x (its attributes: hard_sigmoid's alpha and beta,
// clip's bounds). Outside the domain (sqrt of a negative value, reciprocal of 0) it
// throws: unary_domain_error says so first, with the node and the element.
template <class T>
T unary_fwd(const Node& n, const T& x) {
  using std::atan;
  using std::cos;
  using std::erf;
  using std::log;
  using std::sin;
  using std::exp;
  using std::sqrt;
  using std::tanh;
  switch (family_member<UnaryOp>(n.op)) {
    case UnaryOp::relu: return x > 0 ? x : T(0);
    case UnaryOp::gelu: return x * (T(1) + erf(x / sqrt(T(2)))) / 2;
    case UnaryOp::tanh: return tanh(x);
    case UnaryOp::sigmoid: return sigmoid_of(x);
    case UnaryOp::silu: return x * sigmoid_of(x);
    case UnaryOp::exp: return exp(x);
    case UnaryOp::sqrt: return sqrt(x);
    case UnaryOp::reciprocal: return T(1) / x;
    case UnaryOp::erf: return erf(x);
    case UnaryOp::log: return log(x);
    case UnaryOp::sin: return sin(x);
    case UnaryOp::cos: return cos(x);
    case UnaryOp::atan: return atan(x);
    case UnaryOp::hard_sigmoid: return clamp_to(T(n.alpha) * x + T(n.beta), T(0), T(1));
    case UnaryOp::hard_swish: return x * clamp_to(x / 6 + T(1) / 2, T(0), T(1));
    case UnaryOp::clip: {
      T y = x;
      if (!std::isinf(n.min) && y < T(n.min)) y = T(n.min);
      if (!std::isinf(n.max) && y > T(n.max)) y = T(n.max);
      return y;
    }
  }
  throw InternalError("unary_fwd: unknown unary op");
}

// d unary(x) / dx, given x and y = unary(x). Where a piecewise op has a kink the one-sided
// choice is LibTorch's (relu, hard_sigmoid: 0 at the kinks; clip: 1 on the bounds).
template <class T>
T unary_derivative(const Node& n, const T& x, const T& y) {
  using std::acos;
  using std::cos;
  using std::sin;
  using std::erf;
  using std::exp;
  using std::sqrt;
  switch (family_member<UnaryOp>(n.op)) {
    case UnaryOp::relu: return x > 0 ? T(1) : T(0);
    case UnaryOp::gelu: {
      const T pi = acos(T(-1));
      return (T(1) + erf(x / sqrt(T(2)))) / 2 + x * exp(-x * x / 2) / sqrt(2 * pi);
    }
    case UnaryOp::tanh: return T(1) - y * y;
    case UnaryOp::sigmoid: return y * (T(1) - y);
    case UnaryOp::silu: {
      const T s = sigmoid_of(x);
      return s * (T(1) + x * (T(1) - s));
    }
    case UnaryOp::exp: return y;
    case UnaryOp::sqrt: return T(1) / (2 * y);
    case UnaryOp::reciprocal: return -(y * y);
    case UnaryOp::erf: return 2 * exp(-x * x) / sqrt(acos(T(-1)));
    case UnaryOp::log: return T(1) / x;
    case UnaryOp::sin: return cos(x);
    case UnaryOp::cos: return -sin(x);
    case UnaryOp::atan: return T(1) / (T(1) + x * x);
    case UnaryOp::hard_sigmoid: {
      const T z = T(n.alpha) * x + T(n.beta);
      return z > 0 && z < 1 ? T(n.alpha) : T(0);
    }
    case UnaryOp::hard_swish: {
      if (x < -3) return T(0);
      if (x > 3) return T(1);
      return x / 3 + T(1) / 2;
    }
    case UnaryOp::clip:
      return (std::isinf(n.min) || x >= T(n.min)) && (std::isinf(n.max) || x <= T(n.max))
                 ? T(1)
                 : T(0);
  }
  throw InternalError("unary_derivative: unknown unary op");
}

// Whether x lies outside the domain of n's unary op (forward: sqrt of a negative value,
// reciprocal of 0; with `derivative`, also sqrt at 0, where the slope is unbounded), as
// an error message naming the element; empty when inside.
template <class T>
std::string unary_domain_error(const Node& n, const T& x, int64_t k, bool derivative) {
  const bool bad = (n.op == Op::sqrt && (x < 0 || (derivative && x == 0))) ||
                   (n.op == Op::reciprocal && x == 0) || (n.op == Op::log && x <= 0);
  if (!bad) return "";
  return std::string(op_name(n.op)) + (derivative ? "'s derivative" : "") +
         " is undefined at " + std::to_string(static_cast<double>(x)) + " (flat index " +
         std::to_string(k) + ")";
}

// ---------------------------------------------------------------- dropout

// The kept elements of a training-mode dropout (docs/spec/format.md): the stream of the
// node's name under the run's seed, element i kept iff its uniform >= p.
inline std::vector<bool> dropout_mask(const std::string& node, uint64_t seed, int64_t n,
                                      double p) {
  SplitMix64 rng(seed, node);
  std::vector<bool> keep(n);
  for (int64_t i = 0; i < n; ++i) keep[i] = rng.uniform() >= p;
  return keep;
}

// ---------------------------------------------------------------- softmax

// A masked softmax (`keep` nonempty, one entry per element) is the softmax of x + M with
// M = 0 where kept and -inf elsewhere: masked positions get exactly 0 and take no part in
// the row's maximum or sum (every row keeps a position: shape inference checks it).
template <class T>
Tensor<T> softmax_fwd(const Tensor<T>& x, int64_t axis, const std::vector<bool>& keep = {}) {
  using std::exp;
  const Fibers fb = fibers_of(x.shape, {axis});
  const auto kept = [&](int64_t i) { return keep.empty() || keep[size_t(i)]; };
  Tensor<T> y(x.shape);
  for (int64_t f = 0; f < fb.count; ++f) {
    std::optional<T> mx;
    for (int64_t j = 0; j < fb.size; ++j)
      if (kept(fb.at(f, j)) && (!mx || x.data[fb.at(f, j)] > *mx)) mx = x.data[fb.at(f, j)];
    T sum(0);
    for (int64_t j = 0; j < fb.size; ++j) {
      T& e = y.data[fb.at(f, j)];
      e = kept(fb.at(f, j)) ? T(exp(x.data[fb.at(f, j)] - *mx)) : T(0);
      sum += e;
    }
    for (int64_t j = 0; j < fb.size; ++j) y.data[fb.at(f, j)] /= sum;
  }
  return y;
}

// Masked positions have y = 0, so their gradient y·(dy - dot) is exactly 0.
template <class T>
void softmax_bwd(const Tensor<T>& y, const Tensor<T>& dy, int64_t axis, Tensor<T>& dx) {
  const Fibers fb = fibers_of(y.shape, {axis});
  for (int64_t f = 0; f < fb.count; ++f) {
    T dot(0);
    for (int64_t j = 0; j < fb.size; ++j) dot += dy.data[fb.at(f, j)] * y.data[fb.at(f, j)];
    for (int64_t j = 0; j < fb.size; ++j) {
      const int64_t i = fb.at(f, j);
      dx.data[i] += y.data[i] * (dy.data[i] - dot);
    }
  }
}

// ---------------------------------------------------------------- attention

// Everything the backward pass needs from a forward attention.
template <class T>
struct AttentionCache {
  int64_t n = 0, t = 0, d = 0, heads = 1, dh = 0;
  bool causal = false;
  T scale;
  Tensor<T> q, k, v;
  std::vector<T> probs;  // [n, heads, t, t], zero where masked
  Tensor<T> merged;      // [n, t, d], heads merged, before the output projection
  Tensor<T> out;

  int64_t p_at(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return ((b * heads + h) * t + i) * t + j;
  }
};

template <class T>
struct AttentionParams {
  const Tensor<T>* wq;
  const Tensor<T>* wk;
  const Tensor<T>* wv;
  const Tensor<T>* wo;
  const Tensor<T>* bq;
  const Tensor<T>* bk;
  const Tensor<T>* bv;
  const Tensor<T>* bo;
};

template <class T>
AttentionCache<T> attention_fwd(const Tensor<T>& x, const AttentionParams<T>& p, int64_t heads,
                                bool causal) {
  using std::exp;
  using std::sqrt;
  AttentionCache<T> c;
  c.n = x.shape[0], c.t = x.shape[1], c.d = x.shape[2], c.heads = heads;
  c.dh = c.d / heads;
  c.causal = causal;
  c.scale = T(1) / sqrt(T(c.dh));
  c.q = linear_fwd(x, *p.wq, p.bq);
  c.k = linear_fwd(x, *p.wk, p.bk);
  c.v = linear_fwd(x, *p.wv, p.bv);
  c.probs.assign(c.n * heads * c.t * c.t, T(0));
  c.merged = Tensor<T>(x.shape);
  std::vector<T> s(c.t);
  for (int64_t b = 0; b < c.n; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < c.t; ++i) {
        const int64_t keys = causal ? i + 1 : c.t;
        const T* qi = c.q.data.data() + (b * c.t + i) * c.d + h * c.dh;
        for (int64_t j = 0; j < keys; ++j) {
          const T* kj = c.k.data.data() + (b * c.t + j) * c.d + h * c.dh;
          T dot(0);
          for (int64_t e = 0; e < c.dh; ++e) dot += qi[e] * kj[e];
          s[j] = dot * c.scale;
        }
        T mx = s[0];
        for (int64_t j = 1; j < keys; ++j)
          if (s[j] > mx) mx = s[j];
        T sum(0);
        for (int64_t j = 0; j < keys; ++j) {
          T& pr = c.probs[c.p_at(b, h, i, j)];
          pr = exp(s[j] - mx);
          sum += pr;
        }
        T* oi = c.merged.data.data() + (b * c.t + i) * c.d + h * c.dh;
        for (int64_t j = 0; j < keys; ++j) {
          T& pr = c.probs[c.p_at(b, h, i, j)];
          pr /= sum;
          const T* vj = c.v.data.data() + (b * c.t + j) * c.d + h * c.dh;
          for (int64_t e = 0; e < c.dh; ++e) oi[e] += pr * vj[e];
        }
      }
  c.out = linear_fwd(c.merged, *p.wo, p.bo);
  return c;
}

template <class T>
struct AttentionGrads {
  Tensor<T>*dwq, *dwk, *dwv, *dwo;
  Tensor<T>*dbq, *dbk, *dbv, *dbo;  // null when the node has no such bias
};

template <class T>
void attention_bwd(const Tensor<T>& x, const AttentionParams<T>& p, const AttentionCache<T>& c,
                   const Tensor<T>& dy, Tensor<T>* dx, const AttentionGrads<T>& gr) {
  Tensor<T> dmerged(c.merged.shape), dq(x.shape), dk(x.shape), dv(x.shape);
  linear_bwd(c.merged, *p.wo, dy, &dmerged, *gr.dwo, gr.dbo);
  std::vector<T> dp(c.t);
  for (int64_t b = 0; b < c.n; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.t; ++i) {
        const int64_t keys = c.causal ? i + 1 : c.t;
        const int64_t row_i = (b * c.t + i) * c.d + h * c.dh;
        T dot(0);
        for (int64_t j = 0; j < keys; ++j) {
          const int64_t row_j = (b * c.t + j) * c.d + h * c.dh;
          const T& pr = c.probs[c.p_at(b, h, i, j)];
          T acc(0);
          for (int64_t e = 0; e < c.dh; ++e) {
            acc += dmerged.data[row_i + e] * c.v.data[row_j + e];
            dv.data[row_j + e] += pr * dmerged.data[row_i + e];
          }
          dp[j] = acc;
          dot += pr * acc;
        }
        for (int64_t j = 0; j < keys; ++j) {
          const int64_t row_j = (b * c.t + j) * c.d + h * c.dh;
          const T ds = c.probs[c.p_at(b, h, i, j)] * (dp[j] - dot) * c.scale;
          for (int64_t e = 0; e < c.dh; ++e) {
            dq.data[row_i + e] += ds * c.k.data[row_j + e];
            dk.data[row_j + e] += ds * c.q.data[row_i + e];
          }
        }
      }
  linear_bwd(x, *p.wq, dq, dx, *gr.dwq, gr.dbq);
  linear_bwd(x, *p.wk, dk, dx, *gr.dwk, gr.dbk);
  linear_bwd(x, *p.wv, dv, dx, *gr.dwv, gr.dbv);
}

// ---------------------------------------------------------------- rnn

template <class T>
struct RnnParams {
  const Tensor<T>* wih;
  const Tensor<T>* whh;
  const Tensor<T>* b;  // may be null
  bool has_norm = false;
  NormRow<T> norm;
};

// Pre-activation a_t = W_ih x_t + W_hh h_{t-1} + b for one sequence element.
template <class T>
void rnn_preact(const RnnParams<T>& p, const T* xt, const T* hprev, int64_t f, int64_t hsz,
                T* a) {
  for (int64_t o = 0; o < hsz; ++o) {
    T acc = p.b ? p.b->data[o] : T(0);
    for (int64_t i = 0; i < f; ++i) acc += p.wih->data[o * f + i] * xt[i];
    if (hprev)
      for (int64_t i = 0; i < hsz; ++i) acc += p.whh->data[o * hsz + i] * hprev[i];
    a[o] = acc;
  }
}

template <class T>
Tensor<T> rnn_fwd(const Tensor<T>& x, const RnnParams<T>& p) {
  using std::tanh;
  const int64_t n = x.shape[0], t = x.shape[1], f = x.shape[2], hsz = p.wih->shape[0];
  Tensor<T> y({n, t, hsz});
  std::vector<T> a(hsz), z(hsz);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t s = 0; s < t; ++s) {
      const T* hprev = s == 0 ? nullptr : y.data.data() + (b * t + s - 1) * hsz;
      rnn_preact(p, x.data.data() + (b * t + s) * f, hprev, f, hsz, a.data());
      if (p.has_norm)
        norm_row_fwd(p.norm, a.data(), hsz, z.data());
      else
        z = a;
      T* h = y.data.data() + (b * t + s) * hsz;
      for (int64_t o = 0; o < hsz; ++o) h[o] = tanh(z[o]);
    }
  return y;
}

template <class T>
struct RnnGrads {
  Tensor<T>* dwih;
  Tensor<T>* dwhh;
  Tensor<T>* db;      // null without bias
  Tensor<T>* dnorm_w;  // null without a norm weight
  Tensor<T>* dnorm_b;  // null without a norm bias
};

// Backpropagation through time, given the forward output y (all h_t).
template <class T>
void rnn_bwd(const Tensor<T>& x, const RnnParams<T>& p, const Tensor<T>& y, const Tensor<T>& dy,
             Tensor<T>* dx, const RnnGrads<T>& gr) {
  const int64_t n = x.shape[0], t = x.shape[1], f = x.shape[2], hsz = p.wih->shape[0];
  std::vector<T> a(hsz), dz(hsz), da(hsz), dh(hsz);
  for (int64_t b = 0; b < n; ++b) {
    std::fill(dh.begin(), dh.end(), T(0));  // gradient reaching h_s from step s + 1
    for (int64_t s = t - 1; s >= 0; --s) {
      const int64_t at = (b * t + s);
      const T* xt = x.data.data() + at * f;
      const T* h = y.data.data() + at * hsz;
      const T* hprev = s == 0 ? nullptr : y.data.data() + (at - 1) * hsz;
      for (int64_t o = 0; o < hsz; ++o)
        dz[o] = (dh[o] + dy.data[at * hsz + o]) * (T(1) - h[o] * h[o]);
      if (p.has_norm) {
        rnn_preact(p, xt, hprev, f, hsz, a.data());
        std::fill(da.begin(), da.end(), T(0));
        norm_row_bwd(p.norm, a.data(), hsz, dz.data(), da.data(),
                     gr.dnorm_w ? gr.dnorm_w->data.data() : nullptr,
                     gr.dnorm_b ? gr.dnorm_b->data.data() : nullptr);
      } else {
        da = dz;
      }
      std::fill(dh.begin(), dh.end(), T(0));
      for (int64_t o = 0; o < hsz; ++o) {
        const T& g = da[o];
        if (gr.db) gr.db->data[o] += g;
        for (int64_t i = 0; i < f; ++i) {
          gr.dwih->data[o * f + i] += g * xt[i];
          if (dx) dx->data[at * f + i] += g * p.wih->data[o * f + i];
        }
        if (hprev)
          for (int64_t i = 0; i < hsz; ++i) {
            gr.dwhh->data[o * hsz + i] += g * hprev[i];
            dh[i] += g * p.whh->data[o * hsz + i];
          }
      }
    }
  }
}

}  // namespace lnv::eval::detail

namespace lnv::eval::detail {

// ---------------------------------------------------------------- params as nodes read them

// A param as a node reads it: the effective value, or a centered copy when the node is
// cbwc and the attribute is one CBWC centers. Not copyable: it may point into itself.
template <class T>
class ParamRead {
 public:
  ParamRead(const Tensor<T>* v, int64_t axis) : v_(v) {
    if (v && axis >= 0) {
      owned_ = centered(*v, Axes{axis});
      v_ = &owned_;
    }
  }
  ParamRead(const ParamRead&) = delete;
  ParamRead& operator=(const ParamRead&) = delete;
  const Tensor<T>* get() const { return v_; }
  const Tensor<T>& operator*() const { return *v_; }

 private:
  const Tensor<T>* v_;
  Tensor<T> owned_;
};

template <class T>
ParamRead<T> read_param(const Graph& g, const std::vector<Tensor<T>>& params, const Node& n,
                        const std::string& attr, const std::string& name) {
  if (name.empty()) return ParamRead<T>(nullptr, -1);
  return ParamRead<T>(&params[g.param_index(name)], cbwc_axis(n, attr));
}

inline std::string node_where(const Node& n) { return "node '" + n.name + "'"; }

// An `opaque` node: the evaluators do not know what it computes.
inline NotEvaluableError not_evaluable(const Node& n) {
  return NotEvaluableError(node_where(n), "cannot evaluate op '" + n.op_type +
                                              "' (imported as opaque: lnverify does not "
                                              "model what it computes)");
}

// A slice: for each output element (row-major), the flat index of the input element it
// takes.
inline std::vector<int64_t> slice_sources(const Node& n, const Shape& in, const Shape& out) {
  const std::vector<SliceAxis> l = slice_layout(n, in, node_where(n));
  const std::vector<int64_t> st = strides_of(in);
  const size_t R = out.size();
  std::vector<int64_t> src(static_cast<size_t>(numel(out)));
  std::vector<int64_t> idx(R, 0);
  for (size_t f = 0; f < src.size(); ++f) {
    int64_t at = 0;
    for (size_t a = 0; a < R; ++a) at += (l[a].start + idx[a] * l[a].step) * st[a];
    src[f] = at;
    for (size_t a = R; a-- > 0;) {
      if (++idx[a] < out[a]) break;
      idx[a] = 0;
    }
  }
  return src;
}

// A constant-mode pad: for each output element (row-major), the flat index of the input
// element it copies, or -1 where it holds the pad value.
inline std::vector<int64_t> pad_sources(const Node& n, const Shape& in, const Shape& out) {
  const std::vector<PadAxis> l = pad_layout(n, in, node_where(n));
  const std::vector<int64_t> st = strides_of(in);
  const size_t R = out.size();
  std::vector<int64_t> src(static_cast<size_t>(numel(out)));
  std::vector<int64_t> idx(R, 0);
  for (size_t f = 0; f < src.size(); ++f) {
    int64_t at = 0;
    for (size_t a = 0; a < R && at >= 0; ++a) {
      const int64_t j = idx[a] - l[a].before;
      at = j < 0 || j >= in[a] ? -1 : at + j * st[a];
    }
    src[f] = at;
    for (size_t a = R; a-- > 0;) {
      if (++idx[a] < out[a]) break;
      idx[a] = 0;
    }
  }
  return src;
}

// A where node's condition broadcast to its output shape `out`: one bool per element.
inline std::vector<bool> where_mask(const Node& n, const Shape& out) {
  const std::vector<int64_t> src = broadcast_map(out, n.condition_shape);
  std::vector<bool> m(src.size());
  for (size_t k = 0; k < src.size(); ++k) m[k] = n.condition[src[k]] != 0;
  return m;
}

// Concat layout: `outer` blocks, each the inputs' `widths[k] * inner` values in turn.
struct ConcatLayout {
  int64_t outer = 1, inner = 1, total = 0;
  std::vector<int64_t> widths;
};

inline ConcatLayout concat_layout(const std::vector<Shape>& in, int64_t axis) {
  ConcatLayout l;
  for (int64_t a = 0; a < axis; ++a) l.outer *= in[0][a];
  for (size_t a = axis + 1; a < in[0].size(); ++a) l.inner *= in[0][a];
  for (const Shape& s : in) {
    l.widths.push_back(s[axis]);
    l.total += s[axis];
  }
  return l;
}

}  // namespace lnv::eval::detail

namespace lnv::eval::detail {

// The params an attention node reads (cbwc applied), alive as long as this object.
template <class T>
struct AttentionReads {
  ParamRead<T> wq, wk, wv, wo, bq, bk, bv, bo;
  AttentionReads(const Graph& g, const std::vector<Tensor<T>>& ps, const Node& n)
      : wq(read_param(g, ps, n, "wq", n.wq)), wk(read_param(g, ps, n, "wk", n.wk)),
        wv(read_param(g, ps, n, "wv", n.wv)), wo(read_param(g, ps, n, "wo", n.wo)),
        bq(read_param(g, ps, n, "bq", n.bq)), bk(read_param(g, ps, n, "bk", n.bk)),
        bv(read_param(g, ps, n, "bv", n.bv)), bo(read_param(g, ps, n, "bo", n.bo)) {}
  AttentionParams<T> view() const {
    return {wq.get(), wk.get(), wv.get(), wo.get(), bq.get(), bk.get(), bv.get(), bo.get()};
  }
};

// The params an rnn node reads (cbwc applied), alive as long as this object.
template <class T>
struct RnnReads {
  ParamRead<T> wih, whh, b, norm_w, norm_b;
  RnnParams<T> params;
  RnnReads(const Graph& g, const std::vector<Tensor<T>>& ps, const Node& n)
      : wih(read_param(g, ps, n, "weight_ih", n.weight_ih)),
        whh(read_param(g, ps, n, "weight_hh", n.weight_hh)),
        b(read_param(g, ps, n, "bias", n.bias)),
        norm_w(read_param(g, ps, n, "norm/weight", n.norm ? n.norm->weight : std::string())),
        norm_b(read_param(g, ps, n, "norm/bias", n.norm ? n.norm->bias : std::string())) {
    params.wih = wih.get();
    params.whh = whh.get();
    params.b = b.get();
    params.has_norm = n.norm.has_value();
    if (n.norm) {
      params.norm.layer = n.norm->kind == Op::layer_norm;
      params.norm.eps = T(n.norm->eps);
      params.norm.w = norm_w.get() ? norm_w.get()->data.data() : nullptr;
      params.norm.b = norm_b.get() ? norm_b.get()->data.data() : nullptr;
    }
  }
};

}  // namespace lnv::eval::detail
