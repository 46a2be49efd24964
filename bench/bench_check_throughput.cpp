// Cases verified per second at 256 bits, and how that scales with graph size.
//
//   bench_check_throughput [CASES_PER_SIZE] [MODE]   (defaults: 40, both)
//
// For max-nodes 8, 16, 32, 64 it generates CASES_PER_SIZE graphs (the generator of
// `lnverify fuzz`, seeds 1..), runs every check (a)-(d) on each in inference and training
// mode (2 trials, like `lnverify fuzz`), and prints cases/s with the mean graph size.
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <string>

#include "checkers/campaign.h"
#include "generators/random_graph.h"

int main(int argc, char** argv) {
  using namespace lnv;
  const int cases = argc > 1 ? std::atoi(argv[1]) : 40;
  const std::string mode = argc > 2 ? argv[2] : "both";
  std::vector<Mode> modes;
  if (mode != "training") modes.push_back(Mode::inference);
  if (mode != "inference") modes.push_back(Mode::training);
  check::CheckOptions opt;
  opt.bits = 256;
  opt.trials = 2;
  std::cout << "max-nodes  cases  nodes/case  LNs/case  cases/s  ms/case  (mode " << mode
            << ", 256 bits, 2 trials)\n";
  for (int max_nodes : {8, 16, 32, 64}) {
    gen::GenConfig cfg;
    cfg.max_nodes = max_nodes;
    cfg.max_steps = std::max(2, max_nodes / 2);
    double nodes = 0, lns = 0;
    int fails = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < cases; ++i) {
      const Graph g = gen::generate_case(cfg, 1 + static_cast<uint64_t>(i)).value();
      opt.seed = static_cast<uint64_t>(i);
      const check::CaseOutcome out = check::check_case(g, opt, modes);
      fails += out.outcome == report::Outcome::fails;
      nodes += static_cast<double>(g.nodes.size());
      if (!out.reports.empty()) lns += static_cast<double>(out.reports.front().layer_norms);
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << std::setw(9) << max_nodes << std::setw(7) << cases << std::fixed
              << std::setprecision(1) << std::setw(12) << nodes / cases << std::setw(10)
              << lns / cases << std::setw(9) << cases / secs << std::setw(9)
              << 1000 * secs / cases << (fails ? "  (" + std::to_string(fails) + " failing)" : "")
              << "\n" << std::defaultfloat;
  }
  return 0;
}
