// Fidelity measurement: an exact fold shows float64 differences at rounding level and full
// top-1 agreement; a wrong fold (an LN forced to RMSNorm without its centering) shows up.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/analysis/fold_plan.h"
#include "generators/architectures.h"
#include "torch/fidelity.h"

namespace lnv {
namespace {

using torch_engine::FidelityOptions;
using torch_engine::measure_fidelity;

zoo::ArchOptions small_text(double dropout) {
  zoo::ArchOptions o;
  o.layers = 2, o.hidden = 16, o.heads = 2, o.seq = 5, o.vocab = 30, o.batch = 2;
  o.dropout = dropout;
  return o;
}

TEST(TorchFidelity, ExactInferenceFoldAgreesEverywhere) {
  const Graph g = zoo::build_architecture("gpt2", small_text(0.1));
  const Graph folded = apply_fold(g, detect_foldable(g, Mode::inference));
  FidelityOptions opt;
  opt.trials = 8;
  const auto rep = measure_fidelity(g, folded, opt);
  EXPECT_EQ(rep.layer_norms, 5);
  EXPECT_EQ(rep.folded, 5);
  EXPECT_EQ(rep.top1_total, 8 * 2 * 5);  // trials x batch x tokens
  EXPECT_EQ(rep.top1_agree, rep.top1_total);
  EXPECT_LE(rep.f64_output_rel, 1e-12);
  EXPECT_LT(rep.f32_max_rel, 1e-4);
  EXPECT_GT(rep.f32_noise_rel, 0.0);
  EXPECT_EQ(rep.f64_grad_rel, -1);  // inference: not measured
}

TEST(TorchFidelity, ExactTrainingFoldHasTheSameGradients) {
  const Graph g = zoo::build_architecture("gpt2", small_text(0.0));
  const Graph folded = apply_fold(g, detect_foldable(g, Mode::training));
  FidelityOptions opt;
  opt.mode = Mode::training;
  opt.trials = 2;
  const auto rep = measure_fidelity(g, folded, opt);
  EXPECT_EQ(rep.folded, 5);
  EXPECT_LE(rep.f64_output_rel, 1e-12);
  EXPECT_GE(rep.f64_grad_rel, 0.0);
  EXPECT_LE(rep.f64_grad_rel, 1e-10);
}

TEST(TorchFidelity, AWrongFoldIsVisible) {
  // BERT's post-norm LNs are not foldable: force one to RMSNorm anyway.
  const Graph g = zoo::build_architecture("bert", small_text(0.1));
  FoldPlan plan = detect_foldable(g, Mode::inference);
  ASSERT_EQ(std::count(plan.fold.begin(), plan.fold.end(), "encoder.0.attention.LayerNorm"), 0);
  plan.fold.push_back("encoder.0.attention.LayerNorm");
  const Graph wrong = apply_fold(g, plan);
  FidelityOptions opt;
  opt.trials = 2;
  const auto rep = measure_fidelity(g, wrong, opt);
  EXPECT_GT(rep.f64_output_rel, 1e-6);
  EXPECT_GT(rep.f32_max_rel, 1e-6);
}

}  // namespace
}  // namespace lnv
