// apply_fold (docs/spec/semantics.md, "The rewrite"): applies a FoldPlan exactly as
// written (no re-verification), so that checkers can also apply forced plans and watch
// them fail.
//
// inference: every centered param use reads a param whose effective value is centered
//   (Param::center_axes) or zeroed (a `remove` term). A param is changed in place when
//   all of its uses want the same centering; otherwise each wanted centering gets an
//   untied copy "<param>.centered" (".centered.2", ...) and raw uses keep the original.
// training: every stored param is kept; producers get `cbwc: true`, param terms are read
//   through a new `center` node (a `scale` by 0 for a removed term), and a norm whose bias
//   is a term is split: the norm (renamed "<norm>.nobias") loses its bias and an `add` of
//   the centered bias, which takes the norm's name, follows.
// A LayerScale term (a producer term naming a `mul`, core/analysis/producers.h): in
//   inference its producer's weight and the chain's biases take γ (Param::scale, then
//   centered as the producer's own CBWC centers them) and the mul becomes a `scale` by 1,
//   keeping its name; in training the mul (renamed "<mul>.unscaled") is followed by a
//   `center` over its feature axis that takes its name: C(γ ⊙ (Wx + b)) is
//   (C·diag(γ)·W)x + C(γ ⊙ b), computed from the stored γ, W and b.
// Both: every LN named in plan.fold becomes an rms_norm with the same eps, weight, bias;
//   then each whose bias moves (LnVerdict::bias) loses it, and each reader R becomes
//   "<R>.own" followed by add(R.own, R.moved_bias), named R, with R.moved_bias = W·β computed
//   in the graph from the norm's bias and the reader's weight (as centered, or `cbwc`);
//   each producer a residual add sums with the norm (BiasMove::residual) likewise, with
//   R.moved_bias = β reshaped to [C].
#include <algorithm>
#include <map>
#include <set>

#include "core/analysis/fold_plan.h"
#include "core/analysis/producers.h"
#include "core/error.h"
#include "core/model_json.h"

namespace lnv {
namespace {

// One use of a param by a node: an attribute ("weight", "norm/bias") or "inputs/k".
struct Use {
  int32_t node;
  std::string slot;
  bool operator<(const Use& o) const { return std::tie(node, slot) < std::tie(o.node, o.slot); }
};

// What a use wants: centering over `axes`, or zeroing; with `scale`, multiplied first by
// that LayerScale param along axes[0].
struct Centering {
  Axes axes;
  bool remove = false;
  std::string scale;
  bool operator<(const Centering& o) const {
    return std::tie(remove, axes, scale) < std::tie(o.remove, o.axes, o.scale);
  }
  bool operator==(const Centering& o) const = default;
};

std::string* slot_ref(Node& n, const std::string& slot) {
  if (slot.rfind("inputs/", 0) == 0) {
    const size_t k = std::stoul(slot.substr(7));
    return k < n.inputs.size() ? &n.inputs[k] : nullptr;
  }
  if (slot == "weight") return &n.weight;
  if (slot == "bias") return &n.bias;
  if (slot == "weight_ih") return &n.weight_ih;
  if (slot == "weight_hh") return &n.weight_hh;
  if (slot == "wq") return &n.wq;
  if (slot == "wk") return &n.wk;
  if (slot == "wv") return &n.wv;
  if (slot == "wo") return &n.wo;
  if (slot == "bq") return &n.bq;
  if (slot == "bk") return &n.bk;
  if (slot == "bv") return &n.bv;
  if (slot == "bo") return &n.bo;
  if (n.norm && slot == "norm/weight") return &n.norm->weight;
  if (n.norm && slot == "norm/bias") return &n.norm->bias;
  return nullptr;
}

class Rewriter {
 public:
  // `g` is read for structure (names, shapes, references), never for param values; `out`
  // is the graph rewritten (a copy of g, or g itself moved in).
  Rewriter(const Graph& g, const FoldPlan& plan, Graph out)
      : g_(g), plan_(plan), out_(std::move(out)) {}

  Graph run() {
    swap_norms();
    if (plan_.mode == Mode::inference) center_inference();
    else center_training();
    move_biases();  // after the centering: the moved term reads the weights as centered
    out_.finalize();
    return std::move(out_);
  }

 private:
  const Graph& g_;
  const FoldPlan& plan_;
  Graph out_;
  std::set<std::string> added_;  // the names the rewrite gave, besides g's

  // Whether `name` names an input, param or node of g (finalized: its index has them all)
  // or was given by the rewrite.
  bool taken(const std::string& name) const { return g_.has(name) || added_.count(name); }

  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int k = 2; taken(name); ++k) name = base + "." + std::to_string(k);
    added_.insert(name);
    return name;
  }

  int32_t node_of(const std::string& name, const char* what) const {
    if (!g_.has(name) || g_.ref(name).kind != ValueRef::Kind::node)
      throw ModelError(name, std::string("the fold plan names ") + what + " '" + name +
                                 "', which is not a node of the model");
    return g_.ref(name).index;
  }

  void swap_norms() {
    for (const std::string& name : plan_.fold) {
      if (g_.has(name) && g_.ref(name).kind == ValueRef::Kind::node) {
        Node& n = out_.nodes[g_.ref(name).index];
        if (n.op != Op::layer_norm)
          throw ModelError(name, "the fold plan folds '" + name + "', which is not a layer_norm");
        n.op = Op::rms_norm;
        continue;
      }
      const std::string suffix = ".norm";
      const std::string rnn = name.size() > suffix.size() &&
                                      name.compare(name.size() - suffix.size(), suffix.size(),
                                                   suffix) == 0
                                  ? name.substr(0, name.size() - suffix.size())
                                  : std::string();
      const int32_t i = node_of(rnn.empty() ? name : rnn, "LayerNorm");
      Node& n = out_.nodes[i];
      if (n.op != Op::rnn || !n.norm)
        throw ModelError(name, "the fold plan folds '" + name + "', which is not a LayerNorm");
      n.norm->kind = Op::rms_norm;
    }
  }

  // The param uses a producer's CBWC centers, with the axis of each weight.
  std::vector<std::pair<Use, Centering>> producer_uses(int32_t i) const {
    const Node& n = g_.nodes[i];
    std::vector<std::pair<Use, Centering>> uses;
    auto add = [&](const std::string& slot, int64_t axis) {
      uses.push_back({Use{i, slot}, Centering{{axis}, false, {}}});
    };
    if (n.op == Op::matmul) {
      const MatmulCentering mc = cbwc_matmul_operand(g_, i);
      add("inputs/" + std::to_string(mc.operand), mc.axis);
    } else if (is_weighted(n.op)) {
      for (const auto& [attr, param] : n.param_attrs())
        if (const int64_t axis = cbwc_attr_axis(n.op, attr); axis >= 0) add(attr, axis);
    } else {
      throw ModelError(n.name, "the fold plan centers '" + n.name + "' (" +
                                   std::string(op_name(n.op)) + "), which is not a producer");
    }
    return uses;
  }

  // --- LayerScale ---------------------------------------------------------------------

  analysis::LayerScale layer_scale(int32_t i) const {
    const auto ls = analysis::layer_scale_of(g_, i);
    if (!ls)
      throw ModelError(g_.nodes[i].name, "the fold plan centers '" + g_.nodes[i].name +
                                             "' (mul), which is not a LayerScale of a producer");
    return *ls;
  }

  // The param uses a LayerScale's fold changes: its producer's CBWC uses and the chain's
  // biases, each multiplied by γ along its feature axis before centering.
  std::vector<std::pair<Use, Centering>> layer_scale_uses(const analysis::LayerScale& ls) const {
    const std::string gamma = g_.nodes[ls.mul].inputs[size_t(ls.gamma)];
    std::vector<std::pair<Use, Centering>> uses = producer_uses(ls.producer);
    for (auto& [use, c] : uses) c.scale = gamma;
    for (const auto& b : ls.biases)
      uses.push_back({Use{b.node, "inputs/" + std::to_string(b.operand)}, Centering{{b.axis}, false, gamma}});
    return uses;
  }

  // Inference: γ now lives in the weights; the mul becomes the identity `scale 1`.
  void drop_layer_scale(const analysis::LayerScale& ls) {
    Node& n = out_.nodes[ls.mul];
    const std::string y = n.inputs[size_t(1 - ls.gamma)];
    n.op = Op::scale;
    n.factor = 1.0;
    n.inputs = {y};
  }

  // Training: mul(γ, y) -> center(mul.unscaled(γ, y)) over the feature axis, the center
  // taking the mul's name.
  void center_layer_scale(const analysis::LayerScale& ls) {
    Node& n = out_.nodes[ls.mul];
    const std::string name = n.name;
    n.name = fresh(name + ".unscaled");
    Node c;
    c.name = name;
    c.op = Op::center;
    c.inputs = {n.name};
    c.axes = {ls.feature};
    out_.nodes.push_back(c);
  }

  // The values of each LayerScale γ the plan folds, read before any param changes.
  std::map<std::string, std::vector<double>> gamma_values(const std::map<Use, Centering>& wanted) {
    std::map<std::string, std::vector<double>> out;
    for (const auto& [use, c] : wanted) {
      if (c.scale.empty() || out.count(c.scale)) continue;
      Param p = out_.params[g_.param_index(c.scale)];
      if (p.values_deferred) materialize_values(p, out_.base_dir);
      out[c.scale] = effective_values(p);
    }
    return out;
  }

  void center_inference() {
    std::map<Use, Centering> wanted;
    std::vector<analysis::LayerScale> scales;
    for (const CenterTerm& t : plan_.center) {
      const int32_t i = node_of(t.node, "term");
      if (t.kind == CenterTerm::Kind::producer && g_.nodes[i].op == Op::mul) {
        scales.push_back(layer_scale(i));
      } else if (t.kind == CenterTerm::Kind::producer) {
        for (const auto& [use, c] : producer_uses(i)) wanted[use] = c;
      } else {
        // The same use wanted over nested axis sets: the smallest zeroes every mean.
        const Centering c{t.axes, t.remove, {}};
        auto [it, inserted] = wanted.emplace(Use{i, t.slot}, c);
        if (!inserted && (c.remove || std::includes(it->second.axes.begin(), it->second.axes.end(),
                                                    c.axes.begin(), c.axes.end())))
          it->second = c;
      }
    }
    // A LayerScale's producer also centered on its own (a forced fold may ask for both):
    // the LayerScale's centering wins, as the mul it rewrites reads the scaled producer.
    for (const analysis::LayerScale& ls : scales)
      for (const auto& [use, c] : layer_scale_uses(ls)) wanted[use] = c;
    // Every use of every param, grouped by param.
    std::map<std::string, std::vector<Use>> uses_of;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      for (const auto& [attr, pname] : n.param_attrs()) uses_of[pname].push_back({int32_t(i), attr});
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (g_.node_inputs[i][k].kind == ValueRef::Kind::param)
          uses_of[n.inputs[k]].push_back({int32_t(i), "inputs/" + std::to_string(k)});
    }
    for (const auto& [use, c] : wanted)
      if (slot_ref(out_.nodes[use.node], use.slot) == nullptr)
        throw ModelError(g_.nodes[use.node].name, "the fold plan names slot '" + use.slot +
                                                      "', which node '" +
                                                      g_.nodes[use.node].name + "' lacks");
    gammas_ = gamma_values(wanted);
    for (const auto& [pname, uses] : uses_of) {
      std::set<Centering> variants;
      bool raw = false;
      for (const Use& u : uses) {
        auto it = wanted.find(u);
        if (it == wanted.end()) raw = true;
        else variants.insert(it->second);
      }
      if (variants.empty()) continue;
      const int pi = g_.param_index(pname);
      if (!raw && variants.size() == 1) {
        centered(out_.params[pi], *variants.begin());
        continue;
      }
      for (const Centering& c : variants) {
        Param copy = out_.params[pi];  // still raw: a shared param is not centered in place
        copy.name = fresh(pname + ".centered");
        centered(copy, c);
        for (const Use& u : uses) {
          auto it = wanted.find(u);
          if (it != wanted.end() && it->second == c) *slot_ref(out_.nodes[u.node], u.slot) = copy.name;
        }
        out_.params.push_back(std::move(copy));
      }
    }
    for (const analysis::LayerScale& ls : scales) drop_layer_scale(ls);
  }

  std::map<std::string, std::vector<double>> gammas_;

  void centered(Param& p, const Centering& c) const {
    // A deferred param (values not loaded) is centered by save_model as it streams it;
    // only a second centering needs its values now. A removed one needs none.
    if (p.values_deferred && c.remove) {
      p.values_deferred = false;
      p.lazy.reset();
      p.center_axes.clear();
      p.values.assign(static_cast<size_t>(numel(p.shape)), 0.0);
      p.source = ParamSource::data;
      return;
    }
    const bool changed = !p.center_axes.empty() || !p.scale.empty();
    if (p.values_deferred && (changed || !c.scale.empty())) materialize_values(p, out_.base_dir);
    if (changed) {
      p.values = effective_values(p);
      p.center_axes.clear();
      p.scale.clear();
      p.scale_param.clear();
      p.source = ParamSource::data;
    }
    if (c.remove) {
      std::fill(p.values.begin(), p.values.end(), 0.0);
      p.source = ParamSource::data;
      return;
    }
    for (int64_t a : c.axes)
      if (a < 0 || a >= int64_t(p.shape.size()))
        throw ModelError(p.name, "the fold plan centers param '" + p.name + "' over axis " +
                                     std::to_string(a) + ", out of range for shape " +
                                     to_string(p.shape));
    if (!c.scale.empty()) {
      p.scale = gammas_.at(c.scale);
      p.scale_axis = c.axes.at(0);
      p.scale_param = c.scale;
      if (int64_t(p.scale.size()) != p.shape[size_t(p.scale_axis)])
        throw ModelError(p.name, "the fold plan scales param '" + p.name + "' by '" + c.scale +
                                     "', whose size does not fit axis " +
                                     std::to_string(p.scale_axis) + " of shape " + to_string(p.shape));
    }
    p.center_axes = c.axes;
  }

  // A node reading `param` centered as `c` (a scale by 0 when removed).
  std::string centered_reader(const std::string& param, const Axes& axes, bool remove) {
    Node c;
    c.inputs = {param};
    if (remove) {
      c.name = fresh(param + ".zero");
      c.op = Op::scale;
      c.factor = 0.0;
    } else {
      c.name = fresh(param + ".center");
      c.op = Op::center;
      c.axes = axes;
    }
    out_.nodes.push_back(c);
    return c.name;
  }

  // The plan's terms, one per producer or param use (nested axis sets: the smallest).
  std::vector<CenterTerm> merged_terms() const {
    std::vector<CenterTerm> out;
    for (const CenterTerm& t : plan_.center) {
      auto same = std::find_if(out.begin(), out.end(), [&](const CenterTerm& h) {
        return h.kind == t.kind && h.node == t.node && h.param == t.param && h.slot == t.slot;
      });
      if (same == out.end()) out.push_back(t);
      else if (t.remove || std::includes(same->axes.begin(), same->axes.end(), t.axes.begin(),
                                         t.axes.end()))
        *same = t;
    }
    return out;
  }

  void center_training() {
    for (const CenterTerm& t : merged_terms()) {
      const int32_t i = node_of(t.node, "term");
      if (t.kind == CenterTerm::Kind::producer && g_.nodes[i].op == Op::mul) {
        center_layer_scale(layer_scale(i));
        continue;
      }
      if (t.kind == CenterTerm::Kind::producer) {
        producer_uses(i);  // validates that it is a producer
        out_.nodes[i].cbwc = true;
        continue;
      }
      if (t.slot == "bias" && (g_.nodes[i].op == Op::layer_norm || g_.nodes[i].op == Op::rms_norm)) {
        split_norm_bias(i, t);
        continue;
      }
      std::string* ref = slot_ref(out_.nodes[i], t.slot);
      if (ref == nullptr || t.slot.rfind("inputs/", 0) != 0)
        throw ModelError(t.node, "the fold plan centers slot '" + t.slot + "' of '" + t.node +
                                     "', which is not an operand");
      *ref = centered_reader(t.param, t.axes, t.remove);
    }
  }

  void move_biases() {
    const std::set<std::string> folded(plan_.fold.begin(), plan_.fold.end());
    for (const LnVerdict& v : plan_.layer_norms) {
      if (!v.bias.moves || !folded.count(v.name)) continue;
      Node& norm = out_.nodes[node_of(v.node, "LayerNorm")];
      if (norm.op != Op::rms_norm || norm.bias.empty())
        throw ModelError(v.name, "the fold plan moves the bias of '" + v.name +
                                     "', which is not a folded norm with a bias");
      const std::string beta = norm.bias;
      norm.bias.clear();
      for (const std::string& r : v.bias.readers) move_into(node_of(r, "bias reader"), beta, false);
      for (const std::string& r : v.bias.residual) move_into(node_of(r, "residual bias producer"), beta, true);
    }
  }

  // reader(y) -> add(reader.own(y), reader.moved_bias(beta)), the add taking the reader's
  // name; moved_bias is W·β for a reader, β itself (a reshape to [C]) for a producer a
  // residual add sums with the norm.
  void move_into(int32_t i, const std::string& beta, bool residual) {
    const Node reader = out_.nodes[i];
    const std::string name = reader.name;
    Node image;
    image.name = moved_bias_image(name);
    if (residual && (reader.op == Op::linear || reader.op == Op::matmul)) {
      image.op = Op::reshape;
      image.inputs = {beta};
      image.shape = {-1};
    } else if (reader.op == Op::linear) {
      image.cbwc = reader.cbwc;
      image.op = Op::linear;
      image.inputs = {beta};
      image.weight = reader.weight;
    } else if (reader.op == Op::matmul && g_.node_inputs[i].size() == 2 &&
               g_.node_inputs[i][1].kind == ValueRef::Kind::param) {
      Node row;
      row.name = image.name + ".row";
      row.op = Op::reshape;
      row.inputs = {beta};
      row.shape = {1, -1};
      out_.nodes.push_back(row);
      image.op = Op::matmul;
      image.inputs = {row.name, reader.inputs[1]};
      image.transpose_b = reader.transpose_b;
      image.cbwc = reader.cbwc;
    } else {
      throw ModelError(name, "the fold plan moves a bias into '" + name + "' (" +
                                 std::string(op_name(reader.op)) +
                                 "), which is not a linear or a matmul with a param weight");
    }
    for (const std::string& n : {moved_bias_own(name), image.name})
      if (taken(n)) throw ModelError(name, "the moved bias needs the name '" + n + "', which is taken");
    out_.nodes[i].name = moved_bias_own(name);
    added_.insert(out_.nodes[i].name);
    added_.insert(image.name);
    Node add;
    add.name = name;
    add.op = Op::add;
    add.inputs = {moved_bias_own(name), image.name};
    out_.nodes.push_back(image);
    out_.nodes.push_back(add);
  }

  // norm(x, bias=b) -> add(norm.nobias(x), center(b)), the add taking the norm's name.
  void split_norm_bias(int32_t i, const CenterTerm& t) {
    Node& norm = out_.nodes[i];
    const std::string name = norm.name;
    const std::string bias = norm.bias;
    norm.name = fresh(name + ".nobias");
    norm.bias.clear();
    std::string addend = centered_reader(bias, t.axes, t.remove);
    // The bias lies on the norm's axes; broadcast it explicitly unless they are trailing.
    const Shape& xs = g_.node_shapes[i];
    const Axes na = normalize_axes(g_.nodes[i].axes, int64_t(xs.size()), name);
    bool trailing = true;
    for (size_t k = 0; k < na.size(); ++k)
      trailing = trailing && na[k] == int64_t(xs.size() - na.size() + k);
    if (!trailing) {
      Node r;
      r.name = fresh(bias + ".broadcast");
      r.op = Op::reshape;
      r.inputs = {addend};
      r.shape.assign(xs.size(), 1);
      for (int64_t a : na) r.shape[a] = xs[a];
      out_.nodes.push_back(r);
      addend = r.name;
    }
    Node add;
    add.name = name;
    add.op = Op::add;
    add.inputs = {out_.nodes[i].name, addend};
    out_.nodes.push_back(add);
  }
};

}  // namespace

Graph apply_fold(const Graph& g, const FoldPlan& plan) {
  LNV_INTERNAL_ASSERT(g.finalized(), "apply_fold needs a finalized graph");
  return Rewriter(g, plan, g).run();
}

Graph apply_fold(Graph&& g, const FoldPlan& plan) {
  LNV_INTERNAL_ASSERT(g.finalized(), "apply_fold needs a finalized graph");
  // The rewriter reads structure from a copy without param values and rewrites g itself,
  // so the values are never copied (the centered copies of shared params aside).
  std::vector<std::vector<double>> values(g.params.size());
  for (size_t i = 0; i < g.params.size(); ++i) values[i] = std::move(g.params[i].values);
  const Graph structure = g;
  for (size_t i = 0; i < g.params.size(); ++i) g.params[i].values = std::move(values[i]);
  return Rewriter(structure, plan, std::move(g)).run();
}

}  // namespace lnv
