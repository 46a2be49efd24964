// ONNX ops read as compositions of model.json ops (onnx/import_compositions.h). Each
// composition equals the ONNX op in exact arithmetic, so the exact evaluators and the
// analysis read the op through ops whose rules are derived (docs/onnx.md, "Ops imported
// as compositions"). A form a composition does not cover is opaque; an attribute value
// the ONNX operator specification rules out is an error naming the node.
#include "onnx/import_compositions.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/error.h"

namespace lnv::onnx_import {
namespace {

using lnv::Node;

// Emits the nodes of one composition for ONNX node n: intermediate nodes are named after
// n with a suffix, the last one as n, holding n's first output.
class Composer {
 public:
  Composer(Importer& im, const onnx_import::Node& n, size_t i) : im_(im), n_(n), i_(i) {}

  std::string in(size_t k) const { return im_.value(n_.inputs[k]); }
  const std::vector<int64_t>& shape(size_t k) const { return im_.shape(n_.inputs[k]); }
  const std::vector<int64_t>& out_shape() const { return im_.shape(n_.outputs[0]); }
  std::string base() const { return n_.name.empty() ? n_.outputs[0] : n_.name; }
  [[noreturn]] void fail(const std::string& what) const { throw ModelError(im_.describe(i_), what); }

  Node node(Op op, std::vector<std::string> inputs) { return im_.node(n_, i_, op, std::move(inputs), next()); }
  std::string emit(Node nd) { return im_.emit(std::move(nd)); }
  std::string op(Op o, std::vector<std::string> inputs) { return emit(node(o, std::move(inputs))); }
  std::string scale(const std::string& x, double f) {
    Node s = node(Op::scale, {x});
    s.factor = f;
    return emit(std::move(s));
  }
  std::string constant(const std::string& what, const Shape& shape, std::vector<double> values) {
    return im_.new_param(base() + "." + what, shape, std::move(values));
  }
  std::string scalar(const std::string& what, double v) { return constant(what, {1}, {v}); }
  std::string reshape(const std::string& x, Shape to) {
    Node r = node(Op::reshape, {x});
    r.shape = std::move(to);
    return emit(std::move(r));
  }
  std::string transpose(const std::string& x, std::vector<int64_t> perm) {
    Node t = node(Op::transpose, {x});
    t.perm = std::move(perm);
    return emit(std::move(t));
  }
  std::string reduce(Op o, const std::string& x, Axes axes, bool keepdims) {
    Node r = node(o, {x});
    r.axes = std::move(axes);
    r.keepdims = keepdims;
    return emit(std::move(r));
  }
  std::string slice(const std::string& x, Axes axes, std::vector<int64_t> starts,
                    std::vector<int64_t> ends, std::vector<int64_t> steps) {
    Node s = node(Op::slice, {x});
    s.axes = std::move(axes);
    s.starts = std::move(starts);
    s.ends = std::move(ends);
    s.steps = std::move(steps);
    return emit(std::move(s));
  }
  std::string concat(std::vector<std::string> parts, int64_t axis) {
    if (parts.size() == 1) return parts[0];
    Node c = node(Op::concat, std::move(parts));
    c.axis = axis;
    return emit(std::move(c));
  }
  // relu(-x): the negative part, as a nonnegative value.
  std::string negative_part(const std::string& x) { return op(Op::relu, {scale(x, -1.0)}); }
  std::string abs(const std::string& x) { return op(Op::add, {op(Op::relu, {x}), negative_part(x)}); }
  // The sum over axes: a mean scaled by the count.
  std::string sum(const std::string& x, const Shape& x_shape, const Axes& axes, bool keepdims) {
    int64_t count = 1;
    for (int64_t a : normalize_axes(axes, int64_t(x_shape.size()), im_.describe(i_))) count *= x_shape[a];
    return scale(reduce(Op::mean, x, axes, keepdims), double(count));
  }
  // The last node: renamed to n's name and bound to n's first output.
  void finish(const std::string& last) { finish_as(last, n_.outputs[0]); }
  void finish_as(const std::string& last, const std::string& onnx_value) {
    im_.alias_lnv(onnx_value, last);
  }

 private:
  std::string next() { return std::to_string(++count_); }

  Importer& im_;
  const onnx_import::Node& n_;
  size_t i_;
  int count_ = 0;
};

bool float_input(Importer& im, const onnx_import::Node& n) { return im.is_float_value(n.inputs[0]); }

std::string elu(Composer& c, const std::string& x, double alpha, double inner) {
  // x > 0: x; else alpha (exp(x / inner) - 1) = alpha exp(-relu(-x) / inner) - alpha.
  const std::string pos = c.op(Op::relu, {x});
  const std::string e = c.op(Op::exp, {c.scale(c.negative_part(x), -1.0 / inner)});
  const std::string neg = c.op(Op::add, {c.scale(e, alpha), c.scalar("minus_alpha", -alpha)});
  return c.op(Op::add, {pos, neg});
}

}  // namespace

void map_abs(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!float_input(im, n)) return im.opaque(i, "an integer operand");
  Composer c(im, n, i);
  c.finish(c.abs(c.in(0)));
}

// relu(x) - alpha relu(-x).
void map_leaky_relu(Importer& im, const onnx_import::Node& n, size_t i) {
  Composer c(im, n, i);
  const double alpha = im.attr_f(n, "alpha", 0.01);
  const std::string x = c.in(0);
  c.finish(c.op(Op::add, {c.op(Op::relu, {x}), c.scale(c.negative_part(x), -alpha)}));
}

// relu(x) - slope relu(-x), the slope a constant broadcast to x.
void map_prelu(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!im.is_constant(n.inputs[1])) return im.opaque(i, "a slope that is not a constant");
  Composer c(im, n, i);
  std::vector<double> minus = im.floats(n.inputs[1]);
  for (double& v : minus) v = -v;
  const std::string x = c.in(0);
  const std::string slope = c.constant("minus_slope", c.shape(1), std::move(minus));
  c.finish(c.op(Op::add, {c.op(Op::relu, {x}), c.op(Op::mul, {c.negative_part(x), slope})}));
}

// Elu: relu(x) + alpha (exp(min(x, 0)) - 1); Selu: gamma times Elu; Celu: relu(x) +
// alpha (exp(min(x, 0) / alpha) - 1).
void map_elu(Importer& im, const onnx_import::Node& n, size_t i) {
  Composer c(im, n, i);
  if (n.op_type == "Selu") {
    const double alpha = im.attr_f(n, "alpha", 1.67326319217681884765625);
    const double gamma = im.attr_f(n, "gamma", 1.05070102214813232421875);
    return c.finish(c.scale(elu(c, c.in(0), alpha, 1.0), gamma));
  }
  const double alpha = im.attr_f(n, "alpha", 1.0);
  if (n.op_type == "Celu" && alpha == 0.0) c.fail("Celu's alpha must not be 0 (it divides by it)");
  c.finish(elu(c, c.in(0), alpha, n.op_type == "Celu" ? alpha : 1.0));
}

// x / (1 + |x|).
void map_softsign(Importer& im, const onnx_import::Node& n, size_t i) {
  Composer c(im, n, i);
  const std::string x = c.in(0);
  c.finish(c.op(Op::div, {x, c.op(Op::add, {c.abs(x), c.scalar("one", 1.0)})}));
}

// log(exp(x) + 1).
void map_softplus(Importer& im, const onnx_import::Node& n, size_t i) {
  Composer c(im, n, i);
  c.finish(c.op(Op::log, {c.op(Op::add, {c.op(Op::exp, {c.in(0)}), c.scalar("one", 1.0)})}));
}

// The trigonometric and hyperbolic functions by their definitions: tan = sin / cos,
// asin x = atan(x / sqrt(1 - x²)), acos = π/2 - asin, sinh and cosh from exp, asinh x =
// log(x + sqrt(x² + 1)), acosh x = log(x + sqrt(x² - 1)), atanh x = log((1 + x) / (1 - x)) / 2.
void map_trig(Importer& im, const onnx_import::Node& n, size_t i) {
  Composer c(im, n, i);
  const std::string x = c.in(0);
  const std::string& t = n.op_type;
  auto square_plus = [&](double k) { return c.op(Op::add, {c.op(Op::mul, {x, x}), c.scalar("k", k)}); };
  if (t == "Tan") return c.finish(c.op(Op::div, {c.op(Op::sin, {x}), c.op(Op::cos, {x})}));
  if (t == "Asin" || t == "Acos") {
    const std::string root = c.op(Op::sqrt, {c.op(Op::add, {c.scale(c.op(Op::mul, {x, x}), -1.0),
                                                             c.scalar("one", 1.0)})});
    const std::string asin = c.op(Op::atan, {c.op(Op::div, {x, root})});
    if (t == "Asin") return c.finish(asin);
    return c.finish(c.op(Op::add, {c.scale(asin, -1.0), c.scalar("half_pi", std::acos(0.0))}));
  }
  if (t == "Sinh" || t == "Cosh") {
    const std::string ep = c.op(Op::exp, {x}), em = c.op(Op::exp, {c.scale(x, -1.0)});
    return c.finish(c.scale(c.op(t == "Sinh" ? Op::sub : Op::add, {ep, em}), 0.5));
  }
  if (t == "Asinh" || t == "Acosh")
    return c.finish(c.op(Op::log, {c.op(Op::add, {x, c.op(Op::sqrt, {square_plus(t == "Asinh" ? 1.0 : -1.0)})})}));
  // Atanh
  const std::string one = c.scalar("one", 1.0);
  const std::string q = c.op(Op::div, {c.op(Op::add, {x, one}), c.op(Op::sub, {one, x})});
  c.finish(c.scale(c.op(Op::log, {q}), 0.5));
}

// Min, Max: each operand broadcast to the output's shape and stacked on a new leading
// axis, then max over it (Min: -max(-x)); Sum: a chain of adds; Mean: the sum / count.
void map_variadic(Importer& im, const onnx_import::Node& n, size_t i) {
  for (const std::string& v : n.inputs)
    if (!im.is_float_value(v)) return im.opaque(i, "an integer operand");
  if (n.inputs.size() == 1) return im.alias(n.outputs[0], n.inputs[0]);
  Composer c(im, n, i);
  const Shape out = c.out_shape();
  const bool is_min = n.op_type == "Min";
  if (n.op_type == "Min" || n.op_type == "Max") {
    std::vector<std::string> rows;
    Shape row = out;
    row.insert(row.begin(), 1);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      std::string x = c.in(k);
      if (is_min) x = c.scale(x, -1.0);
      if (c.shape(k) != out) {
        lnv::Node e = c.node(Op::expand, {x});
        e.shape = out;
        x = c.emit(std::move(e));
      }
      rows.push_back(c.reshape(x, row));
    }
    const std::string m = c.reduce(Op::max, c.concat(std::move(rows), 0), {0}, false);
    return c.finish(is_min ? c.scale(m, -1.0) : m);
  }
  std::string s = c.in(0);
  for (size_t k = 1; k < n.inputs.size(); ++k) s = c.op(Op::add, {s, c.in(k)});
  c.finish(n.op_type == "Mean" ? c.scale(s, 1.0 / double(n.inputs.size())) : s);
}

// LogSoftmax: d - log(sum(exp(d))) with d = x - max(x) along the axis (ONNX's function
// body); before opset 13 over the flattened axes from `axis` on.
void map_log_softmax(Importer& im, const onnx_import::Node& n, size_t i) {
  Composer c(im, n, i);
  const Shape x_shape = c.shape(0);
  const int64_t rank = int64_t(x_shape.size());
  const bool flattening = im.model().opset("") < 13;
  int64_t axis = im.attr_i(n, "axis", flattening ? 1 : -1);
  if (axis < -rank || axis >= rank) c.fail("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  std::string x = c.in(0);
  Shape shape = x_shape;
  if (flattening && axis != rank - 1) {
    const int64_t a = std::accumulate(x_shape.begin(), x_shape.begin() + axis, int64_t{1}, std::multiplies<>());
    shape = {a, std::accumulate(x_shape.begin() + axis, x_shape.end(), int64_t{1}, std::multiplies<>())};
    x = c.reshape(x, shape);
    axis = 1;
  }
  const std::string d = c.op(Op::sub, {x, c.reduce(Op::max, x, {axis}, true)});
  const std::string lse = c.op(Op::log, {c.sum(c.op(Op::exp, {d}), shape, {axis}, true)});
  std::string y = c.op(Op::sub, {d, lse});
  if (shape != x_shape) y = c.reshape(y, x_shape);
  c.finish(y);
}

// ReduceProd = the product of the slices; ReduceMin = -max(-x); ReduceSumSquare = sum(x²); ReduceL1 = sum(|x|); ReduceL2 =
// sqrt(sum(x²)); ReduceLogSum = log(sum(x)); ReduceLogSumExp = log(sum(exp(x - m))) + m, m
// the max (ONNX Runtime's stable form, equal in exact arithmetic).
void map_reduce_composite(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!float_input(im, n)) return im.opaque(i, "an integer operand");
  const auto read = im.reduce_axes(n);
  if (!read) return im.opaque(i, "axes that are not a constant");
  Composer c(im, n, i);
  const Shape x_shape = c.shape(0);
  const int64_t rank = int64_t(x_shape.size());
  Axes axes = *read;
  if (axes.empty()) {
    if (im.attr_i(n, "noop_with_empty_axes", 0) != 0) return im.opaque(i, "noop_with_empty_axes");
    for (int64_t k = 0; k < rank; ++k) axes.push_back(k);
  }
  for (int64_t a : axes)
    if (a < -rank || a >= rank) c.fail("axis " + std::to_string(a) + " out of range for rank " + std::to_string(rank));
  const bool keep = im.attr_i(n, "keepdims", 1) != 0;
  const std::string x = c.in(0);
  const std::string& t = n.op_type;
  if (t == "ReduceMin") return c.finish(c.scale(c.reduce(Op::max, c.scale(x, -1.0), axes, keep), -1.0));
  if (t == "ReduceSumSquare") return c.finish(c.sum(c.op(Op::mul, {x, x}), x_shape, axes, keep));
  if (t == "ReduceL1") return c.finish(c.sum(c.abs(x), x_shape, axes, keep));
  if (t == "ReduceL2") return c.finish(c.op(Op::sqrt, {c.sum(c.op(Op::mul, {x, x}), x_shape, axes, keep)}));
  if (t == "ReduceLogSum") return c.finish(c.op(Op::log, {c.sum(x, x_shape, axes, keep)}));
  if (t == "ReduceProd") {  // the product of the slices along each axis, one axis at a time
    std::string p = x;
    for (int64_t a : normalize_axes(axes, rank, im.describe(i))) {
      if (x_shape[size_t(a)] > 64) return im.opaque(i, "more than 64 elements along a reduced axis");
      std::string prod = c.slice(p, {a}, {0}, {1}, {1});
      for (int64_t k = 1; k < x_shape[size_t(a)]; ++k) prod = c.op(Op::mul, {prod, c.slice(p, {a}, {k}, {k + 1}, {1})});
      p = prod;
    }
    return c.finish(keep ? p : c.reshape(p, c.out_shape()));
  }
  // ReduceLogSumExp
  const std::string m = c.reduce(Op::max, x, axes, true);
  const std::string e = c.op(Op::exp, {c.op(Op::sub, {x, m})});
  const std::string l = c.op(Op::log, {c.sum(e, x_shape, axes, keep)});
  c.finish(c.op(Op::add, {l, keep ? m : c.reshape(m, c.out_shape())}));
}

// CumSum along a constant axis: the axis moved last, a matmul by the constant triangular
// matrix of ones that sums each prefix (or suffix: reverse; without the element itself:
// exclusive), and moved back.
void map_cumsum(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!float_input(im, n)) return im.opaque(i, "an integer operand");
  const Initializer* ax = im.constant(n.inputs[1]);
  if (!ax || ax->value.is_float() || ax->value.ints.size() != 1) return im.opaque(i, "an axis that is not a constant");
  Composer c(im, n, i);
  const Shape x_shape = c.shape(0);
  const int64_t rank = int64_t(x_shape.size());
  int64_t axis = ax->value.ints[0];
  if (axis < -rank || axis >= rank) c.fail("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  const bool exclusive = im.attr_i(n, "exclusive", 0) != 0, reverse = im.attr_i(n, "reverse", 0) != 0;
  const int64_t len = x_shape[axis];
  std::vector<double> tri(size_t(len * len), 0.0);
  for (int64_t r = 0; r < len; ++r)
    for (int64_t col = 0; col < len; ++col) {  // y[col] = sum over r of x[r] tri[r][col]
      const bool in = reverse ? (exclusive ? r > col : r >= col) : (exclusive ? r < col : r <= col);
      tri[size_t(r * len + col)] = in ? 1.0 : 0.0;
    }
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[size_t(axis)], perm[size_t(rank - 1)]);
  std::string x = c.in(0);
  if (axis != rank - 1) x = c.transpose(x, perm);
  Shape moved = x_shape;
  std::swap(moved[size_t(axis)], moved[size_t(rank - 1)]);
  if (rank == 1) x = c.reshape(x, {1, len});
  std::string y = c.op(Op::matmul, {x, c.constant("prefix_sums", {len, len}, std::move(tri))});
  if (rank == 1) y = c.reshape(y, x_shape);
  if (axis != rank - 1) y = c.transpose(y, perm);
  c.finish(y);
}

// Tile by constant repeats: copies concatenated along each axis.
void map_tile(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!float_input(im, n)) return im.opaque(i, "an integer operand");
  const Initializer* r = im.constant(n.inputs[1]);
  if (!r || r->value.is_float()) return im.opaque(i, "repeats that are not a constant");
  Composer c(im, n, i);
  const auto& reps = r->value.ints;
  if (reps.size() != c.shape(0).size())
    c.fail("repeats has " + std::to_string(reps.size()) + " entries for an input of rank " +
           std::to_string(c.shape(0).size()));
  std::string y = c.in(0);
  for (size_t a = 0; a < reps.size(); ++a) {
    if (reps[a] < 1) c.fail("repeats[" + std::to_string(a) + "] is " + std::to_string(reps[a]) + ", expected at least 1");
    if (reps[a] > 64) return im.opaque(i, "more than 64 repeats along an axis");
    y = c.concat(std::vector<std::string>(size_t(reps[a]), y), int64_t(a));
  }
  if (y == c.in(0)) return im.alias(n.outputs[0], n.inputs[0]);
  c.finish(y);
}

// InstanceNormalization: a layer_norm over the spatial axes (no weight), times the scale
// and plus the bias per channel.
void map_instance_norm(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!im.is_constant(n.inputs[1]) || !im.is_constant(n.inputs[2]))
    return im.opaque(i, "a scale or bias that is not a constant");
  Composer c(im, n, i);
  const Shape x_shape = c.shape(0);
  if (x_shape.size() < 3) c.fail("expected an input of rank 3 or more (N, C, spatial...)");
  Shape per_channel(x_shape.size() - 1, 1);
  per_channel[0] = x_shape[1];
  if (im.numel(n.inputs[1]) != x_shape[1] || im.numel(n.inputs[2]) != x_shape[1])
    c.fail("scale and B must hold one value per channel (" + std::to_string(x_shape[1]) + ")");
  lnv::Node ln = c.node(Op::layer_norm, {c.in(0)});
  for (int64_t a = 2; a < int64_t(x_shape.size()); ++a) ln.axes.push_back(a);
  ln.eps = im.attr_f(n, "epsilon", 1e-5);
  const std::string normed = c.emit(std::move(ln));
  const std::string scaled = c.op(Op::mul, {normed, c.constant("scale", per_channel, im.floats(n.inputs[1]))});
  c.finish(c.op(Op::add, {scaled, c.constant("bias", per_channel, im.floats(n.inputs[2]))}));
}

namespace {

// Whether the windows tile the input (stride = kernel, dilation 1, each out · kernel ≤ the
// input's size), so that the pool is a reduction over reshaped axes.
bool tiles(const Shape& x, const Shape& out, const std::vector<int64_t>& kernel,
           const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations) {
  for (size_t k = 0; k < kernel.size(); ++k)
    if (strides[k] != kernel[k] || dilations[k] != 1 || out[2 + k] * kernel[k] > x[2 + k]) return false;
  return true;
}

// A tiling pool: the input cut to out · kernel along each spatial axis (the tail no window
// reads), reshaped to [N, C, out1, k1, out2, k2, ...], reduced over the k axes (max, or
// mean: count_include_pad does not matter without padding).
std::string pool_tiles(Composer& c, const Shape& x, const Shape& out, const std::vector<int64_t>& kernel,
                       bool is_max) {
  std::string v = c.in(0);
  Axes cut, ends;
  for (size_t k = 0; k < kernel.size(); ++k)
    if (out[2 + k] * kernel[k] < x[2 + k]) cut.push_back(int64_t(k + 2)), ends.push_back(out[2 + k] * kernel[k]);
  if (!cut.empty()) v = c.slice(v, cut, std::vector<int64_t>(cut.size(), 0), ends, std::vector<int64_t>(cut.size(), 1));
  Shape split = {x[0], x[1]};
  Axes window;
  for (size_t k = 0; k < kernel.size(); ++k) {
    split.push_back(out[2 + k]);
    split.push_back(kernel[k]);
    window.push_back(int64_t(split.size() - 1));
  }
  return c.reduce(is_max ? Op::max : Op::mean, c.reshape(v, split), window, false);
}

}  // namespace

// MaxPool and AveragePool: when the windows tile the input, a max or mean over reshaped
// axes. Otherwise one strided slice of the padded input per kernel offset. Max:
// the slices stacked on a new leading axis and max over it; the input padded by repeating
// its edge, which leaves each window's max unchanged when every window is contiguous
// (dilation 1) and holds an element of the input. Average: the sum of the slices of the
// input padded with zeros, times 1 / the count of each window (the elements of the input,
// or with count_include_pad those within the explicit pads too).
void map_pool(Importer& im, const onnx_import::Node& n, size_t i) {
  const bool is_max = n.op_type == "MaxPool";
  if (!float_input(im, n)) return im.opaque(i, "an integer operand");
  if (is_max && n.outputs.size() > 1 && im.used(n, 1)) return im.opaque(i, "its Indices output is used");
  Composer c(im, n, i);
  const Shape x = c.shape(0), out = c.out_shape();
  const auto kernel = im.attr_ints(n, "kernel_shape", {});
  const size_t s = kernel.size();
  if (s == 0 || x.size() != s + 2) c.fail("kernel_shape must have one entry per spatial axis of the input");
  const auto strides = im.attr_ints(n, "strides", std::vector<int64_t>(s, 1));
  const auto dilations = im.attr_ints(n, "dilations", std::vector<int64_t>(s, 1));
  auto pads = im.attr_ints(n, "pads", std::vector<int64_t>(2 * s, 0));
  if (strides.size() != s || dilations.size() != s || pads.size() != 2 * s)
    c.fail("strides, dilations and pads must have one entry per spatial axis (pads two)");
  for (size_t k = 0; k < s; ++k)
    if (kernel[k] < 1 || strides[k] < 1 || dilations[k] < 1 || pads[k] < 0 || pads[k + s] < 0)
      c.fail("kernel_shape, strides and dilations must be positive and pads not negative");
  const std::string auto_pad = im.attr_s(n, "auto_pad", "NOTSET");
  if (auto_pad == "VALID") pads.assign(2 * s, 0);
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
    for (size_t k = 0; k < s; ++k) {
      const int64_t total = std::max<int64_t>(
          (out[2 + k] - 1) * strides[k] + (kernel[k] - 1) * dilations[k] + 1 - x[2 + k], 0);
      pads[k] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[k + s] = total - pads[k];
    }
  const bool unpadded = std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; });
  if (!is_max && unpadded && std::equal(kernel.begin(), kernel.end(), x.begin() + 2, x.end())) {
    Axes spatial(s);  // one window over the whole input: a mean, as GlobalAveragePool
    std::iota(spatial.begin(), spatial.end(), 2);
    return c.finish(c.reduce(Op::mean, c.in(0), spatial, true));
  }
  if (unpadded && tiles(x, out, kernel, strides, dilations)) return c.finish(pool_tiles(c, x, out, kernel, is_max));
  int64_t offsets = 1;
  for (int64_t k : kernel) offsets *= k;
  if (offsets > 256) return im.opaque(i, "a window of more than 256 elements");
  // The padding each axis needs: the begin pads, and at the end what the last window
  // reaches (more than the pads with ceil_mode).
  std::vector<int64_t> begin(s), end(s);
  for (size_t k = 0; k < s; ++k) {
    begin[k] = pads[k];
    end[k] = std::max<int64_t>(
        (out[2 + k] - 1) * strides[k] + (kernel[k] - 1) * dilations[k] + 1 - x[2 + k] - begin[k], 0);
    for (int64_t o = 0; o < out[2 + k]; ++o) {
      const int64_t first = o * strides[k] - begin[k], last = first + (kernel[k] - 1) * dilations[k];
      if (last < 0 || first >= x[2 + k]) return im.opaque(i, "a window that holds no element of the input");
    }
    if (is_max && dilations[k] != 1 && (begin[k] > 0 || end[k] > 0))
      return im.opaque(i, "padding with dilations other than 1");
  }
  const std::string in = c.in(0);
  std::string padded = in;
  if (is_max) {
    for (size_t k = 0; k < s; ++k) {
      const int64_t a = int64_t(k + 2);
      if (begin[k] == 0 && end[k] == 0) continue;
      const std::string first = c.slice(padded, {a}, {0}, {1}, {1});
      const std::string last = c.slice(padded, {a}, {x[size_t(a)] - 1}, {x[size_t(a)]}, {1});
      std::vector<std::string> parts(size_t(begin[k]), first);
      parts.push_back(padded);
      parts.insert(parts.end(), size_t(end[k]), last);
      padded = c.concat(std::move(parts), a);
    }
  } else if (std::any_of(begin.begin(), begin.end(), [](int64_t p) { return p > 0; }) ||
             std::any_of(end.begin(), end.end(), [](int64_t p) { return p > 0; })) {
    lnv::Node p = c.node(Op::pad, {padded});
    p.pads.assign(2 * x.size(), 0);
    for (size_t k = 0; k < s; ++k) p.pads[k + 2] = begin[k], p.pads[k + 2 + x.size()] = end[k];
    padded = c.emit(std::move(p));
  }
  Axes axes(s);
  std::iota(axes.begin(), axes.end(), 2);
  std::vector<std::string> windows;
  Shape row = out;
  row.insert(row.begin(), 1);
  std::vector<int64_t> off(s, 0);
  for (int64_t w = 0; w < offsets; ++w) {
    std::vector<int64_t> starts(s), ends(s);
    for (size_t k = 0; k < s; ++k) {
      starts[k] = off[k] * dilations[k];
      ends[k] = starts[k] + (out[2 + k] - 1) * strides[k] + 1;
    }
    const std::string sl = c.slice(padded, axes, starts, ends, strides);
    windows.push_back(is_max ? c.reshape(sl, row) : sl);
    for (size_t k = s; k-- > 0;) {  // the next offset, the last axis fastest
      if (++off[k] < kernel[k]) break;
      off[k] = 0;
    }
  }
  if (is_max) return c.finish(c.reduce(Op::max, c.concat(std::move(windows), 0), {0}, false));
  std::string sum = windows[0];
  for (size_t w = 1; w < windows.size(); ++w) sum = c.op(Op::add, {sum, windows[w]});
  // 1 / count per output position: a product over the spatial axes.
  const bool include_pad = im.attr_i(n, "count_include_pad", 0) != 0;
  Shape spatial(out.begin() + 2, out.end());
  int64_t positions = 1;
  for (int64_t d : spatial) positions *= d;
  std::vector<double> inv(size_t(positions), 1.0);
  for (int64_t p = 0; p < positions; ++p) {
    int64_t rest = p, count = 1;
    for (size_t k = s; k-- > 0;) {
      const int64_t o = rest % out[2 + k];
      rest /= out[2 + k];
      const int64_t lo = include_pad ? -pads[k] : 0, hi = x[2 + k] + (include_pad ? pads[k + s] : 0);
      int64_t inside = 0;
      for (int64_t t = 0; t < kernel[k]; ++t) {
        const int64_t at = o * strides[k] - begin[k] + t * dilations[k];
        inside += at >= lo && at < hi;
      }
      count *= inside;
    }
    inv[size_t(p)] = 1.0 / double(count);
  }
  if (std::all_of(inv.begin(), inv.end(), [&](double v) { return v == inv[0]; }))
    return c.finish(c.scale(sum, inv[0]));
  spatial.insert(spatial.begin(), {1, 1});
  c.finish(c.op(Op::mul, {sum, c.constant("inverse_counts", spatial, std::move(inv))}));
}

namespace {

// "ij,jk->ik": the operands' labels and the output's; nullopt for a form not read (an
// ellipsis, an implicit output, a label twice in one term).
std::optional<std::vector<std::string>> parse_einsum(std::string eq) {
  std::erase(eq, ' ');
  const size_t arrow = eq.find("->");
  if (arrow == std::string::npos || eq.find("...") != std::string::npos) return std::nullopt;
  std::vector<std::string> terms;
  std::string lhs = eq.substr(0, arrow);
  size_t start = 0;
  for (size_t comma; (comma = lhs.find(',', start)) != std::string::npos; start = comma + 1)
    terms.push_back(lhs.substr(start, comma - start));
  terms.push_back(lhs.substr(start));
  terms.push_back(eq.substr(arrow + 2));
  for (const std::string& t : terms) {
    std::string sorted = t;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return std::nullopt;
  }
  return terms;
}

}  // namespace

// Einsum of one or two operands without an ellipsis or a label repeated within a term.
// Labels of one operand that the output lacks are summed first; two operands are then a
// batched matmul: each transposed to [batch, own, contracted] (or [batch, contracted,
// own]) and reshaped to rank 3, multiplied, reshaped to [batch, a's own, b's own] and
// transposed to the output's order. So an Einsum that is a matmul is a matmul.
void map_einsum(Importer& im, const onnx_import::Node& n, size_t i) {
  for (const std::string& v : n.inputs)
    if (!im.is_float_value(v)) return im.opaque(i, "an integer operand");
  Composer c(im, n, i);
  const auto terms = parse_einsum(im.attr_s(n, "equation", ""));
  if (!terms || terms->size() != n.inputs.size() + 1 || n.inputs.size() > 2)
    return im.opaque(i, "an equation other than one or two operands without an ellipsis or a repeated label");
  const std::string& out = terms->back();
  std::vector<std::string> labels;  // each operand's labels after its own sums
  std::vector<std::string> values;
  std::vector<Shape> shapes;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const std::string& t = (*terms)[k];
    Shape sh = c.shape(k);
    if (sh.size() != t.size()) c.fail("operand " + std::to_string(k) + " has rank " + std::to_string(sh.size()) +
                                      ", its term '" + t + "' " + std::to_string(t.size()) + " labels");
    const std::string other = n.inputs.size() == 2 ? (*terms)[1 - k] : "";
    Axes summed;
    std::string kept;
    Shape kept_shape;
    for (size_t a = 0; a < t.size(); ++a) {
      if (out.find(t[a]) == std::string::npos && other.find(t[a]) == std::string::npos) summed.push_back(int64_t(a));
      else kept += t[a], kept_shape.push_back(sh[a]);
    }
    std::string v = c.in(k);
    if (!summed.empty()) v = c.sum(v, sh, summed, false);
    labels.push_back(kept);
    values.push_back(v);
    shapes.push_back(kept_shape);
  }
  for (char l : out)
    if (std::none_of(labels.begin(), labels.end(), [&](const std::string& t) { return t.find(l) != std::string::npos; }))
      c.fail(std::string("output label '") + l + "' is in no operand");
  auto dim_of = [&](char l) {
    for (size_t k = 0; k < labels.size(); ++k)
      if (size_t a = labels[k].find(l); a != std::string::npos) return shapes[k][a];
    return int64_t{1};
  };
  // Permutes value v (labels `from`) to the order `to`.
  auto permute = [&](const std::string& v, const std::string& from, const std::string& to) {
    if (from == to) return v;
    std::vector<int64_t> perm;
    for (char l : to) perm.push_back(int64_t(from.find(l)));
    return c.transpose(v, perm);
  };
  if (values.size() == 1) return c.finish(permute(values[0], labels[0], out));
  const std::string &a = labels[0], &b = labels[1];
  std::string batch, a_own, b_own, contracted;
  for (char l : a) {
    const bool in_b = b.find(l) != std::string::npos, in_out = out.find(l) != std::string::npos;
    if (in_b && in_out) batch += l;
    else if (in_b) contracted += l;
    else a_own += l;
  }
  for (char l : b)
    if (a.find(l) == std::string::npos) b_own += l;
  for (char l : batch + contracted)
    if (shapes[0][a.find(l)] != shapes[1][b.find(l)])
      c.fail(std::string("label '") + l + "' has different sizes in the two operands");
  auto product = [&](const std::string& ls) {
    int64_t p = 1;
    for (char l : ls) p *= dim_of(l);
    return p;
  };
  const int64_t nb = product(batch), m = product(a_own), kk = product(contracted), nn = product(b_own);
  if (batch.empty() && im.is_constant(n.inputs[1]) && labels[1] == (*terms)[1]) {
    // x · W with W a constant: W's values laid out as [contracted, b's own] in a param,
    // x's own axes kept in front, as a MatMul by a weight imports.
    const Shape b_shape = c.shape(1);
    const std::vector<double> w = im.floats(n.inputs[1]);
    std::vector<double> laid(w.size());
    std::vector<int64_t> stride(b.size(), 1);
    for (size_t k = b.size(); k-- > 1;) stride[k - 1] = stride[k] * b_shape[k];
    const std::string order = contracted + b_own;
    std::vector<int64_t> idx(order.size(), 0);
    for (size_t flat = 0; flat < laid.size(); ++flat) {
      int64_t at = 0;
      for (size_t k = 0; k < order.size(); ++k) at += idx[k] * stride[b.find(order[k])];
      laid[flat] = w[size_t(at)];
      for (size_t k = order.size(); k-- > 0;) {
        if (++idx[k] < dim_of(order[k])) break;
        idx[k] = 0;
      }
    }
    const std::string weight = c.constant("weight", {kk, nn}, std::move(laid));
    std::string xa = permute(values[0], a, a_own + contracted);
    Shape lead;
    for (char l : a_own) lead.push_back(dim_of(l));
    Shape xs = lead;
    xs.push_back(kk);
    if (contracted.size() != 1 || lead.empty()) xa = c.reshape(xa, lead.empty() ? Shape{1, kk} : xs);
    std::string y = c.op(Op::matmul, {xa, weight});
    Shape ys = lead;
    for (char l : b_own) ys.push_back(dim_of(l));
    if (b_own.size() != 1 || lead.empty()) y = c.reshape(y, ys.empty() ? c.out_shape() : ys);
    return c.finish(permute(y, a_own + b_own, out));
  }
  const std::string a3 = c.reshape(permute(values[0], a, batch + a_own + contracted), {nb, m, kk});
  const std::string b3 = c.reshape(permute(values[1], b, batch + contracted + b_own), {nb, kk, nn});
  const std::string prod = c.op(Op::matmul, {a3, b3});
  const std::string order = batch + a_own + b_own;
  Shape full;
  for (char l : order) full.push_back(dim_of(l));
  if (full.empty()) full = {1};
  std::string y = c.reshape(prod, full);
  if (order.empty()) return c.finish(c.reshape(y, c.out_shape()));
  c.finish(permute(y, order, out));
}

}  // namespace lnv::onnx_import

namespace lnv::onnx_import {
namespace {

// How Resize maps output positions to input positions and weighs the neighbours.
struct ResizeMode {
  std::string mode = "nearest", coordinates = "half_pixel", nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
};

// The weights of one output position's neighbours at `ratio` (in (0, 1], 1 when the
// position is an input index), as ONNX's reference implementation of Resize takes them.
std::vector<double> resize_coeffs(const ResizeMode& m, double ratio, bool integral) {
  if (m.mode == "nearest") {
    if (integral) return {0, 1};
    if (m.nearest == "round_prefer_floor") return {double(ratio <= 0.5), double(ratio > 0.5)};
    if (m.nearest == "round_prefer_ceil") return {double(ratio < 0.5), double(ratio >= 0.5)};
    if (m.nearest == "floor") return {1, 0};
    return {0, 1};  // ceil
  }
  if (m.mode == "linear") return {1 - ratio, ratio};
  const double a = m.cubic_a, r = ratio, q = 1 - ratio;
  return {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
          ((a + 2) * r - (a + 3)) * r * r + 1, ((a + 2) * q - (a + 3)) * q * q + 1,
          ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a};
}

// One axis of a Resize as a constant [in, out] matrix: column j holds the weights of the
// input elements that output element j interpolates (the input's edge repeats beyond it).
std::vector<double> resize_matrix(const ResizeMode& m, int64_t in, int64_t out, double scale) {
  std::vector<double> w(size_t(in * out), 0.0);
  const double out_width = scale * double(in);
  for (int64_t j = 0; j < out; ++j) {
    double x = 0;
    if (m.coordinates == "align_corners") x = out_width == 1 ? 0.0 : double(j) * double(in - 1) / (out_width - 1);
    else if (m.coordinates == "asymmetric") x = double(j) / scale;
    else if (m.coordinates == "pytorch_half_pixel") x = out_width == 1 ? -0.5 : (double(j) + 0.5) / scale - 0.5;
    else if (m.coordinates == "tf_half_pixel_for_nn") x = (double(j) + 0.5) / scale;
    else x = (double(j) + 0.5) / scale - 0.5;  // half_pixel
    const bool integral = x == std::floor(x);
    std::vector<double> coeffs = resize_coeffs(m, integral ? 1.0 : x - std::floor(x), integral);
    const int64_t n = int64_t(coeffs.size()), pad = (n + 1) / 2;
    // The n positions of the edge-padded input nearest to x (ties to the lower), in order.
    std::vector<int64_t> near;
    for (int64_t p = 0; p < in + 2 * pad; ++p) near.push_back(p);
    const double xp = x + double(pad);
    std::stable_sort(near.begin(), near.end(), [&](int64_t a, int64_t b) {
      return std::fabs(xp - double(a)) < std::fabs(xp - double(b));
    });
    near.resize(size_t(n));
    std::sort(near.begin(), near.end());
    if (m.exclude_outside) {
      double total = 0;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t at = near[size_t(k)] - pad;
        if (at < 0 || at >= in) coeffs[size_t(k)] = 0;
        total += coeffs[size_t(k)];
      }
      for (double& c : coeffs) c /= total;
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t at = std::clamp<int64_t>(near[size_t(k)] - pad, 0, in - 1);
      w[size_t(at * out + j)] += coeffs[size_t(k)];
    }
  }
  return w;
}

}  // namespace

// Resize (opset 11 on) and Upsample: separable, so one constant [in, out] matrix per
// resized axis (resize_matrix), applied as a matmul with that axis moved last. Each
// output element is the same fixed combination of input elements that ONNX's reference
// implementation computes (nearest: one element; linear: two; cubic: four).
void map_resize(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!float_input(im, n)) return im.opaque(i, "an integer operand");
  Composer c(im, n, i);
  const Shape x = c.shape(0), out = c.out_shape();
  ResizeMode m;
  m.mode = im.attr_s(n, "mode", "nearest");
  std::vector<double> scales;
  const bool upsample = n.op_type == "Upsample";
  if (upsample || im.model().opset("") < 11) {
    if (!upsample) return im.opaque(i, "Resize before opset 11");
    m.coordinates = "asymmetric";
    m.nearest = "floor";
    if (n.inputs.size() > 1) {
      if (!im.is_constant(n.inputs[1])) return im.opaque(i, "scales that are not a constant");
      scales = im.floats(n.inputs[1]);
    } else if (const Attribute* a = n.attr("scales")) {  // opset 7: an attribute
      scales.assign(a->floats.begin(), a->floats.end());
    }
  } else {
    m.coordinates = im.attr_s(n, "coordinate_transformation_mode", "half_pixel");
    m.nearest = im.attr_s(n, "nearest_mode", "round_prefer_floor");
    m.cubic_a = im.attr_f(n, "cubic_coeff_a", -0.75);
    m.exclude_outside = im.attr_i(n, "exclude_outside", 0) != 0;
    if (m.coordinates == "tf_crop_and_resize") return im.opaque(i, "coordinate_transformation_mode tf_crop_and_resize");
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
      if (!im.is_constant(n.inputs[2])) return im.opaque(i, "scales that are not a constant");
      scales = im.floats(n.inputs[2]);
    }
    if (scales.empty()) {  // from sizes: out / in
      if (n.inputs.size() < 4 || n.inputs[3].empty()) c.fail("neither scales nor sizes given");
      for (size_t a = 0; a < x.size(); ++a) scales.push_back(double(out[a]) / double(x[a]));
    }
  }
  const std::set<std::string> modes = {"nearest", "linear", "cubic"};
  if (!modes.count(m.mode)) c.fail("mode '" + m.mode + "': expected nearest, linear or cubic");
  if (upsample && m.mode == "cubic") c.fail("Upsample's mode is nearest or linear");
  const std::set<std::string> coords = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                        "tf_half_pixel_for_nn"};
  if (!coords.count(m.coordinates)) c.fail("coordinate_transformation_mode '" + m.coordinates + "' is not ONNX's");
  const std::set<std::string> nearest = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  if (!nearest.count(m.nearest)) c.fail("nearest_mode '" + m.nearest + "' is not ONNX's");
  if (scales.size() != x.size()) c.fail("scales has " + std::to_string(scales.size()) + " entries for an input of rank " + std::to_string(x.size()));
  std::string y = c.in(0);
  Shape now = x;
  const int64_t rank = int64_t(x.size());
  for (int64_t a = 0; a < rank; ++a) {
    if (!(scales[size_t(a)] > 0)) c.fail("scales must be positive");
    if (scales[size_t(a)] == 1.0 && out[size_t(a)] == x[size_t(a)]) continue;
    std::vector<int64_t> perm(static_cast<size_t>(rank));
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[size_t(a)], perm[size_t(rank - 1)]);
    if (a != rank - 1) y = c.transpose(y, perm);
    const int64_t len_in = x[size_t(a)], len_out = out[size_t(a)];
    Shape moved = now;
    std::swap(moved[size_t(a)], moved[size_t(rank - 1)]);
    const bool flat = rank == 1;
    if (flat) y = c.reshape(y, {1, len_in});
    y = c.op(Op::matmul, {y, c.constant("resize" + std::to_string(a), {len_in, len_out},
                                        resize_matrix(m, len_in, len_out, scales[size_t(a)]))});
    if (flat) y = c.reshape(y, {len_out});
    if (a != rank - 1) y = c.transpose(y, perm);
    now[size_t(a)] = len_out;
  }
  if (y == c.in(0)) return im.alias(n.outputs[0], n.inputs[0]);
  c.finish(y);
}

// DepthToSpace (DCR, CRD) and SpaceToDepth: a reshape, a transpose, a reshape.
void map_depth_space(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!float_input(im, n)) return im.opaque(i, "an integer operand");
  Composer c(im, n, i);
  const Shape x = c.shape(0);
  const int64_t b = im.attr_i(n, "blocksize", 0);
  if (x.size() != 4) c.fail("expected an input of rank 4");
  if (b < 1) c.fail("blocksize must be positive");
  const int64_t N = x[0], C = x[1], H = x[2], W = x[3];
  if (n.op_type == "SpaceToDepth") {
    if (H % b || W % b) c.fail("height and width must be multiples of blocksize");
    const std::string r = c.reshape(c.in(0), {N, C, H / b, b, W / b, b});
    return c.finish(c.reshape(c.transpose(r, {0, 3, 5, 1, 2, 4}), {N, C * b * b, H / b, W / b}));
  }
  if (C % (b * b)) c.fail("channels must be a multiple of blocksize²");
  const bool crd = im.attr_s(n, "mode", "DCR") == "CRD";
  const std::string r = crd ? c.reshape(c.in(0), {N, C / (b * b), b, b, H, W})
                            : c.reshape(c.in(0), {N, b, b, C / (b * b), H, W});
  const std::string t = crd ? c.transpose(r, {0, 1, 4, 2, 5, 3}) : c.transpose(r, {0, 3, 4, 1, 5, 2});
  c.finish(c.reshape(t, {N, C / (b * b), H * b, W * b}));
}

// Shrink with bias = lambd (soft shrinkage, continuous): relu(x - lambd) - relu(-x - lambd).
void map_shrink(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!float_input(im, n)) return im.opaque(i, "an integer operand");
  const double lambd = im.attr_f(n, "lambd", 0.5), bias = im.attr_f(n, "bias", 0.0);
  if (bias != lambd) return im.opaque(i, "a bias other than lambd (a jump at ±lambd)");
  Composer c(im, n, i);
  const std::string x = c.in(0), l = c.scalar("minus_lambd", -lambd);
  const std::string up = c.op(Op::relu, {c.op(Op::add, {x, l})});
  const std::string down = c.op(Op::relu, {c.op(Op::add, {c.scale(x, -1.0), l})});
  c.finish(c.op(Op::sub, {up, down}));
}

// Pow by a constant exponent of integers 0 ... 16 (per element, broadcast): the product
// over k = 1 ... max of where(y >= k, x, 1); of integers -16 ... 0: its reciprocal; of 0.5
// everywhere: sqrt. Other exponents are opaque.
void map_pow_composite(Importer& im, const onnx_import::Node& n, size_t i) {
  const Initializer* e = im.constant(n.inputs[1]);
  if (!e || !im.is_float_value(n.inputs[0])) return im.opaque(i, "an exponent that is not a constant, or an integer base");
  std::vector<double> y = e->value.is_float() ? im.floats(n.inputs[1])
                                              : std::vector<double>(e->value.ints.begin(), e->value.ints.end());
  Composer c(im, n, i);
  const Shape out = c.out_shape();
  std::string x = c.in(0);
  if (std::all_of(y.begin(), y.end(), [](double v) { return v == 0.5; }) && c.shape(0) == out)
    return c.finish(c.op(Op::sqrt, {x}));
  const bool integral = std::all_of(y.begin(), y.end(), [](double v) { return v == std::floor(v) && std::fabs(v) <= 16; });
  const bool up = std::all_of(y.begin(), y.end(), [](double v) { return v >= 0; });
  const bool down = std::all_of(y.begin(), y.end(), [](double v) { return v <= 0; });
  if (!integral || !(up || down)) return im.opaque(i, "an exponent other than integers of one sign up to 16, or 0.5");
  if (c.shape(0) != out) {
    lnv::Node ex = c.node(Op::expand, {x});
    ex.shape = out;
    x = c.emit(std::move(ex));
  }
  double top = 0;
  for (double v : y) top = std::max(top, std::fabs(v));
  const Shape y_shape = e->value.dims.empty() ? Shape{1} : Shape(e->value.dims.begin(), e->value.dims.end());
  const std::string one = c.scalar("one", 1.0);
  std::string p;
  for (int64_t k = 1; k <= int64_t(top); ++k) {
    lnv::Node w = c.node(Op::where, {x, one});
    w.condition_shape = y_shape;
    for (double v : y) w.condition.push_back(std::fabs(v) >= double(k) ? 1 : 0);
    const std::string f = c.emit(std::move(w));
    p = p.empty() ? f : c.op(Op::mul, {p, f});
  }
  if (p.empty()) {  // x⁰ = 1
    lnv::Node z = c.node(Op::where, {x, one});
    z.condition_shape = {1};
    z.condition = {0};
    p = c.emit(std::move(z));
  }
  c.finish(down && top > 0 ? c.op(Op::reciprocal, {p}) : p);
}

// MeanVarianceNormalization (ONNX's function body): (x - E x) / (sqrt(E x² - (E x)²) +
// 1e-9) over `axes` (default [0, 2, 3]); E x² - (E x)² is written as E (x - E x)², equal in
// exact arithmetic.
void map_mvn(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!float_input(im, n)) return im.opaque(i, "an integer operand");
  Composer c(im, n, i);
  const Axes axes = im.attr_ints(n, "axes", {0, 2, 3});
  const int64_t rank = int64_t(c.shape(0).size());
  for (int64_t a : axes)
    if (a < -rank || a >= rank) c.fail("axis " + std::to_string(a) + " out of range for rank " + std::to_string(rank));
  const std::string x = c.in(0);
  const std::string d = c.op(Op::sub, {x, c.reduce(Op::mean, x, axes, true)});
  const std::string sd = c.op(Op::sqrt, {c.reduce(Op::mean, c.op(Op::mul, {d, d}), axes, true)});
  c.finish(c.op(Op::div, {d, c.op(Op::add, {sd, c.scalar("eps", 1e-9)})}));
}

// LRN: x / (bias + alpha / size · Σ x² over the channels c - ⌊(size-1)/2⌋ ... c +
// ⌈(size-1)/2⌉)^beta; the window sum is the sum of `size` slices of the zero-padded x²,
// the power exp(beta · log(·)) of a positive base.
void map_lrn(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!float_input(im, n)) return im.opaque(i, "an integer operand");
  Composer c(im, n, i);
  const Shape x_shape = c.shape(0);
  const int64_t size = im.attr_i(n, "size", 0);
  if (size < 1) c.fail("size must be positive");
  if (x_shape.size() < 3) c.fail("expected an input of rank 3 or more (N, C, spatial...)");
  const double alpha = im.attr_f(n, "alpha", 1e-4), beta = im.attr_f(n, "beta", 0.75), bias = im.attr_f(n, "bias", 1.0);
  if (!(bias > 0) || alpha < 0) return im.opaque(i, "a bias that is not positive, or a negative alpha");
  if (size > 64) return im.opaque(i, "a window of more than 64 channels");
  const std::string x = c.in(0);
  lnv::Node p = c.node(Op::pad, {c.op(Op::mul, {x, x})});
  p.pads.assign(2 * x_shape.size(), 0);
  p.pads[1] = (size - 1) / 2;
  p.pads[1 + x_shape.size()] = size / 2;
  const std::string padded = c.emit(std::move(p));
  std::string s;
  for (int64_t k = 0; k < size; ++k) {
    const std::string sl = c.slice(padded, {1}, {k}, {k + x_shape[1]}, {1});
    s = s.empty() ? sl : c.op(Op::add, {s, sl});
  }
  const std::string base = c.op(Op::add, {c.scale(s, alpha / double(size)), c.scalar("bias", bias)});
  const std::string power = c.op(Op::exp, {c.scale(c.op(Op::log, {base}), beta)});
  c.finish(c.op(Op::div, {x, power}));
}

// ConvTranspose (1-D, 2-D; constant weight and bias): the input with s - 1 zeros between
// neighbours along each spatial axis (a matmul by a constant 0/1 matrix, the axis moved
// last), zero-padded by (k - 1)·d - pad_begin before and what the output's length needs
// after, then a stride-1 conv1d/conv2d with the kernel flipped and its channel axes
// swapped per group: y[o] = Σ x[i] W[k] over o = i·s + k·d - pad_begin.
void map_conv_transpose(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!im.is_constant(n.inputs[1])) return im.opaque(i, "a weight that is not a constant");
  const bool biased = n.inputs.size() > 2 && !n.inputs[2].empty();
  if (biased && !im.is_constant(n.inputs[2])) return im.opaque(i, "a bias that is not a constant");
  Composer c(im, n, i);
  const Shape x = c.shape(0), w = c.shape(1), out = c.out_shape();
  if (w.size() != 3 && w.size() != 4) return im.opaque(i, "not a 1-D or 2-D transposed convolution");
  const size_t s = w.size() - 2;
  if (x.size() != w.size()) c.fail("the weight's rank is not the input's");
  const int64_t groups = im.attr_i(n, "group", 1);
  if (groups < 1 || x[1] % groups || x[1] != w[0]) c.fail("the input's channels must equal the weight's first dim, a multiple of group");
  const auto strides = im.attr_ints(n, "strides", std::vector<int64_t>(s, 1));
  const auto dilations = im.attr_ints(n, "dilations", std::vector<int64_t>(s, 1));
  const auto out_pad = im.attr_ints(n, "output_padding", std::vector<int64_t>(s, 0));
  auto pads = im.attr_ints(n, "pads", std::vector<int64_t>(2 * s, 0));
  if (strides.size() != s || dilations.size() != s || out_pad.size() != s || pads.size() != 2 * s)
    c.fail("strides, dilations, output_padding and pads must have one entry per spatial axis (pads two)");
  const std::string auto_pad = im.attr_s(n, "auto_pad", "NOTSET");
  const bool explicit_shape = n.attr("output_shape") != nullptr;
  std::vector<int64_t> left(s), right(s);
  for (size_t k = 0; k < s; ++k) {
    if (strides[k] < 1 || dilations[k] < 1) c.fail("strides and dilations must be positive");
    const int64_t span = (w[2 + k] - 1) * dilations[k];
    const int64_t stuffed = (x[2 + k] - 1) * strides[k] + 1;
    const int64_t total = stuffed - 1 + out_pad[k] + span + 1 - out[2 + k];
    auto floor_half = [](int64_t t) { return t >= 0 ? t / 2 : -((-t + 1) / 2); };
    int64_t begin = pads[k];
    if (auto_pad == "SAME_UPPER") begin = floor_half(total);
    else if (auto_pad == "SAME_LOWER" || explicit_shape) begin = total - floor_half(total);
    else if (auto_pad == "VALID") begin = 0;
    left[k] = span - begin;
    right[k] = out[2 + k] - stuffed + begin;
    if (left[k] < 0 || right[k] < 0) return im.opaque(i, "pads larger than the kernel's span");
  }
  std::string v = c.in(0);
  const int64_t rank = int64_t(x.size());
  for (size_t k = 0; k < s; ++k) {  // zeros between neighbours
    if (strides[k] == 1 || x[2 + k] == 1) continue;
    const int64_t a = int64_t(k + 2), len = x[2 + k], stuffed = (len - 1) * strides[k] + 1;
    std::vector<double> m(size_t(len * stuffed), 0.0);
    for (int64_t j = 0; j < len; ++j) m[size_t(j * stuffed + j * strides[k])] = 1.0;
    std::vector<int64_t> perm(static_cast<size_t>(rank));
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[size_t(a)], perm[size_t(rank - 1)]);
    if (a != rank - 1) v = c.transpose(v, perm);
    v = c.op(Op::matmul, {v, c.constant("stuff" + std::to_string(k), {len, stuffed}, std::move(m))});
    if (a != rank - 1) v = c.transpose(v, perm);
  }
  if (std::any_of(left.begin(), left.end(), [](int64_t p) { return p > 0; }) ||
      std::any_of(right.begin(), right.end(), [](int64_t p) { return p > 0; })) {
    lnv::Node p = c.node(Op::pad, {v});
    p.pads.assign(2 * x.size(), 0);
    for (size_t k = 0; k < s; ++k) p.pads[k + 2] = left[k], p.pads[k + 2 + x.size()] = right[k];
    v = c.emit(std::move(p));
  }
  // W [C_in, C_out/g, k...] -> [C_out, C_in/g, k...], flipped along the kernel axes.
  const std::vector<double> wv = im.floats(n.inputs[1]);
  const int64_t cin_g = w[0] / groups, cout_g = w[1], kh = w[2], kw = s == 2 ? w[3] : 1;
  std::vector<double> flipped(wv.size());
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t oo = 0; oo < cout_g; ++oo)
      for (int64_t cc = 0; cc < cin_g; ++cc)
        for (int64_t a = 0; a < kh; ++a)
          for (int64_t b = 0; b < kw; ++b) {
            const int64_t from = (((g * cin_g + cc) * cout_g + oo) * kh + a) * kw + b;
            const int64_t to = (((g * cout_g + oo) * cin_g + cc) * kh + (kh - 1 - a)) * kw + (kw - 1 - b);
            flipped[size_t(to)] = wv[size_t(from)];
          }
  Shape fshape = {groups * cout_g, cin_g, kh};
  if (s == 2) fshape.push_back(kw);
  lnv::Node conv = c.node(s == 1 ? Op::conv1d : Op::conv2d, {v});
  conv.weight = c.constant("weight", fshape, std::move(flipped));
  if (biased) conv.bias = c.constant("bias", {groups * cout_g}, im.floats(n.inputs[2]));
  conv.stride = std::vector<int64_t>(s, 1);
  conv.padding = std::vector<int64_t>(s, 0);
  conv.dilation = dilations;
  conv.groups = groups;
  c.finish(c.emit(std::move(conv)));
}

}  // namespace lnv::onnx_import
