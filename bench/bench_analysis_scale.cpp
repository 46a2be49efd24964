// The cost of detect_foldable on a deep pre-norm residual stream, built in code:
//   emb -> [ln_k -> fc1_k -> gelu_k -> fc2_k -> add_k]* -> ln_f
// (5 nodes a block), for about 10^4, 10^5 and 10^6 nodes. Every LN is foldable and LN k
// has k + 1 terms, so per-value term sets are quadratic if copied; the analysis shares
// them (mean_form.h) and memoizes the safety of each (value, constant axes).
//
//   bench_analysis_scale [max_nodes]     (default 1000000)
//
// Prints nodes, wall and CPU seconds and CPU microseconds per node for each size, with the per-LN term
// lists off (they alone are quadratic: LnVerdict::terms of LN k has k entries), and memory:
// the resident set holding the graph before the analysis, and how far the analysis raised
// the peak above it (the plan included; Linux's /proc/self/status, its peak reset through
// /proc/self/clear_refs before each analysis).
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/analysis/fold_plan.h"
#include "core/graph.h"

namespace {

lnv::Graph pre_norm_stack(int64_t blocks, int64_t width) {
  using namespace lnv;
  Graph g;
  g.name = "pre-norm-" + std::to_string(blocks);
  g.inputs.push_back({"tok", {1, 4}, DType::index, 32});
  auto param = [&](const std::string& name, Shape shape) {
    Param p;
    p.name = name;
    p.shape = shape;
    p.values.assign(numel(shape), 0.01);
    g.params.push_back(std::move(p));
  };
  auto node = [&](const std::string& name, Op op, std::vector<std::string> in) -> Node& {
    Node n;
    n.name = name;
    n.op = op;
    n.inputs = std::move(in);
    g.nodes.push_back(std::move(n));
    return g.nodes.back();
  };
  param("wte", {32, width});
  node("emb", Op::embedding, {"tok"}).weight = "wte";
  // All blocks share one pair of weights (like an RNN over depth) to keep memory small;
  // the analysis treats every use separately either way.
  param("w1", {2 * width, width});
  param("w2", {width, 2 * width});
  std::string h = "emb";
  for (int64_t k = 0; k < blocks; ++k) {
    const std::string s = std::to_string(k);
    node("ln" + s, Op::layer_norm, {h}).axes = {-1};
    node("fc1_" + s, Op::linear, {"ln" + s}).weight = "w1";
    node("act" + s, Op::gelu, {"fc1_" + s});
    node("fc2_" + s, Op::linear, {"act" + s}).weight = "w2";
    node("h" + s, Op::add, {h, "fc2_" + s});
    h = "h" + s;
  }
  node("ln_f", Op::layer_norm, {h}).axes = {-1};
  g.outputs = {"ln_f"};
  g.finalize();
  return g;
}

// A field of /proc/self/status in MB (VmRSS: resident now; VmHWM: the peak), or -1.
double status_mb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::atof(line.c_str() + field.size() + 1) / 1024.0;
  return -1.0;
}

// Starts the peak (VmHWM) over from the resident set now.
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace

int main(int argc, char** argv) {
  const int64_t max_nodes = argc > 1 ? std::atoll(argv[1]) : 1000000;
  std::printf("%10s %10s %10s %10s %12s %10s %10s %12s\n", "nodes", "foldable", "seconds", "cpu_s",
              "cpu_us/node", "centered", "graph_MB", "analysis_MB");
  for (int64_t target = 10000; target <= max_nodes; target *= 10) {
    const int64_t blocks = (target - 2) / 5;
    const lnv::Graph g = pre_norm_stack(blocks, 8);
    reset_peak();
    const double graph_mb = status_mb("VmRSS");
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    const lnv::FoldPlan plan = lnv::detect_foldable(g, lnv::Mode::inference, {false});
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;
    const double analysis_mb = status_mb("VmHWM") - graph_mb;
    std::printf("%10zu %10zu %10.3f %10.3f %12.3f %10zu %10.0f %12.0f\n", g.nodes.size(),
                plan.foldable_count(lnv::Mode::inference), s, cpu,
                1e6 * cpu / double(g.nodes.size()), plan.center.size(), graph_mb, analysis_mb);
    std::fflush(stdout);
  }
  return 0;
}
