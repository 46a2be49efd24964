// The suite has teeth: deliberately wrong variants of the analysis are caught by the
// checkers on generated graphs, each within a bounded number of cases, with a small
// counterexample.
//
// The mutants do not touch the real analysis: each wraps detect_foldable and post-processes
// its plan — flipping chosen verdicts to "foldable" with the terms a careless rule would
// center, or flipping correct "yes" verdicts to "no" — which is what a wrong rule inside the
// analysis would produce.
#include <functional>
#include <iostream>
#include <set>

#include <gtest/gtest.h>

#include "checkers/campaign.h"
#include "checkers/equivalence.h"
#include "core/analysis/fold_plan.h"
#include "generators/random_graph.h"

namespace lnv {
namespace {

// Nodes upstream of the LN held by node `n` (its inputs, their inputs, ...).
std::set<int> ancestors(const Graph& g, int n) {
  std::set<int> seen;
  std::vector<int> stack{n};
  while (!stack.empty()) {
    const int k = stack.back();
    stack.pop_back();
    for (const ValueRef& r : g.node_inputs[k])
      if (r.kind == ValueRef::Kind::node && seen.insert(r.index).second) stack.push_back(r.index);
  }
  return seen;
}

CenterTerm producer(const std::string& node) {
  CenterTerm t;
  t.kind = CenterTerm::Kind::producer;
  t.node = node;
  return t;
}

// Recomputes the plan's fold list and centered terms from its verdicts.
void rebuild(FoldPlan& plan) {
  const int m = static_cast<int>(plan.mode);
  plan.fold.clear();
  plan.center.clear();
  for (const LnVerdict& v : plan.layer_norms) {
    if (!v.foldable[m]) continue;
    plan.fold.push_back(v.name);
    for (const CenterTerm& t : v.terms)
      if (std::find(plan.center.begin(), plan.center.end(), t) == plan.center.end())
        plan.center.push_back(t);
  }
}

void flip_to_foldable(LnVerdict& v, Mode m, const std::vector<CenterTerm>& extra) {
  v.foldable[static_cast<int>(m)] = true;
  v.reason[static_cast<int>(m)].clear();
  for (const CenterTerm& t : extra)
    if (std::find(v.terms.begin(), v.terms.end(), t) == v.terms.end()) v.terms.push_back(t);
}

// A mutant: given the graph, the mode, the real plan of that mode and the LN's ancestors,
// decide whether to change a verdict (and change it).
using Rewrite = std::function<bool(const Graph&, Mode, LnVerdict&, const std::set<int>&)>;

check::Detector mutant(Rewrite rewrite) {
  return [rewrite](const Graph& g, Mode m) {
    FoldPlan plan = detect_foldable(g, m);
    bool changed = false;
    for (LnVerdict& v : plan.layer_norms)
      changed |= rewrite(g, m, v, ancestors(g, g.node_index(v.node)));
    if (changed) rebuild(plan);
    return plan;
  };
}

bool not_foldable(const LnVerdict& v, Mode m) { return !v.foldable[static_cast<int>(m)]; }

// Training-mode dropout treated as passing the shift: an LN foldable in inference but not
// in training (dropout is the only difference between the modes) is folded in training
// with its inference terms.
const Rewrite kDropoutPasses = [](const Graph& g, Mode m, LnVerdict& v, const std::set<int>&) {
  if (m != Mode::training || !not_foldable(v, m) || !v.foldable[int(Mode::inference)])
    return false;
  for (const LnVerdict& w : detect_foldable(g, Mode::inference).layer_norms)
    if (w.name == v.name) flip_to_foldable(v, m, w.terms);
  return true;
};

// Safety ignored: an LN whose mean holds only centerable terms is folded even though
// centering them changes something downstream.
const Rewrite kSafetyIgnored = [](const Graph&, Mode m, LnVerdict& v, const std::set<int>&) {
  if (!not_foldable(v, m) || v.opaque || v.terms.empty()) return false;
  flip_to_foldable(v, m, {});
  return true;
};

// The node where the analysis says the fold breaks (first on LnVerdict::path), or -1.
int breaking_node(const Graph& g, const LnVerdict& v, Mode m) {
  const auto& path = v.path[static_cast<int>(m)];
  if (path.empty() || !g.has(path.front())) return -1;
  const ValueRef& r = g.ref(path.front());
  return r.kind == ValueRef::Kind::node ? r.index : -1;
}

// Linear producers directly feeding node n.
std::vector<CenterTerm> linear_inputs(const Graph& g, int n) {
  std::vector<CenterTerm> out;
  for (const ValueRef& r : g.node_inputs[n])
    if (r.kind == ValueRef::Kind::node && g.nodes[r.index].op == Op::linear)
      out.push_back(producer(g.nodes[r.index].name));
  return out;
}

// Grouped (or depthwise) convs treated as producers: an LN broken at a grouped conv is
// folded with the conv centered over all its output channels.
const Rewrite kGroupedConvProducer = [](const Graph& g, Mode m, LnVerdict& v,
                                        const std::set<int>&) {
  const int n = breaking_node(g, v, m);
  if (!not_foldable(v, m) || n < 0) return false;
  const Node& node = g.nodes[n];
  if ((node.op != Op::conv1d && node.op != Op::conv2d) || node.groups == 1) return false;
  flip_to_foldable(v, m, {producer(node.name)});
  return true;
};

// A concat of different parts along its last axis (the feature axis) on the breaking path
// treated as passing the shift: the LN is folded with the concat's linear parts centered.
const Rewrite kConcatFeaturesPass = [](const Graph& g, Mode m, LnVerdict& v,
                                       const std::set<int>&) {
  if (!not_foldable(v, m)) return false;
  for (const std::string& name : v.path[static_cast<int>(m)]) {
    if (!g.has(name) || g.ref(name).kind != ValueRef::Kind::node) continue;
    const int n = g.ref(name).index;
    const Node& node = g.nodes[n];
    const int64_t rank = static_cast<int64_t>(g.node_shapes[n].size());
    const bool distinct_parts =
        std::set<std::string>(node.inputs.begin(), node.inputs.end()).size() > 1;
    if (node.op == Op::concat && distinct_parts && (node.axis == -1 || node.axis == rank - 1)) {
      flip_to_foldable(v, m, linear_inputs(g, n));
      return true;
    }
  }
  return false;
};

// A mul by a factor varying along the normalized axes (a per-feature gain) treated as
// passing the shift: an LN broken at such a mul is folded with the mul's linear input
// centered.
const Rewrite kPerFeatureMulPasses = [](const Graph& g, Mode m, LnVerdict& v,
                                        const std::set<int>&) {
  const int n = breaking_node(g, v, m);
  if (!not_foldable(v, m) || n < 0 || g.nodes[n].op != Op::mul) return false;
  flip_to_foldable(v, m, linear_inputs(g, n));
  return true;
};

// Terms that cancel ignored: an LN whose input went through a subtraction or a center is
// judged not foldable (the cancelled atoms counted as opaque), though it is.
const Rewrite kCancellationIgnored = [](const Graph& g, Mode m, LnVerdict& v,
                                        const std::set<int>& up) {
  if (not_foldable(v, m)) return false;
  for (int n : up)
    if (g.nodes[n].op == Op::sub || g.nodes[n].op == Op::center) {
      v.foldable[static_cast<int>(m)] = false;
      v.reason[static_cast<int>(m)] = "mutant: cancellation through '" + g.nodes[n].name +
                                      "' ignored";
      v.opaque = true;
      return true;
    }
  return false;
};

struct Caught {
  bool caught = false;
  int cases = 0;        // generated cases looked at
  int checked = 0;      // cases the mutant changed (and so were checked)
  size_t nodes = 0;     // size of the shrunk counterexample
  std::string summary;  // what failed on it
};

// The checks that fail under the mutant but hold under the real analysis, one line each
// (a failure both share is the real analysis' problem, not the mutant's).
std::vector<std::string> new_failures(const check::CaseOutcome& bad, const check::CaseOutcome& real) {
  std::set<std::string> real_fails;
  for (const report::CheckReport& r : real.reports)
    for (const report::CheckResult& res : r.results)
      if (res.outcome == report::Outcome::fails)
        real_fails.insert(std::string(mode_name(r.mode)) + " " + res.kind + " " + res.subject);
  std::vector<std::string> out;
  for (const report::CheckReport& r : bad.reports)
    for (const report::CheckResult& res : r.results) {
      const std::string key = std::string(mode_name(r.mode)) + " " + res.kind + " " + res.subject;
      if (res.outcome == report::Outcome::fails && !real_fails.count(key))
        out.push_back(key + ": " + res.detail);
    }
  return out;
}

// Runs the campaign against a mutant until it is caught, then shrinks the counterexample.
Caught hunt(const Rewrite& rewrite, const std::vector<Mode>& modes, int max_cases) {
  const check::Detector bad = mutant(rewrite);
  gen::GenConfig cfg;
  cfg.max_nodes = 24;
  cfg.max_steps = 10;
  check::CheckOptions opt;
  opt.trials = 2;
  opt.drift = false;
  auto changes = [&](const Graph& g) {
    for (Mode m : modes)
      if (detect_foldable(g, m).fold != bad(g, m).fold) return true;
    return false;
  };
  // "Fails" when the mutant makes some check fail that holds for the real analysis; an
  // exception from the rewrite of a mutant plan does not count as caught.
  std::vector<std::string> last;
  auto check = [&](const Graph& g) {
    check::CaseOutcome verdict;
    if (!changes(g)) return verdict;
    const check::CaseOutcome with_bad = check::check_case(g, opt, modes, bad);
    if (!with_bad.error.empty()) return verdict;
    last = new_failures(with_bad, check::check_case(g, opt, modes));
    if (!last.empty()) verdict.outcome = report::Outcome::fails;
    return verdict;
  };
  Caught c;
  for (; c.cases < max_cases && !c.caught; ++c.cases) {
    const auto s = gen::generate_case(cfg, 4242 + static_cast<uint64_t>(c.cases));
    if (!changes(s.value())) continue;
    ++c.checked;
    if (check(s.value()).outcome != report::Outcome::fails) continue;
    c.caught = true;
    const check::Shrunk shrunk = check::shrink_case(s, check, 400);
    check(shrunk.graph);  // the failures of the final graph, into `last`
    c.nodes = shrunk.graph.nodes.size();
    for (const std::string& line : last) c.summary += "  " + line + "\n";
    c.summary += gen::describe(shrunk.graph);
  }
  return c;
}

void expect_caught(const char* name, const Rewrite& rewrite, const std::vector<Mode>& modes) {
  constexpr int kMaxCases = 400;
  constexpr size_t kSmall = 12;
  const Caught c = hunt(rewrite, modes, kMaxCases);
  std::cout << "[teeth] " << name << ": caught=" << c.caught << " after " << c.cases
            << " cases (" << c.checked << " changed by the mutant); counterexample " << c.nodes
            << " nodes\n" << c.summary;
  EXPECT_TRUE(c.caught) << name << " survived " << kMaxCases << " generated cases";
  EXPECT_LE(c.nodes, kSmall) << name << ": counterexample not small\n" << c.summary;
}

const std::vector<Mode> kBoth = {Mode::inference, Mode::training};

TEST(Teeth, TrainingDropoutPassingTheShiftIsCaught) {
  expect_caught("training dropout passes the shift", kDropoutPasses, {Mode::training});
}
TEST(Teeth, IgnoringSafetyIsCaught) { expect_caught("safety ignored", kSafetyIgnored, kBoth); }
TEST(Teeth, GroupedConvsAsProducersAreCaught) {
  expect_caught("grouped convs as producers", kGroupedConvProducer, kBoth);
}
TEST(Teeth, ConcatAlongFeaturesPassingIsCaught) {
  expect_caught("concat along the feature axis passes", kConcatFeaturesPass, kBoth);
}
TEST(Teeth, PerFeatureMulPassingIsCaught) {
  expect_caught("per-feature mul passes", kPerFeatureMulPasses, kBoth);
}
TEST(Teeth, IgnoringCancellationIsCaught) {
  expect_caught("cancelling terms ignored", kCancellationIgnored, kBoth);
}

}  // namespace
}  // namespace lnv
