#include "torch/fidelity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "core/eval/evaluator.h"
#include "torch/engine.h"

namespace lnv::torch_engine {
namespace {

struct Diff {
  double abs = 0, rel = 0;
};

// max |a - b|, and that over max |a| (abs when a is all zero).
Diff diff(const Tensor<double>& a, const Tensor<double>& b) {
  LNV_INTERNAL_ASSERT(a.data.size() == b.data.size(), "fidelity: outputs differ in size");
  double d = 0, scale = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    d = std::max(d, std::abs(a.data[i] - b.data[i]));
    scale = std::max(scale, std::abs(a.data[i]));
  }
  return {d, scale > 0 ? d / scale : d};
}

void widen(Diff& acc, const Diff& d) {
  acc.abs = std::max(acc.abs, d.abs);
  acc.rel = std::max(acc.rel, d.rel);
}

// Argmax over the last axis of every row.
std::vector<int64_t> top1(const Tensor<double>& t) {
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  std::vector<int64_t> out;
  for (int64_t r = 0; r * cols < t.size(); ++r) {
    const auto row = t.data.begin() + r * cols;
    out.push_back(std::max_element(row, row + cols) - row);
  }
  return out;
}

int64_t count_lns(const Graph& g, Op kind) {
  int64_t n = 0;
  for (const Node& node : g.nodes) {
    if (node.op == kind) ++n;
    if (node.op == Op::rnn && node.norm && node.norm->kind == kind) ++n;
  }
  return n;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

FidelityReport measure_fidelity(const Graph& original, const Graph& folded,
                                const FidelityOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  LNV_INTERNAL_ASSERT(original.inputs.size() == folded.inputs.size() &&
                          original.outputs.size() == folded.outputs.size(),
                      "fidelity: the fold has other inputs or outputs than the original");
  FidelityReport rep;
  rep.model = original.name;
  rep.mode = opt.mode;
  rep.layer_norms = count_lns(original, Op::layer_norm);
  rep.folded = rep.layer_norms - count_lns(folded, Op::layer_norm);
  rep.trials = opt.trials;
  rep.trials_f64 = opt.trials_f64;

  // Two phases, so that at most three models' weights are held at once (float64 takes
  // twice float32's memory): float32 against float32 (and the float64 original, for the
  // noise), then float64 against float64.
  Engine orig64(original, {Precision::f64});
  Diff f32, noise, f64out, f64grad;
  const int steps = opt.trials + opt.trials_f64;  // for the progress callback
  {
    Engine orig32(original, {Precision::f32}), fold32(folded, {Precision::f32});
    for (int t = 0; t < opt.trials; ++t) {
      if (opt.progress && t > 0) opt.progress(t, steps);
      const uint64_t seed = opt.seed + static_cast<uint64_t>(t);
      const RunOptions run{opt.mode, seed};
      const auto inputs = eval::random_inputs<double>(original, seed);
      const auto a = orig32.forward(inputs, run);
      const auto b = fold32.forward(inputs, run);
      for (size_t k = 0; k < a.size(); ++k) widen(f32, diff(a[k], b[k]));
      const auto pa = top1(a[0]), pb = top1(b[0]);
      for (size_t r = 0; r < pa.size(); ++r) rep.top1_agree += pa[r] == pb[r];
      rep.top1_total += static_cast<int64_t>(pa.size());
      if (t < opt.trials_f64) {
        const auto exact = orig64.forward(inputs, run);
        for (size_t k = 0; k < a.size(); ++k) widen(noise, diff(exact[k], a[k]));
      }
    }
  }
  Engine fold64(folded, {Precision::f64});
  for (int t = 0; t < opt.trials_f64; ++t) {
    if (opt.progress) opt.progress(opt.trials + t, steps);
    const uint64_t seed = opt.seed + static_cast<uint64_t>(t);
    const RunOptions run{opt.mode, seed};
    const auto inputs = eval::random_inputs<double>(original, seed);
    if (opt.mode == Mode::inference) {
      const auto a = orig64.forward(inputs, run);
      const auto b = fold64.forward(inputs, run);
      for (size_t k = 0; k < a.size(); ++k) widen(f64out, diff(a[k], b[k]));
      continue;
    }
    const GradResult a = orig64.gradients(inputs, run);
    const GradResult b = fold64.gradients(inputs, run);
    for (size_t k = 0; k < a.outputs.size(); ++k) widen(f64out, diff(a.outputs[k], b.outputs[k]));
    // Gradients relative to the largest gradient entry of the trial: some gradients are
    // zero in exact arithmetic (an attention key bias: softmax ignores a per-query shift)
    // and hold only rounding noise, which a per-tensor ratio would blow up.
    std::vector<std::pair<const Tensor<double>*, const Tensor<double>*>> pairs;
    for (size_t k = 0; k < a.inputs.size(); ++k)
      if (original.inputs[k].dtype == DType::float_) pairs.emplace_back(&a.inputs[k], &b.inputs[k]);
    std::map<std::string, size_t> fold_param;
    for (size_t k = 0; k < folded.params.size(); ++k) fold_param[folded.params[k].name] = k;
    for (size_t k = 0; k < original.params.size(); ++k) {
      const auto it = fold_param.find(original.params[k].name);
      if (it == fold_param.end())
        throw ModelError(original.params[k].name,
                         "the training fold lost this param; its gradient cannot be compared");
      pairs.emplace_back(&a.params[k], &b.params[it->second]);
    }
    double delta = 0, scale = 0;
    for (const auto& [ga, gb] : pairs) {
      delta = std::max(delta, diff(*ga, *gb).abs);
      for (double v : ga->data) scale = std::max(scale, std::abs(v));
    }
    widen(f64grad, {delta, scale > 0 ? delta / scale : delta});
  }
  if (opt.progress) opt.progress(steps, steps);
  rep.f32_max_abs = f32.abs, rep.f32_max_rel = f32.rel;
  rep.f32_noise_abs = noise.abs, rep.f32_noise_rel = noise.rel;
  rep.f64_output_rel = f64out.rel;
  rep.f64_grad_rel = opt.mode == Mode::training && opt.trials_f64 > 0 ? f64grad.rel : -1;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return rep;
}

void to_json(nlohmann::json& j, const FidelityReport& r) {
  j = {{"format", "lnverify.fidelity"},
       {"version", 1},
       {"model", r.model},
       {"mode", mode_name(r.mode)},
       {"layer_norms", r.layer_norms},
       {"folded", r.folded},
       {"float32",
        {{"trials", r.trials},
         {"max_abs_diff", r.f32_max_abs},
         {"max_rel_diff", r.f32_max_rel},
         {"noise_floor_abs", r.f32_noise_abs},
         {"noise_floor_rel", r.f32_noise_rel},
         {"top1_agree", r.top1_agree},
         {"top1_total", r.top1_total}}},
       {"float64", {{"trials", r.trials_f64}, {"output_rel_diff", r.f64_output_rel}}},
       {"seconds", r.seconds}};
  if (r.f64_grad_rel >= 0) j["float64"]["gradient_rel_diff"] = r.f64_grad_rel;
}

std::string to_text(const FidelityReport& r) {
  std::string s = "fidelity of the " + std::string(mode_name(r.mode)) + " fold of " + r.model +
                  ": " + std::to_string(r.folded) + " of " + std::to_string(r.layer_norms) +
                  " LayerNorms folded\n";
  s += "  float32, " + std::to_string(r.trials) + " trials: max abs diff " + fmt(r.f32_max_abs) +
       ", max rel diff " + fmt(r.f32_max_rel) + " (float32 noise of the original: abs " +
       fmt(r.f32_noise_abs) + ", rel " + fmt(r.f32_noise_rel) + ")\n";
  const double pct = r.top1_total ? 100.0 * double(r.top1_agree) / double(r.top1_total) : 100.0;
  s += "  top-1 agreement: " + std::to_string(r.top1_agree) + " / " +
       std::to_string(r.top1_total) + " predictions (" + fmt(pct) + "%)\n";
  s += "  float64, " + std::to_string(r.trials_f64) + " trials: outputs rel diff " +
       fmt(r.f64_output_rel);
  if (r.f64_grad_rel >= 0) s += ", gradients rel diff " + fmt(r.f64_grad_rel);
  s += "\n  (" + fmt(r.seconds) + " s)\n";
  return s;
}

}  // namespace lnv::torch_engine
