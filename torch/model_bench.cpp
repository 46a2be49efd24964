#include "torch/model_bench.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "core/analysis/fold_plan.h"
#include "core/eval/evaluator.h"
#include "core/mode.h"

namespace lnv::torch {
namespace {

using torch_engine::Engine;
using torch_engine::NormTiming;

struct Runner {
  Engine engine;
  std::vector<double> seconds, norm_seconds;
  std::vector<NormTiming> norms;  // accumulated over the timed forwards
  std::vector<std::vector<double>> per_call;  // per norm node, per forward

  Runner(const Graph& g, const std::vector<Tensor<double>>& inputs)
      : engine(g, {torch_engine::Precision::f32}) {
    engine.set_inputs(inputs);
    engine.set_norm_timing(true);
  }

  void forward(Clock clock, bool timed) {
    engine.reset_norm_timings();
    const double start = now_seconds(clock);
    engine.run({Mode::inference, 0});
    const double t = now_seconds(clock) - start;
    if (!timed) return;
    seconds.push_back(t);
    const std::vector<NormTiming> now = engine.norm_timings();
    double sum = 0;
    for (const NormTiming& n : now) sum += n.seconds;
    norm_seconds.push_back(sum);
    per_call.resize(now.size());
    for (size_t k = 0; k < now.size(); ++k)
      if (now[k].calls) per_call[k].push_back(now[k].seconds / double(now[k].calls));
    if (norms.empty()) {
      norms = now;
    } else {
      for (size_t k = 0; k < norms.size(); ++k)
        norms[k].calls += now[k].calls, norms[k].seconds += now[k].seconds;
    }
  }

  VariantResult result(int64_t tokens) const {
    VariantResult v;
    v.seconds = summarize(seconds);
    v.tokens_per_s = v.seconds.median > 0 ? double(tokens) / v.seconds.median : 0;
    v.norm_seconds = summarize(norm_seconds);
    v.norms = norms;
    for (const std::vector<double>& samples : per_call)
      v.norm_call_seconds.push_back(summarize(samples));
    const double forwards = std::max<double>(1, double(seconds.size()));
    for (size_t k = 0; k < norms.size() && k < v.norm_call_seconds.size(); ++k)
      v.norm_seconds_typical +=
          v.norm_call_seconds[k].median * double(norms[k].calls) / forwards;
    return v;
  }
};

std::string shape_text(const NormTiming& n) {
  return std::to_string(n.rows) + "x" + std::to_string(n.cols);
}

}  // namespace

int64_t tokens_per_forward(const Graph& g) {
  for (const Input& in : g.inputs)
    if (in.dtype == DType::index) return numel(in.shape);
  for (int32_t i : g.order) {
    const Node& n = g.nodes[i];
    if (n.op == Op::layer_norm || n.op == Op::rms_norm) {
      const Shape& s = g.node_shapes[i];
      const Axes axes = normalize_axes(n.axes, int64_t(s.size()), n.name);
      int64_t cols = 1;
      for (int64_t a : axes) cols *= s[a];
      return numel(s) / cols;
    }
  }
  return g.inputs.empty() || g.inputs[0].shape.empty() ? 1 : g.inputs[0].shape[0];
}

ModelBenchResult bench_model(const Graph& g, const ModelBenchOptions& opt) {
  const FoldPlan plan = detect_foldable(g, Mode::inference);
  const Graph folded = apply_fold(g, plan);

  ModelBenchResult res;
  res.model = g.name;
  res.tokens_per_forward = tokens_per_forward(g);
  res.layer_norms = plan.layer_norms.size();
  res.folded = plan.fold.size();

  const std::vector<Tensor<double>> inputs = eval::random_inputs<double>(g, opt.seed);
  Runner original(g, inputs), rewritten(folded, inputs);
  res.biases_absorbed = rewritten.engine.absorbed_biases();
  original.forward(opt.clock, false);  // warm-up: kept buffers, first-touch pages
  rewritten.forward(opt.clock, false);
  for (int rep = 0; rep < opt.repeats; ++rep) {
    // Alternate who goes first, so neither always runs on the other's warm caches.
    Runner& first = rep % 2 ? rewritten : original;
    Runner& second = rep % 2 ? original : rewritten;
    first.forward(opt.clock, true);
    second.forward(opt.clock, true);
    if (opt.progress) opt.progress(rep + 1, opt.repeats);
  }
  res.original = original.result(res.tokens_per_forward);
  res.folded_model = rewritten.result(res.tokens_per_forward);
  return res;
}

std::string format_model_bench(const ModelBenchResult& r) {
  std::ostringstream os;
  char line[320];
  std::snprintf(line, sizeof line,
                "model %s: %lld tokens per forward, %zu LayerNorms, %zu folded to RMSNorm "
                "(inference)\n",
                r.model.c_str(), (long long)r.tokens_per_forward, r.layer_norms, r.folded);
  os << line;
  if (r.biases_absorbed) {
    std::snprintf(line, sizeof line, "  %zu moved biases added inside the bias of the linear that takes them (no add of their own)\n",
                  r.biases_absorbed);
    os << line;
  }
  std::snprintf(line, sizeof line, "  %-9s %12s %8s %11s %13s %8s %8s\n", "variant",
                "median ms", "spread", "tokens/s", "norms ms/fwd", "norm %", "speedup");
  os << line;
  const double base = r.original.seconds.median;
  for (const auto& [label, v] :
       {std::pair<const char*, const VariantResult&>{"original", r.original},
        {"folded", r.folded_model}}) {
    std::snprintf(line, sizeof line, "  %-9s %12.2f %7.1f%% %11.1f %13.3f %7.2f%% %7.3fx\n",
                  label, v.seconds.median * 1e3, 100 * v.seconds.spread(), v.tokens_per_s,
                  v.norm_seconds_typical * 1e3,
                  100 * v.norm_seconds_typical / std::max(v.seconds.median, 1e-12),
                  base / std::max(v.seconds.median, 1e-12));
    os << line;
  }
  std::snprintf(line, sizeof line, "  norm time saved per forward (sum of per-call medians): "
                "%.3f ms (%.2f%% of the original forward)\n",
                (r.original.norm_seconds_typical - r.folded_model.norm_seconds_typical) * 1e3,
                100 * (r.original.norm_seconds_typical - r.folded_model.norm_seconds_typical) /
                    std::max(base, 1e-12));
  os << line;

  // Per norm node: the original's call against the folded model's (same node names).
  std::map<std::string, size_t> folded_by_node;
  for (size_t k = 0; k < r.folded_model.norms.size(); ++k)
    folded_by_node[r.folded_model.norms[k].node] = k;
  auto median_call = [](const VariantResult& v, size_t k) {
    return k < v.norm_call_seconds.size() ? v.norm_call_seconds[k].median : 0.0;
  };
  os << "  (a norm fed by a same-shape residual add is timed with that add: the folded\n"
        "  float32 model runs the two as one add+rms_norm kernel, which cannot be split)\n";
  std::snprintf(line, sizeof line, "  %-28s %-11s %13s %13s %8s\n", "norm node (median)",
                "shape", "original us", "folded us", "ratio");
  os << line;
  for (size_t k = 0; k < r.original.norms.size(); ++k) {
    const NormTiming& n = r.original.norms[k];
    const double before = median_call(r.original, k);
    const auto it = folded_by_node.find(n.node);
    const NormTiming* f = it == folded_by_node.end() ? nullptr : &r.folded_model.norms[it->second];
    const double after = f ? median_call(r.folded_model, it->second) : 0;
    const std::string ops = std::string(op_name(n.op)) + (f && f->op != n.op ? "->rms" : "");
    std::snprintf(line, sizeof line, "  %-28s %-11s %13.1f %13.1f %7.2fx  %s\n",
                  n.node.c_str(), shape_text(n).c_str(), before * 1e6, after * 1e6,
                  after > 0 ? before / after : 0.0, ops.c_str());
    os << line;
  }
  return os.str();
}

void to_json(nlohmann::json& j, const ModelBenchResult& r) {
  auto variant = [](const VariantResult& v) {
    nlohmann::json norms = nlohmann::json::array();
    for (size_t k = 0; k < v.norms.size(); ++k) {
      const NormTiming& n = v.norms[k];
      const Timing t = k < v.norm_call_seconds.size() ? v.norm_call_seconds[k] : Timing{};
      norms.push_back({{"node", n.node},
                       {"op", op_name(n.op)},
                       {"rows", n.rows},
                       {"cols", n.cols},
                       {"calls", n.calls},
                       {"mean_s_per_call", n.calls ? n.seconds / double(n.calls) : 0.0},
                       {"median_s_per_call", t.median},
                       {"samples_s_per_call", t.samples}});
    }
    return nlohmann::json{{"median_s", v.seconds.median},
                          {"min_s", v.seconds.min},
                          {"max_s", v.seconds.max},
                          {"samples_s", v.seconds.samples},
                          {"tokens_per_s", v.tokens_per_s},
                          {"norm_median_s", v.norm_seconds.median},
                          {"norm_typical_s", v.norm_seconds_typical},
                          {"norm_samples_s", v.norm_seconds.samples},
                          {"norms", norms}};
  };
  j = {{"model", r.model},
       {"tokens_per_forward", r.tokens_per_forward},
       {"layer_norms", r.layer_norms},
       {"folded", r.folded},
       {"biases_absorbed", r.biases_absorbed},
       {"original", variant(r.original)},
       {"folded_model", variant(r.folded_model)}};
}

}  // namespace lnv::torch
