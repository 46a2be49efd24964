// The benchmark machinery of `lnverify bench`: what it measures and how it attributes
// it (never how fast anything is: timings are not asserted).
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "core/analysis/fold_plan.h"
#include "generators/architectures.h"
#include "torch/kernel_bench.h"
#include "torch/model_bench.h"

namespace lnv::torch {
namespace {

Graph tiny_gpt2() {
  zoo::ArchOptions o;
  o.layers = 2;
  o.hidden = 16;
  o.heads = 2;
  o.seq = 5;
  o.vocab = 11;
  o.batch = 3;
  return zoo::build_architecture("gpt2", o);
}

TEST(Bench, SummarizeGivesMedianAndRange) {
  const Timing t = summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(t.median, 3);
  EXPECT_EQ(t.min, 1);
  EXPECT_EQ(t.max, 5);
  EXPECT_DOUBLE_EQ(t.spread(), 4.0 / 3.0);
  EXPECT_EQ(summarize({1, 2, 4, 10}).median, 3);
  EXPECT_EQ(t.samples.front(), 5);  // run order kept
}

TEST(Bench, SummarizeGivesQuartilesAndInterquartileRange) {
  const Timing t = summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(t.q1, 2);
  EXPECT_EQ(t.q3, 4);
  EXPECT_DOUBLE_EQ(t.iqr(), 2.0 / 3.0);
  // Between ranks: linear interpolation (numpy's default).
  const Timing u = summarize({10, 1, 4, 2});
  EXPECT_DOUBLE_EQ(u.q1, 1.75);
  EXPECT_DOUBLE_EQ(u.q3, 5.5);
  EXPECT_DOUBLE_EQ(u.median, 3);
  // One wild sample moves the range, not the interquartile range.
  const Timing v = summarize({1, 1, 1, 1, 100});
  EXPECT_EQ(v.iqr(), 0);
  EXPECT_EQ(v.spread(), 99);
  const Timing one = summarize({7});
  EXPECT_EQ(one.q1, 7);
  EXPECT_EQ(one.q3, 7);
}

TEST(Bench, TokensAreTheTokenIds) {
  EXPECT_EQ(tokens_per_forward(tiny_gpt2()), 15);
}

TEST(Bench, ModelBenchTimesBothVariantsAndAttributesEveryNorm) {
  const Graph g = tiny_gpt2();
  ModelBenchOptions opt;
  opt.repeats = 3;
  const ModelBenchResult r = bench_model(g, opt);

  const FoldPlan plan = detect_foldable(g, Mode::inference);
  EXPECT_EQ(r.layer_norms, plan.layer_norms.size());
  EXPECT_EQ(r.folded, plan.fold.size());
  EXPECT_GT(r.folded, 0u);  // GPT-2's pre-norm LNs fold in inference
  EXPECT_EQ(r.tokens_per_forward, 15);
  // The MLPs' first linears read the ln_2s, whose biases move into them: the engine runs
  // those moved biases inside the linears' own.
  EXPECT_GT(r.biases_absorbed, 0u);
  EXPECT_EQ(r.biases_absorbed,
            torch_engine::Engine(apply_fold(g, plan), {torch_engine::Precision::f32}).absorbed_biases());

  for (const VariantResult* v : {&r.original, &r.folded_model}) {
    ASSERT_EQ(v->seconds.samples.size(), 3u);
    ASSERT_EQ(v->norm_seconds.samples.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_GT(v->seconds.samples[k], 0);
      // The norm calls are part of the forward.
      EXPECT_LE(v->norm_seconds.samples[k], v->seconds.samples[k]);
    }
    ASSERT_EQ(v->norms.size(), r.layer_norms);  // every norm node, one entry each
    ASSERT_EQ(v->norm_call_seconds.size(), r.layer_norms);
    double typical = 0;
    for (size_t k = 0; k < v->norm_call_seconds.size(); ++k) {
      EXPECT_EQ(v->norm_call_seconds[k].samples.size(), 3u);
      typical += v->norm_call_seconds[k].median;  // one call per forward
    }
    EXPECT_DOUBLE_EQ(v->norm_seconds_typical, typical);
    for (const auto& n : v->norms) {
      EXPECT_EQ(n.calls, 3) << n.node;  // once per timed forward
      EXPECT_EQ(n.rows, 15) << n.node;
      EXPECT_EQ(n.cols, 16) << n.node;
    }
  }
  // The folded model has rms_norm exactly at the folded LNs, under the same names.
  const std::set<std::string> folded(plan.fold.begin(), plan.fold.end());
  for (size_t k = 0; k < r.original.norms.size(); ++k) {
    EXPECT_EQ(r.original.norms[k].op, Op::layer_norm);
    EXPECT_EQ(r.folded_model.norms[k].node, r.original.norms[k].node);
    EXPECT_EQ(r.folded_model.norms[k].op,
              folded.count(r.original.norms[k].node) ? Op::rms_norm : Op::layer_norm);
  }
  const std::string text = format_model_bench(r);
  EXPECT_NE(text.find("tokens/s"), std::string::npos);
  EXPECT_NE(text.find(r.original.norms[0].node), std::string::npos);
}

TEST(Bench, KernelTableHasEveryKernelAndConsistentRatios) {
  KernelBenchOptions opt;
  opt.repeats = 3;
  opt.sample_seconds = 0.001;
  const auto table = bench_norm_kernels({{8, 64}, {5, 13}}, opt);
  ASSERT_EQ(table.size(), 2u);
  const std::string text = format_kernel_table(table);
  EXPECT_NE(text.find("IQR"), std::string::npos);
  EXPECT_NE(text.find("per round"), std::string::npos);
  nlohmann::json j = table[0];
  EXPECT_TRUE(j.contains("rms_over_our_layer_norm_rounds"));
  EXPECT_EQ(j["kernels"][0]["samples_s"].size(), 3u);
  EXPECT_TRUE(j["kernels"][0].contains("iqr_rel"));
  for (const KernelShapeResult& r : table) {
    ASSERT_EQ(r.kernels.size(), kernel_names().size());
    double copy_gbps = 0, rms = 0, our_ln = 0;
    for (size_t k = 0; k < r.kernels.size(); ++k) {
      const KernelResult& kr = r.kernels[k];
      EXPECT_EQ(kr.name, kernel_names()[k]);
      EXPECT_EQ(kr.seconds.samples.size(), 3u);
      EXPECT_GT(kr.seconds.median, 0);
      EXPECT_NEAR(kr.gb_per_s, kr.bytes_per_call / kr.seconds.median / 1e9,
                  1e-9 * kr.gb_per_s);
      if (kr.name == "copy") copy_gbps = kr.gb_per_s;
      if (kr.name == "our rms_norm") rms = kr.seconds.median;
      if (kr.name == "our layer_norm") our_ln = kr.seconds.median;
    }
    for (const KernelResult& kr : r.kernels)
      EXPECT_NEAR(kr.share_of_copy, kr.gb_per_s / copy_gbps, 1e-12);
    EXPECT_NEAR(r.rms_over_our_ln, our_ln / rms, 1e-12);
    // Per-round ratios: the kernels' samples of the same round, divided.
    const KernelResult* by_name[3] = {};
    for (const KernelResult& kr : r.kernels) {
      if (kr.name == "our rms_norm") by_name[0] = &kr;
      if (kr.name == "our layer_norm") by_name[1] = &kr;
      if (kr.name == "copy") by_name[2] = &kr;
    }
    ASSERT_TRUE(by_name[0] && by_name[1] && by_name[2]);
    ASSERT_EQ(r.rms_over_our_ln_rounds.samples.size(), 3u);
    ASSERT_EQ(r.rms_over_aten_ln_rounds.samples.size(), 3u);
    ASSERT_EQ(r.rms_share_of_copy_rounds.samples.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      const double t_rms = by_name[0]->seconds.samples[i];
      EXPECT_NEAR(r.rms_over_our_ln_rounds.samples[i],
                  by_name[1]->seconds.samples[i] / t_rms, 1e-12);
      EXPECT_NEAR(r.rms_share_of_copy_rounds.samples[i],
                  (by_name[0]->bytes_per_call / t_rms) /
                      (by_name[2]->bytes_per_call / by_name[2]->seconds.samples[i]),
                  1e-9);
    }
    EXPECT_LE(r.rms_over_our_ln_rounds.q1, r.rms_over_our_ln_rounds.median);
    EXPECT_LE(r.rms_over_our_ln_rounds.median, r.rms_over_our_ln_rounds.q3);
    // Bytes: a norm reads x and writes y (plus weight and bias), a copy reads and writes.
    const double elems = double(r.shape.rows * r.shape.cols) * sizeof(float);
    EXPECT_EQ(r.kernels.back().bytes_per_call, 2 * elems);
  }
}

}  // namespace
}  // namespace lnv::torch
