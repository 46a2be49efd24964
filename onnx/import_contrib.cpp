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

// ---- attention (Attention, MultiHeadAttention) ------------------------------------------
// Both are imported as the unfused attention their documentation gives: per head,
// softmax(scale · Q Kᵀ + M) V, the heads concatenated, M the key mask of `mask_index` /
// `key_padding_mask` (`mask_filter_value`, default −10000, where masked and 0 elsewhere,
// as ONNX Runtime's CPU kernel adds it to the scaled scores), the causal mask of
// `unidirectional` a mask of the softmax.

// The integer graph input that `v` is, directly or through a Cast to int32 or int64 (ONNX
// Runtime's transformer optimizer casts the int64 mask to int32), or "".
std::string index_source(const Importer& im, const std::string& v) {
  if (im.is_index_input(v)) return v;
  const int p = im.producer(v);
  if (p < 0) return "";
  const onnx_import::Node& c = im.nodes()[size_t(p)];
  if (c.op_type == "Cast" && (c.domain.empty() || c.domain == "ai.onnx") && im.is_index_input(c.inputs[0]))
    return c.inputs[0];
  return "";
}

// The additive key mask of input k (mask_index of Attention, key_padding_mask of
// MultiHeadAttention) for scores [B, H, S, T], as a value that broadcasts onto them:
// [B, 1, 1, T] or [B, 1, S, T]. The forms ONNX Runtime's CPU kernel reads that are modelled:
//   (B)        key lengths (right padding): key t of batch b is masked where t ≥ len[b];
//   (B, T)     a raw mask: masked where 0 (ONNX Runtime: where not > 0);
//   (B, S, T)  a raw mask per query.
// From an integer graph input (through a Cast) the mask is an `embedding` lookup of the
// ids in a constant table (the raw forms: ids in {0, 1}, table [[fill], [0]]; the lengths:
// ids in [0, T], row L the mask of length L), so each id the input can hold maps to the
// kernel's mask exactly; from an integer constant it is a param; key lengths an
// EmbedLayerNormalization counts from its mask (Importer::key_lengths) give
// fill · (1 − clip(len − t, 0, 1)). Any other form or source
// (the start/end form (2B), (3B + 2), the 4-D Megatron mask, a mask computed in the graph)
// is not modelled: exit 2 naming the node and the form.
std::string key_mask(Importer& im, const onnx_import::Node& n, size_t i, size_t k, const char* input,
                     int64_t b, int64_t s, int64_t t, double fill) {
  const std::string& v = n.inputs[k];
  const auto& m = im.shape(v);
  const std::string where = std::string(input) + " ('" + v + "') of shape " + lnv::to_string(m);
  enum class Form { lengths, keys, per_query } form;
  if (m == Shape{b}) form = Form::lengths;
  else if (m == Shape{b, t}) form = Form::keys;
  else if (m == Shape{b, s, t}) form = Form::per_query;
  else if (m.size() == 1 && (m[0] == 2 * b || m[0] == 3 * b + 2))
    throw ModelError(im.describe(i), where + " is the " + (m[0] == 2 * b ? "end/start positions" : "(3 * batch + 2)") +
                                         " form, which lnverify does not model; modelled: key lengths [" +
                                         std::to_string(b) + "], a 0/1 mask [" + std::to_string(b) + ", " +
                                         std::to_string(t) + "] or [" + std::to_string(b) + ", " +
                                         std::to_string(s) + ", " + std::to_string(t) + "]");
  else
    throw ModelError(im.describe(i), where + " is not a form lnverify models: expected key lengths [" +
                                         std::to_string(b) + "], a 0/1 mask [" + std::to_string(b) + ", " +
                                         std::to_string(t) + "] or [" + std::to_string(b) + ", " +
                                         std::to_string(s) + ", " + std::to_string(t) + "]");
  const Shape out = form == Form::per_query ? Shape{b, 1, s, t} : Shape{b, 1, 1, t};
  const std::string name = (n.name.empty() ? n.outputs[0] : n.name) + ".key_mask";
  // The mask row of length L: fill from key L on.
  auto row = [&](int64_t len) {
    std::vector<double> r(size_t(t), 0.0);
    for (int64_t c = std::max<int64_t>(len, 0); c < t; ++c) r[size_t(c)] = fill;
    return r;
  };
  if (form == Form::lengths && im.key_lengths(v)) {
    // Lengths held as exact integer counts len [B]: key t is kept where len − t ≥ 1, so the
    // mask is fill · (1 − clip(len − t, 0, 1)), exact at every integer len.
    Node col = im.node(n, i, Op::reshape, {im.value(v)}, "key_lengths");
    col.shape = {b, 1};
    std::vector<double> keys(static_cast<size_t>(t));
    for (int64_t c = 0; c < t; ++c) keys[size_t(c)] = double(c);
    Node past = im.node(n, i, Op::sub, {im.emit(std::move(col)), im.new_param(name + "_keys", {1, t}, keys)},
                        "key_mask_past");
    Node kept = im.node(n, i, Op::clip, {im.emit(std::move(past))}, "key_mask_kept");
    kept.min = 0.0;
    kept.max = 1.0;
    Node scaled = im.node(n, i, Op::scale, {im.emit(std::move(kept))}, "key_mask_scaled");
    scaled.factor = -fill;
    Node filled = im.node(n, i, Op::add, {im.emit(std::move(scaled)), im.new_param(name + "_fill", {1}, {fill})},
                          "key_mask_filled");
    Node r = im.node(n, i, Op::reshape, {im.emit(std::move(filled))}, "key_mask");
    r.shape = out;
    return im.emit(std::move(r));
  }
  if (const Initializer* c = im.constant(v)) {
    if (c->value.is_float()) throw ModelError(im.describe(i), where + " holds floats; expected int32");
    std::vector<double> values;
    values.reserve(size_t(lnv::numel(out)));
    for (size_t e = 0; e < c->value.ints.size(); ++e) {
      const int64_t x = c->value.ints[e];
      if (form != Form::lengths) {
        values.push_back(x > 0 ? 0.0 : fill);
        continue;
      }
      if (x < 0)
        throw ModelError(im.describe(i), where + " holds the negative key length " + std::to_string(x) +
                                             " at index " + std::to_string(e));
      const auto r = row(x);
      values.insert(values.end(), r.begin(), r.end());
    }
    return im.new_param(name, out, std::move(values));
  }
  const std::string ids = index_source(im, v);
  if (ids.empty()) {
    const int p = im.producer(v);
    if (p >= 0 && im.nodes()[size_t(p)].op_type == "EmbedLayerNormalization" &&
        im.nodes()[size_t(p)].outputs.size() > 1 && im.nodes()[size_t(p)].outputs[1] == v) {
      const auto& e = im.nodes()[size_t(p)];
      const std::string mask = e.inputs.size() > 7 ? e.inputs[7] : "";
      throw ModelError(im.describe(i), where + " is the mask_index of " + e.describe(size_t(p)) +
                                           (mask.empty() ? std::string(", which has no mask input")
                                                         : ", counted from its mask ('" + mask + "')") +
                                           ", which lnverify does not model there: it models the count of a mask "
                                           "that is an integer graph input [batch, sequence] (directly or through "
                                           "a Cast), read by Attention mask_index inputs alone");
    }
    throw ModelError(im.describe(i), where + " is computed by " +
                                         (p >= 0 ? im.nodes()[size_t(p)].describe(size_t(p)) : std::string("the graph")) +
                                         "; lnverify models a mask that is an integer graph input (directly or "
                                         "through a Cast) or an integer constant");
  }
  std::vector<double> table;
  int64_t rows = 2, cols = 1;
  if (form == Form::lengths) {
    rows = t + 1;
    cols = t;
    for (int64_t len = 0; len <= t; ++len) {
      const auto r = row(len);
      table.insert(table.end(), r.begin(), r.end());
    }
  } else {
    table = {fill, 0.0};
  }
  Node e = im.node(n, i, Op::embedding, {im.value(ids)}, "key_mask_lookup");
  e.weight = im.new_param(name + "_table", {rows, cols}, std::move(table));
  im.note_index_range(ids, rows);
  Node r = im.node(n, i, Op::reshape, {im.emit(std::move(e))}, "key_mask");
  r.shape = out;
  return im.emit(std::move(r));
}

// [B, len, heads · d] → [B, heads, len, d].
std::string split_heads(Importer& im, const onnx_import::Node& n, size_t i, const std::string& x,
                        const Shape& bld, int64_t heads, const std::string& what) {
  Node r = im.node(n, i, Op::reshape, {x}, what + "_heads");
  r.shape = {bld[0], bld[1], heads, bld[2] / heads};
  Node t = im.node(n, i, Op::transpose, {im.emit(std::move(r))}, what + "_transposed");
  t.perm = {0, 2, 1, 3};
  return im.emit(std::move(t));
}

// softmax(scale · q kᵀ + Σ masks) v over heads q [B, H, S, dq], k [B, H, T, dq], v [B, H, T, dv],
// back to [B, S, H · dv] as the node's output 0. Causal (`unidirectional`): key t is left
// out of query s's softmax where t > s (its probability exactly 0), the softmax's mask:
// ONNX Runtime's CPU kernel sets those scores to the float minimum, whatever
// mask_filter_value is, not to mask_filter_value.
void attend(Importer& im, const onnx_import::Node& n, size_t i, const std::string& q, const std::string& k,
            const std::string& v, int64_t b, int64_t s, int64_t t, int64_t dv, double scale,
            const std::vector<std::string>& masks, bool causal) {
  Node qk = im.node(n, i, Op::matmul, {q, k}, "scores");
  qk.transpose_b = true;
  Node sc = im.node(n, i, Op::scale, {im.emit(std::move(qk))}, "scaled");
  sc.factor = scale;
  std::string scores = im.emit(std::move(sc));
  for (const std::string& m : masks) scores = im.emit(im.node(n, i, Op::add, {scores, m}, "masked"));
  Node sm = im.node(n, i, Op::softmax, {scores}, "probs");
  sm.axis = -1;
  if (causal) {
    sm.condition_shape = {s, t};
    for (int64_t r = 0; r < s; ++r)
      for (int64_t c = 0; c < t; ++c) sm.condition.push_back(c <= r ? 1 : 0);
  }
  const std::string ctx = im.emit(im.node(n, i, Op::matmul, {im.emit(std::move(sm)), v}, "context"));
  Node tr = im.node(n, i, Op::transpose, {ctx}, "context_transposed");
  tr.perm = {0, 2, 1, 3};
  Node r = im.node(n, i, Op::reshape, {im.emit(std::move(tr))});
  r.shape = {b, s, dv};
  im.emit_final(std::move(r), n.outputs[0]);
}

int64_t num_heads(Importer& im, const onnx_import::Node& n, size_t i) {
  const Attribute* a = n.attr("num_heads");
  if (!a) throw ModelError(im.describe(i), "the required attribute num_heads is missing");
  if (a->i <= 0) throw ModelError(im.describe(i), "num_heads is " + std::to_string(a->i) + "; expected a positive count");
  return a->i;
}

// Attention (packed Q, K, V weights [Din, Dq + Dk + Dv] and bias): the three projections
// (`matmul` by a slice of the weights, `add` of the bias slice), then `attend`. past,
// attention_bias, past_sequence_length, rotary embeddings and a read `present` are not
// modelled: exit 2 naming the node and the input (they change the result).
void map_attention(Importer& im, const onnx_import::Node& n, size_t i) {
  auto given = [&](size_t k) { return k < n.inputs.size() && !n.inputs[k].empty(); };
  if (given(4) || given(6) || im.used(n, 1))
    throw ModelError(im.describe(i), "past or present state (input past, past_sequence_length or output present) "
                                     "is not modelled; lnverify reads Attention without a key/value cache");
  if (given(5)) throw ModelError(im.describe(i), "attention_bias ('" + n.inputs[5] + "') is not modelled");
  if (im.attr_i(n, "do_rotary", 0) != 0) throw ModelError(im.describe(i), "do_rotary (rotary embeddings) is not modelled");
  const int64_t heads = num_heads(im, n, i);
  if (!im.is_constant(n.inputs[1]) || (given(2) && !im.is_constant(n.inputs[2])))
    return im.opaque(i, "Attention whose weights or bias are not constants");
  const auto& x = im.shape(n.inputs[0]);
  const auto& w = im.shape(n.inputs[1]);
  if (x.size() != 3 || w.size() != 2 || w[0] != x[2])
    throw ModelError(im.describe(i), "weights ('" + n.inputs[1] + "') of shape " + lnv::to_string(w) +
                                         " do not fit an input of shape " + lnv::to_string(x) +
                                         "; expected [" + std::to_string(x.size() == 3 ? x[2] : 0) + ", 3 * hidden]");
  std::vector<int64_t> sizes = im.attr_ints(n, "qkv_hidden_sizes", {w[1] / 3, w[1] / 3, w[1] / 3});
  if (sizes.size() != 3 || sizes[0] + sizes[1] + sizes[2] != w[1] || sizes[0] != sizes[1] ||
      sizes[0] % heads != 0 || sizes[2] % heads != 0)
    throw ModelError(im.describe(i), "num_heads " + std::to_string(heads) + " and qkv_hidden_sizes " +
                                         lnv::to_string(sizes) + " do not split the weights' " +
                                         std::to_string(w[1]) + " columns into Q, K, V of equal heads");
  if (given(2) && im.numel(n.inputs[2]) != w[1])
    throw ModelError(im.describe(i), "bias ('" + n.inputs[2] + "') has " + std::to_string(im.numel(n.inputs[2])) +
                                         " elements; expected " + std::to_string(w[1]));
  const int64_t b = x[0], s = x[1], din = x[2];
  const double fill = im.attr_f(n, "mask_filter_value", -10000.0);
  std::vector<std::string> masks;
  if (given(3)) masks.push_back(key_mask(im, n, i, 3, "mask_index", b, s, s, fill));
  const std::vector<double> wv = im.floats(n.inputs[1]);
  const std::vector<double> bv = given(2) ? im.floats(n.inputs[2]) : std::vector<double>{};
  const std::string name = n.name.empty() ? n.outputs[0] : n.name;
  const std::string in = im.value(n.inputs[0]);
  // One projection into heads: [B, H, S, head], from columns [from, from + cols).
  auto project = [&](const std::string& what, int64_t from, int64_t cols) {
    std::vector<double> wk(size_t(din * cols));
    for (int64_t r = 0; r < din; ++r)
      for (int64_t c = 0; c < cols; ++c) wk[size_t(r * cols + c)] = wv[size_t(r * w[1] + from + c)];
    std::string p = im.emit(im.node(n, i, Op::matmul, {in, im.new_param(name + "." + what + "_weight", {din, cols}, wk)},
                                    what + "_proj"));
    if (!bv.empty()) {
      std::vector<double> bk(bv.begin() + from, bv.begin() + from + cols);
      p = im.emit(im.node(n, i, Op::add, {p, im.new_param(name + "." + what + "_bias", {cols}, bk)}, what + "_bias"));
    }
    return split_heads(im, n, i, p, {b, s, cols}, heads, what);
  };
  const std::string q = project("q", 0, sizes[0]);
  const std::string k = project("k", sizes[0], sizes[1]);
  const std::string v = project("v", sizes[0] + sizes[1], sizes[2]);
  attend(im, n, i, q, k, v, b, s, s, sizes[2],
         im.attr_f(n, "scale", 1.0 / std::sqrt(double(sizes[0] / heads))), masks,
         im.attr_i(n, "unidirectional", 0) != 0);
}

// MultiHeadAttention (query [B, S, D], key [B, T, D], value [B, T, Dv], projected already;
// or packed QKV in query [B, S, N, 3, H] with key and value absent; or packed KV in key
// [B, T, N, 2, H] with value absent): bias (D + D + Dv) added to Q, K and V, then `attend`.
// past_key / past_value (and key given as past_key), attention_bias, cache_indirection and
// the present / qk outputs are not modelled: exit 2 naming the node and the input.
void map_multi_head_attention(Importer& im, const onnx_import::Node& n, size_t i) {
  auto given = [&](size_t k) { return k < n.inputs.size() && !n.inputs[k].empty(); };
  static const char* const kUnmodelled[] = {nullptr, nullptr, nullptr, nullptr, nullptr, "attention_bias",
                                            "past_key", "past_value", "past_sequence_length", "cache_indirection"};
  for (size_t k = 5; k < n.inputs.size() && k < 10; ++k)
    if (given(k)) throw ModelError(im.describe(i), std::string(kUnmodelled[k]) + " ('" + n.inputs[k] + "') is not modelled");
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (im.used(n, k))
      throw ModelError(im.describe(i), "output " + std::to_string(k) + " ('" + n.outputs[k] +
                                           "', present_key, present_value or qk) is read; it is not modelled");
  const int64_t heads = num_heads(im, n, i);
  const auto& qs = im.shape(n.inputs[0]);
  const std::string name = n.name.empty() ? n.outputs[0] : n.name;
  // Slice `what` (0, 1, 2) of a packed [B, len, N, parts, H] input as [B, len, N · H].
  auto unpack = [&](size_t k, int64_t part, const std::string& what) {
    const auto& p = im.shape(n.inputs[k]);
    Node sl = im.node(n, i, Op::slice, {im.value(n.inputs[k])}, what + "_unpacked");
    sl.axes = {3};
    sl.starts = {part};
    sl.ends = {part + 1};
    Node r = im.node(n, i, Op::reshape, {im.emit(std::move(sl))}, what + "_packed_rows");
    r.shape = {p[0], p[1], p[2] * p[4]};
    return im.emit(std::move(r));
  };
  std::string q, k, v;
  Shape qd, kd, vd;  // [B, len, hidden] of each
  if (qs.size() == 5) {
    if (given(1) || given(2) || qs[3] != 3 || qs[2] != heads)
      throw ModelError(im.describe(i), "query ('" + n.inputs[0] + "') of shape " + lnv::to_string(qs) +
                                           " is packed QKV only as [batch, sequence, num_heads (" +
                                           std::to_string(heads) + "), 3, head_size] with key and value absent");
    q = unpack(0, 0, "q"), k = unpack(0, 1, "k"), v = unpack(0, 2, "v");
    qd = kd = vd = {qs[0], qs[1], qs[2] * qs[4]};
  } else if (qs.size() == 3 && given(1) && im.shape(n.inputs[1]).size() == 5 && !given(2)) {
    const auto& ks = im.shape(n.inputs[1]);
    if (ks[0] != qs[0] || ks[2] != heads || ks[3] != 2 || ks[2] * ks[4] != qs[2])
      throw ModelError(im.describe(i), "key ('" + n.inputs[1] + "') of shape " + lnv::to_string(ks) +
                                           " is not packed KV [batch, kv_sequence, num_heads (" +
                                           std::to_string(heads) + "), 2, head_size] for a query of shape " +
                                           lnv::to_string(qs));
    q = im.value(n.inputs[0]), k = unpack(1, 0, "k"), v = unpack(1, 1, "v");
    qd = qs;
    kd = vd = {ks[0], ks[1], ks[2] * ks[4]};
  } else {
    if (qs.size() != 3 || !given(1) || !given(2))
      throw ModelError(im.describe(i), "query ('" + n.inputs[0] + "') of shape " + lnv::to_string(qs) +
                                           " with key " + (given(1) ? "given" : "absent") + " and value " + (given(2) ? "given" : "absent") +
                                           ": lnverify models query, key and value of rank 3, packed QKV in query, or "
                                           "packed KV in key");
    kd = im.shape(n.inputs[1]), vd = im.shape(n.inputs[2]);
    if (kd.size() != 3 || vd.size() != 3 || kd[0] != qs[0] || vd[0] != qs[0] || kd[1] != vd[1] || kd[2] != qs[2])
      throw ModelError(im.describe(i), "key ('" + n.inputs[1] + "') of shape " + lnv::to_string(kd) + " and value ('" +
                                           n.inputs[2] + "') of shape " + lnv::to_string(vd) +
                                           " do not fit a query of shape " + lnv::to_string(qs) +
                                           " (key and value [batch, kv_sequence, ...], key's hidden size the query's; "
                                           "a key of rank 4 is past_key, not modelled)");
    q = im.value(n.inputs[0]), k = im.value(n.inputs[1]), v = im.value(n.inputs[2]);
    qd = qs;
  }
  if (qd[2] % heads != 0 || vd[2] % heads != 0)
    throw ModelError(im.describe(i), "num_heads " + std::to_string(heads) + " does not divide the hidden sizes " +
                                         std::to_string(qd[2]) + " (query, key) and " + std::to_string(vd[2]) + " (value)");
  if (given(3)) {
    if (!im.is_constant(n.inputs[3])) return im.opaque(i, "MultiHeadAttention whose bias is not a constant");
    const int64_t want = qd[2] + kd[2] + vd[2];
    if (im.numel(n.inputs[3]) != want)
      throw ModelError(im.describe(i), "bias ('" + n.inputs[3] + "') has " + std::to_string(im.numel(n.inputs[3])) +
                                           " elements; expected " + std::to_string(want) + " (query, key, value hidden sizes)");
    const std::vector<double> bv = im.floats(n.inputs[3]);
    auto add_bias = [&](std::string& x, int64_t from, int64_t cols, const std::string& what) {
      std::vector<double> part(bv.begin() + from, bv.begin() + from + cols);
      x = im.emit(im.node(n, i, Op::add, {x, im.new_param(name + "." + what + "_bias", {cols}, std::move(part))},
                          what + "_bias"));
    };
    add_bias(q, 0, qd[2], "q");
    add_bias(k, qd[2], kd[2], "k");
    add_bias(v, qd[2] + kd[2], vd[2], "v");
  }
  const int64_t b = qd[0], s = qd[1], t = kd[1];
  const bool causal = im.attr_i(n, "unidirectional", 0) != 0;
  if (causal && s != t)
    throw ModelError(im.describe(i), "unidirectional with a query of " + std::to_string(s) + " positions and keys of " +
                                         std::to_string(t) + " is not modelled (only self-attention lengths)");
  const double fill = im.attr_f(n, "mask_filter_value", -10000.0);
  std::vector<std::string> masks;
  if (given(4)) masks.push_back(key_mask(im, n, i, 4, "key_padding_mask", b, s, t, fill));
  attend(im, n, i, split_heads(im, n, i, q, qd, heads, "q"), split_heads(im, n, i, k, kd, heads, "k"),
         split_heads(im, n, i, v, vd, heads, "v"), b, s, t, vd[2],
         im.attr_f(n, "scale", 1.0 / std::sqrt(double(qd[2] / heads))), masks, causal);
}

}  // namespace

const std::map<std::string, Mapper>& contrib_mappers() {
  static const std::map<std::string, Mapper> kMappers = {
      {"Gelu", map_gelu},           {"BiasGelu", map_bias_gelu},   {"FastGelu", map_fast_gelu},
      {"QuickGelu", map_quick_gelu}, {"BiasAdd", map_bias_add},     {"BiasSoftmax", map_bias_softmax},
      {"FusedMatMul", map_fused_matmul}, {"FusedGemm", map_fused_gemm},
      {"Attention", map_attention}, {"MultiHeadAttention", map_multi_head_attention},
  };
  return kMappers;
}

}  // namespace lnv::onnx_import
