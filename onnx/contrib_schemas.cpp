// Schemas of ONNX Runtime's com.microsoft ops that lnverify imports (docs/onnx.md,
// "ONNX Runtime's fused ops"), for ONNX's checker and shape inference, which know none of
// them: inputs, outputs and attributes as ONNX Runtime's contrib operator documentation
// declares them, and the output shapes each op computes. The checker then refuses a node
// with an attribute the op does not have, and shape inference carries static shapes through
// ONNX Runtime's optimized graphs.
#include <map>
#include <string>

#include <onnx/defs/schema.h>
#include <onnx/defs/shape_inference.h>

#include "onnx/newer_opsets.h"

namespace lnv::onnx_import {
namespace {

namespace ox = ::onnx;
using ox::AttributeProto;
using ox::OpSchema;

const std::vector<std::string>& float_types() {
  static const std::vector<std::string> kTypes = {"tensor(float16)", "tensor(float)", "tensor(double)",
                                                  "tensor(bfloat16)"};
  return kTypes;
}

OpSchema base(const char* name) {
  OpSchema s;
  s.SetName(name);
  s.SetDomain("com.microsoft");
  s.SinceVersion(1);
  s.TypeConstraint("T", float_types(), "");
  return s;
}

// An elementwise op (with operands that broadcast into the first): the first input's shape.
OpSchema elementwise(const char* name, std::vector<const char*> inputs, int required) {
  OpSchema s = base(name);
  for (size_t k = 0; k < inputs.size(); ++k)
    s.Input(int(k), inputs[k], "", "T",
            int(k) < required ? OpSchema::Single : OpSchema::Optional);
  s.Output(0, "Y", "", "T");
  s.TypeAndShapeInferenceFunction(ox::propagateShapeAndTypeFromFirstInput);
  return s;
}

// FusedMatMul: alpha * A' B', with A' = A with its last two dims swapped (transA) and its
// first dim moved behind the batch dims (transBatchA), B' likewise; as ONNX Runtime's
// FusedMatMulShapeInference.
void fused_matmul_shape(ox::InferenceContext& ctx) {
  ox::propagateElemTypeFromInputToOutput(ctx, 0, 0);
  if (!ox::hasInputShape(ctx, 0) || !ox::hasInputShape(ctx, 1)) return;
  auto flag = [&](const char* a) {
    const AttributeProto* p = ctx.getAttribute(a);
    return p && p->i() != 0;
  };
  auto operand = [&](size_t k, bool trans, bool trans_batch) {
    const ox::TensorShapeProto& raw = ox::getInputShape(ctx, k);
    const int r = raw.dim_size();
    if (r == 0) fail_shape_inference("FusedMatMul: an input of rank 0");
    if (r == 1) return raw;
    ox::TensorShapeProto s;
    for (int i = trans_batch ? 1 : 0; i < (trans_batch ? r - 1 : r - 2); ++i) *s.add_dim() = raw.dim(i);
    const int row = trans_batch ? 0 : r - 2;
    *s.add_dim() = raw.dim(trans ? r - 1 : row);
    *s.add_dim() = raw.dim(trans ? row : r - 1);
    return s;
  };
  const ox::TensorShapeProto a = operand(0, flag("transA"), flag("transBatchA"));
  const ox::TensorShapeProto b = operand(1, flag("transB"), flag("transBatchB"));
  ox::TensorShapeProto l, r;
  if (a.dim_size() == 1) l.add_dim()->set_dim_value(1);
  for (const auto& d : a.dim()) *l.add_dim() = d;
  for (const auto& d : b.dim()) *r.add_dim() = d;
  if (b.dim_size() == 1) r.add_dim()->set_dim_value(1);
  const auto& k1 = l.dim(l.dim_size() - 1);
  const auto& k2 = r.dim(r.dim_size() - 2);
  if (k1.has_dim_value() && k2.has_dim_value() && k1.dim_value() != k2.dim_value())
    fail_shape_inference("FusedMatMul: incompatible dimensions for matrix multiplication");
  ox::TensorShapeProto pl, pr, out;
  for (int i = 0; i + 2 < l.dim_size(); ++i) *pl.add_dim() = l.dim(i);
  for (int i = 0; i + 2 < r.dim_size(); ++i) *pr.add_dim() = r.dim(i);
  ox::bidirectionalBroadcastShapeInference(pl, pr, out);
  if (a.dim_size() != 1) *out.add_dim() = l.dim(l.dim_size() - 2);
  if (b.dim_size() != 1) *out.add_dim() = r.dim(r.dim_size() - 1);
  ox::updateOutputShape(ctx, 0, out);
}

OpSchema fused_matmul() {
  OpSchema s = base("FusedMatMul");
  s.Input(0, "A", "", "T").Input(1, "B", "", "T").Output(0, "Y", "", "T");
  s.Attr("alpha", "", AttributeProto::FLOAT, 1.0f);
  for (const char* a : {"transA", "transB", "transBatchA", "transBatchB"})
    s.Attr(a, "", AttributeProto::INT, int64_t{0});
  s.TypeAndShapeInferenceFunction(fused_matmul_shape);
  return s;
}

// FusedGemm: Gemm's [M, N] output, then an activation.
void fused_gemm_shape(ox::InferenceContext& ctx) {
  ox::propagateElemTypeFromInputToOutput(ctx, 0, 0);
  if (!ox::hasInputShape(ctx, 0) || !ox::hasInputShape(ctx, 1)) return;
  const auto& a = ox::getInputShape(ctx, 0);
  const auto& b = ox::getInputShape(ctx, 1);
  if (a.dim_size() != 2 || b.dim_size() != 2) fail_shape_inference("FusedGemm: inputs of rank other than 2");
  const AttributeProto* ta = ctx.getAttribute("transA");
  const AttributeProto* tb = ctx.getAttribute("transB");
  ox::TensorShapeProto out;
  *out.add_dim() = a.dim(ta && ta->i() ? 1 : 0);
  *out.add_dim() = b.dim(tb && tb->i() ? 0 : 1);
  ox::updateOutputShape(ctx, 0, out);
}

OpSchema fused_gemm() {
  OpSchema s = base("FusedGemm");
  s.Input(0, "A", "", "T").Input(1, "B", "", "T").Input(2, "C", "", "T", OpSchema::Optional);
  s.Output(0, "Y", "", "T");
  s.Attr("alpha", "", AttributeProto::FLOAT, 1.0f).Attr("beta", "", AttributeProto::FLOAT, 1.0f);
  s.Attr("transA", "", AttributeProto::INT, int64_t{0}).Attr("transB", "", AttributeProto::INT, int64_t{0});
  s.Attr("activation", "", AttributeProto::STRING, ox::OPTIONAL_VALUE);
  for (const char* a : {"activation_alpha", "activation_beta", "activation_gamma"})
    s.Attr(a, "", AttributeProto::FLOAT, ox::OPTIONAL_VALUE);
  s.TypeAndShapeInferenceFunction(fused_gemm_shape);
  return s;
}

// (Skip)(Simplified)LayerNormalization's outputs: the input's shape; mean and inv_std_var
// with the last dim 1 (float); input + skip + bias with the input's shape.
void skip_norm_shape(ox::InferenceContext& ctx) {
  ox::propagateShapeAndTypeFromFirstInput(ctx);
  for (size_t k = 1; k < 3 && k < ctx.getNumOutputs(); ++k) {
    ctx.getOutputType(k)->mutable_tensor_type()->set_elem_type(ox::TensorProto::FLOAT);
    if (!ox::hasInputShape(ctx, 0)) continue;
    ox::TensorShapeProto s = ox::getInputShape(ctx, 0);
    if (s.dim_size() > 0) s.mutable_dim(s.dim_size() - 1)->set_dim_value(1);
    ox::updateOutputShape(ctx, k, s);
  }
  if (ctx.getNumOutputs() > 3) {
    ox::propagateElemTypeFromInputToOutput(ctx, 0, 3);
    if (ox::hasInputShape(ctx, 0)) ox::propagateShapeFromInputToOutput(ctx, 0, 3);
  }
}

OpSchema skip_norm(const char* name, bool beta) {
  OpSchema s = base(name);
  s.Input(0, "input", "", "T").Input(1, "skip", "", "T").Input(2, "gamma", "", "T");
  int k = 3;
  if (beta) s.Input(k++, "beta", "", "T", OpSchema::Optional);
  s.Input(k, "bias", "", "T", OpSchema::Optional);
  s.Output(0, "output", "", "T").Output(1, "mean", "", "U", OpSchema::Optional);
  s.Output(2, "inv_std_var", "", "U", OpSchema::Optional);
  s.Output(3, "input_skip_bias_sum", "", "T", OpSchema::Optional);
  s.TypeConstraint("U", {"tensor(float)"}, "");
  s.Attr("epsilon", "", AttributeProto::FLOAT, ox::OPTIONAL_VALUE);
  s.TypeAndShapeInferenceFunction(skip_norm_shape);
  return s;
}

// Attention: output (batch, sequence, v_hidden_size), v_hidden_size the last of
// qkv_hidden_sizes or a third of the packed weights' columns; `present` is left unknown.
void attention_shape(ox::InferenceContext& ctx) {
  ox::propagateElemTypeFromInputToOutput(ctx, 0, 0);
  if (!ox::hasInputShape(ctx, 0) || !ox::hasInputShape(ctx, 1)) return;
  const auto& x = ox::getInputShape(ctx, 0);
  const auto& w = ox::getInputShape(ctx, 1);
  if (x.dim_size() != 3 || w.dim_size() != 2) fail_shape_inference("Attention: input of rank 3 and weights of rank 2 expected");
  ox::TensorShapeProto out;
  *out.add_dim() = x.dim(0);
  *out.add_dim() = x.dim(1);
  const AttributeProto* sizes = ctx.getAttribute("qkv_hidden_sizes");
  if (sizes && sizes->ints_size() == 3) {
    out.add_dim()->set_dim_value(sizes->ints(2));
  } else if (w.dim(1).has_dim_value()) {
    out.add_dim()->set_dim_value(w.dim(1).dim_value() / 3);
  } else {
    out.add_dim();
  }
  ox::updateOutputShape(ctx, 0, out);
}

OpSchema attention() {
  OpSchema s = base("Attention");
  s.Input(0, "input", "", "T").Input(1, "weights", "", "T").Input(2, "bias", "", "T", OpSchema::Optional);
  s.Input(3, "mask_index", "", "M", OpSchema::Optional).Input(4, "past", "", "T", OpSchema::Optional);
  s.Input(5, "attention_bias", "", "T", OpSchema::Optional);
  s.Input(6, "past_sequence_length", "", "M", OpSchema::Optional);
  s.Output(0, "output", "", "T").Output(1, "present", "", "T", OpSchema::Optional);
  s.TypeConstraint("M", {"tensor(int32)"}, "");
  s.Attr("num_heads", "", AttributeProto::INT, true);
  s.Attr("unidirectional", "", AttributeProto::INT, int64_t{0});
  s.Attr("do_rotary", "", AttributeProto::INT, int64_t{0});
  s.Attr("past_present_share_buffer", "", AttributeProto::INT, int64_t{0});
  s.Attr("rotary_embedding_dim", "", AttributeProto::INT, int64_t{0});
  s.Attr("mask_filter_value", "", AttributeProto::FLOAT, -10000.0f);
  s.Attr("scale", "", AttributeProto::FLOAT, ox::OPTIONAL_VALUE);
  s.Attr("qkv_hidden_sizes", "", AttributeProto::INTS, ox::OPTIONAL_VALUE);
  s.TypeAndShapeInferenceFunction(attention_shape);
  return s;
}

// MultiHeadAttention: output (batch, sequence, v_hidden_size): from a packed QKV query
// (batch, sequence, num_heads, 3, head_size), num_heads · head_size; from a packed KV key
// (batch, kv_sequence, num_heads, 2, head_size), the same; else value's last dim (rank 3)
// or num_heads · head_size of a past_value (batch, num_heads, kv_sequence, head_size). The
// present and qk outputs are left unknown.
void multi_head_attention_shape(ox::InferenceContext& ctx) {
  ox::propagateElemTypeFromInputToOutput(ctx, 0, 0);
  if (!ox::hasInputShape(ctx, 0)) return;
  const auto& q = ox::getInputShape(ctx, 0);
  if (q.dim_size() != 3 && q.dim_size() != 5) fail_shape_inference("MultiHeadAttention: query of rank 3 or 5 expected");
  auto product = [](const ox::TensorShapeProto_Dimension& a, const ox::TensorShapeProto_Dimension& b) {
    ox::TensorShapeProto_Dimension d;
    if (a.has_dim_value() && b.has_dim_value()) d.set_dim_value(a.dim_value() * b.dim_value());
    return d;
  };
  ox::TensorShapeProto out;
  *out.add_dim() = q.dim(0);
  *out.add_dim() = q.dim(1);
  const bool has_key = ctx.getNumInputs() > 1 && ctx.getInputType(1) != nullptr;
  const bool has_value = ctx.getNumInputs() > 2 && ctx.getInputType(2) != nullptr;
  if (q.dim_size() == 5) {
    *out.add_dim() = product(q.dim(2), q.dim(4));
  } else if (has_key && !has_value && ox::hasInputShape(ctx, 1) && ox::getInputShape(ctx, 1).dim_size() == 5) {
    const auto& k = ox::getInputShape(ctx, 1);
    *out.add_dim() = product(k.dim(2), k.dim(4));
  } else if (has_value && ox::hasInputShape(ctx, 2)) {
    const auto& v = ox::getInputShape(ctx, 2);
    if (v.dim_size() == 3) *out.add_dim() = v.dim(2);
    else if (v.dim_size() == 4) *out.add_dim() = product(v.dim(1), v.dim(3));
    else fail_shape_inference("MultiHeadAttention: value of rank 3 or 4 expected");
  } else {
    out.add_dim();
  }
  ox::updateOutputShape(ctx, 0, out);
}

OpSchema multi_head_attention() {
  OpSchema s = base("MultiHeadAttention");
  s.Input(0, "query", "", "T").Input(1, "key", "", "T", OpSchema::Optional);
  s.Input(2, "value", "", "T", OpSchema::Optional).Input(3, "bias", "", "T", OpSchema::Optional);
  s.Input(4, "key_padding_mask", "", "M", OpSchema::Optional).Input(5, "attention_bias", "", "T", OpSchema::Optional);
  s.Input(6, "past_key", "", "T", OpSchema::Optional).Input(7, "past_value", "", "T", OpSchema::Optional);
  s.Input(8, "past_sequence_length", "", "M", OpSchema::Optional);
  s.Input(9, "cache_indirection", "", "M", OpSchema::Optional);
  s.Output(0, "output", "", "T").Output(1, "present_key", "", "T", OpSchema::Optional);
  s.Output(2, "present_value", "", "T", OpSchema::Optional).Output(3, "qk", "", "QK", OpSchema::Optional);
  s.TypeConstraint("M", {"tensor(int32)"}, "");
  s.TypeConstraint("QK", float_types(), "");
  s.Attr("num_heads", "", AttributeProto::INT, true);
  s.Attr("mask_filter_value", "", AttributeProto::FLOAT, -10000.0f);
  s.Attr("scale", "", AttributeProto::FLOAT, ox::OPTIONAL_VALUE);
  s.Attr("unidirectional", "", AttributeProto::INT, int64_t{0});
  s.TypeAndShapeInferenceFunction(multi_head_attention_shape);
  return s;
}

// EmbedLayerNormalization: output and embedding_sum (batch, sequence, hidden), mask_index
// (batch) int32.
void embed_norm_shape(ox::InferenceContext& ctx) {
  ox::propagateElemTypeFromInputToOutput(ctx, 2, 0);
  if (ctx.getNumOutputs() > 1) ctx.getOutputType(1)->mutable_tensor_type()->set_elem_type(ox::TensorProto::INT32);
  if (ctx.getNumOutputs() > 2) ox::propagateElemTypeFromInputToOutput(ctx, 2, 2);
  if (!ox::hasInputShape(ctx, 0) || !ox::hasInputShape(ctx, 2)) return;
  const auto& ids = ox::getInputShape(ctx, 0);
  const auto& word = ox::getInputShape(ctx, 2);
  if (ids.dim_size() != 2 || word.dim_size() != 2) fail_shape_inference("EmbedLayerNormalization: ids of rank 2 and a table of rank 2 expected");
  ox::TensorShapeProto out;
  *out.add_dim() = ids.dim(0);
  *out.add_dim() = ids.dim(1);
  *out.add_dim() = word.dim(1);
  ox::updateOutputShape(ctx, 0, out);
  if (ctx.getNumOutputs() > 2) ox::updateOutputShape(ctx, 2, out);
  if (ctx.getNumOutputs() > 1) {
    ox::TensorShapeProto m;
    *m.add_dim() = ids.dim(0);
    ox::updateOutputShape(ctx, 1, m);
  }
}

OpSchema embed_layer_norm() {
  OpSchema s = base("EmbedLayerNormalization");
  s.Input(0, "input_ids", "", "T1").Input(1, "segment_ids", "", "T1", OpSchema::Optional);
  s.Input(2, "word_embedding", "", "T").Input(3, "position_embedding", "", "T");
  s.Input(4, "segment_embedding", "", "T", OpSchema::Optional).Input(5, "gamma", "", "T").Input(6, "beta", "", "T");
  s.Input(7, "mask", "", "T1", OpSchema::Optional).Input(8, "position_ids", "", "T1", OpSchema::Optional);
  s.Output(0, "output", "", "T").Output(1, "mask_index", "", "T1", OpSchema::Optional);
  s.Output(2, "embedding_sum", "", "T", OpSchema::Optional);
  s.TypeConstraint("T1", {"tensor(int32)"}, "");
  s.Attr("epsilon", "", AttributeProto::FLOAT, ox::OPTIONAL_VALUE);
  s.Attr("mask_index_type", "", AttributeProto::INT, ox::OPTIONAL_VALUE);
  s.TypeAndShapeInferenceFunction(embed_norm_shape);
  return s;
}

std::map<std::string, OpSchema> make_schemas() {
  std::map<std::string, OpSchema> m;
  auto add = [&](OpSchema s) {
    s.Finalize();
    const std::string name = s.Name();
    m.emplace(name, std::move(s));
  };
  add(elementwise("Gelu", {"X"}, 1));
  add(elementwise("BiasGelu", {"A", "B"}, 2));
  add(elementwise("FastGelu", {"X", "bias"}, 1));
  OpSchema quick = elementwise("QuickGelu", {"X"}, 1);
  quick.Attr("alpha", "", AttributeProto::FLOAT, 1.702f);
  add(std::move(quick));
  add(elementwise("BiasAdd", {"X", "bias", "skip"}, 3));
  OpSchema bias_softmax = elementwise("BiasSoftmax", {"data", "bias"}, 2);
  bias_softmax.Attr("axis", "", AttributeProto::INT, int64_t{1});
  bias_softmax.Attr("is_inner_broadcast", "", AttributeProto::INT, true);
  add(std::move(bias_softmax));
  add(fused_matmul());
  add(fused_gemm());
  add(skip_norm("SkipLayerNormalization", true));
  add(skip_norm("SkipSimplifiedLayerNormalization", false));
  add(attention());
  add(multi_head_attention());
  add(embed_layer_norm());
  return m;
}

}  // namespace

const ox::OpSchema* contrib_schema(const std::string& op) {
  static const std::map<std::string, OpSchema> kSchemas = make_schemas();
  auto it = kSchemas.find(op);
  return it == kSchemas.end() ? nullptr : &it->second;
}

}  // namespace lnv::onnx_import
