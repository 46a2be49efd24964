// The folded ONNX IR -> lnv::Graph (onnx/import.h). One function per ONNX op family
// (kMappers); norms and Gelu's Erf spelling are matched first (onnx/import_patterns.cpp)
// and replace the nodes they span.
#include "onnx/import.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "core/model_json.h"
#include "onnx/constant_fold.h"
#include "onnx/import_compositions.h"
#include "onnx/import_context.h"
#include "onnx/import_recurrent.h"
#include "onnx/spellings.h"

namespace lnv::onnx_import {
namespace {

using lnv::Node;

// ---- one mapper per op family ----------------------------------------------------------

void map_alias(Importer& im, const onnx_import::Node& n, size_t i) {
  // An integer graph input cast to int32 or int64 holds the same ids (an attention mask
  // cast for ONNX Runtime's kernels, which read int32): what reads it reads the input.
  const ElemType to = im.elem_type(n.outputs[0]);
  const bool ids = im.is_index_input(n.inputs[0]) && (to == ElemType::Int32 || to == ElemType::Int64);
  if ((n.op_type == "Cast" || n.op_type == "CastLike") && !ids &&
      !(is_float_type(im.elem_type(n.inputs[0])) && is_float_type(to)))
    return im.opaque(i, "a Cast between non-float types");
  im.alias(n.outputs[0], n.inputs[0]);
}

void map_binary(Importer& im, const onnx_import::Node& n, size_t i) {
  const Op op = *lnv_op_of(n.op_type);
  for (const std::string& v : n.inputs)
    if (!im.is_float_value(v)) return im.opaque(i, "an integer operand");
  // x * c and c * x with a scalar constant c: a scale (exact either way round).
  if (op == Op::mul)
    for (int k = 0; k < 2; ++k)
      if (auto c = im.scalar(n.inputs[k]); c && !im.is_constant(n.inputs[1 - k]) &&
                                           im.shape(n.inputs[1 - k]) == im.shape(n.outputs[0])) {
        Node s = im.node(n, i, Op::scale, {im.value(n.inputs[1 - k])});
        s.factor = *c;
        return im.emit_final(std::move(s), n.outputs[0]);
      }
  im.emit_final(im.node(n, i, op, {im.value(n.inputs[0]), im.value(n.inputs[1])}), n.outputs[0]);
}

void map_pow(Importer& im, const onnx_import::Node& n, size_t i) {
  const auto e = im.scalar(n.inputs[1]);
  if (e && *e == 1.0) return im.alias(n.outputs[0], n.inputs[0]);
  if (!e || *e != 2.0) return map_pow_composite(im, n, i);
  const std::string x = im.value(n.inputs[0]);
  im.emit_final(im.node(n, i, Op::mul, {x, x}), n.outputs[0]);
}

void map_unary(Importer& im, const onnx_import::Node& n, size_t i) {
  if (n.op_type == "Gelu") {
    const Attribute* a = n.attr("approximate");
    if (a && a->s != "none") return im.opaque(i, "Gelu with approximate='" + a->s + "'");
  }
  im.emit_final(im.node(n, i, *lnv_op_of(n.op_type), {im.value(n.inputs[0])}), n.outputs[0]);
}

// HardSigmoid: max(0, min(1, alpha x + beta)), ONNX's defaults alpha 0.2, beta 0.5.
void map_hard_sigmoid(Importer& im, const onnx_import::Node& n, size_t i) {
  Node h = im.node(n, i, Op::hard_sigmoid, {im.value(n.inputs[0])});
  h.alpha = im.attr_f(n, "alpha", 0.2);
  h.beta = im.attr_f(n, "beta", 0.5);
  im.emit_final(std::move(h), n.outputs[0]);
}

// Clip: bounds as attributes before opset 11, as optional constant inputs from 11; none:
// the identity.
void map_clip(Importer& im, const onnx_import::Node& n, size_t i) {
  Node c = im.node(n, i, Op::clip, {im.value(n.inputs[0])});
  if (im.model().opset("") < 11) {
    c.min = im.attr_f(n, "min", c.min);
    c.max = im.attr_f(n, "max", c.max);
  } else {
    for (size_t k = 1; k < 3 && k < n.inputs.size(); ++k) {
      if (n.inputs[k].empty()) continue;
      const auto bound = im.scalar(n.inputs[k]);
      if (!bound) return im.opaque(i, "a bound that is not a constant");
      (k == 1 ? c.min : c.max) = *bound;
    }
  }
  if (std::isinf(c.min) && std::isinf(c.max)) return im.alias(n.outputs[0], n.inputs[0]);
  im.emit_final(std::move(c), n.outputs[0]);
}

void map_neg(Importer& im, const onnx_import::Node& n, size_t i) {
  Node s = im.node(n, i, Op::scale, {im.value(n.inputs[0])});
  s.factor = -1.0;
  im.emit_final(std::move(s), n.outputs[0]);
}

// numpy.matmul; a 1-D operand is a row (a) or a column (b), reshaped (a constant too, by a
// reshape node, so that its param keeps the file's shape and its gradient pairs by name),
// and the product reshaped to the output's shape.
void map_matmul(Importer& im, const onnx_import::Node& n, size_t i) {
  const auto& a = im.shape(n.inputs[0]);
  const auto& b = im.shape(n.inputs[1]);
  if (a.empty() || b.empty()) return im.opaque(i, "a scalar operand");
  if (a.size() >= 2 && b.size() >= 2)
    return im.emit_final(im.node(n, i, Op::matmul, {im.value(n.inputs[0]), im.value(n.inputs[1])}),
                         n.outputs[0]);
  auto as_matrix = [&](const std::string& v, Shape shape, const char* suffix) {
    if (im.shape(v).size() >= 2) return im.value(v);
    Node r = im.node(n, i, Op::reshape, {im.value(v)}, suffix);
    r.shape = std::move(shape);
    return im.emit(std::move(r));
  };
  const std::string a2 = as_matrix(n.inputs[0], {1, a[0]}, "row");
  const std::string b2 = as_matrix(n.inputs[1], {b[0], 1}, "column");
  const std::string p = im.emit(im.node(n, i, Op::matmul, {a2, b2}, "product"));
  Node r = im.node(n, i, Op::reshape, {p});
  r.shape = im.shape(n.outputs[0]);
  im.emit_final(std::move(r), n.outputs[0]);
}

// Y = alpha * A' B' + beta * C.
void map_gemm(Importer& im, const onnx_import::Node& n, size_t i) {
  const double alpha = im.attr_f(n, "alpha", 1.0), beta = im.attr_f(n, "beta", 1.0);
  const bool trans_a = im.attr_i(n, "transA", 0) != 0, trans_b = im.attr_i(n, "transB", 0) != 0;
  const std::string c = n.inputs.size() > 2 ? n.inputs[2] : "";
  const std::vector<int64_t> out_shape = im.shape(n.outputs[0]);
  std::string a = im.value(n.inputs[0]);
  if (trans_a) {
    Node t = im.node(n, i, Op::transpose, {a}, "transA");
    t.perm = {1, 0};
    a = im.emit(std::move(t));
  }
  const bool b_const = im.is_constant(n.inputs[1]);
  const bool bias_fits = !c.empty() && beta == 1.0 && alpha == 1.0 && im.is_constant(c) &&
                         im.shape(c).size() <= 2 && im.numel(c) == out_shape[1] &&
                         (im.shape(c).size() < 2 || im.shape(c)[0] == 1);
  Node prod;
  if (b_const && trans_b) {  // B is [N, K]: a linear layer's weight as PyTorch stores it
    prod = im.node(n, i, Op::linear, {a}, c.empty() || bias_fits ? "" : "product");
    prod.weight = im.value(n.inputs[1]);
    if (bias_fits) prod.bias = im.param_as(c, {out_shape[1]});
    if (c.empty() || bias_fits) return im.emit_final(std::move(prod), n.outputs[0]);
  } else {
    const bool last = c.empty() && alpha == 1.0;
    prod = im.node(n, i, Op::matmul, {a, im.value(n.inputs[1])}, last ? "" : "product");
    prod.transpose_b = trans_b;
    if (last) return im.emit_final(std::move(prod), n.outputs[0]);
  }
  std::string y = im.emit(std::move(prod));
  if (alpha != 1.0) {
    Node s = im.node(n, i, Op::scale, {y}, c.empty() ? "" : "alpha");
    s.factor = alpha;
    if (c.empty()) return im.emit_final(std::move(s), n.outputs[0]);
    y = im.emit(std::move(s));
  }
  std::string bias;
  if (beta == 1.0) {
    bias = im.value(c);
  } else if (im.is_constant(c)) {
    std::vector<double> v = im.floats(c);
    for (double& x : v) x *= beta;
    bias = im.new_param(c + ".beta", im.shape(c), std::move(v));
  } else {
    Node s = im.node(n, i, Op::scale, {im.value(c)}, "beta");
    s.factor = beta;
    bias = im.emit(std::move(s));
  }
  im.emit_final(im.node(n, i, Op::add, {y, bias}), n.outputs[0]);
}

// ONNX pads [b1, b2, ..., e1, e2, ...], or auto_pad: one padding per spatial axis when
// symmetric; nullopt otherwise.
std::optional<std::vector<int64_t>> symmetric_pads(Importer& im, const onnx_import::Node& n,
                                                   const std::vector<int64_t>& in,
                                                   const std::vector<int64_t>& kernel,
                                                   const std::vector<int64_t>& strides,
                                                   const std::vector<int64_t>& dilations) {
  const size_t s = kernel.size();
  const std::string auto_pad = im.attr_s(n, "auto_pad", "NOTSET");
  std::vector<int64_t> pads = im.attr_ints(n, "pads", std::vector<int64_t>(2 * s, 0));
  if (auto_pad == "VALID") pads.assign(2 * s, 0);
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
    for (size_t k = 0; k < s; ++k) {
      const int64_t out = (in[2 + k] + strides[k] - 1) / strides[k];
      const int64_t total =
          std::max<int64_t>((out - 1) * strides[k] + (kernel[k] - 1) * dilations[k] + 1 - in[2 + k], 0);
      pads[k] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[k + s] = total - pads[k];
    }
  if (pads.size() != 2 * s) return std::nullopt;
  std::vector<int64_t> sym(s);
  for (size_t k = 0; k < s; ++k) {
    if (pads[k] != pads[k + s]) return std::nullopt;
    sym[k] = pads[k];
  }
  return sym;
}

// The constant W when `v` is Sub(W, ReduceMean(W, [axis], keepdims=1)): W centered along
// `axis` in the graph, as `fold --mode training` writes a CBWC weight (docs/onnx.md, "ONNX
// out"); "" otherwise.
std::string centered_constant(const Importer& im, const std::string& v, int64_t axis) {
  const int s = im.producer(v);
  if (s < 0) return "";
  const onnx_import::Node& sub = im.nodes()[size_t(s)];
  if (sub.op_type != "Sub" || !sub.domain.empty() || sub.inputs.size() != 2 ||
      !im.is_constant(sub.inputs[0]))
    return "";
  const int m = im.producer(sub.inputs[1]);
  if (m < 0) return "";
  const onnx_import::Node& mean = im.nodes()[size_t(m)];
  if (mean.op_type != "ReduceMean" || !mean.domain.empty() || mean.inputs.empty() ||
      mean.inputs[0] != sub.inputs[0] || im.attr_i(mean, "keepdims", 1) != 1)
    return "";
  const auto axes = im.reduce_axes(mean);
  const int64_t rank = int64_t(im.shape(sub.inputs[0]).size());
  if (!axes || axes->size() != 1 || ((*axes)[0] + rank) % rank != axis) return "";
  return sub.inputs[0];
}

// A LayerScale moved into a weight as `fold --mode training` writes it (docs/onnx.md,
// "Training"): `v` = Sub(M, ReduceMean(M, [axis], keepdims=1)), M = Mul(W, γ') with W a
// constant and γ' = Reshape(γ) of a constant γ (or a constant γ' itself), which the
// constant folder leaves unfolded (computed_params). W and γ (γ' when it is stored
// reshaped) when it is; nullopt otherwise.
struct ScaledConstant {
  std::string weight, gamma;
};
std::optional<ScaledConstant> scaled_constant(const Importer& im, const std::string& v, int64_t axis) {
  const int s = im.producer(v);
  if (s < 0) return std::nullopt;
  const onnx_import::Node& sub = im.nodes()[size_t(s)];
  if (sub.op_type != "Sub" || !sub.domain.empty() || sub.inputs.size() != 2) return std::nullopt;
  const int p = im.producer(sub.inputs[0]), m = im.producer(sub.inputs[1]);
  if (p < 0 || m < 0) return std::nullopt;
  const onnx_import::Node& mul = im.nodes()[size_t(p)];
  const onnx_import::Node& mean = im.nodes()[size_t(m)];
  if (mul.op_type != "Mul" || !mul.domain.empty() || mul.inputs.size() != 2 ||
      !im.is_constant(mul.inputs[0]) || im.shape(mul.inputs[0]) != im.shape(v))
    return std::nullopt;
  if (mean.op_type != "ReduceMean" || !mean.domain.empty() || mean.inputs.empty() ||
      mean.inputs[0] != sub.inputs[0] || im.attr_i(mean, "keepdims", 1) != 1)
    return std::nullopt;
  const auto axes = im.reduce_axes(mean);
  const int64_t rank = int64_t(im.shape(v).size());
  if (!axes || axes->size() != 1 || ((*axes)[0] + rank) % rank != axis) return std::nullopt;
  std::string gamma = mul.inputs[1];
  if (const int r = im.producer(gamma); r >= 0) {
    const onnx_import::Node& reshape = im.nodes()[size_t(r)];
    if (reshape.op_type != "Reshape" || !reshape.domain.empty() || reshape.inputs.empty()) return std::nullopt;
    gamma = reshape.inputs[0];
  }
  if (!im.is_constant(gamma) || !im.is_float_value(gamma) ||
      im.numel(gamma) != im.shape(v).at(size_t(axis)))
    return std::nullopt;
  return ScaledConstant{mul.inputs[0], gamma};
}

void map_conv(Importer& im, const onnx_import::Node& n, size_t i) {
  const std::vector<int64_t> x = im.shape(n.inputs[0]);
  std::string weight = n.inputs[1];
  std::string bias = n.inputs.size() > 2 ? n.inputs[2] : "";
  // A weight (and bias) centered in the graph along the output channels: the stored ones
  // with `cbwc`.
  bool cbwc = false;
  // A weight (and bias) times a LayerScale γ, centered in the graph along the output
  // channels: the Conv of the stored ones, times γ along the channels, centered over them.
  std::string gamma;
  if (!im.is_constant(weight)) {
    const std::string w = centered_constant(im, weight, 0);
    const std::string b = bias.empty() ? "" : centered_constant(im, bias, 0);
    const auto sw = scaled_constant(im, weight, 0);
    const auto sb = bias.empty() ? std::nullopt : scaled_constant(im, bias, 0);
    if (!w.empty() && (bias.empty() || !b.empty())) {
      weight = w;
      bias = b;
      cbwc = true;
    } else if (sw && (bias.empty() || (sb && sb->gamma == sw->gamma))) {
      weight = sw->weight;
      bias = sb ? sb->weight : "";
      gamma = sw->gamma;
    }
  }
  if (!im.is_constant(weight)) return im.opaque(i, "a weight that is not a constant");
  if (!bias.empty() && !im.is_constant(bias)) return im.opaque(i, "a bias that is not a constant");
  const std::vector<int64_t> w = im.shape(n.inputs[1]);
  if (w.size() != 3 && w.size() != 4) return im.opaque(i, "not a 1-D or 2-D convolution");
  const size_t s = w.size() - 2;
  const std::vector<int64_t> kernel(w.begin() + 2, w.end());
  const auto strides = im.attr_ints(n, "strides", std::vector<int64_t>(s, 1));
  const auto dilations = im.attr_ints(n, "dilations", std::vector<int64_t>(s, 1));
  const auto pads = symmetric_pads(im, n, x, kernel, strides, dilations);
  if (!pads) return im.opaque(i, "asymmetric padding");
  Node c = im.node(n, i, s == 1 ? Op::conv1d : Op::conv2d, {im.value(n.inputs[0])},
                   gamma.empty() ? "" : "unscaled");
  c.weight = im.value(weight);
  if (!bias.empty()) c.bias = im.value(bias);
  c.cbwc = cbwc;
  c.stride = strides;
  c.dilation = dilations;
  c.padding = *pads;
  c.groups = im.attr_i(n, "group", 1);
  if (gamma.empty()) return im.emit_final(std::move(c), n.outputs[0]);
  const std::string product = im.emit(std::move(c));
  Node along = im.node(n, i, Op::reshape, {im.value(gamma)}, "layer_scale");
  along.shape.assign(s + 1, 1);
  along.shape[0] = w[0];
  Node scaled = im.node(n, i, Op::mul, {product, im.emit(std::move(along))}, "scaled");
  Node centered = im.node(n, i, Op::center, {im.emit(std::move(scaled))});
  centered.axes = {1};
  im.emit_final(std::move(centered), n.outputs[0]);
}

// Inference: y = x * a + b per channel, a = scale / sqrt(var + eps), b = B - mean * a.
void map_batch_norm(Importer& im, const onnx_import::Node& n, size_t i) {
  if (im.attr_i(n, "training_mode", 0) != 0 || im.used(n, 1))
    return im.opaque(i, "training mode (running statistics as outputs)");
  for (size_t k = 1; k < 5; ++k)
    if (!im.is_constant(n.inputs[k])) return im.opaque(i, "statistics that are not constants");
  const double eps = im.attr_f(n, "epsilon", 1e-5);
  const auto sc = im.floats(n.inputs[1]);
  const auto b = im.floats(n.inputs[2]);
  const auto mean = im.floats(n.inputs[3]);
  const auto var = im.floats(n.inputs[4]);
  std::vector<double> mul(sc.size()), add(sc.size());
  for (size_t c = 0; c < sc.size(); ++c) {
    mul[c] = sc[c] / std::sqrt(var[c] + eps);
    add[c] = b[c] - mean[c] * mul[c];
  }
  std::vector<int64_t> shape(im.shape(n.inputs[0]).size() - 1, 1);
  shape[0] = static_cast<int64_t>(sc.size());
  const std::string name = n.name.empty() ? n.outputs[0] : n.name;
  const std::string m = im.emit(im.node(n, i, Op::mul, {im.value(n.inputs[0]),
                                                        im.new_param(name + ".mul", shape, mul)},
                                        "mul"));
  im.emit_final(im.node(n, i, Op::add, {m, im.new_param(name + ".add", shape, add)}), n.outputs[0]);
}

// Reshape, Flatten, Squeeze, Unsqueeze: a reshape to the output's (static) shape.
void map_reshape(Importer& im, const onnx_import::Node& n, size_t i) {
  Node r = im.node(n, i, Op::reshape, {im.value(n.inputs[0])});
  r.shape = im.shape(n.outputs[0]);
  im.emit_final(std::move(r), n.outputs[0]);
}

void map_transpose(Importer& im, const onnx_import::Node& n, size_t i) {
  const size_t rank = im.shape(n.inputs[0]).size();
  std::vector<int64_t> reversed(rank);
  for (size_t k = 0; k < rank; ++k) reversed[k] = static_cast<int64_t>(rank - 1 - k);
  Node t = im.node(n, i, Op::transpose, {im.value(n.inputs[0])});
  t.perm = im.attr_ints(n, "perm", reversed);
  im.emit_final(std::move(t), n.outputs[0]);
}

void map_concat(Importer& im, const onnx_import::Node& n, size_t i) {
  std::vector<std::string> ins;
  for (const std::string& v : n.inputs) {
    if (!im.is_float_value(v)) return im.opaque(i, "an integer operand");
    ins.push_back(im.value(v));
  }
  Node c = im.node(n, i, Op::concat, ins);
  c.axis = im.attr_i(n, "axis", 0);
  im.emit_final(std::move(c), n.outputs[0]);
}

// Opset >= 13: softmax over `axis`. Before: over the flattened axes from `axis` on
// (default 1), which is a softmax over the last axis of a reshape to [A, B], reshaped back.
void map_softmax(Importer& im, const onnx_import::Node& n, size_t i) {
  const std::vector<int64_t> x = im.shape(n.inputs[0]);
  const int64_t rank = static_cast<int64_t>(x.size());
  const bool flattening = im.model().opset("") < 13;
  int64_t axis = im.attr_i(n, "axis", flattening ? 1 : -1);
  if (axis < 0) axis += rank;
  if (!flattening || axis == rank - 1) {
    Node s = im.node(n, i, Op::softmax, {im.value(n.inputs[0])});
    s.axis = flattening ? -1 : im.attr_i(n, "axis", -1);
    return im.emit_final(std::move(s), n.outputs[0]);
  }
  const int64_t a = std::accumulate(x.begin(), x.begin() + axis, int64_t{1}, std::multiplies<>());
  const int64_t b = std::accumulate(x.begin() + axis, x.end(), int64_t{1}, std::multiplies<>());
  Node r1 = im.node(n, i, Op::reshape, {im.value(n.inputs[0])}, "flatten");
  r1.shape = {a, b};
  Node s = im.node(n, i, Op::softmax, {im.emit(std::move(r1))}, "softmax");
  s.axis = -1;
  Node r2 = im.node(n, i, Op::reshape, {im.emit(std::move(s))});
  r2.shape = x;
  im.emit_final(std::move(r2), n.outputs[0]);
}

// ReduceMean/ReduceMax, ReduceSum (a mean scaled by the count), GlobalAveragePool,
// GlobalMaxPool.
void map_reduce(Importer& im, const onnx_import::Node& n, size_t i) {
  const std::vector<int64_t> x = im.shape(n.inputs[0]);
  const int64_t rank = static_cast<int64_t>(x.size());
  Axes axes;
  bool keepdims = true;
  if (n.op_type.starts_with("Reduce")) {
    const auto read = im.reduce_axes(n);
    if (!read) return im.opaque(i, "axes that are not a constant");
    axes = *read;
    keepdims = im.attr_i(n, "keepdims", 1) != 0;
    if (axes.empty()) {
      if (im.attr_i(n, "noop_with_empty_axes", 0) != 0) return im.alias(n.outputs[0], n.inputs[0]);
      for (int64_t k = 0; k < rank; ++k) axes.push_back(k);
    }
  } else {
    for (int64_t k = 2; k < rank; ++k) axes.push_back(k);
  }
  const bool is_max = n.op_type == "ReduceMax" || n.op_type == "GlobalMaxPool";
  const bool is_sum = n.op_type == "ReduceSum";
  Node r = im.node(n, i, is_max ? Op::max : Op::mean, {im.value(n.inputs[0])}, is_sum ? "mean" : "");
  r.axes = axes;
  r.keepdims = keepdims;
  if (!is_sum) return im.emit_final(std::move(r), n.outputs[0]);
  int64_t count = 1;
  for (int64_t a : normalize_axes(axes, rank, im.describe(i))) count *= x[a];
  Node s = im.node(n, i, Op::scale, {im.emit(std::move(r))});
  s.factor = static_cast<double>(count);
  im.emit_final(std::move(s), n.outputs[0]);
}

void map_dropout(Importer& im, const onnx_import::Node& n, size_t i) {
  if (im.used(n, 1)) return im.opaque(i, "its mask is used");
  double p = im.attr_f(n, "ratio", 0.5);
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    const auto r = im.scalar(n.inputs[1]);
    if (!r) return im.opaque(i, "a ratio that is not a constant");
    p = *r;
  }
  Node d = im.node(n, i, Op::dropout, {im.value(n.inputs[0])});
  d.p = p;
  im.emit_final(std::move(d), n.outputs[0]);
}

// Constant integers of input k (empty when omitted); nullopt when not a constant.
std::optional<std::vector<int64_t>> constant_ints(Importer& im, const onnx_import::Node& n, size_t k) {
  if (k >= n.inputs.size() || n.inputs[k].empty()) return std::vector<int64_t>{};
  const Initializer* c = im.constant(n.inputs[k]);
  if (!c || c->value.is_float()) return std::nullopt;
  return c->value.ints;
}

// A `slice` of x along `axes`; starts and ends brought into [-size - 1, size] (the same
// elements under ONNX's clamping, without INT64_MAX-sized values).
Node slice_node(Importer& im, const onnx_import::Node& n, size_t i, const std::string& x,
                const std::vector<int64_t>& shape, Axes axes, std::vector<int64_t> starts,
                std::vector<int64_t> ends, std::vector<int64_t> steps, const std::string& suffix) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t d = shape[axes[k] < 0 ? axes[k] + rank : axes[k]];
    starts[k] = std::clamp(starts[k], -d - 1, d);
    ends[k] = std::clamp(ends[k], -d - 1, d);
  }
  Node sl = im.node(n, i, Op::slice, {x}, suffix);
  sl.axes = std::move(axes);
  sl.starts = std::move(starts);
  sl.ends = std::move(ends);
  sl.steps = std::move(steps);
  return sl;
}

// Slice: starts, ends, axes (and steps from opset 10) as attributes before opset 10, as
// constant inputs from 10.
void map_slice(Importer& im, const onnx_import::Node& n, size_t i) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (im.model().opset("") < 10) {
    starts = im.attr_ints(n, "starts", {});
    ends = im.attr_ints(n, "ends", {});
    axes = im.attr_ints(n, "axes", {});
  } else {
    const auto s = constant_ints(im, n, 1), e = constant_ints(im, n, 2), a = constant_ints(im, n, 3),
               st = constant_ints(im, n, 4);
    if (!s || !e || !a || !st) return im.opaque(i, "starts, ends, axes or steps that are not constants");
    starts = *s, ends = *e, axes = *a, steps = *st;
  }
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  const auto& x = im.shape(n.inputs[0]);
  im.emit_final(slice_node(im, n, i, im.value(n.inputs[0]), x, axes, starts, ends, steps, ""),
                n.outputs[0]);
}

// Split: one slice per output read, of the sizes in `split` (attribute before opset 13,
// input from 13), else equal parts.
void map_split(Importer& im, const onnx_import::Node& n, size_t i) {
  const auto& x = im.shape(n.inputs[0]);
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = im.attr_i(n, "axis", 0);
  if (axis < 0) axis += rank;
  std::vector<int64_t> sizes = im.attr_ints(n, "split", {});
  if (im.model().opset("") >= 13) {
    const auto s = constant_ints(im, n, 1);
    if (!s) return im.opaque(i, "split sizes that are not constants");
    sizes = *s;
  }
  if (sizes.empty())
    for (const std::string& out : n.outputs) sizes.push_back(im.shape(out)[axis]);
  std::vector<size_t> read;
  for (size_t k = 0; k < n.outputs.size(); ++k)
    if (im.used(n, k)) read.push_back(k);
  const std::string in = im.value(n.inputs[0]);
  int64_t offset = 0;
  for (size_t k = 0; k < n.outputs.size() && k < sizes.size(); offset += sizes[k], ++k) {
    if (std::find(read.begin(), read.end(), k) == read.end()) continue;
    Node sl = slice_node(im, n, i, in, x, {axis}, {offset}, {offset + sizes[k]}, {1},
                         read.size() == 1 ? "" : std::to_string(k));
    im.emit_final(std::move(sl), n.outputs[k]);
  }
}

// Gather of an activation by constant indices: a slice per index along the axis (a scalar
// index drops the axis: a reshape to the output's shape; a 1-D list: the slices
// concatenated).
void map_gather_constant(Importer& im, const onnx_import::Node& n, size_t i) {
  const Initializer* idx = im.constant(n.inputs[1]);
  const auto& x = im.shape(n.inputs[0]);
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = im.attr_i(n, "axis", 0);
  if (axis < 0) axis += rank;
  if (idx->value.dims.size() > 1 || idx->value.ints.size() > 64)
    return im.opaque(i, "indices of rank above 1, or more than 64");
  const std::string in = im.value(n.inputs[0]);
  std::vector<std::string> parts;
  for (size_t k = 0; k < idx->value.ints.size(); ++k) {
    int64_t at = idx->value.ints[k];
    if (at < 0) at += x[axis];
    parts.push_back(im.emit(slice_node(im, n, i, in, x, {axis}, {at}, {at + 1}, {1},
                                       idx->value.ints.size() == 1 ? "slice" : "slice." + std::to_string(k))));
  }
  if (idx->value.dims.empty()) {
    Node r = im.node(n, i, Op::reshape, {parts[0]});
    r.shape = im.shape(n.outputs[0]);
    return im.emit_final(std::move(r), n.outputs[0]);
  }
  Node c = im.node(n, i, Op::concat, parts);
  c.axis = axis;
  im.emit_final(std::move(c), n.outputs[0]);
}

// Expand of an activation to a constant shape (folded from the shape arithmetic).
void map_expand(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!im.is_float_value(n.inputs[0])) return im.opaque(i, "an integer operand");
  const auto shape = constant_ints(im, n, 1);
  if (!shape) return im.opaque(i, "a shape that is not a constant");
  for (int64_t d : *shape)
    if (d <= 0) return im.opaque(i, "a shape entry below 1");
  Node e = im.node(n, i, Op::expand, {im.value(n.inputs[0])});
  e.shape = *shape;
  im.emit_final(std::move(e), n.outputs[0]);
}

// Pad in constant mode: pads (and the value) as attributes before opset 11 (`paddings`
// in opset 1), as constant inputs from 11; `axes` (opset 18) names the axes pads covers.
void map_pad(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!im.is_float_value(n.inputs[0])) return im.opaque(i, "an integer operand");
  const std::string mode = im.attr_s(n, "mode", "constant");
  if (mode != "constant") return im.opaque(i, "mode '" + mode + "' (only constant mode is modelled)");
  const int64_t rank = static_cast<int64_t>(im.shape(n.inputs[0]).size());
  std::vector<int64_t> pads, axes;
  double value = 0.0;
  if (im.model().opset("") < 11) {
    pads = im.attr_ints(n, n.attr("pads") ? "pads" : "paddings", {});
    value = im.attr_f(n, "value", 0.0);
  } else {
    const auto p = constant_ints(im, n, 1), a = constant_ints(im, n, 3);
    if (!p || !a) return im.opaque(i, "pads or axes that are not constants");
    pads = *p, axes = *a;
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
      const auto v = im.scalar(n.inputs[2]);
      if (!v) return im.opaque(i, "a constant_value that is not a constant");
      value = *v;
    }
  }
  if (axes.empty())
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  const size_t k = axes.size();
  if (pads.size() != 2 * k)
    throw ModelError(im.describe(i), "pads has " + std::to_string(pads.size()) +
                                         " entries, expected 2 per axis (" + std::to_string(2 * k) + ")");
  std::vector<int64_t> full(2 * static_cast<size_t>(rank), 0);
  for (size_t j = 0; j < k; ++j) {
    const int64_t a = axes[j] < 0 ? axes[j] + rank : axes[j];
    if (a < 0 || a >= rank) throw ModelError(im.describe(i), "axis " + std::to_string(axes[j]) + " out of range");
    if (pads[j] < 0 || pads[j + k] < 0) return im.opaque(i, "negative pads (cropping)");
    full[a] = pads[j];
    full[a + rank] = pads[j + k];
  }
  Node p = im.node(n, i, Op::pad, {im.value(n.inputs[0])});
  p.pads = std::move(full);
  p.value = value;
  im.emit_final(std::move(p), n.outputs[0]);
}

// Where with a constant condition (an attention mask): the condition goes into the node.
void map_where(Importer& im, const onnx_import::Node& n, size_t i) {
  const Initializer* c = im.constant(n.inputs[0]);
  if (!c || c->value.is_float()) return im.opaque(i, "a condition that is not a constant");
  if (!im.is_float_value(n.inputs[1]) || !im.is_float_value(n.inputs[2]))
    return im.opaque(i, "an integer operand");
  Node w = im.node(n, i, Op::where, {im.value(n.inputs[1]), im.value(n.inputs[2])});
  w.condition_shape = c->value.dims;
  w.condition.reserve(c->value.ints.size());
  for (int64_t v : c->value.ints) w.condition.push_back(v != 0 ? 1 : 0);
  im.emit_final(std::move(w), n.outputs[0]);
}

// An embedding lookup: Gather(axis 0) of a constant [num, dim] table by an integer graph
// input.
void map_gather(Importer& im, const onnx_import::Node& n, size_t i) {
  if (!im.is_constant(n.inputs[0]) && im.is_constant(n.inputs[1]) && im.has_shape(n.inputs[0]))
    return map_gather_constant(im, n, i);
  if (!im.is_constant(n.inputs[0]) || !im.is_float_value(n.inputs[0]) ||
      im.shape(n.inputs[0]).size() != 2 || im.attr_i(n, "axis", 0) != 0 ||
      !im.is_index_input(n.inputs[1]))
    return im.opaque(i, "not a lookup of a constant table by an integer graph input");
  Node e = im.node(n, i, Op::embedding, {im.value(n.inputs[1])});
  e.weight = im.value(n.inputs[0]);
  im.note_index_range(n.inputs[1], im.shape(n.inputs[0])[0]);
  im.emit_final(std::move(e), n.outputs[0]);
}

const std::map<std::string, Mapper>& mappers() {
  static const std::map<std::string, Mapper> kMappers = {
#define LNV_ONNX_OP(op, OnnxOp, mapper) {#OnnxOp, mapper},
#define LNV_ONNX_READ_OP(op, OnnxOp, mapper) {#OnnxOp, mapper},
#define LNV_ONNX_READ(OnnxOp, mapper) {#OnnxOp, mapper},
#include "onnx/ops.def"
  };
  return kMappers;
}

}  // namespace

Mapper contrib_gemm_mapper() { return map_gemm; }

lnv::Graph import_graph(const Model& folded, bool defer_values, const ProgressFn& progress) {
  // ONNX Runtime's level `all` writes layout ops for the CPU that saved the file.
  for (size_t i = 0; i < folded.graph.nodes.size(); ++i)
    if (folded.graph.nodes[i].domain == "com.microsoft.nchwc")
      throw ModelError(folded.path.string() + ": " + folded.graph.nodes[i].describe(i),
                       "com.microsoft.nchwc ops are ONNX Runtime's layout for the CPU that saved the "
                       "file (optimization level 'all'); save the model at level 'extended' "
                       "(SessionOptions graphOptimizationLevel) for lnverify");
  Importer im(folded);
  im.import_inputs();
  const auto matches = match_patterns(im);
  const auto& table = mappers();
  const auto& nodes = folded.graph.nodes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    report_progress(progress, "import nodes", "nodes", i, nodes.size());
    if (auto it = matches.find(i); it != matches.end()) {
      it->second(im);
      continue;
    }
    if (im.consumed(i)) continue;
    const onnx_import::Node& n = nodes[i];
    // A node reading a value whose shape nobody knows (computed from an op that is not
    // modelled and that shape inference does not know) is left out; a norm among them
    // stays, as a "no" naming that op.
    if (im.reads_unshaped(i)) {
      im.leave_out(i);
      continue;
    }
    Mapper m = nullptr;
    if (n.domain.empty() || n.domain == "ai.onnx") {
      if (auto it = table.find(n.op_type); it != table.end()) m = it->second;
    } else if (n.domain == "com.microsoft") {
      if (auto it = contrib_mappers().find(n.op_type); it != contrib_mappers().end()) m = it->second;
    }
    if (!m) {
      im.opaque(i, "no mapping of this op");
      continue;
    }
    // An additive attention mask of -inf (nn.MultiheadAttention's causal mask) is exact
    // in the source, but model.json params are finite: the node reading it is opaque.
    if (const auto bad = im.non_finite_input(n)) {
      im.opaque(i, "it reads the constant '" + *bad + "', which holds an infinity or a NaN");
      continue;
    }
    m(im, n, i);
  }
  report_progress(progress, "import nodes", "nodes", nodes.size(), nodes.size());
  lnv::Graph g = im.finish();
  if (!defer_values) materialize_all(g, progress);
  return g;
}

bool is_imported_op(const std::string& domain, const std::string& op_type) {
  if (norm_op_of(domain, op_type)) return true;
  if (domain == "com.microsoft")
    return op_type == "SkipSimplifiedLayerNormalization" || contrib_mappers().count(op_type) != 0;
  return (domain.empty() || domain == "ai.onnx") && mappers().count(op_type) != 0;
}

lnv::Graph import_onnx(const std::filesystem::path& path, const DimBindings& dims,
                       bool defer_values, const ProgressFn& progress) {
  const Model loaded = load_onnx(path, dims, progress);
  report_progress(progress, "fold constants", "", 0, 0);
  return import_graph(fold_constants(loaded).model, defer_values, progress);
}

lnv::Graph import_onnx_bytes(std::string_view bytes, const std::string& name,
                             const DimBindings& dims) {
  return import_graph(fold_constants(load_onnx_bytes(bytes, name, dims)).model);
}

bool is_onnx_path(const std::filesystem::path& path) {
  if (path.extension() == ".onnx") return true;
  // Only a regular file is peeked at: reading a FIFO's first byte would consume it.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream f(path, std::ios::binary);
  char first = 0;
  // A ModelProto written by ONNX starts with field 1 (ir_version, varint): byte 0x08.
  // model.json starts with '{' or whitespace.
  return f.get(first) && first == 0x08;
}

}  // namespace lnv::onnx_import
