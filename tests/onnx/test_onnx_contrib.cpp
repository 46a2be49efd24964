// ONNX Runtime's contrib ops (tests/data/onnx/contrib/, written by
// scripts/make_onnx_contrib_models.py, backend-test style): each hand-written graph is
// imported, evaluated in double by lnverify's exact evaluator, and compared with ONNX
// Runtime's own float32 outputs; the cases ending in `_audit` hold ops lnverify leaves
// opaque, and their verdicts and reasons are checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/eval/evaluator.h"
#include "onnx/import.h"
#include "tests/onnx/node_test_data.h"

namespace fs = std::filesystem;
using namespace lnv::onnx_import;

namespace {

const fs::path kDir = fs::path(LNV_SOURCE_DIR) / "tests/data/onnx/contrib";

std::vector<std::string> cases(bool audit) {
  std::vector<std::string> out;
  for (const fs::directory_entry& d : fs::directory_iterator(kDir)) {
    const std::string name = d.path().filename().string();
    const bool is_audit = name.size() > 6 && name.substr(name.size() - 6) == "_audit";
    if (is_audit == audit) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

lnv::Tensor<double> as_double(const Tensor& t) {
  lnv::Tensor<double> out;
  out.shape = t.dims;
  if (t.is_float()) out.data = t.floats;
  else out.data.assign(t.ints.begin(), t.ints.end());  // ids
  return out;
}

class Contrib : public testing::TestWithParam<std::string> {};

// ONNX Runtime computes in float32 (erf, tanh and the norms' statistics included): its
// outputs agree with the exact value to a few float32 units; 2^-17 relative to the
// output's largest element (or 1) is 16 of them, far below what a wrong attribute, a
// dropped bias or another Gelu would change.
TEST_P(Contrib, AgreesWithOnnxRuntime) {
  const fs::path dir = kDir / GetParam();
  const lnv::Graph g = import_onnx(dir / "model.onnx", {});
  std::vector<lnv::Tensor<double>> inputs;
  for (const fs::path& f : node_test_files(dir, "input_")) inputs.push_back(as_double(load_tensor_pb(f)));
  const auto run = lnv::eval::evaluate<double>(g, inputs, lnv::eval::RunOptions{});
  const auto expected = node_test_files(dir, "output_");
  ASSERT_EQ(run.outputs.size(), expected.size());
  ASSERT_FALSE(expected.empty());
  for (size_t k = 0; k < expected.size(); ++k) {
    const Tensor want = load_tensor_pb(expected[k]);
    const auto& got = run.outputs[k];
    ASSERT_EQ(got.shape, want.dims) << "output " << k;
    double largest = 1, worst = 0;
    for (size_t i = 0; i < want.floats.size(); ++i) {
      largest = std::max(largest, std::fabs(want.floats[i]));
      worst = std::max(worst, std::fabs(got.data[i] - want.floats[i]));
    }
    std::cout << GetParam() << " output " << k << ": max |lnverify - ORT| " << worst << "\n";
    EXPECT_LE(worst, std::ldexp(largest, -17)) << GetParam() << " output " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Contrib, testing::ValuesIn(cases(false)),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(ContribCases, AreFound) { EXPECT_GE(cases(false).size(), 45u); }

// com.microsoft.Inverse's output shape is not inferred (lnverify has no schema for it): the
// LN reading it (through the residual Add) is a "no" naming the node and its op, the LN
// beside it keeps its verdict, and the graph output computed from it is left out (the LN
// after it is an output instead).
TEST(ContribAudit, AnOpWithoutShapeSinksOnlyTheNormsAfterIt) {
  const lnv::Graph g = import_onnx(kDir / "inverse_unshaped_audit/model.onnx", {});
  for (lnv::Mode mode : {lnv::Mode::inference, lnv::Mode::training}) {
    const lnv::FoldPlan plan = lnv::detect_foldable(g, mode);
    ASSERT_EQ(plan.layer_norms.size(), 2u);
    const auto& a = plan.layer_norms[0].name == "ln_a" ? plan.layer_norms[0] : plan.layer_norms[1];
    const auto& b = plan.layer_norms[0].name == "ln_b" ? plan.layer_norms[0] : plan.layer_norms[1];
    EXPECT_EQ(a.name, "ln_a");
    EXPECT_EQ(b.name, "ln_b");
    EXPECT_TRUE(a.foldable[size_t(mode)]) << a.reason[size_t(mode)];
    EXPECT_FALSE(b.foldable[size_t(mode)]);
    EXPECT_TRUE(b.opaque);
    EXPECT_NE(b.reason[size_t(mode)].find("`inverse`"), std::string::npos) << b.reason[size_t(mode)];
    EXPECT_NE(b.reason[size_t(mode)].find("com.microsoft.Inverse"), std::string::npos) << b.reason[size_t(mode)];
  }
  // The file's output computed from it (yb) is left out; the norm after it is an output.
  EXPECT_EQ(g.outputs, (std::vector<std::string>{"ln_a", "ln_b"}));
  const auto meta = nlohmann::json::parse(g.meta);
  EXPECT_EQ(meta["onnx"]["outputs"].size(), 1u) << meta["onnx"]["outputs"].dump();
  EXPECT_NE(meta["onnx"]["opaque"]["inverse"].get<std::string>().find("output shape is unknown"), std::string::npos)
      << meta["onnx"]["opaque"].dump();
}

// The same for norms spelled out (ReduceMean, Sub, Pow, ... as torch.onnx.export writes
// them): the LN and the RMSNorm after the Inverse are kept as norms of a stand-in
// for it, the LN a "no" naming it; the LN beside it keeps its "yes".
TEST(ContribAudit, AnOpWithoutShapeSinksOnlyTheDecomposedNormsAfterIt) {
  const lnv::Graph g = import_onnx(kDir / "inverse_decomposed_unshaped_audit/model.onnx", {});
  for (lnv::Mode mode : {lnv::Mode::inference, lnv::Mode::training}) {
    const lnv::FoldPlan plan = lnv::detect_foldable(g, mode);
    ASSERT_EQ(plan.layer_norms.size(), 2u);
    const auto& a = plan.layer_norms[0].name == "/ln_a/LayerNormalization" ? plan.layer_norms[0] : plan.layer_norms[1];
    const auto& b = plan.layer_norms[0].name == "/ln_b/LayerNormalization" ? plan.layer_norms[0] : plan.layer_norms[1];
    EXPECT_EQ(a.name, "/ln_a/LayerNormalization");
    EXPECT_EQ(b.name, "/ln_b/LayerNormalization");
    EXPECT_TRUE(a.foldable[size_t(mode)]) << a.reason[size_t(mode)];
    EXPECT_FALSE(b.foldable[size_t(mode)]);
    EXPECT_TRUE(b.opaque);
    EXPECT_NE(b.reason[size_t(mode)].find("`inverse`"), std::string::npos) << b.reason[size_t(mode)];
    EXPECT_NE(b.reason[size_t(mode)].find("com.microsoft.Inverse"), std::string::npos) << b.reason[size_t(mode)];
  }
  int rms = 0;
  for (const lnv::Node& n : g.nodes) {
    if (n.op != lnv::Op::rms_norm) continue;
    ++rms;
    EXPECT_EQ(n.name, "/rms_c/RMSNormalization");
    EXPECT_EQ(g.nodes[size_t(g.node_index(n.inputs[0]))].op_type, "com.microsoft.Inverse");
  }
  EXPECT_EQ(rms, 1);
  EXPECT_EQ(g.outputs.size(), 3u);  // ya, and the two norms in place of yb and yc
}

// FusedGemm with an activation model.json has no op for: one opaque node, the reason naming it.
TEST(ContribAudit, AnActivationNotModelledIsOpaqueNamingIt) {
  const lnv::Graph g = import_onnx(kDir / "fused_gemm_leakyrelu_audit/model.onnx", {});
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, lnv::Op::opaque);
  EXPECT_EQ(g.nodes[0].op_type, "com.microsoft.FusedGemm");
  const auto meta = nlohmann::json::parse(g.meta);
  EXPECT_NE(meta.dump().find("LeakyRelu"), std::string::npos) << meta.dump();
}

// EmbedLayerNormalization: the lookups of centerable tables and a LayerNorm of their sum,
// foldable (its tables centered), the int64 ids' Casts gone with it; not when its
// embedding_sum output is a graph output (centering would change it).
TEST(ContribAudit, EmbedLayerNormalizationIsANormOfLookups) {
  for (const char* c : {"embed_layer_norm_position_ids", "embed_layer_norm"}) {
    const lnv::Graph g = import_onnx(kDir / c / "model.onnx", {});
    for (const lnv::Node& n : g.nodes) EXPECT_NE(n.op, lnv::Op::opaque) << c << ": " << n.name;
    const lnv::FoldPlan plan = lnv::detect_foldable(g, lnv::Mode::inference);
    ASSERT_EQ(plan.layer_norms.size(), 1u);
    const lnv::LnVerdict& v = plan.layer_norms[0];
    EXPECT_EQ(v.name, "emb");
    if (std::string(c) == "embed_layer_norm") {
      EXPECT_FALSE(v.foldable[0]);
      EXPECT_NE(v.reason[0].find("emb.sum_segment"), std::string::npos) << v.reason[0];
    } else {
      EXPECT_TRUE(v.foldable[0]) << v.reason[0];
    }
  }
}

const lnv::Input& input_named(const lnv::Graph& g, const std::string& name) {
  for (const lnv::Input& in : g.inputs)
    if (in.name == name) return in;
  throw std::runtime_error("no input " + name);
}

// An Attention's mask_index from an integer graph input (through its Cast to int32) is a
// lookup of the mask's ids: no opaque node, the mask an index input whose range is the ids
// the form holds (0/1 for a raw mask, lengths 0 .. T for key lengths).
TEST(ContribAttention, AMaskInputIsALookupOfItsIds) {
  for (const auto& [c, range] : std::vector<std::pair<std::string, int64_t>>{
           {"attention_mask_raw", 2}, {"attention_mask_3d", 2}, {"attention_mask_lengths", 5},
           {"mha_cross_mask_lengths", 6}, {"mha_cross_mask_raw", 2}}) {
    const lnv::Graph g = import_onnx(kDir / c / "model.onnx", {});
    for (const lnv::Node& n : g.nodes) EXPECT_NE(n.op, lnv::Op::opaque) << c << ": " << n.name;
    const lnv::Input& mask = input_named(g, "mask");
    EXPECT_EQ(mask.dtype, lnv::DType::index) << c;
    EXPECT_EQ(mask.range, range) << c;
  }
}

// MultiHeadAttention reads projections computed in the graph: the MatMuls feeding it (and
// the one after it) stay matmuls, so the analysis sees them as the producers they are.
TEST(ContribAttention, MultiHeadAttentionKeepsItsProjectionsVisible) {
  const lnv::Graph g = import_onnx(kDir / "mha_bias/model.onnx", {});
  for (const char* name : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
    const auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const lnv::Node& n) { return n.name == name; });
    ASSERT_NE(it, g.nodes.end()) << name;
    EXPECT_EQ(it->op, lnv::Op::matmul) << name;
  }
  for (const lnv::Node& n : g.nodes) EXPECT_NE(n.op, lnv::Op::opaque) << n.name;
}

// A BERT layer's LN verdicts are the same with and without its attention mask: the mask is
// an additive term of the scores, before the softmax, and changes no producer.
TEST(ContribAttention, AMaskLeavesTheLnVerdictsAsWithout) {
  const lnv::Graph masked = import_onnx(kDir / "bert_mask_audit/model.onnx", {});
  const lnv::Graph plain = import_onnx(kDir / "bert_mask_audit/model_without_mask.onnx", {});
  for (lnv::Mode mode : {lnv::Mode::inference, lnv::Mode::training}) {
    const lnv::FoldPlan a = lnv::detect_foldable(masked, mode);
    const lnv::FoldPlan b = lnv::detect_foldable(plain, mode);
    ASSERT_EQ(a.layer_norms.size(), 3u);
    ASSERT_EQ(a.layer_norms.size(), b.layer_norms.size());
    int foldable = 0;
    for (size_t k = 0; k < a.layer_norms.size(); ++k) {
      const lnv::LnVerdict& x = a.layer_norms[k];
      const lnv::LnVerdict& y = b.layer_norms[k];
      EXPECT_EQ(x.name, y.name);
      EXPECT_EQ(x.foldable[size_t(mode)], y.foldable[size_t(mode)]) << x.name << ": " << x.reason[size_t(mode)]
                                                                    << " / " << y.reason[size_t(mode)];
      EXPECT_EQ(x.reason[size_t(mode)], y.reason[size_t(mode)]) << x.name;
      foldable += x.foldable[size_t(mode)];
    }
    EXPECT_GE(foldable, 1) << "mode " << int(mode);
  }
}

}  // namespace
