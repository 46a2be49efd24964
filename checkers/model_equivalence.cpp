// `lnverify equiv` (model_equivalence.h): the interface check, the shared trials, and each
// quantity judged by judge_agreement at its precision.
#include "checkers/model_equivalence.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "checkers/agreement.h"
#include "checkers/equivalence.h"
#include "core/error.h"
#include "core/eval/evaluator.h"
#include "core/model_json.h"
#include "core/random.h"

namespace lnv::check {

using eval::Mpfr;
using report::EquivQuantity;
using report::EquivReport;
using report::ErrorAccumulator;
using report::Outcome;
using report::WorstElement;

namespace {

std::string dtype_text(const Input& in) {
  return in.dtype == DType::float_ ? "float" : "index (range " + std::to_string(in.range) + ")";
}

bool is_input(const Graph& g, const std::string& name) {
  return g.has(name) && g.ref(name).kind == ValueRef::Kind::input;
}

// The names outputs are paired by. An imported graph names an output after the node
// computing it and keeps the file's graph output name in meta.onnx.outputs (file name ->
// output); a fold written back to ONNX replaces a norm's nodes but keeps the file's output
// names. So two models imported from ONNX pair by the files' output names, any other pair
// by the outputs' own names.
std::vector<std::string> file_output_names(const Graph& g) {
  const nlohmann::json meta = parse_meta(g);
  if (!meta.contains("onnx") || !meta["onnx"].contains("outputs") ||
      !meta["onnx"]["outputs"].is_object())
    return {};
  std::vector<std::string> keys(g.outputs.size());
  for (const auto& [file_name, output] : meta["onnx"]["outputs"].items())
    for (size_t q = 0; q < g.outputs.size(); ++q)
      if (output.is_string() && output.get<std::string>() == g.outputs[q]) keys[q] = file_name;
  for (const std::string& k : keys)
    if (k.empty()) return {};
  return keys;
}
struct OutputKeys {
  std::vector<std::string> a, b;
};
OutputKeys output_keys(const Graph& a, const Graph& b) {
  OutputKeys k{file_output_names(a), file_output_names(b)};
  if (k.a.empty() || k.b.empty()) k = {a.outputs, b.outputs};
  return k;
}
int position(const std::vector<std::string>& keys, const std::string& key) {
  for (size_t q = 0; q < keys.size(); ++q)
    if (keys[q] == key) return static_cast<int>(q);
  return -1;
}

// The dropout nodes of g by name, with their output shapes.
std::map<std::string, Shape> dropouts(const Graph& g) {
  std::map<std::string, Shape> out;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == Op::dropout) out.emplace(g.nodes[i].name, g.node_shapes[i]);
  return out;
}

void require_same_inputs(const Graph& a, const std::string& an, const Graph& b, const std::string& bn) {
  for (const Input& in : a.inputs) {
    const std::string where = "input '" + in.name + "'";
    if (!is_input(b, in.name))
      throw ModelError(where, an + " has this input, " + bn + " does not: equiv compares models "
                              "with the same inputs by name");
    const Input& other = b.inputs[b.ref(in.name).index];
    if (in.shape != other.shape)
      throw ModelError(where, an + " has shape " + to_string(in.shape) + ", " + bn + " " +
                                  to_string(other.shape));
    if (in.dtype != other.dtype || in.range != other.range)
      throw ModelError(where, an + " has dtype " + dtype_text(in) + ", " + bn + " " + dtype_text(other));
  }
  for (const Input& in : b.inputs)
    if (!is_input(a, in.name))
      throw ModelError("input '" + in.name + "'", bn + " has this input, " + an + " does not: "
                       "equiv compares models with the same inputs by name");
}

void require_same_outputs(const Graph& a, const std::string& an, const Graph& b, const std::string& bn) {
  const OutputKeys keys = output_keys(a, b);
  for (size_t q = 0; q < a.outputs.size(); ++q) {
    const std::string where = "output '" + keys.a[q] + "'";
    const int p = position(keys.b, keys.a[q]);
    if (p < 0)
      throw ModelError(where, an + " has this output, " + bn + " does not: equiv compares "
                              "models with the same outputs by name");
    const Shape& sa = a.shape_of(a.output_refs[q]);
    const Shape& sb = b.shape_of(b.output_refs[p]);
    if (sa != sb)
      throw ModelError(where, an + " has shape " + to_string(sa) + ", " + bn + " " + to_string(sb));
  }
  for (const std::string& o : keys.b)
    if (position(keys.a, o) < 0)
      throw ModelError("output '" + o + "'", bn + " has this output, " + an + " does not: "
                       "equiv compares models with the same outputs by name");
}

// Training-mode masks are the streams of the dropout nodes' names (docs/spec/decisions.md).
void require_paired_dropouts(const Graph& a, const std::string& an, const Graph& b, const std::string& bn) {
  const auto da = dropouts(a), db = dropouts(b);
  auto pair_up = [](const std::map<std::string, Shape>& from, const std::string& fn,
                    const std::map<std::string, Shape>& to, const std::string& tn) {
    for (const auto& [name, shape] : from) {
      const std::string where = "dropout '" + name + "'";
      const auto it = to.find(name);
      if (it == to.end())
        throw ModelError(where, fn + " has this dropout, " + tn + " has no dropout of that "
                                "name: in training mode the masks are shared by dropout node "
                                "name, so every dropout needs a same-named one in the other model");
      if (it->second != shape)
        throw ModelError(where, fn + " masks shape " + to_string(shape) + ", " + tn + " " +
                                    to_string(it->second) + ": a shared mask needs one shape");
    }
  };
  pair_up(da, an, db, bn);
  pair_up(db, bn, da, an);
}

// The params of g not stored identically in other (by name, shape and values): the
// weights that may have been rounded between them (a fold's centered weights, a re-export
// in another float type), params only g has included.
std::vector<size_t> differing_params(const Graph& g, const Graph& other) {
  std::vector<size_t> out;
  for (size_t i = 0; i < g.params.size(); ++i) {
    const Param& p = g.params[i];
    const bool same = other.has(p.name) && other.ref(p.name).kind == ValueRef::Kind::param &&
                      [&] {
                        const Param& q = other.params[static_cast<size_t>(other.param_index(p.name))];
                        return q.shape == p.shape && q.values == p.values;
                      }();
    if (!same) out.push_back(i);
  }
  return out;
}

// The least stored_bits among the differing params of both models, or 0 when there is
// none: the two store the same weights, and no weight was rounded between them.
unsigned rounded_weight_bits(const Graph& a, const std::vector<size_t>& diff_a, const Graph& b,
                             const std::vector<size_t>& diff_b) {
  int bits = 0;
  for (const auto& [g, diff] : {std::pair{&a, &diff_a}, std::pair{&b, &diff_b}})
    for (size_t i : *diff) {
      const int p = g->params[i].stored_bits;
      bits = bits == 0 ? p : std::min(bits, p);
    }
  return static_cast<unsigned>(bits);
}

std::string float_type_of(unsigned bits) {
  switch (bits) {
    case 53: return "double";
    case 24: return "float32";
    case 11: return "float16";
    case 8: return "bfloat16";
    default: return std::to_string(bits) + "-bit";
  }
}

double to_double(const Mpfr& x) { return x.convert_to<double>(); }

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// The largest finite |value| in a list of tensors (an infinite one, e.g. a -inf attention
// mask, is judged where it reaches a compared quantity, not here).
double max_finite_magnitude(const std::vector<Tensor<Mpfr>>& ts) {
  double m = 0.0;
  for (const Tensor<Mpfr>& t : ts)
    for (const Mpfr& v : t.data) {
      const double x = std::fabs(to_double(v));
      if (std::isfinite(x)) m = std::max(m, x);
    }
  return m;
}

Shape unflatten(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  return index;
}

// One compared quantity: where it sits in each model's evaluation.
struct Quantity {
  std::string name;
  Shape shape;
  bool gradient = false;
  int a = 0, b = 0;  // output index, or input (param) index for a gradient
  bool param = false;  // a gradient with respect to a param, not an input
};

// The weight-storage allowance of a quantity is kStorageMargin times the largest change
// kStorageDraws random perturbations of the differing params' storage cause in either
// model (docs/spec/decisions.md, "Equal up to weight storage"), plus the rounding bound.
constexpr int kStorageDraws = 2;
constexpr double kStorageMargin = 16.0;

// The compared tensors of one trial, per quantity, of each model.
struct Values {
  std::vector<Tensor<Mpfr>> a, b;
};

// Every quantity compared at one precision over all trials.
struct Measurement {
  struct PerQuantity {
    ErrorAccumulator acc;
    bool finite = true;
    double max_abs = 0.0;
    WorstElement worst;
  };
  std::vector<PerQuantity> q;
  double scale = 1.0;
  double bound = 0.0;
  std::vector<Values> per_trial;
  // Per quantity, the largest change the storage perturbations caused in A or B; measured
  // when a quantity first needs the allowance.
  std::optional<std::vector<double>> sensitivity;
};

class Runner {
 public:
  Runner(const Graph& a, const Graph& b, const EquivOptions& opt)
      : a_(a), b_(b), opt_(opt), diff_a_(differing_params(a, b)), diff_b_(differing_params(b, a)),
        rounded_bits_(rounded_weight_bits(a, diff_a_, b, diff_b_)),
        same_weights_(rounded_bits_ == 0),
        weight_bits_(opt.weight_bits != 0 ? opt.weight_bits : rounded_bits_) {
    const OutputKeys keys = output_keys(a, b);
    for (size_t q = 0; q < a.outputs.size(); ++q)
      quantities_.push_back({"output '" + a.outputs[q] + "'", a.shape_of(a.output_refs[q]),
                             false, static_cast<int>(q), position(keys.b, keys.a[q])});
    if (!opt.grad) return;
    for (size_t i = 0; i < a.inputs.size(); ++i)
      if (a.inputs[i].dtype == DType::float_)
        quantities_.push_back({"gradient of input '" + a.inputs[i].name + "'", a.inputs[i].shape,
                               true, static_cast<int>(i), b.ref(a.inputs[i].name).index});
    if (!opt.grad_params) return;
    for (size_t i = 0; i < a.params.size(); ++i) {
      const Param& p = a.params[i];
      if (!b.has(p.name) || b.ref(p.name).kind != ValueRef::Kind::param) continue;
      const int j = b.ref(p.name).index;
      if (b.params[j].shape == p.shape)
        quantities_.push_back({"gradient of param '" + p.name + "'", p.shape, true,
                               static_cast<int>(i), j, true});
    }
  }

  EquivReport run() {
    Precision precision(opt_.bits);
    EquivReport rep;
    rep.a = opt_.a_name;
    rep.b = opt_.b_name;
    rep.mode = opt_.mode;
    rep.bits = eval::mpfr_bits();
    rep.trials = opt_.trials;
    rep.seed = opt_.seed;
    rep.grad = opt_.grad;
    rep.weight_bits = opt_.strict || same_weights_ ? 0 : weight_bits_;
    rep.weight_storage = opt_.strict       ? "none (--strict)"
                         : same_weights_   ? "none (A and B store the same weights)"
                         : (opt_.weight_bits ? std::to_string(weight_bits_) + " bits (--weight-bits)"
                                             : std::to_string(weight_bits_) + " bits (the " +
                                                   float_type_of(weight_bits_) +
                                                   " storage of the weights that differ)") +
                               "; measured: " + sci(kStorageMargin) + " × the largest change of " +
                               std::to_string(kStorageDraws) + " random 2^-" +
                               std::to_string(weight_bits_) + " perturbations of the " +
                               std::to_string(diff_a_.size() + diff_b_.size()) + " differing params";
    if (opt_.mode == Mode::training)
      for (const auto& [name, shape] : dropouts(a_)) rep.dropouts.push_back(name);
    for (size_t i = 0; i < quantities_.size(); ++i) rep.quantities.push_back(judge(i));
    return rep;
  }

 private:
  EquivQuantity judge(size_t i) {
    const Agreement ag = judge_agreement(opt_.bits, "A or B", [&] {
      const Measurement& m = at_current_precision();
      const Measurement::PerQuantity& q = m.q[i];
      return Measured{q.finite, q.max_abs, m.bound, m.scale, q.max_abs / m.bound};
    });
    Measurement& m = measurements_.at(ag.bits);
    Measurement::PerQuantity& q = m.q[i];
    EquivQuantity out;
    out.stats = q.acc.stats(quantities_[i].name, m.bound, ag.bits);
    out.shape = quantities_[i].shape;
    out.outcome = ag.outcome;
    out.detail = ag.detail;
    if (ag.outcome != Outcome::fails) return out;
    // A stable difference within what storing the weights that differ at the precision
    // they are stored in causes (a fold's centered weights saved in double, or in an ONNX
    // file's float32), measured, is equal up to weight storage; models that store the same
    // weights have no such rounding between them.
    const bool storage_allowed = !opt_.strict && !same_weights_;
    double sensitivity = 0.0;
    if (storage_allowed) {
      sensitivity = storage_sensitivity(m, ag.bits)[i];
      out.storage_bound = kStorageMargin * sensitivity + m.bound;
    }
    if (storage_allowed && q.max_abs <= out.storage_bound) {
      out.outcome = Outcome::holds;
      out.up_to_weight_storage = true;
      out.detail = "the difference " + sci(q.max_abs) + " stays at twice the precision (above "
                   "the rounding bound " + sci(m.bound) + ") but is within " +
                   sci(out.storage_bound) + " = " + sci(kStorageMargin) + " × " + sci(sensitivity) +
                   " (the largest change measured for the differing weights perturbed at " +
                   std::to_string(weight_bits_) + " bits) + the rounding bound: equal up to "
                   "weight storage (--strict: different)";
      return out;
    }
    out.worst = q.worst;
    out.detail = quantities_[i].name + " differs by up to " + sci(q.max_abs) + " (relative " +
                 sci(out.stats.max_rel) + "), " + sci(q.max_abs / m.bound) +
                 " times the rounding bound, stable at twice the precision" +
                 (storage_allowed ? ", and above the bound for rounded weights (" +
                                        sci(out.storage_bound) + " = " + sci(kStorageMargin) +
                                        " × the measured " + sci(sensitivity) +
                                        " + the rounding bound)"
                  : same_weights_ ? " (both models store the same weights)"
                                  : "");
    return out;
  }

  Measurement& at_current_precision() {
    const unsigned bits = eval::mpfr_bits();
    auto it = measurements_.find(bits);
    if (it == measurements_.end()) it = measurements_.emplace(bits, measure()).first;
    return it->second;
  }

  // B's inputs: A's random inputs of a trial, by name.
  std::vector<Tensor<Mpfr>> inputs_of_b(const std::vector<Tensor<Mpfr>>& in_a) const {
    std::vector<Tensor<Mpfr>> in_b;
    for (const Input& in : b_.inputs) in_b.push_back(in_a[a_.ref(in.name).index]);
    return in_b;
  }

  Measurement measure() {
    Measurement m;
    m.q.resize(quantities_.size());
    std::vector<Values>& per_trial = m.per_trial;
    for (int k = 0; k < opt_.trials; ++k) {
      const uint64_t seed = opt_.seed + static_cast<uint64_t>(k);
      const eval::RunOptions ro{opt_.mode, seed};
      std::vector<Tensor<Mpfr>> in_a = eval::random_inputs<Mpfr>(a_, seed);
      std::vector<Tensor<Mpfr>> in_b = inputs_of_b(in_a);
      const eval::Evaluation<Mpfr> ea = eval::evaluate(a_, std::move(in_a), ro);
      const eval::Evaluation<Mpfr> eb = eval::evaluate(b_, std::move(in_b), ro);
      m.scale = std::max({m.scale, max_finite_magnitude(ea.nodes), max_finite_magnitude(eb.nodes),
                          max_finite_magnitude(ea.inputs)});
      Values v;
      for (const Quantity& q : quantities_) {
        if (q.gradient) continue;
        v.a.push_back(ea.outputs[q.a]);
        v.b.push_back(eb.outputs[q.b]);
      }
      if (opt_.grad) {
        // One loss for both: B's outputs get the cotangents of the A outputs they pair with.
        const std::vector<Tensor<Mpfr>> ra = eval::loss_cotangents<Mpfr>(a_, seed);
        std::vector<Tensor<Mpfr>> rb(b_.outputs.size());
        for (const Quantity& q : quantities_)
          if (!q.gradient) rb[q.b] = ra[q.a];
        const eval::Gradients<Mpfr> ga = eval::gradients(a_, ea, ro, ra);
        const eval::Gradients<Mpfr> gb = eval::gradients(b_, eb, ro, rb);
        m.scale = std::max({m.scale, max_finite_magnitude(ga.inputs), max_finite_magnitude(gb.inputs)});
        for (const Quantity& q : quantities_) {
          if (!q.gradient) continue;
          v.a.push_back(q.param ? ga.params[q.a] : ga.inputs[q.a]);
          v.b.push_back(q.param ? gb.params[q.b] : gb.inputs[q.b]);
          if (q.param)
            m.scale = std::max({m.scale, max_finite_magnitude({v.a.back()}), max_finite_magnitude({v.b.back()})});
        }
      }
      per_trial.push_back(std::move(v));
    }
    m.bound = std::max(rounding_bound(a_, eval::mpfr_bits(), m.scale),
                       rounding_bound(b_, eval::mpfr_bits(), m.scale));
    for (int k = 0; k < opt_.trials; ++k)
      for (size_t i = 0; i < quantities_.size(); ++i)
        add(m.q[i], per_trial[k].a[i], per_trial[k].b[i], k, quantities_[i].shape);
    if (opt_.strict || same_weights_) per_trial.clear();  // kept for storage_sensitivity only
    return m;
  }

  void add(Measurement::PerQuantity& q, const Tensor<Mpfr>& a, const Tensor<Mpfr>& b, int trial,
           const Shape& shape) const {
    LNV_INTERNAL_ASSERT(a.shape == b.shape, "equiv: compared quantities differ in shape");
    for (int64_t e = 0; e < a.size(); ++e) {
      const Mpfr& x = a.data[e];
      const Mpfr& y = b.data[e];
      if (!boost::multiprecision::isfinite(x) || !boost::multiprecision::isfinite(y)) {
        q.acc.add(INFINITY, INFINITY, INFINITY);
        q.finite = false;
        continue;
      }
      const double d = to_double(Mpfr(abs(x - y)));
      q.acc.add(to_double(x), to_double(y), d);
      if (d > q.max_abs) {
        q.max_abs = d;
        q.worst = {trial, opt_.seed + static_cast<uint64_t>(trial), e, unflatten(e, shape),
                   to_double(x), to_double(y)};
      }
    }
  }

  // The largest change, per quantity, of kStorageDraws evaluations of A and of B on each
  // trial's inputs (and dropout masks) with every differing param perturbed as storage
  // rounding perturbs it: w' = w·(1 + u·2^-weight_bits), u uniform in [-1, 1) per element
  // from the stream "<param>#storage#<draw>" under the trial's run seed (format.md,
  // "Random numbers"). Measured at `bits`, the precision of m, once per measurement.
  const std::vector<double>& storage_sensitivity(Measurement& m, unsigned bits) {
    if (m.sensitivity) return *m.sensitivity;
    Precision precision(bits);
    std::vector<double> s(quantities_.size(), 0.0);
    const Mpfr step = boost::multiprecision::ldexp(Mpfr(1), -static_cast<int>(weight_bits_));
    for (int k = 0; k < opt_.trials; ++k) {
      const uint64_t seed = opt_.seed + static_cast<uint64_t>(k);
      const eval::RunOptions ro{opt_.mode, seed};
      const std::vector<Tensor<Mpfr>> in_a = eval::random_inputs<Mpfr>(a_, seed);
      // The same loss as measure(): B's outputs get the cotangents of the A outputs they pair with.
      std::vector<Tensor<Mpfr>> ra, rb;
      if (opt_.grad) {
        ra = eval::loss_cotangents<Mpfr>(a_, seed);
        rb.resize(b_.outputs.size());
        for (const Quantity& q : quantities_)
          if (!q.gradient) rb[q.b] = ra[q.a];
      }
      for (const bool is_a : {true, false}) {
        const Graph& g = is_a ? a_ : b_;
        const std::vector<size_t>& differing = is_a ? diff_a_ : diff_b_;
        const std::vector<Tensor<Mpfr>> inputs = is_a ? in_a : inputs_of_b(in_a);
        const std::vector<Tensor<Mpfr>> stored = eval::param_values<Mpfr>(g);
        const std::vector<Tensor<Mpfr>>& base = is_a ? m.per_trial[k].a : m.per_trial[k].b;
        for (int r = 0; r < kStorageDraws; ++r) {
          std::vector<Tensor<Mpfr>> perturbed = stored;
          for (size_t p : differing) {
            SplitMix64 stream(seed, g.params[p].name + "#storage#" + std::to_string(r));
            for (Mpfr& w : perturbed[p].data) w *= 1 + (2 * Mpfr(stream.uniform()) - 1) * step;
          }
          const eval::Evaluation<Mpfr> ev = eval::evaluate_with_params(g, inputs, perturbed, ro);
          std::optional<eval::Gradients<Mpfr>> gr;
          if (opt_.grad) gr = eval::gradients(g, ev, ro, is_a ? ra : rb);
          for (size_t i = 0; i < quantities_.size(); ++i) {
            const Quantity& q = quantities_[i];
            const int at = is_a ? q.a : q.b;
            const Tensor<Mpfr>& t = !q.gradient ? ev.outputs[at] : q.param ? gr->params[at] : gr->inputs[at];
            for (int64_t e = 0; e < t.size(); ++e) {
              const double d = to_double(Mpfr(abs(t.data[e] - base[i].data[e])));
              if (std::isfinite(d)) s[i] = std::max(s[i], d);
            }
          }
        }
      }
    }
    return *(m.sensitivity = std::move(s));
  }

  const Graph& a_;
  const Graph& b_;
  const EquivOptions& opt_;
  const std::vector<size_t> diff_a_, diff_b_;  // differing_params(a, b), (b, a)
  const unsigned rounded_bits_;  // rounded_weight_bits
  const bool same_weights_;
  const unsigned weight_bits_;   // of the allowance: opt.weight_bits, else rounded_bits_
  std::vector<Quantity> quantities_;
  std::map<unsigned, Measurement> measurements_;  // per precision
};

}  // namespace

void require_same_interface(const Graph& a, const std::string& a_name, const Graph& b,
                            const std::string& b_name, Mode mode) {
  require_same_inputs(a, a_name, b, b_name);
  require_same_outputs(a, a_name, b, b_name);
  if (mode == Mode::training) require_paired_dropouts(a, a_name, b, b_name);
}

report::EquivReport equiv_models(const Graph& a, const Graph& b, const EquivOptions& opt) {
  LNV_INTERNAL_ASSERT(a.finalized() && b.finalized(), "equiv_models needs finalized graphs");
  LNV_INTERNAL_ASSERT(opt.trials >= 1, "equiv_models needs at least one trial");
  return Runner(a, b, opt).run();
}

}  // namespace lnv::check
