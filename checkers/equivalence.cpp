// The verdict-vs-truth checks of equivalence.h (docs/spec/semantics.md, "Verification"):
// the rounding bound, the forced folds tried against each "no" (their producers chosen by
// the analysis' own producer rule, core/analysis/producers.h), and the exact comparisons.
#include "checkers/equivalence.h"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "checkers/agreement.h"
#include "core/analysis/producers.h"
#include "core/error.h"
#include "core/eval/bounded.h"
#include "core/eval/evaluator.h"
#include "core/model_json.h"
#include "core/random.h"

namespace lnv::check {

using eval::Bounded;
using eval::Mpfr;
using report::CheckReport;
using report::CheckResult;
using report::Divergence;

Detector real_detector() {
  return [](const Graph& g, Mode m) { return detect_foldable(g, m); };
}

Detector detected(const FoldPlan& plan) {
  return [&plan](const Graph& g, Mode m) { return m == plan.mode ? plan : detect_foldable(g, m); };
}

double rounding_bound(const Graph& g, unsigned bits, double scale) {
  double ops = 1.0, log2_amplification = 0.0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    double steps = 1.0;
    if (n.op == Op::rnn) steps = static_cast<double>(g.node_shapes[i][1]);
    if (n.op == Op::attention) steps = 4.0;
    // A gated recurrent layer: T steps of several gates each.
    if (n.op == Op::lstm || n.op == Op::gru) steps = 4.0 * static_cast<double>(g.shape_of(n.inputs[0])[0]);
    ops += steps;
    auto gain = [](double eps) { return 0.5 * std::log2(1.0 / std::max(eps, 0x1p-20)); };
    if (n.op == Op::layer_norm || n.op == Op::rms_norm) log2_amplification += std::max(0.0, gain(n.eps));
    if (n.op == Op::rnn && n.norm) log2_amplification += steps * std::max(0.0, gain(n.norm->eps));
  }
  log2_amplification = std::min(log2_amplification, bits / 4.0);
  return std::ldexp(std::max(1.0, scale) * ops, -static_cast<int>(bits) + 20 +
                                                    static_cast<int>(std::ceil(log2_amplification)));
}

std::vector<CenterTerm> forced_candidates(const Graph& g, const LnVerdict& v) {
  std::vector<CenterTerm> out = v.terms;
  const int ln = g.node_index(v.node);
  // The LN's node and everything upstream (an rnn's own pre-activation is a producer).
  std::vector<int> stack{ln};
  std::set<int> seen{ln};
  std::vector<int> upstream;
  while (!stack.empty()) {
    const int k = stack.back();
    stack.pop_back();
    if (k != ln || g.nodes[k].op == Op::rnn) upstream.push_back(k);
    for (const ValueRef& r : g.node_inputs[k])
      if (r.kind == ValueRef::Kind::node && seen.insert(r.index).second) stack.push_back(r.index);
  }
  std::sort(upstream.begin(), upstream.end());
  for (int k : upstream) {
    if (!analysis::is_centerable_producer(g, k)) continue;
    CenterTerm t;
    t.kind = CenterTerm::Kind::producer;
    t.node = g.nodes[k].name;
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

std::vector<std::vector<CenterTerm>> forced_folds(const LnVerdict& v,
                                                  const std::vector<CenterTerm>& candidates,
                                                  int cap, uint64_t seed) {
  const size_t n = candidates.size();
  std::vector<std::vector<CenterTerm>> out;
  std::set<std::vector<bool>> seen;
  auto add = [&](const std::vector<bool>& mask) {
    if (static_cast<int>(out.size()) >= cap || !seen.insert(mask).second) return;
    std::vector<CenterTerm> s;
    for (size_t k = 0; k < n; ++k)
      if (mask[k]) s.push_back(candidates[k]);
    out.push_back(std::move(s));
  };
  if (n <= 6) {
    for (uint32_t bitsmask = 0; bitsmask < (1u << n); ++bitsmask) {
      std::vector<bool> mask(n);
      for (size_t k = 0; k < n; ++k) mask[k] = (bitsmask >> k) & 1;
      add(mask);
    }
    return out;
  }
  add(std::vector<bool>(n, false));
  add(std::vector<bool>(n, true));
  for (size_t k = 0; k < n; ++k) {
    std::vector<bool> one(n, false), all_but(n, true);
    one[k] = true;
    all_but[k] = false;
    add(one);
    add(all_but);
  }
  SplitMix64 rng(seed, v.name + "#forced");
  for (int tries = 0; static_cast<int>(out.size()) < cap && tries < 16 * cap; ++tries) {
    std::vector<bool> mask(n);
    for (size_t k = 0; k < n; ++k) mask[k] = rng.next() & 1;
    add(mask);
  }
  return out;
}

namespace {

double to_double(const Mpfr& x) { return x.convert_to<double>(); }

// Largest |value| in a list of tensors.
// With `skip`, the tensors i with (*skip)[i] >= 0 are left out.
template <class Tensors>
double max_magnitude(const Tensors& ts, const std::vector<int32_t>* skip = nullptr) {
  double m = 0.0;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (skip && !skip->empty() && (*skip)[i] >= 0) continue;
    for (const Mpfr& v : ts[i].data) m = std::max(m, std::fabs(to_double(v)));
  }
  return m;
}

bool all_finite(const std::vector<Tensor<Mpfr>>& ts) {
  for (const Tensor<Mpfr>& t : ts)
    for (const Mpfr& v : t.data)
      if (!boost::multiprecision::isfinite(v)) return false;
  return true;
}

// Whether x and y are written the same in a model file. Compared as text, where -0.0 and
// 0.0 differ (as JSON values they are equal, though a division tells them apart).
bool same_double(double x, double y) { return std::memcmp(&x, &y, sizeof(double)) == 0; }

// Whether every field of x and y is the same, doubles bit for bit: then node_to_json writes
// them the same. A node that apply_fold copied passes this without writing either.
bool same_fields(const Node& x, const Node& y) {
  // A field added to Node must be compared here (then update the size).
  static_assert(sizeof(void*) != 8 || sizeof(Node) == 1160,
                "Node changed: compare its new fields in same_fields");
  const auto same_norm = [](const std::optional<RnnNorm>& a, const std::optional<RnnNorm>& b) {
    if (a.has_value() != b.has_value()) return false;
    return !a || (a->kind == b->kind && same_double(a->eps, b->eps) &&
                  a->weight == b->weight && a->bias == b->bias);
  };
  return x.name == y.name && x.op == y.op && x.inputs == y.inputs && x.weight == y.weight &&
         x.bias == y.bias && x.weight_ih == y.weight_ih && x.weight_hh == y.weight_hh &&
         x.wq == y.wq && x.wk == y.wk && x.wv == y.wv && x.wo == y.wo && x.bq == y.bq &&
         x.bk == y.bk && x.bv == y.bv && x.bo == y.bo && x.cbwc == y.cbwc &&
         x.axes == y.axes && x.keepdims == y.keepdims && same_double(x.eps, y.eps) &&
         same_double(x.factor, y.factor) && same_double(x.p, y.p) &&
         same_double(x.alpha, y.alpha) && same_double(x.beta, y.beta) &&
         same_double(x.min, y.min) && same_double(x.max, y.max) && x.axis == y.axis &&
         x.perm == y.perm && x.starts == y.starts && x.ends == y.ends && x.steps == y.steps &&
         x.shape == y.shape && x.pads == y.pads && same_double(x.value, y.value) &&
         x.condition == y.condition && x.condition_shape == y.condition_shape &&
         x.stride == y.stride && x.padding == y.padding && x.dilation == y.dilation &&
         x.groups == y.groups && x.heads == y.heads && x.causal == y.causal &&
         x.transpose_b == y.transpose_b && x.activation == y.activation &&
         same_norm(x.norm, y.norm) && x.initial_h == y.initial_h &&
         x.initial_c == y.initial_c && x.direction == y.direction &&
         x.sequence_lens == y.sequence_lens && x.output == y.output &&
         x.linear_before_reset == y.linear_before_reset && x.op_type == y.op_type;
}

bool same_node(const Node& x, const Node& y) {
  return same_fields(x, y) || node_to_json(x).dump() == node_to_json(y).dump();
}

bool same_input(const Input& x, const Input& y) {
  return x.name == y.name && x.shape == y.shape && x.dtype == y.dtype && x.range == y.range;
}

// Bit for bit: -0.0 and 0.0 differ.
bool same_bits(const std::vector<double>& x, const std::vector<double>& y) {
  return x.size() == y.size() &&
         (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0);
}

// Whether the evaluators read the same effective values from x and y.
bool same_param(const Param& x, const Param& y) {
  return !x.values_deferred && !y.values_deferred && x.name == y.name && x.shape == y.shape &&
         same_bits(x.values, y.values) && x.center_axes == y.center_axes &&
         same_bits(x.scale, y.scale) && x.scale_axis == y.scale_axis &&
         x.scale_param == y.scale_param;
}

// For each node of h, the index of the node of g that has its value on every trial, or
// -1: a node of the same name, written the same, whose every input and param is g's (the
// same input, a param with the same effective values, or such a node). Evaluations of h
// and g on the same inputs and options agree on these nodes, so one can take them from
// the other. A rewrite leaves everything upstream of what it changed so.
std::vector<int32_t> shared_nodes(const Graph& h, const Graph& g) {
  std::vector<int32_t> shared(h.nodes.size(), -1);
  auto same_value = [&](const std::string& name) {
    if (!g.has(name)) return false;
    const ValueRef &a = h.ref(name), &b = g.ref(name);
    if (a.kind != b.kind) return false;
    switch (a.kind) {
      case ValueRef::Kind::input: return same_input(h.inputs[a.index], g.inputs[b.index]);
      case ValueRef::Kind::param: return same_param(h.params[a.index], g.params[b.index]);
      case ValueRef::Kind::node: return shared[a.index] == b.index;
    }
    return false;
  };
  for (int32_t i : h.order) {
    const Node& n = h.nodes[i];
    if (!g.has(n.name) || g.ref(n.name).kind != ValueRef::Kind::node) continue;
    const int32_t j = g.ref(n.name).index;
    bool same = same_node(n, g.nodes[j]);
    for (const std::string& in : n.inputs) same = same && same_value(in);
    for (const auto& [attr, param] : n.param_attrs()) same = same && same_value(param);
    if (same) shared[i] = j;
  }
  return shared;
}

// Whether h holds g's model for the evaluators, given shared = shared_nodes(h, g): the
// same inputs, params and outputs, and every node of h, in g's order, is g's node there
// written the same (which shared_nodes has compared). Then evaluating either on the same
// inputs and run seed gives the same values, element by element.
bool same_model(const Graph& h, const Graph& g, const std::vector<int32_t>& shared) {
  if (h.seed != g.seed || h.outputs != g.outputs || h.inputs.size() != g.inputs.size() ||
      h.params.size() != g.params.size() || h.nodes.size() != g.nodes.size())
    return false;
  for (size_t i = 0; i < h.inputs.size(); ++i)
    if (!same_input(h.inputs[i], g.inputs[i])) return false;
  for (size_t i = 0; i < h.params.size(); ++i)
    if (!same_param(h.params[i], g.params[i])) return false;
  for (size_t i = 0; i < shared.size(); ++i)
    if (shared[i] != int32_t(i)) return false;
  return true;
}

// The values of `from`'s nodes that an evaluation of h can take (shared_nodes), per node
// of h.
template <class T>
std::vector<const Tensor<T>*> known_values(const std::vector<int32_t>& shared,
                                           const eval::Evaluation<T>& from) {
  std::vector<const Tensor<T>*> known;
  known.reserve(shared.size());
  for (int32_t j : shared) known.push_back(j >= 0 ? &from.nodes[j] : nullptr);
  return known;
}

struct TensorDiff {
  double max_abs = 0.0;
  int64_t element = 0;
  double a = 0.0, b = 0.0;
};

// The worst element of a - b; every element's difference also goes to `stats` if given.
TensorDiff diff(const Tensor<Mpfr>& a, const Tensor<Mpfr>& b,
                report::ErrorAccumulator* stats = nullptr) {
  TensorDiff d;
  if (a.shape != b.shape) {
    d.max_abs = INFINITY;
    return d;
  }
  Mpfr t;  // |a - b| of an element, as abs(a - b) rounds it, without a new number per element
  for (int64_t i = 0; i < a.size(); ++i) {
    const mpfr_srcptr x = a.data[i].backend().data(), y = b.data[i].backend().data();
    const mpfr_prec_t prec = std::max(mpfr_get_prec(x), mpfr_get_prec(y));
    if (mpfr_get_prec(t.backend().data()) != prec) mpfr_set_prec(t.backend().data(), prec);
    mpfr_sub(t.backend().data(), x, y, MPFR_RNDN);
    mpfr_abs(t.backend().data(), t.backend().data(), MPFR_RNDN);
    const double e = to_double(t);
    if (stats) stats->add(to_double(a.data[i]), to_double(b.data[i]), e);
    if (e > d.max_abs || std::isnan(e)) {
      d.max_abs = e;
      d.element = i;
      d.a = to_double(a.data[i]);
      d.b = to_double(b.data[i]);
    }
  }
  return d;
}

// One run of a graph on one trial: forward values and (training) gradients.
template <class T>
struct RunOf {
  eval::Evaluation<T> ev;
  std::optional<eval::Gradients<T>> grads;
};
// For an original's run (Checker::original), `magnitude` is the largest |value| of its
// nodes, inputs and (training) gradients of params and inputs, which compare() takes the
// scale of.
struct Run : RunOf<Mpfr> {
  double magnitude = 0.0;
};

// A run of the double pre-pass: usable when no branch was uncertain and every value and
// its bound is finite; then `scale` >= 1 bounds every |exact value| of the nodes (and
// gradients), and every compared quantity's exact value lies within e of v.
// `scale_estimate` is the same maximum over the double values alone.
struct BoundedRun : RunOf<Bounded> {
  bool usable = false;
  double scale = 1.0, scale_estimate = 1.0;
};

// The largest |exact value| in a list of tensors, bounded from above, and the largest
// |double value|.
struct Magnitudes {
  double above = 0.0, estimate = 0.0;
  void add(const std::vector<Tensor<Bounded>>& ts) {
    for (const Tensor<Bounded>& t : ts)
      for (const Bounded& x : t.data) {
        const double u = (std::fabs(x.v) + x.e) * (1 + 0x1p-50);
        if (!(u <= DBL_MAX)) above = INFINITY;  // also NaN
        above = std::max(above, u);
        estimate = std::max(estimate, std::fabs(x.v));
      }
  }
};

// The worst difference between an original run and a rewrite run.
struct Comparison {
  bool finite = true;
  double max_abs = 0.0, max_rel = 0.0;
  double bound = 0.0;      // the largest per-trial bound
  double scale = 0.0;      // the largest per-trial scale the bounds were computed for
  double worst_ratio = 0.0;  // max over trials of max_abs / bound
  int worst_trial = 0;
  std::string worst_quantity;
  int worst_output = -1;  // output index when the worst quantity is an output
  TensorDiff worst;

  // With collect_stats: per quantity (outputs, then gradients), every element's difference.
  std::vector<std::pair<std::string, report::ErrorAccumulator>> errors;

  Measured measured() const { return {finite, max_abs, bound, scale, worst_ratio}; }
};

class Checker {
 public:
  Checker(const Graph& g, const CheckOptions& opt) : g_(g), opt_(opt) {}

  CheckReport run(const Detector& detect) {
    Precision precision(opt_.bits);
    bits_ = eval::mpfr_bits();
    CheckReport rep;
    rep.model = opt_.model_name.empty() ? g_.name : opt_.model_name;
    rep.mode = opt_.mode;
    rep.bits = bits_;
    rep.trials = opt_.trials;
    rep.seed = opt_.seed;

    const FoldPlan plan = detect(g_, opt_.mode);
    rep.layer_norms = plan.layer_norms.size();
    rep.foldable = plan.foldable_count(opt_.mode);
    const int m = static_cast<int>(opt_.mode);
    // The checks, one per LN and then the plan's, each independent of the others: run on
    // opt.jobs threads, each result in its place.
    const size_t lns = plan.layer_norms.size();
    rep.results.resize(lns + 1);
    for_each_check(lns + 1, [&](size_t i) {
      if (i == lns) {
        rep.results[i] = exact("plan_exact", "plan", plan);
        return;
      }
      const LnVerdict& v = plan.layer_norms[i];
      rep.results[i] = v.foldable[m] ? ln_exact(plan, v) : ln_tight(plan, v);
    });
    if (opt_.mode == Mode::training && opt_.drift) rep.drift = drift(detect, plan);
    return rep;
  }

 private:
  // Runs check(i) for i < n on opt.jobs threads (this one among them), the progress
  // reported after each; the first exception in check order is rethrown.
  void for_each_check(size_t n, const std::function<void(size_t)>& check) {
    std::atomic<size_t> next{0};
    std::vector<std::exception_ptr> errors(n);
    int64_t done = 0;
    auto work = [&] {
      for (size_t i; (i = next++) < n;) {
        try {
          SharedPrecision shared;
          check(i);
        } catch (...) {
          errors[i] = std::current_exception();
        }
        std::lock_guard<std::mutex> lock(report_mutex_);
        if (opt_.progress) opt_.progress(++done, int64_t(n));
      }
    };
    std::vector<std::thread> threads;
    const size_t extra = std::min(n, size_t(std::max(opt_.jobs, 1))) - 1;
    for (size_t t = 0; t < extra; ++t)
      threads.emplace_back([&] {
        work();
        // MPFR keeps caches per thread (constants such as log 2, exp's tables); a thread
        // that ends frees its own (the process's are freed at exit).
        mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
      });
    work();
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  }

  bool training() const { return opt_.mode == Mode::training; }

  void count(int64_t CheckCounters::*counter) {
    if (!opt_.counters) return;
    std::lock_guard<std::mutex> lock(report_mutex_);
    ++(opt_.counters->*counter);
  }
  uint64_t trial_seed(int k) const { return opt_.seed + static_cast<uint64_t>(k); }

  // Inputs of trial k for graph h, drawn for the original's inputs and matched by name.
  template <class T = Mpfr>
  std::vector<Tensor<T>> inputs_for(const Graph& h, int k) {
    const auto base = eval::random_inputs<T>(g_, trial_seed(k));
    std::vector<Tensor<T>> in;
    for (const Input& i : h.inputs) {
      const ValueRef& r = g_.ref(i.name);
      LNV_INTERNAL_ASSERT(r.kind == ValueRef::Kind::input, "rewrite input not in original");
      in.push_back(base[r.index]);
    }
    return in;
  }

  // With `shared` (shared_nodes(h, g_)), the nodes h shares with the original are taken
  // from the original's run `from` of the same trial and precision.
  Run run_graph(const Graph& h, int k, bool with_grads,
                const std::vector<int32_t>* shared = nullptr, const Run* from = nullptr) {
    const eval::RunOptions ro{opt_.mode, trial_seed(k)};
    Run r;
    r.ev = shared ? eval::evaluate(h, inputs_for(h, k), ro, known_values(*shared, from->ev))
                  : eval::evaluate(h, inputs_for(h, k), ro);
    if (with_grads) r.grads = eval::gradients(h, r.ev, ro);
    return r;
  }

  // The original's run of trial k at the current precision (cached per precision; the
  // threads of for_each_check share it, one computing while the others wait).
  const Run& original(int k) {
    std::lock_guard<std::mutex> lock(originals_mutex_);
    auto& cache = originals_[eval::mpfr_bits()];
    auto it = cache.find(k);
    if (it == cache.end()) {
      it = cache.emplace(k, run_graph(g_, k, training())).first;
      Run& o = it->second;
      o.magnitude = std::max(max_magnitude(o.ev.nodes), max_magnitude(o.ev.inputs));
      if (o.grads)
        o.magnitude = std::max({o.magnitude, max_magnitude(o.grads->params),
                                max_magnitude(o.grads->inputs)});
    }
    return it->second;
  }

  // The compared quantities of a rewrite run r against an original run o, in order:
  // visit(name, original's tensor, rewrite's tensor) for each output, then (training) the
  // gradient of each param and of each float input.
  template <class T, class Visit>
  void for_each_quantity(const Graph& h, const RunOf<T>& o, const RunOf<T>& r, Visit&& visit) const {
    for (size_t q = 0; q < g_.outputs.size(); ++q)
      visit("output '" + g_.outputs[q] + "'", o.ev.outputs[q], r.ev.outputs[output_index(h, g_.outputs[q])]);
    if (!training()) return;
    for (size_t p = 0; p < g_.params.size(); ++p)
      visit("gradient of param '" + g_.params[p].name + "'", o.grads->params[p],
            r.grads->params[h.param_index(g_.params[p].name)]);
    for (size_t i = 0; i < g_.inputs.size(); ++i) {
      if (g_.inputs[i].dtype != DType::float_) continue;
      visit("gradient of input '" + g_.inputs[i].name + "'", o.grads->inputs[i],
            r.grads->inputs[input_index(h, g_.inputs[i].name)]);
    }
  }

  // ---- The double pre-pass (docs/verification.md, "Settling a difference in double").

  // With `shared`, as run_graph; `from` must be usable (its branches were certain).
  BoundedRun run_bounded(const Graph& h, int k, bool with_grads,
                         const std::vector<int32_t>* shared = nullptr,
                         const BoundedRun* from = nullptr) {
    const eval::RunOptions ro{opt_.mode, trial_seed(k)};
    BoundedRun r;
    eval::reset_uncertain_branches();
    try {
      r.ev = shared ? eval::evaluate(h, inputs_for<Bounded>(h, k), ro, known_values(*shared, from->ev))
                    : eval::evaluate(h, inputs_for<Bounded>(h, k), ro);
      if (with_grads) r.grads = eval::gradients(h, r.ev, ro);
    } catch (const std::exception&) {
      return r;  // not usable: the exact path decides (and reports what it throws)
    }
    if (eval::uncertain_branches()) return r;
    Magnitudes m;  // over what compare() takes the scale of (a superset for a rewrite)
    m.add(r.ev.nodes);
    m.add(r.ev.inputs);
    if (r.grads) {
      m.add(r.grads->params);
      m.add(r.grads->inputs);
    }
    r.scale = std::max(1.0, m.above);
    r.scale_estimate = std::max(1.0, m.estimate);
    r.usable = std::isfinite(r.scale);
    return r;
  }

  const BoundedRun& original_bounded(int k) {
    std::lock_guard<std::mutex> lock(originals_mutex_);
    auto it = bounded_originals_.find(k);
    if (it == bounded_originals_.end())
      it = bounded_originals_.emplace(k, run_bounded(g_, k, training())).first;
    return it->second;
  }

  // Whether compare(h, far, trials) at the current precision must find a difference above
  // `far` times the bound, proved from the double pre-pass: on some trial, with every trial
  // before it evaluated to finite values, the exact difference of a compared element is at
  // least (far (1 + 2^-40) + 4) times the bound for an upper bound of that trial's scale, so
  // the exact evaluations differ by far more than rounding. Returns an estimate (from the
  // double values) of the worst ratio that comparison reports, or nothing when the
  // pre-pass cannot tell.
  std::optional<double> settled_different(const Graph& h, double far, int trials) {
    const unsigned bits = eval::mpfr_bits();
    const Graph& larger = h.nodes.size() > g_.nodes.size() ? h : g_;
    double estimate = 0.0;
    bool stopped = false;  // the estimate reached `far`: the comparison stops there
    const std::vector<int32_t> shared = shared_nodes(h, g_);
    for (int k = 0; k < trials; ++k) {
      const BoundedRun& o = original_bounded(k);
      if (!o.usable) return std::nullopt;
      const BoundedRun r = run_bounded(h, k, training(), &shared, &o);
      if (!r.usable) return std::nullopt;
      const double bound = rounding_bound(larger, bits, std::max(o.scale, r.scale));
      const double bound_estimate = rounding_bound(larger, bits, std::max(o.scale_estimate, r.scale_estimate));
      const double threshold = (far * (1 + 0x1p-40) + 4) * bound;
      double lower = 0.0, measured = 0.0;
      for_each_quantity(h, o, r, [&](const std::string&, const Tensor<Bounded>& a, const Tensor<Bounded>& b) {
        if (a.shape != b.shape) {
          measured = INFINITY;
          return;
        }
        for (int64_t i = 0; i < a.size(); ++i) {
          const double d = std::fabs(a.data[i].v - b.data[i].v);
          measured = std::max(measured, d);
          lower = std::max(lower, d * (1 - 0x1p-50) - eval::bounded_detail::up(a.data[i].e + b.data[i].e));
        }
      });
      if (!stopped) estimate = std::max(estimate, measured / bound_estimate);
      stopped = stopped || estimate > far;
      if (lower > threshold) return estimate;
    }
    return std::nullopt;
  }

  // Compares the rewrite h with the original on `trials` trials (default opt.trials), or
  // until a trial differs by more than `stop_ratio` times its bound; with `collect_stats`
  // also the error statistics of every compared quantity (Comparison::errors).
  Comparison compare(const Graph& h, double stop_ratio = INFINITY, int trials = 0,
                     bool collect_stats = false) {
    const unsigned bits = eval::mpfr_bits();
    // A rewrite that changed nothing (an empty plan) evaluates to the original's values.
    const std::vector<int32_t> shared = shared_nodes(h, g_);
    const bool unchanged = same_model(h, g_, shared);
    Comparison c;
    for (int k = 0; k < (trials > 0 ? trials : opt_.trials); ++k) {
      const Run& o = original(k);
      std::optional<Run> own;
      const Run& r = unchanged ? o : own.emplace(run_graph(h, k, training(), &shared, &o));
      if (!all_finite(o.ev.nodes) || !all_finite(r.ev.nodes)) {
        c.finite = false;
        return c;
      }
      // The nodes r shares with o hold o's values, already in o.magnitude.
      double scale = std::max({1.0, o.magnitude, unchanged ? 0.0 : max_magnitude(r.ev.nodes, &shared)});
      std::vector<std::pair<std::string, TensorDiff>> diffs;
      auto compare_quantity = [&](std::string quantity, const Tensor<Mpfr>& a,
                                  const Tensor<Mpfr>& b) {
        report::ErrorAccumulator* stats = nullptr;
        if (collect_stats) {
          if (c.errors.size() == diffs.size()) c.errors.emplace_back(quantity, report::ErrorAccumulator{});
          stats = &c.errors[diffs.size()].second;
        }
        diffs.emplace_back(std::move(quantity), diff(a, b, stats));
      };
      if (training())
        scale = std::max(scale, max_magnitude(r.grads->params));
      for_each_quantity(h, o, r, compare_quantity);
      const double bound = rounding_bound(h.nodes.size() > g_.nodes.size() ? h : g_, bits, scale);
      c.bound = std::max(c.bound, bound);
      c.scale = std::max(c.scale, scale);
      for (size_t q = 0; q < diffs.size(); ++q) {
        const TensorDiff& d = diffs[q].second;
        if (std::isnan(d.max_abs)) {
          c.finite = false;
          return c;
        }
        c.max_rel = std::max(c.max_rel, d.max_abs / scale);
        if (d.max_abs > c.max_abs) c.max_abs = d.max_abs;
        const double ratio = d.max_abs / bound;
        if (ratio > c.worst_ratio) {
          c.worst_ratio = ratio;
          c.worst_trial = k;
          c.worst_quantity = diffs[q].first;
          c.worst_output = q < g_.outputs.size() ? static_cast<int>(q) : -1;
          c.worst = d;
        }
      }
      if (c.worst_ratio > stop_ratio) break;
    }
    return c;
  }

  static size_t output_index(const Graph& h, const std::string& name) {
    for (size_t q = 0; q < h.outputs.size(); ++q)
      if (h.outputs[q] == name) return q;
    throw InternalError("the rewrite lost graph output '" + name + "'");
  }
  static int input_index(const Graph& h, const std::string& name) {
    const ValueRef& r = h.ref(name);
    LNV_INTERNAL_ASSERT(r.kind == ValueRef::Kind::input, "rewrite input kind");
    return r.index;
  }

  FoldPlan single(const FoldPlan& plan, const std::string& ln, std::vector<CenterTerm> terms) const {
    FoldPlan p;
    p.mode = opt_.mode;
    p.layer_norms = plan.layer_norms;
    p.fold = {ln};
    p.center = std::move(terms);
    return p;
  }

  // A forced fold compared on the model with every param redrawn (normal, at each param's
  // own RMS; stream "<param>#generic", then "<param>#generic#k" for the k-th further draw,
  // under the check's seed): a difference far above the bound, or nothing. Several draws:
  // one draw can leave a relu off for every input - a relu of a rank-one product whose 4
  // outputs all take the sign that turns it off, probability about 1/16 per draw - and the
  // property tests' shrinking finds such draws (RC_PARAMS=seed=5, case 153).
  static constexpr int kGenericDraws = 4;
  std::optional<Comparison> generic_comparison(const FoldPlan& forced, double far) {
    for (int k = 0; k < kGenericDraws; ++k) {
      Graph g2 = g_;
      for (Param& p : g2.params) {
        double ss = 0;
        for (double x : p.values) ss += x * x;
        const double scale = ss > 0 ? std::sqrt(ss / double(p.values.size())) : 0.5;
        SplitMix64 rng(opt_.seed, p.name + "#generic" + (k ? "#" + std::to_string(k) : ""));
        for (double& x : p.values) x = scale * rng.normal();
      }
      Checker inner(g2, opt_);
      const Comparison c =
          inner.compare(apply_fold(g2, forced), far, opt_.trials + kExtraTightTrials);
      if (c.finite && c.worst_ratio > far) return c;
    }
    return std::nullopt;
  }

  // The plan with LN `ln` also folded, centering `terms` besides the plan's own.
  FoldPlan on_top(const FoldPlan& plan, const std::string& ln, const std::vector<CenterTerm>& terms) const {
    FoldPlan p = plan;
    p.mode = opt_.mode;
    p.fold.push_back(ln);
    for (const CenterTerm& t : terms)
      if (std::find(p.center.begin(), p.center.end(), t) == p.center.end()) p.center.push_back(t);
    return p;
  }

  static std::vector<std::string> term_names(const std::vector<CenterTerm>& terms) {
    std::vector<std::string> out;
    for (const CenterTerm& t : terms)
      out.push_back(t.kind == CenterTerm::Kind::producer ? t.node : t.param + "@" + t.node + "/" + t.slot);
    return out;
  }

  CheckResult ln_exact(const FoldPlan& plan, const LnVerdict& v) {
    CheckResult r = exact("ln_exact", v.name, single(plan, v.name, v.terms));
    r.centered = term_names(v.terms);
    return r;
  }

  // (a)/(b)/(d): the rewrite of `plan` equals the original (agreement.h).
  CheckResult exact(const std::string& kind, const std::string& subject, const FoldPlan& plan) {
    CheckResult res;
    res.kind = kind;
    res.subject = subject;
    res.centered = term_names(plan.center);
    const ExactMeasurement& m = measure_exact(plan);
    const Agreement& a = m.agreement;
    Comparison used = a.remeasured ? m.measured.back() : m.measured.front();
    fill(res, used);
    res.bits = a.bits;
    res.error_stats = error_stats(used, a.bits);
    res.outcome = a.outcome;
    res.detail = a.detail;
    if (a.outcome == Outcome::fails) {
      const Comparison& c = m.measured.front();
      res.detail = subject == "plan"
                       ? "the rewrite of the whole plan changes " + c.worst_quantity
                       : "folding " + subject + " changes " + c.worst_quantity;
      res.divergence = divergence(apply_fold(g_, plan), c);
    }
    return res;
  }

  // The comparisons of exact() and the agreement judged from them.
  struct ExactMeasurement {
    std::vector<Comparison> measured;  // at opt.bits, then (if needed) at twice that
    Agreement agreement;
  };

  // exact()'s measurement of the rewrite of `plan`, taken once per rewrite: plan_exact's
  // plan is often an ln_exact's (one foldable LN). Every plan here carries the detected
  // plan's verdicts, so its mode, folds and centered terms determine the rewrite.
  const ExactMeasurement& measure_exact(const FoldPlan& plan) {
    PlanKey key{plan.mode, plan.fold, plan.center};
    {
      const std::lock_guard<std::mutex> lock(exact_mutex_);
      for (const auto& [k, m] : exact_measured_)
        if (k == key) return m;
    }
    const Graph h = apply_fold(g_, plan);
    ExactMeasurement m;
    m.agreement = judge_agreement(opt_.bits, "the original or the rewrite", [&] {
      m.measured.push_back(compare(h, INFINITY, 0, true));
      return m.measured.back().measured();
    });
    const std::lock_guard<std::mutex> lock(exact_mutex_);
    return exact_measured_.emplace_back(std::move(key), std::move(m)).second;
  }

  static constexpr double kEstimateTies = 1e-6;

  // compare(h, far), and when no trial differs by more than `far` times the bound, the
  // same on kExtraTightTrials more trials if one of those does.
  Comparison compare_tight(const Graph& h, double far) {
    Comparison c = compare(h, far);
    // Discrete draws (dropout masks, index inputs) can make a forced fold exact on a
    // few trials by coincidence (a mask keeping a whole row): before calling the
    // verdict loose, look for a difference on more trials.
    if (c.finite && c.worst_ratio <= far) {
      const Comparison more = compare(h, far, opt_.trials + kExtraTightTrials);
      if (more.finite && more.worst_ratio > far) c = more;
    }
    return c;
  }

  // (c): every forced fold of an LN judged not foldable changes the outputs. A "no" that
  // holds relative to the plan (LnVerdict::conflicts) is forced on top of the plan's folds.
  static constexpr int kExtraTightTrials = 16;
  CheckResult ln_tight(const FoldPlan& plan, const LnVerdict& v) {
    CheckResult res;
    res.kind = "ln_tight";
    res.subject = v.name;
    res.bits = bits_;
    const bool relative = !v.conflicts[static_cast<int>(opt_.mode)].empty();
    const auto folds =
        forced_folds(v, forced_candidates(g_, v), opt_.max_forced_folds, opt_.seed);
    res.attempts = static_cast<int>(folds.size());
    // "Far more than the bound": a margin no rounding model error could bridge.
    const double far = std::ldexp(1.0, static_cast<int>(bits_ / 4));
    // The report gives the weakest forced fold's figures (the first of equals).
    double weakest = INFINITY;
    size_t weakest_fold = folds.size();
    std::vector<std::pair<size_t, double>> settled_folds;  // fold index, estimated ratio
    auto forced_plan = [&](const std::vector<CenterTerm>& terms) {
      return relative ? on_top(plan, v.name, terms) : single(plan, v.name, terms);
    };
    for (size_t fold = 0; fold < folds.size(); ++fold) {
      const std::vector<CenterTerm>& terms = folds[fold];
      const FoldPlan forced = forced_plan(terms);
      const Graph h = apply_fold(g_, forced);
      // What compare(h, far) and its retry on more trials below conclude when a trial
      // differs by more than `far` times the bound, settled in double when the double
      // pre-pass proves that difference.
      std::optional<double> settled;
      if (opt_.double_prepass) settled = settled_different(h, far, opt_.trials + kExtraTightTrials);
      count(settled ? &CheckCounters::settled_in_double : &CheckCounters::measured_exactly);
      if (settled) {
        settled_folds.emplace_back(fold, *settled);
        continue;
      }
      Comparison c = compare_tight(h, far);
      // A verdict is about generic weights: the model's own can make a forced fold exact
      // (a relu its weights never activate). Then the same forced fold is tried on the
      // model with every param redrawn.
      if (c.finite && c.worst_ratio <= far) {
        if (const std::optional<Comparison> generic = generic_comparison(forced, far)) {
          c = *generic;
          res.detail = "with the model's own weights forcing the fold keeps the outputs by "
                       "coincidence (e.g. an activation they never turn on, or a factor equal "
                       "over the features); with redrawn weights it changes " +
                       c.worst_quantity + ", so the verdict stands on the structure";
        }
      }
      if (!c.finite) {
        res.outcome = report::worse(res.outcome, Outcome::inconclusive);
        res.detail = "a value is not finite under a forced fold";
        continue;
      }
      if (c.worst_ratio < weakest) {
        weakest = c.worst_ratio;
        weakest_fold = fold;
        fill(res, c);
        res.centered = term_names(terms);
      }
      if (c.worst_ratio > far) continue;
      Outcome o = c.worst_ratio <= 1.0 ? Outcome::fails : Outcome::inconclusive;
      {
        Precision more(2 * opt_.bits);
        const Comparison c2 = compare(h);
        if (c2.finite && c2.worst_ratio > 1.0 && c2.max_abs >= 0.5 * c.max_abs)
          o = Outcome::holds;  // a genuine, if small, difference
        else if (c2.finite && c2.worst_ratio <= 1.0)
          o = Outcome::fails;
      }
      if (o == Outcome::fails) {
        fill(res, c);
        res.outcome = Outcome::fails;
        res.centered = term_names(terms);
        res.detail = "judged not foldable (" + v.reason[static_cast<int>(opt_.mode)] +
                     "), but centering {" + join(res.centered) + "} and swapping " + v.name + " for RMSNorm" +
                     (relative ? " on top of the plan" : "") + " keeps every output";
        return res;
      }
      if (o == Outcome::inconclusive) {
        res.outcome = report::worse(res.outcome, Outcome::inconclusive);
        res.detail = "centering {" + join(term_names(terms)) + "} changes the outputs by only " +
                     std::to_string(c.max_abs) + ", not clearly above rounding";
      }
    }
    // The settled folds whose estimate is the least (up to kEstimateTies, which covers
    // the estimates' own rounding), measured in MPFR in fold order: the first weakest.
    double least = INFINITY;
    for (const auto& [fold, estimate] : settled_folds) least = std::min(least, estimate);
    for (const auto& [fold, estimate] : settled_folds) {
      if (estimate > least * (1 + kEstimateTies) || estimate > weakest * (1 + kEstimateTies)) continue;
      const Comparison c = compare_tight(apply_fold(g_, forced_plan(folds[fold])), far);
      if (c.worst_ratio < weakest || (c.worst_ratio == weakest && fold < weakest_fold)) {
        weakest = c.worst_ratio;
        weakest_fold = fold;
        fill(res, c);
        res.centered = term_names(folds[fold]);
      }
    }
    return res;
  }

  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  }

  // The statistics of a finite comparison (none when a value was not finite), judged
  // against its bound.
  static std::vector<report::ErrorStats> error_stats(Comparison& c, unsigned bits) {
    std::vector<report::ErrorStats> out;
    if (!c.finite) return out;
    for (auto& [quantity, acc] : c.errors) out.push_back(acc.stats(quantity, c.bound, bits));
    return out;
  }

  static void fill(CheckResult& res, const Comparison& c) {
    res.max_abs = c.max_abs;
    res.max_rel = c.max_rel;
    res.bound = c.bound;
  }

  // The first node (topological order of the original) from which a chain of nodes that
  // differ between original and rewrite reaches the worst output.
  Divergence divergence(const Graph& h, const Comparison& c) {
    Divergence d;
    d.quantity = c.worst_quantity;
    d.trial = c.worst_trial;
    d.seed = trial_seed(c.worst_trial);
    d.max_abs = c.worst.max_abs;
    d.element = c.worst.element;
    d.original_value = c.worst.a;
    d.rewrite_value = c.worst.b;
    const Run& o = original(c.worst_trial);
    const Run r = run_graph(h, c.worst_trial, false);
    std::vector<bool> differs(g_.nodes.size(), false);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (!h.has(g_.nodes[i].name) || h.ref(g_.nodes[i].name).kind != ValueRef::Kind::node) continue;
      const int j = h.node_index(g_.nodes[i].name);
      differs[i] = diff(o.ev.nodes[i], r.ev.nodes[j]).max_abs > c.bound;
    }
    // Start from the differing output (the worst one, else any output that differs).
    int start = -1;
    auto node_of_output = [&](size_t q) {
      const ValueRef& ref = g_.output_refs[q];
      return ref.kind == ValueRef::Kind::node && differs[ref.index] ? ref.index : -1;
    };
    if (c.worst_output >= 0) start = node_of_output(c.worst_output);
    for (size_t q = 0; start < 0 && q < g_.outputs.size(); ++q) start = node_of_output(q);
    if (start < 0) return d;
    std::vector<int> position(g_.nodes.size());
    for (size_t p = 0; p < g_.order.size(); ++p) position[g_.order[p]] = static_cast<int>(p);
    std::map<int, int> next_toward_output{{start, -1}};
    std::vector<int> frontier{start};
    int first = start;
    while (!frontier.empty()) {
      const int n = frontier.back();
      frontier.pop_back();
      if (position[n] < position[first]) first = n;
      for (const ValueRef& in : g_.node_inputs[n])
        if (in.kind == ValueRef::Kind::node && differs[in.index] &&
            next_toward_output.emplace(in.index, n).second)
          frontier.push_back(in.index);
    }
    d.first_node = g_.nodes[first].name;
    for (int n = first; n >= 0; n = next_toward_output.at(n)) d.chain.push_back(g_.nodes[n].name);
    return d;
  }

  // Training-mode drift of the inference rewrite of each LN foldable in inference only.
  std::vector<report::Drift> drift(const Detector& detect, const FoldPlan& plan) {
    std::vector<report::Drift> out;
    const FoldPlan inference = detect(g_, Mode::inference);
    for (const LnVerdict& v : plan.layer_norms) {
      if (v.foldable[int(Mode::training)] || !v.foldable[int(Mode::inference)]) continue;
      const LnVerdict* iv = nullptr;
      for (const LnVerdict& w : inference.layer_norms)
        if (w.name == v.name) iv = &w;
      if (!iv) continue;
      FoldPlan p;
      p.mode = Mode::inference;
      p.layer_norms = inference.layer_norms;
      p.fold = {v.name};
      p.center = iv->terms;
      const Graph h = apply_fold(g_, p);
      std::vector<report::Drift> per_output(g_.outputs.size());
      for (int k = 0; k < opt_.trials; ++k) {  // one evaluation per trial for every output
        const Run& o = original(k);
        const Run r = run_graph(h, k, false);
        for (size_t q = 0; q < g_.outputs.size(); ++q) {
          report::Drift& d = per_output[q];
          d.layer_norm = v.name;
          d.output = g_.outputs[q];
          const TensorDiff td = diff(o.ev.outputs[q], r.ev.outputs[output_index(h, d.output)]);
          d.max_abs = std::max(d.max_abs, td.max_abs);
          d.max_rel = std::max(d.max_rel, td.max_abs / std::max(1e-300, max_magnitude(std::vector{o.ev.outputs[q]})));
        }
      }
      out.insert(out.end(), per_output.begin(), per_output.end());
    }
    return out;
  }

  const Graph& g_;
  const CheckOptions& opt_;
  unsigned bits_ = 0;
  std::map<unsigned, std::map<int, Run>> originals_;  // per precision, per trial
  std::map<int, BoundedRun> bounded_originals_;        // per trial
  std::mutex originals_mutex_;  // guards the two caches above
  std::mutex report_mutex_;     // guards opt.counters and the progress count
  using PlanKey = std::tuple<Mode, std::vector<std::string>, std::vector<CenterTerm>>;
  std::deque<std::pair<PlanKey, ExactMeasurement>> exact_measured_;  // see measure_exact
  std::mutex exact_mutex_;
};

}  // namespace

report::CheckReport check_model(const Graph& g, const CheckOptions& opt, const Detector& detect) {
  LNV_INTERNAL_ASSERT(g.finalized(), "check_model needs a finalized graph");
  LNV_INTERNAL_ASSERT(opt.trials >= 1, "check_model needs at least one trial");
  return Checker(g, opt).run(detect);
}

}  // namespace lnv::check
