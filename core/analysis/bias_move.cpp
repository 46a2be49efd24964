// plan_bias_moves (fold_plan.h, docs/spec/semantics.md "Moving the bias"): which folded
// norms can hand their bias to their readers. For y = RMSNorm(x)·γ + β read only by
// producers R(y) = y·W + b (through reshapes and transposes that keep the feature axis
// last), R(y) = R(y − β) + β·W for every reader, so the norm writes no bias and each
// reader adds β·W, which a runtime keeps in the bias it adds anyway. A residual add
// y + P(z), P(z) = z·W + b reached through reshapes and transposes nothing else reads,
// equals (y − β) + (z·W + b + β): P adds β to its own bias and the add's value is kept.
#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "core/analysis/fold_plan.h"
#include "core/error.h"

namespace lnv {
namespace {

std::string quote(const std::string& s) { return "`" + s + "`"; }

std::string described(const Node& n) { return quote(n.name) + " (" + std::string(op_name(n.op)) + ")"; }

class BiasMovePlanner {
 public:
  BiasMovePlanner(const Graph& g, const FoldPlan& plan) : g_(g) {
    for (const ValueRef& r : g.output_refs)
      if (r.kind == ValueRef::Kind::node) outputs_.insert(r.index);
    for (const CenterTerm& t : plan.center)
      if (t.kind == CenterTerm::Kind::param && t.slot == "bias") centered_bias_.insert(t.node);
  }

  BiasMove judge(int32_t norm) const {
    const Node& n = g_.nodes[norm];
    BiasMove m;
    if (n.bias.empty()) return m;
    const Shape& xs = g_.node_shapes[norm];
    const Axes axes = normalize_axes(n.axes, int64_t(xs.size()), n.name);
    if (axes.size() != 1 || axes[0] != int64_t(xs.size()) - 1) {
      m.kept = "it normalizes axes other than the last alone, where no reader's weight meets its bias";
      return m;
    }
    if (g_.shape_of(n.bias) != Shape{xs.back()}) {
      m.kept = "its bias " + quote(n.bias) + " is not a vector over the normalized axis";
      return m;
    }
    if (centered_bias_.count(n.name)) {
      m.kept = "its bias is a term the fold centers";
      return m;
    }
    if (std::find(g_.fused_norms.begin(), g_.fused_norms.end(), n.name) != g_.fused_norms.end()) {
      m.kept = "it is computed inside a fused op of the source file that the fold keeps, which adds "
               "the bias itself";
      return m;
    }
    if (!follow(norm, int64_t(xs.size()) - 1, xs.back(), m)) return kept(std::move(m.kept));
    std::set<std::string_view> takers;
    for (const std::vector<std::string>* list : {&m.readers, &m.residual})
      for (const std::string& r : *list) {
        if (!takers.insert(r).second)
          return kept(quote(r) + " would take the bias twice (it reads the norm and is summed with it)");
        for (const std::string& name : {moved_bias_own(r), moved_bias_image(r), moved_bias_image(r) + ".row"})
          if (g_.has(name)) return kept("the name " + quote(name) + " the moved bias needs is taken");
      }
    m.moves = true;
    return m;
  }

  static BiasMove kept(std::string why) {
    BiasMove m;
    m.kept = std::move(why);
    return m;
  }

 private:
  const Graph& g_;
  std::set<int32_t> outputs_;
  std::unordered_set<std::string_view> centered_bias_;  // the norms whose bias a fold centers

  // Whether producer `r` adds a bias anyway: a linear's own, or an add of a param vector
  // over its features that alone reads it (ONNX's MatMul + Add).
  bool adds_bias(int32_t r) const {
    const Node& n = g_.nodes[r];
    if (n.op == Op::linear && !n.bias.empty()) return true;
    if (outputs_.count(r) || g_.consumers[r].size() != 1) return false;
    const int32_t a = g_.consumers[r][0];
    if (g_.nodes[a].op != Op::add) return false;
    for (const ValueRef& in : g_.node_inputs[a])
      if (in.kind == ValueRef::Kind::param && g_.params[in.index].shape == Shape{g_.node_shapes[r].back()})
        return true;
    return false;
  }

  // Producer `r` can take the bias of a norm over `features`: it adds a bias anyway, or a
  // new one over its outputs costs no more than the norm's over its features (a tied LM
  // head over a vocabulary wider than the model keeps the norm's bias: the new pass would
  // be the wider one).
  bool takes_bias(int32_t r, int64_t features, std::string& why) const {
    if (adds_bias(r)) return true;
    const int64_t out = g_.node_shapes[r].back();
    if (out <= features) return true;
    why = described(g_.nodes[r]) + " adds no bias of its own, and a new one over its " +
          std::to_string(out) + " output features costs more than the norm's over " +
          std::to_string(features);
    return false;
  }

  bool fused(const Node& n) const {
    return std::find(g_.fused_producers.begin(), g_.fused_producers.end(), n.name) != g_.fused_producers.end();
  }

  // A matmul whose second operand is a 2-D param: a producer over its last axis.
  bool weight_matmul(int32_t r) const {
    const auto& ins = g_.node_inputs[r];
    return g_.nodes[r].op == Op::matmul && ins.size() == 2 && ins[1].kind == ValueRef::Kind::param &&
           g_.params[ins[1].index].shape.size() == 2;
  }

  // The producer whose bias carries β for a residual add's other operand `s` (the norm's
  // feature axis at `axis` of it): a linear with a bias, or a matmul by a 2-D param whose
  // own add of a param vector over its features alone reads it, reached through reshapes
  // that keep the last axis' length and transposes, each node on the way (the producer
  // too) read by nothing else and no graph output. -1 with `why` naming what is not.
  int32_t residual_producer(int32_t s, int64_t axis, std::string& why) const {
    for (;;) {
      const Node& n = g_.nodes[s];
      if (outputs_.count(s) || g_.consumers[s].size() != 1) {
        why = described(n) + (outputs_.count(s) ? " is a graph output" : " has other readers") +
              ", which would see the bias";
        return -1;
      }
      const auto& ins = g_.node_inputs[s];
      const int64_t last = int64_t(g_.node_shapes[s].size()) - 1;
      int32_t p = -1;
      if (axis == last && n.op == Op::linear && !n.bias.empty()) p = s;
      if (axis == last && n.op == Op::add && ins.size() == 2)
        for (size_t k = 0; k < 2 && p < 0; ++k)
          if (ins[k].kind == ValueRef::Kind::node && weight_matmul(ins[k].index) && adds_bias(ins[k].index) &&
              g_.node_shapes[ins[k].index] == g_.node_shapes[s])
            p = ins[k].index;
      if (p >= 0) {
        if (!fused(g_.nodes[p])) return p;
        why = described(g_.nodes[p]) + " is computed inside a fused op of the source file, which has no "
              "Gemm or MatMul of its own to take the bias";
        return -1;
      }
      const bool from_node = !ins.empty() && ins[0].kind == ValueRef::Kind::node;
      if (from_node && n.op == Op::reshape && axis == last &&
          g_.node_shapes[ins[0].index].back() == g_.node_shapes[s].back()) {
        axis = int64_t(g_.node_shapes[ins[0].index].size()) - 1;
        s = ins[0].index;
        continue;
      }
      if (from_node && n.op == Op::transpose) {
        const int64_t rank = int64_t(n.perm.size());
        axis = (n.perm[axis] + rank) % rank;
        s = ins[0].index;
        continue;
      }
      why = described(n) + " is not a linear or a matmul by a 2-D param that adds a bias, nor a reshape "
            "or transpose of one";
      return -1;
    }
  }

  // Every reader of node `v` (the feature axis at `axis` of its output) takes the bias:
  // adds the producers to m.readers (m.residual); false with m.kept set at the first that
  // cannot.
  bool follow(int32_t v, int64_t axis, int64_t features, BiasMove& m) const {
    std::string& why = m.kept;
    if (outputs_.count(v)) {
      why = quote(g_.nodes[v].name) + ", which carries its bias, is a graph output";
      return false;
    }
    std::set<int32_t> seen;
    for (int32_t c : g_.consumers[v]) {
      if (!seen.insert(c).second) continue;
      const Node& r = g_.nodes[c];
      const auto& ins = g_.node_inputs[c];
      std::vector<size_t> slots;
      for (size_t k = 0; k < ins.size(); ++k)
        if (ins[k].kind == ValueRef::Kind::node && ins[k].index == v) slots.push_back(k);
      const int64_t last = int64_t(g_.node_shapes[v].size()) - 1;
      const bool feature_last = slots == std::vector<size_t>{0} && axis == last;
      const bool producer = feature_last && (r.op == Op::linear || weight_matmul(c));
      if (producer) {
        if (fused(r)) {
          why = described(r) + " is computed inside a fused op of the source file, which has no Gemm or "
                "MatMul of its own to take the bias";
          return false;
        }
        if (!takes_bias(c, features, why)) return false;
        m.readers.push_back(r.name);
        continue;
      }
      if (r.op == Op::add && slots.size() == 1 && axis == last && ins.size() == 2 &&
          g_.node_shapes[c] == g_.node_shapes[v]) {
        // A residual add: the other operand's producer takes β, the sum is unchanged.
        const ValueRef& other = ins[1 - slots[0]];
        std::string found;  // what the other operand is, where no producer takes β
        if (other.kind != ValueRef::Kind::node) {
          found = "a value that is no node's output";
        } else if (g_.node_shapes[other.index] != g_.node_shapes[v]) {
          found = "a value of another shape";
        } else if (const int32_t p = residual_producer(other.index, last, found); p >= 0) {
          m.residual.push_back(g_.nodes[p].name);
          continue;
        } else {
          found = "a value where " + found;
        }
        why = described(r) + " adds " + quote(g_.nodes[v].name) + " to " + found +
              ": the bias moves through a residual add only into the bias of the producer of its other "
              "operand";
        return false;
      }
      if (r.op == Op::reshape && axis == last && !g_.node_shapes[c].empty() &&
          g_.node_shapes[c].back() == g_.node_shapes[v].back()) {
        // The last axis keeps its length: every row of features stays a row.
        if (!follow(c, int64_t(g_.node_shapes[c].size()) - 1, features, m)) return false;
        continue;
      }
      if (r.op == Op::transpose) {
        const int64_t rank = int64_t(r.perm.size());
        int64_t to = -1;
        for (int64_t p = 0; p < rank; ++p)
          if ((r.perm[p] + rank) % rank == axis) to = p;
        if (to >= 0) {
          if (!follow(c, to, features, m)) return false;
          continue;
        }
      }
      why = described(r) + " reads " + quote(g_.nodes[v].name) +
            ": the bias moves only into a linear or a matmul with a 2-D param weight that "
            "contracts the feature axis, or through a residual add";
      return false;
    }
    return true;
  }
};

// A producer takes at most one norm's bias: one summed with a norm by a residual add may
// also read another folded norm. The later norm (in topological order) keeps its bias.
void one_norm_per_taker(FoldPlan& plan) {
  std::unordered_map<std::string_view, std::string_view> taken;  // producer -> norm
  for (LnVerdict& v : plan.layer_norms) {
    if (!v.bias.moves) continue;
    std::string clash;
    for (const std::vector<std::string>* list : {&v.bias.readers, &v.bias.residual})
      for (const std::string& r : *list)
        if (auto it = taken.find(r); clash.empty() && it != taken.end())
          clash = "`" + r + "` takes the bias of `" + std::string(it->second) + "` already";
    if (!clash.empty()) {
      v.bias = {};
      v.bias.kept = clash;
      continue;
    }
    for (const std::vector<std::string>* list : {&v.bias.readers, &v.bias.residual})
      for (const std::string& r : *list) taken.emplace(r, v.name);
  }
}

// Judges each folded norm on its own (BiasMovePlanner::judge).
void plan_each_bias_move(const Graph& g, FoldPlan& plan, const std::vector<int32_t>& ln_nodes) {
  const BiasMovePlanner planner(g, plan);
  // Without an rnn's norm (named "<rnn>.norm", a name a node may also have), each verdict
  // is its own node's and is in plan.fold exactly when foldable in the plan's mode: no
  // name need be looked up.
  if (std::find(ln_nodes.begin(), ln_nodes.end(), -1) == ln_nodes.end()) {
    for (size_t i = 0; i < plan.layer_norms.size(); ++i) {
      LnVerdict& v = plan.layer_norms[i];
      v.bias = {};
      if (v.foldable[static_cast<int>(plan.mode)]) v.bias = planner.judge(ln_nodes[i]);
    }
    return;
  }
  std::unordered_set<std::string_view> folded;
  folded.reserve(plan.fold.size());
  folded.insert(plan.fold.begin(), plan.fold.end());
  for (LnVerdict& v : plan.layer_norms) {
    v.bias = {};
    if (!folded.count(v.name) || !g.has(v.name)) continue;
    const ValueRef& r = g.ref(v.name);
    if (r.kind != ValueRef::Kind::node) continue;  // the norm inside an rnn (its bias stays inside)
    const int32_t i = r.index;
    if (g.nodes[i].op != Op::layer_norm) continue;
    v.bias = planner.judge(i);
  }
}

}  // namespace

void plan_bias_moves(const Graph& g, FoldPlan& plan, const std::vector<int32_t>& ln_nodes) {
  plan_each_bias_move(g, plan, ln_nodes);
  one_norm_per_taker(plan);
}

std::string moved_bias_own(const std::string& reader) { return reader + ".own"; }
std::string moved_bias_image(const std::string& reader) { return reader + ".moved_bias"; }

std::vector<std::string> moved_bias_readers(const Graph& folded) {
  std::vector<std::string> out;
  for (const Node& n : folded.nodes)
    if (n.op == Op::add && n.inputs.size() == 2 && n.inputs[0] == moved_bias_own(n.name) &&
        n.inputs[1] == moved_bias_image(n.name))
      out.push_back(n.name);
  return out;
}

}  // namespace lnv
