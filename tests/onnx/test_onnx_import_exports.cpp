// The real exports of tests/data/onnx/ (scripts/make_onnx_test_models.py) through the
// importer: each imports, its LayerNorms get the verdicts derived by hand below, the
// opset-14 (decomposed) and opset-17 (LayerNormalization) spellings of a model agree, and
// the imported graph evaluated in double reproduces PyTorch's output for the stored input
// (<model>_data/test_data_set_0; float32 reference: relative 1e-5 of the largest output).

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>

#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/model_json.h"
#include "core/eval/evaluator.h"
#include "onnx/import.h"

namespace fs = std::filesystem;
using namespace lnv::onnx_import;

namespace {

const std::string kDir = std::string(LNV_SOURCE_DIR) + "/tests/data/onnx/";

// Verdicts derived by hand (inference mode), as a function of the LayerNorm's name (the
// ONNX node's, or for a decomposition its common path + "LayerNormalization").
//
// MLP (mlp_tiny): ln_1 reads proj(x), a Linear (MatMul by an [in, out] initializer plus a
//   bias: centered); ln_2 reads proj(x) + mlp(ln_1(...)), two Linears: both fold.
// GPT-2-like, pre-norm: every LN (ln_1, ln_2 of each block, ln_f) reads the residual
//   stream wte(ids) + wpe(positions) + the blocks' c_proj and mlp outputs. wte is an
//   embedding (CBWC centers its rows), wpe's lookup of the folded positions is a constant
//   (a param term, centered), c_proj and the MLP's second Linear are MatMuls by an
//   [in, out] initializer plus a bias (centered). Nothing else enters the sum: all 5 fold.
// BERT-like, post-norm: emb_norm reads word(ids) + position + token_type (an embedding and
//   two folded lookups: constants): it folds. Each encoder layer's norm1 reads x + sa(x)
//   and norm2 reads x + ff(x), where x is the previous LayerNorm's output (weight and bias
//   make its mean nonzero and no centering of a producer changes that): none of the 4 folds.
//   (This is the post-norm nn.TransformerEncoder export: BERT-shaped embeddings, embedding
//   LayerNorm, norm_first=False layers.)
// Pre-norm nn.TransformerEncoder causal LM (prenorm_lm_tiny): every LN (norm1, norm2 of
//   each layer, the encoder's final norm) reads the residual stream embed(ids) +
//   positions[:, :n] + the layers' attention out_proj (Gemm, bias included) and linear2
//   (MatMul + bias) outputs. embed is an embedding (rows centered), the sliced positions a
//   constant (a param term): all centerable, nothing else enters the sum, and in pre-norm
//   no LN output is added back to the stream: all 5 fold. The tied head is no obstacle:
//   the export holds the head's matrix as its own initializer (embed.weight transposed,
//   folded by the exporter), so centering the embedding's rows leaves the logits
//   unchanged; a fold that kept the two tied would change them (the final LN's output y is
//   not zero-mean, so y·C·Eᵀ ≠ y·Eᵀ). The causal mask of generate_square_subsequent_mask
//   is a constant of 0 and -inf added to the attention scores: with the Softmax reading it,
//   a masked softmax (exact; it lies after the LNs' outputs on the attention path, where no
//   centering deviation reaches it).
// The same causal LM exported at a fixed 128 tokens (causal_lm_seq128: one layer, d 8),
//   its mask a buffer sliced to the length: torch folds it into one [1, 128, 128]
//   initializer of 0 and -inf (64 KiB, left in the file on load). The same derivation: all
//   3 LNs (norm1, norm2, the final norm) fold, and the mask is a masked softmax.
// ConvNeXt (torchvision): the stem's LayerNorm2d (features.0.1) reads a dense Conv with a
//   bias, normalized over channels: the Conv is centered over its output channels, it
//   folds. Each block's LN (block.2, channels-last after a permute) reads a depthwise Conv
//   (groups = channels): channel c's output depends on input channel c alone through its
//   own kernel, so no change of its weights makes the mean over channels zero for every
//   input (it would take every kernel zero): no. The downsampling LN (features.2.0) reads
//   stage 1's stream, which starts with the stem LN's output (weight and bias: not
//   zero-mean): no. The classifier's LN reads the average pool of stage 2's stream:
//   downsampling Conv + each block's layer_scale · linear2(...). Centering those producers
//   would shift the stream by minus its channel mean at every point, and that shift enters
//   the next block's depthwise Conv, which turns a shift equal over channels into one that
//   is not, which the block's LN does not absorb: no. 1 of 7 (check: every "no" tight).
//   The audit's reason for the classifier LN names the layer scale's Mul (a Linear scaled
//   per channel is outside the analysis' vocabulary, docs/spec/decisions.md); the verdict
//   is right for the reason above. The layer scale (gamma [C, 1, 1] times the permuted
//   linear2 output) is a LayerScale (docs/spec/semantics.md): its Mul is the classifier
//   LN's term, and centering it shifts the stream into the next depthwise Conv all the
//   same, so the verdicts do not change.
// DINOv2-style LayerScale ViT (layerscale_vit_tiny): the stream is concat(class token,
//   patch embedding) + pos_embed + each block's gamma_1 * proj(attn) and gamma_2 *
//   mlp.2(...). The patch embedding is a Conv (centered over its output channels), the
//   class token and pos_embed params; each gamma is a per-feature constant times a
//   Linear (MatMul by an [in, out] initializer plus a bias, read only by the Mul): moving
//   gamma into that Linear (W <- C·W·diag(gamma), b <- C(gamma * b)) makes the branch
//   zero-mean. Every term's shift is constant over the features, and every LN (norm1,
//   norm2 of each block, the final norm) absorbs it; the head reads the final LN: all 5
//   fold (without the LayerScale rule only norm1 of block 0 would).
// ViT (torchvision): the stream is concat(class token, patch embedding) + pos_embedding
//   + the blocks' attention out-projections (Gemm) and MLP outputs. The patch embedding is
//   a Conv (centered over its output channels, which the reshape/permute makes the last
//   axis); the class token and pos_embedding are params: all 5 fold.
// Swin (torchvision): the patch embedding's norm (features.0) reads the Conv output,
//   permuted: it folds. Stage 1 (features.1) starts its residual stream with that norm's
//   output, so its 4 norms do not fold; patch merging's norm (features.2) reads slices of
//   that stream: no. Stage 2 (features.3) starts from the merging's Linear (no bias):
//   its 4 norms and the final norm fold. 6 of 11. (The zero Pad before each window
//   attention and before patch merging pads a norm's output or the stream, whose
//   deviations the norms have already absorbed; what enters the sums is the attention's
//   projection, rolled and cropped.)
// GPT-2's attention masks its scores with Where(causal, scores, min) before the softmax: no
//   term's deviation reaches the scores (the LNs absorb them first).
// Recurrent language models (scripts/make_onnx_recurrent_models.py: rnn_lm_tiny,
//   lstm_lm_tiny, lstm_lm_bi_tiny, gru_lm_2layer_tiny, rnn_lm_bi_tiny, rnn_lm_bi_h0_tiny):
//   embedding -> ln_in -> nn.RNN / nn.LSTM / bidirectional nn.LSTM / two-layer nn.GRU /
//   bidirectional nn.RNN (from zeros, from a learned h0) -> ln_out -> Linear head. ln_in
//   reads the embedding lookup (rows centered; the shift is absorbed by ln_in itself, so
//   the recurrent layer reading ln_in's output sees no change): it folds. ln_out reads the
//   recurrent layer's output (through Squeeze/Transpose/Reshape): tanh(...) of an rnn,
//   o*tanh(C) of an lstm, (1-z)*n + z*h of a gru, which no centering of the layer's weights
//   shifts by a constant over H (docs/spec/semantics.md, "Gated recurrent layers"): no; the
//   bidirectional RNN's features are both directions' tanh outputs side by side, no
//   different. 1 of 2. PyTorch's zero initial states (ConstantOfShape of the batch size)
//   fold to zeros and are left out; the learned h0 (Expand of a parameter) folds to a
//   constant the rnn composition reads (docs/spec/decisions.md, "ONNX's RNN").
struct Export {
  std::string file, data;
  DimBindings dims;
  size_t norms;
  std::function<bool(const std::string&)> foldable;
  int masked_softmaxes = 0;  // one per attention layer with an additive -inf mask
};

const std::vector<Export>& exports() {
  static const auto all = [](const std::string&) { return true; };
  static const auto bert = [](const std::string& n) { return n.find("emb_norm") != std::string::npos; };
  static const auto convnext = [](const std::string& n) {
    return n.rfind("/features/features.0/", 0) == 0;
  };
  static const auto recurrent = [](const std::string& n) { return n.find("ln_in") != std::string::npos; };
  static const auto swin = [](const std::string& n) {
    return n.rfind("/features/features.1/", 0) != 0 && n.rfind("/features/features.2/", 0) != 0;
  };
  static const std::vector<Export> list = {
      {"mlp_tiny_opset17.onnx", "mlp_tiny_data", {{"batch", 2}}, 2, all},
      {"mlp_tiny_opset14.onnx", "mlp_tiny_data", {{"batch", 2}}, 2, all},
      {"gpt2_tiny_opset17.onnx", "gpt2_tiny_data", {{"batch", 2}, {"seq", 8}}, 5, all},
      {"gpt2_tiny_opset14.onnx", "gpt2_tiny_data", {{"batch", 2}, {"seq", 8}}, 5, all},
      {"gpt2_tiny_opset11.onnx", "gpt2_tiny_data", {{"batch", 2}, {"seq", 8}}, 5, all},
      {"bert_tiny_opset17.onnx", "bert_tiny_data", {{"batch", 2}, {"seq", 8}}, 5, bert},
      {"bert_tiny_opset14.onnx", "bert_tiny_data", {{"batch", 2}, {"seq", 8}}, 5, bert},
      {"bert_tiny_opset9.onnx", "bert_tiny_data", {{"batch", 2}, {"seq", 8}}, 5, bert},
      {"vit_tiny_opset17.onnx", "vit_tiny_data", {{"batch", 2}}, 5, all},
      {"vit_tiny_opset14.onnx", "vit_tiny_data", {{"batch", 2}}, 5, all},
      {"swin_tiny_opset17.onnx", "swin_tiny_data", {{"batch", 2}}, 11, swin},
      {"swin_tiny_opset14.onnx", "swin_tiny_data", {{"batch", 2}}, 11, swin},
      {"prenorm_lm_tiny_opset17.onnx", "prenorm_lm_tiny_data", {{"batch", 2}, {"seq", 8}}, 5, all, 2},
      {"prenorm_lm_tiny_opset14.onnx", "prenorm_lm_tiny_data", {{"batch", 2}, {"seq", 8}}, 5, all, 2},
      {"causal_lm_seq128_opset17.onnx", "causal_lm_seq128_data", {}, 3, all, 1},
      {"convnext_tiny_opset17.onnx", "convnext_tiny_data", {{"batch", 2}}, 7, convnext},
      {"convnext_tiny_opset14.onnx", "convnext_tiny_data", {{"batch", 2}}, 7, convnext},
      {"layerscale_vit_tiny_opset17.onnx", "layerscale_vit_tiny_data", {{"batch", 2}}, 5, all},
      {"layerscale_vit_tiny_opset14.onnx", "layerscale_vit_tiny_data", {{"batch", 2}}, 5, all},
      {"rnn_lm_tiny_opset17.onnx", "rnn_lm_tiny_data", {{"batch", 2}, {"seq", 5}}, 2, recurrent},
      {"lstm_lm_tiny_opset17.onnx", "lstm_lm_tiny_data", {{"batch", 2}, {"seq", 5}}, 2, recurrent},
      {"lstm_lm_bi_tiny_opset17.onnx", "lstm_lm_bi_tiny_data", {{"batch", 2}, {"seq", 5}}, 2, recurrent},
      {"gru_lm_2layer_tiny_opset17.onnx", "gru_lm_2layer_tiny_data", {{"batch", 2}, {"seq", 5}}, 2, recurrent},
      {"rnn_lm_bi_tiny_opset17.onnx", "rnn_lm_bi_tiny_data", {{"batch", 2}, {"seq", 5}}, 2, recurrent},
      {"rnn_lm_bi_h0_tiny_opset17.onnx", "rnn_lm_bi_h0_tiny_data", {{"batch", 2}, {"seq", 5}}, 2, recurrent},
  };
  return list;
}

lnv::Graph import(const Export& e) { return import_onnx(kDir + e.file, e.dims); }

class Exports : public testing::TestWithParam<Export> {};

TEST_P(Exports, ImportsWithTheVerdictsDerivedByHand) {
  const Export& e = GetParam();
  const std::optional<lnv::Graph> g = import(e);
  const lnv::FoldPlan plan = lnv::detect_foldable(*g, lnv::Mode::inference);
  EXPECT_EQ(plan.layer_norms.size(), e.norms);
  EXPECT_EQ(parse_meta(*g)["onnx"]["norms"].size(), e.norms);
  const int inf = static_cast<int>(lnv::Mode::inference);
  for (const lnv::LnVerdict& v : plan.layer_norms)
    EXPECT_EQ(v.foldable[inf], e.foldable(v.name)) << v.name << ": " << v.reason[inf];
  // No opaque node: nn.MultiheadAttention's -inf causal mask is a masked softmax.
  for (const lnv::Node& n : g->nodes) EXPECT_NE(n.op, lnv::Op::opaque) << n.name << " " << n.op_type;
  int masked = 0;
  for (const lnv::Node& n : g->nodes) masked += lnv::is_masked_softmax(n) ? 1 : 0;
  EXPECT_EQ(masked, e.masked_softmaxes) << "one causal mask per encoder layer";
  std::cout << e.file << ": " << g->nodes.size() << " nodes, "
            << plan.foldable_count(lnv::Mode::inference) << " of " << plan.layer_norms.size()
            << " LayerNorms foldable (inference)\n";
}

TEST_P(Exports, ReproducesPyTorchsOutput) {
  const Export& e = GetParam();
  const std::optional<lnv::Graph> g = import(e);
  const fs::path data = fs::path(kDir) / e.data / "test_data_set_0";
  const Tensor x = load_tensor_pb(data / "input_0.pb");
  const Tensor want = load_tensor_pb(data / "output_0.pb");
  lnv::Tensor<double> in;
  in.shape = x.dims;
  if (x.is_float()) in.data = x.floats;
  else in.data.assign(x.ints.begin(), x.ints.end());
  const lnv::eval::Evaluation<double> ev = lnv::eval::evaluate<double>(*g, {in}, lnv::eval::RunOptions{});
  ASSERT_EQ(ev.outputs.size(), 1u);
  ASSERT_EQ(ev.outputs[0].shape, want.dims);
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.floats.size(); ++i) {
    scale = std::max(scale, std::fabs(want.floats[i]));
    worst = std::max(worst, std::fabs(ev.outputs[0].data[i] - want.floats[i]));
  }
  std::cout << e.file << ": max |lnverify - PyTorch| = " << worst << " (largest output " << scale << ")\n";
  EXPECT_LE(worst, 1e-5 * scale);
}

INSTANTIATE_TEST_SUITE_P(RealExports, Exports, testing::ValuesIn(exports()),
                         [](const testing::TestParamInfo<Export>& info) {
                           return info.param.file.substr(0, info.param.file.find('.'));
                         });

// The two spellings of a LayerNorm give the same graph to the analysis: the same norm names
// and the same verdicts.
TEST(ExportSpellings, Opset14And17AgreeOnNormsAndVerdicts) {
  for (const char* model :
       {"mlp_tiny", "gpt2_tiny", "bert_tiny", "vit_tiny", "swin_tiny", "prenorm_lm_tiny", "convnext_tiny",
        "layerscale_vit_tiny"}) {
    std::map<std::string, bool> verdicts[2];
    int k = 0;
    for (const char* opset : {"14", "17"}) {
      const Export* e = nullptr;
      for (const Export& x : exports())
        if (x.file == std::string(model) + "_opset" + opset + ".onnx") e = &x;
      const lnv::Graph g = import(*e);
      for (const lnv::LnVerdict& v : lnv::detect_foldable(g, lnv::Mode::inference).layer_norms)
        verdicts[k][v.name] = v.foldable[0];
      ++k;
    }
    EXPECT_EQ(verdicts[0], verdicts[1]) << model;
    EXPECT_FALSE(verdicts[0].empty()) << model;
  }
}

}  // namespace
