// ONNX Runtime's com.microsoft ops (docs/onnx.md, "ONNX Runtime's fused ops"), each imported
// as the composition of model.json ops that ONNX Runtime's contrib operator documentation
// gives for it, so that shape inference, exact evaluation, gradients and the analysis see
// the unfused graph. The norms among them (SkipLayerNormalization, SkipSimplified...) are
// matched in onnx/import_patterns.cpp with the other norms.
#include <cmath>
#include <numbers>
#include <set>

#include "core/error.h"
#include "core/shape.h"
#include "onnx/import_context.h"

namespace lnv::onnx_import {
namespace {

using lnv::Node;

// A bias of the last dim (a 1-D [C] tensor) or of the input's shape, as ONNX Runtime's
// kernels accept it; an error naming the node otherwise.
void check_bias(Importer& im, const onnx_import::Node& n, size_t i, size_t k) {
  const auto& x = im.shape(n.inputs[0]);
  const auto& b = im.shape(n.inputs[k]);
  const bool last = b.size() == 1 && !x.empty() && b[0] == x.back();
  if (!last && b != x)
    throw ModelError(im.describe(i), "input " + std::to_string(k) + " ('" + n.inputs[k] +
                                         "') has shape " + lnv::to_string(b) +
                                         "; expected [" + std::to_string(x.empty() ? 0 : x.back()) +
                                         "] (the last dim of input 0) or input 0's shape");
}

std::string add_bias(Importer& im, const onnx_import::Node& n, size_t i, const std::string& x,
                     size_t k, const std::string& suffix) {
  check_bias(im, n, i, k);
  return im.emit(im.node(n, i, Op::add, {x, im.value(n.inputs[k])}, suffix));
}

// Gelu (com.microsoft): x Φ(x), the erf form.
void map_gelu(Importer& im, const onnx_import::Node& n, size_t i) {
  im.emit_final(im.node(n, i, Op::gelu, {im.value(n.inputs[0])}), n.outputs[0]);
}

// BiasGelu(A, B): Gelu(A + B), B of A's last dim.
void map_bias_gelu(Importer& im, const onnx_import::Node& n, size_t i) {
  const std::string s = add_bias(im, n, i, im.value(n.inputs[0]), 1, "bias");
  im.emit_final(im.node(n, i, Op::gelu, {s}), n.outputs[0]);
}

// FastGelu(X, bias): with x = X + bias, 0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³))).
void map_fast_gelu(Importer& im, const onnx_import::Node& n, size_t i) {
  std::string x = im.value(n.inputs[0]);
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) x = add_bias(im, n, i, x, 1, "bias");
  const std::string sq = im.emit(im.node(n, i, Op::mul, {x, x}, "square"));
  const std::string cube = im.emit(im.node(n, i, Op::mul, {sq, x}, "cube"));
  Node c = im.node(n, i, Op::scale, {cube}, "cube_scaled");
  c.factor = 0.044715;
  const std::string inner = im.emit(im.node(n, i, Op::add, {x, im.emit(std::move(c))}, "inner"));
  Node s = im.node(n, i, Op::scale, {inner}, "inner_scaled");
  s.factor = std::sqrt(2.0 / std::numbers::pi);
  const std::string t = im.emit(im.node(n, i, Op::tanh, {im.emit(std::move(s))}, "tanh"));
  const std::string name = n.name.empty() ? n.outputs[0] : n.name;
  const std::string one = im.new_param(name + ".one", {}, {1.0});
  const std::string t1 = im.emit(im.node(n, i, Op::add, {t, one}, "one_plus"));
  Node h = im.node(n, i, Op::scale, {x}, "half");
  h.factor = 0.5;
  im.emit_final(im.node(n, i, Op::mul, {im.emit(std::move(h)), t1}), n.outputs[0]);
}

// QuickGelu(X; alpha = 1.702): X sigmoid(alpha X).
void map_quick_gelu(Importer& im, const onnx_import::Node& n, size_t i) {
  const std::string x = im.value(n.inputs[0]);
  Node s = im.node(n, i, Op::scale, {x}, "alpha");
  s.factor = im.attr_f(n, "alpha", 1.702);
  const std::string g = im.emit(im.node(n, i, Op::sigmoid, {im.emit(std::move(s))}, "sigmoid"));
  im.emit_final(im.node(n, i, Op::mul, {x, g}), n.outputs[0]);
}

// BiasAdd(X, bias, skip): X + bias + skip, bias of X's last dim, skip of X's shape.
void map_bias_add(Importer& im, const onnx_import::Node& n, size_t i) {
  const std::string s = add_bias(im, n, i, im.value(n.inputs[0]), 1, "bias");
  if (im.shape(n.inputs[2]) != im.shape(n.inputs[0]))
    throw ModelError(im.describe(i), "skip ('" + n.inputs[2] + "') has shape " +
                                         lnv::to_string(im.shape(n.inputs[2])) + "; expected X's " +
                                         lnv::to_string(im.shape(n.inputs[0])));
  im.emit_final(im.node(n, i, Op::add, {s, im.value(n.inputs[2])}), n.outputs[0]);
}

// BiasSoftmax(data, bias; axis = 1, is_inner_broadcast): data as [N, D] rows (D the dims from
// `axis` on) and bias as [R, D]; row r of data adds bias row r / (N / R) (inner broadcast:
// consecutive rows share one) or r % R (outer: cyclic), as ONNX Runtime's kernel; then a
// softmax over each row. Imported as data [R, N/R, D] + bias [R, 1, D] (inner) or
// data [N/R, R, D] + bias [1, R, D] (outer), a softmax over the last axis, reshaped back.
void map_bias_softmax(Importer& im, const onnx_import::Node& n, size_t i) {
  const auto& x = im.shape(n.inputs[0]);
  const int64_t rank = int64_t(x.size());
  int64_t axis = im.attr_i(n, "axis", 1);
  if (axis < -rank || axis >= rank)
    throw ModelError(im.describe(i), "axis " + std::to_string(axis) + " is out of range for rank " +
                                         std::to_string(rank));
  if (axis < 0) axis += rank;
  const Attribute* inner_attr = n.attr("is_inner_broadcast");
  if (!inner_attr) throw ModelError(im.describe(i), "the required attribute is_inner_broadcast is missing");
  const bool inner = inner_attr->i != 0;
  int64_t rows = 1, cols = 1;
  for (int64_t k = 0; k < rank; ++k) (k < axis ? rows : cols) *= x[k];
  const int64_t bias_size = im.numel(n.inputs[1]);
  if (bias_size % cols != 0 || rows % (bias_size / cols) != 0)
    throw ModelError(im.describe(i), "bias ('" + n.inputs[1] + "') has " + std::to_string(bias_size) +
                                         " elements; expected a multiple of the softmax's " +
                                         std::to_string(cols) + " elements per row whose row count divides " +
                                         std::to_string(rows));
  const int64_t r = bias_size / cols, g = rows / r;
  const Shape data3 = inner ? Shape{r, g, cols} : Shape{g, r, cols};
  const Shape bias3 = inner ? Shape{r, 1, cols} : Shape{1, r, cols};
  Node rd = im.node(n, i, Op::reshape, {im.value(n.inputs[0])}, "rows");
  rd.shape = data3;
  const std::string d = im.emit(std::move(rd));
  std::string b;
  if (im.is_constant(n.inputs[1])) {
    b = im.param_as(n.inputs[1], bias3);
  } else {
    Node rb = im.node(n, i, Op::reshape, {im.value(n.inputs[1])}, "bias_rows");
    rb.shape = bias3;
    b = im.emit(std::move(rb));
  }
  Node s = im.node(n, i, Op::softmax, {im.emit(im.node(n, i, Op::add, {d, b}, "biased"))}, "softmax");
  s.axis = -1;
  Node back = im.node(n, i, Op::reshape, {im.emit(std::move(s))});
  back.shape = x;
  im.emit_final(std::move(back), n.outputs[0]);
}

// The permutation FusedMatMul applies to an operand of rank r >= 2 (ONNX Runtime's
// FusedMatMulShapeInference): trans_batch moves dim 0 behind the batch dims, trans swaps
// the last two.
std::vector<int64_t> fused_perm(int64_t r, bool trans, bool trans_batch) {
  std::vector<int64_t> p;
  for (int64_t k = trans_batch ? 1 : 0; k < (trans_batch ? r - 1 : r - 2); ++k) p.push_back(k);
  const int64_t row = trans_batch ? 0 : r - 2;
  p.push_back(trans ? r - 1 : row);
  p.push_back(trans ? row : r - 1);
  return p;
}

bool is_identity(const std::vector<int64_t>& p) {
  for (size_t k = 0; k < p.size(); ++k)
    if (p[k] != int64_t(k)) return false;
  return true;
}

// FusedMatMul(A, B; alpha, transA, transB, transBatchA, transBatchB): alpha A' B'.
void map_fused_matmul(Importer& im, const onnx_import::Node& n, size_t i) {
  for (const char* a : {"transA", "transB", "transBatchA", "transBatchB"}) {
    const int64_t v = im.attr_i(n, a, 0);
    if (v != 0 && v != 1)
      throw ModelError(im.describe(i), std::string(a) + " is " + std::to_string(v) + "; expected 0 or 1");
  }
  const auto& a = im.shape(n.inputs[0]);
  const auto& b = im.shape(n.inputs[1]);
  if (a.size() < 2 || b.size() < 2) return im.opaque(i, "a 1-D operand of FusedMatMul");
  const bool trans_b = im.attr_i(n, "transB", 0) != 0, batch_b = im.attr_i(n, "transBatchB", 0) != 0;
  auto operand = [&](size_t k, std::vector<int64_t> perm, const char* suffix) {
    if (is_identity(perm)) return im.value(n.inputs[k]);
    Node t = im.node(n, i, Op::transpose, {im.value(n.inputs[k])}, suffix);
    t.perm = std::move(perm);
    return im.emit(std::move(t));
  };
  const std::string pa = operand(0, fused_perm(int64_t(a.size()), im.attr_i(n, "transA", 0) != 0,
                                               im.attr_i(n, "transBatchA", 0) != 0), "transA");
  // transB alone is matmul's transpose_b (a weight stored [N, K]).
  const bool b_plain = trans_b && !batch_b;
  const std::string pb = operand(1, fused_perm(int64_t(b.size()), trans_b && !b_plain, batch_b), "transB");
  const double alpha = im.attr_f(n, "alpha", 1.0);
  Node p = im.node(n, i, Op::matmul, {pa, pb}, alpha == 1.0 ? "" : "product");
  p.transpose_b = b_plain;
  if (alpha == 1.0) return im.emit_final(std::move(p), n.outputs[0]);
  Node s = im.node(n, i, Op::scale, {im.emit(std::move(p))});
  s.factor = alpha;
  im.emit_final(std::move(s), n.outputs[0]);
}

// FusedGemm: Gemm, then the activation ONNX Runtime's fusion wrote into it.
void map_fused_gemm(Importer& im, const onnx_import::Node& n, size_t i) {
  const std::string act = im.attr_s(n, "activation", "");
  static const std::set<std::string> kOrtActivations = {"Relu", "Tanh", "Sigmoid", "HardSigmoid",
                                                         "LeakyRelu", "Clip", "Elu", "Selu",
                                                         "Softsign", "Softplus", "ThresholdedRelu",
                                                         "ScaledTanh", "Affine", "Identity"};
  if (!act.empty() && !kOrtActivations.count(act))
    throw ModelError(im.describe(i), "activation '" + act + "' is not an activation ONNX Runtime fuses into Gemm");
  if (!act.empty() && act != "Relu" && act != "Tanh" && act != "Sigmoid" && act != "HardSigmoid" &&
      act != "Identity")
    return im.opaque(i, "FusedGemm with activation '" + act + "' (not modelled)");
  contrib_gemm_mapper()(im, n, i);
  if (act.empty() || act == "Identity") return;
  const std::string y = im.value(n.outputs[0]);
  Node f = im.node(n, i, act == "Relu" ? Op::relu : act == "Tanh" ? Op::tanh
                         : act == "Sigmoid" ? Op::sigmoid : Op::hard_sigmoid,
                   {y}, "activation");
  if (act == "HardSigmoid") {
    f.alpha = im.attr_f(n, "activation_alpha", 0.2);
    f.beta = im.attr_f(n, "activation_beta", 0.5);
  }
  im.emit_final(std::move(f), n.outputs[0]);
}

// Attention (packed Q, K, V weights [Din, Dq + Dk + Dv] and bias): per head, softmax(scale ·
// Q Kᵀ + M) V with scale 1/√head_size unless given, M the causal mask of
// `mask_filter_value` (default −10000, added as ONNX Runtime's kernel adds it) where
// `unidirectional`, else none; then the heads concatenated. Imported as the three
// projections (`matmul` by a slice of the weights, `add` of the bias slice), `reshape` and
// `transpose` into heads, `matmul` (`transpose_b`), `scale`, the mask's `add`, `softmax`,
// `matmul`, and back. mask_index, past, attention_bias, rotary embeddings and the present
// output are not modelled: the node is then opaque, the reason naming what it uses.
void map_attention(Importer& im, const onnx_import::Node& n, size_t i) {
  auto given = [&](size_t k) { return k < n.inputs.size() && !n.inputs[k].empty(); };
  if (given(3)) return im.opaque(i, "Attention with a mask_index (not modelled)");
  if (given(4) || given(6) || im.used(n, 1)) return im.opaque(i, "Attention with past or present state (not modelled)");
  if (given(5)) return im.opaque(i, "Attention with an attention_bias (not modelled)");
  if (im.attr_i(n, "do_rotary", 0) != 0) return im.opaque(i, "Attention with rotary embeddings (not modelled)");
  if (!im.is_constant(n.inputs[1]) || (given(2) && !im.is_constant(n.inputs[2])))
    return im.opaque(i, "Attention whose weights or bias are not constants");
  const auto& x = im.shape(n.inputs[0]);
  const auto& w = im.shape(n.inputs[1]);
  if (x.size() != 3 || w.size() != 2 || w[0] != x[2])
    throw ModelError(im.describe(i), "weights ('" + n.inputs[1] + "') of shape " + lnv::to_string(w) +
                                         " do not fit an input of shape " + lnv::to_string(x) +
                                         "; expected [" + std::to_string(x.size() == 3 ? x[2] : 0) + ", 3 * hidden]");
  const int64_t heads = im.attr_i(n, "num_heads", 0);
  std::vector<int64_t> sizes = im.attr_ints(n, "qkv_hidden_sizes", {w[1] / 3, w[1] / 3, w[1] / 3});
  if (sizes.size() != 3 || sizes[0] + sizes[1] + sizes[2] != w[1] || sizes[0] != sizes[1] || heads <= 0 ||
      sizes[0] % heads != 0 || sizes[2] % heads != 0)
    throw ModelError(im.describe(i), "num_heads " + std::to_string(heads) + " and qkv_hidden_sizes " +
                                         lnv::to_string(sizes) + " do not split the weights' " +
                                         std::to_string(w[1]) + " columns into Q, K, V of equal heads");
  if (given(2) && im.numel(n.inputs[2]) != w[1])
    throw ModelError(im.describe(i), "bias ('" + n.inputs[2] + "') has " + std::to_string(im.numel(n.inputs[2])) +
                                         " elements; expected " + std::to_string(w[1]));
  const int64_t b = x[0], s = x[1], din = x[2];
  const std::vector<double> wv = im.floats(n.inputs[1]);
  const std::vector<double> bv = given(2) ? im.floats(n.inputs[2]) : std::vector<double>{};
  const std::string name = n.name.empty() ? n.outputs[0] : n.name;
  const std::string in = im.value(n.inputs[0]);
  // One projection into heads: [B, H, S, head], from columns [from, from + cols).
  auto project = [&](const char* what, int64_t from, int64_t cols) {
    std::vector<double> wk(size_t(din * cols));
    for (int64_t r = 0; r < din; ++r)
      for (int64_t c = 0; c < cols; ++c) wk[size_t(r * cols + c)] = wv[size_t(r * w[1] + from + c)];
    std::string p = im.emit(im.node(n, i, Op::matmul, {in, im.new_param(name + "." + what + "_weight", {din, cols}, wk)},
                                    std::string(what) + "_proj"));
    if (!bv.empty()) {
      std::vector<double> bk(bv.begin() + from, bv.begin() + from + cols);
      p = im.emit(im.node(n, i, Op::add, {p, im.new_param(name + "." + what + "_bias", {cols}, bk)},
                          std::string(what) + "_bias"));
    }
    Node r = im.node(n, i, Op::reshape, {p}, std::string(what) + "_heads");
    r.shape = {b, s, heads, cols / heads};
    Node t = im.node(n, i, Op::transpose, {im.emit(std::move(r))}, std::string(what) + "_transposed");
    t.perm = {0, 2, 1, 3};
    return im.emit(std::move(t));
  };
  const std::string q = project("q", 0, sizes[0]);
  const std::string k = project("k", sizes[0], sizes[1]);
  const std::string v = project("v", sizes[0] + sizes[1], sizes[2]);
  Node qk = im.node(n, i, Op::matmul, {q, k}, "scores");
  qk.transpose_b = true;
  Node sc = im.node(n, i, Op::scale, {im.emit(std::move(qk))}, "scaled");
  sc.factor = im.attr_f(n, "scale", 1.0 / std::sqrt(double(sizes[0] / heads)));
  std::string scores = im.emit(std::move(sc));
  if (im.attr_i(n, "unidirectional", 0) != 0) {
    const double fill = im.attr_f(n, "mask_filter_value", -10000.0);
    std::vector<double> mask(size_t(s * s), 0.0);
    for (int64_t r = 0; r < s; ++r)
      for (int64_t c = r + 1; c < s; ++c) mask[size_t(r * s + c)] = fill;
    scores = im.emit(im.node(n, i, Op::add, {scores, im.new_param(name + ".causal_mask", {s, s}, mask)}, "masked"));
  }
  Node sm = im.node(n, i, Op::softmax, {scores}, "probs");
  sm.axis = -1;
  const std::string ctx = im.emit(im.node(n, i, Op::matmul, {im.emit(std::move(sm)), v}, "context"));
  Node t = im.node(n, i, Op::transpose, {ctx}, "context_transposed");
  t.perm = {0, 2, 1, 3};
  Node r = im.node(n, i, Op::reshape, {im.emit(std::move(t))});
  r.shape = {b, s, sizes[2]};
  im.emit_final(std::move(r), n.outputs[0]);
}

}  // namespace

const std::map<std::string, Mapper>& contrib_mappers() {
  static const std::map<std::string, Mapper> kMappers = {
      {"Gelu", map_gelu},           {"BiasGelu", map_bias_gelu},   {"FastGelu", map_fast_gelu},
      {"QuickGelu", map_quick_gelu}, {"BiasAdd", map_bias_add},     {"BiasSoftmax", map_bias_softmax},
      {"FusedMatMul", map_fused_matmul}, {"FusedGemm", map_fused_gemm},
      {"Attention", map_attention},
  };
  return kMappers;
}

}  // namespace lnv::onnx_import
