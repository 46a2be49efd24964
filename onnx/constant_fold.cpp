#include "onnx/constant_fold.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "onnx/fold_ops.h"

namespace lnv::onnx_import {
namespace {

// Every value name a graph's nodes read, subgraphs included (a subgraph may read values
// of the enclosing graph by name).
void collect_reads(const Graph& g, std::set<std::string>& names) {
  for (const Node& n : g.nodes) {
    for (const auto& in : n.inputs) names.insert(in);
    for (const Attribute& a : n.attributes) {
      if (a.g) collect_reads(*a.g, names);
      for (const auto& sub : a.graphs) collect_reads(*sub, names);
    }
  }
}

std::set<std::string> subgraph_reads(const Node& n) {
  std::set<std::string> names;
  for (const Attribute& a : n.attributes) {
    if (a.g) collect_reads(*a.g, names);
    for (const auto& sub : a.graphs) collect_reads(*sub, names);
  }
  return names;
}

// The nodes left unfolded although their inputs are constants: a parameter computed in
// the graph from stored ones, as `fold --mode training` writes a LayerScale moved into a
// weight (docs/onnx.md, "Training"): M = Mul(W, Reshape(γ)) read only by a centering
// Sub(M, ReduceMean(M, keepdims=1)). Folding M would read W and γ back as one stored
// constant, so the parameters that train would be gone; kept, M is a product of two
// params. A Reshape of an initializer that only such Muls read stays too (γ keeps its
// name).
std::vector<bool> computed_params(const Graph& g) {
  std::map<std::string, std::vector<size_t>> readers;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (const auto& in : g.nodes[k].inputs) readers[in].push_back(k);
  std::set<std::string> outputs;
  for (const ValueInfo& v : g.outputs) outputs.insert(v.name);
  auto is_default = [&](size_t k, const char* op) {
    return g.nodes[k].op_type == op && (g.nodes[k].domain.empty() || g.nodes[k].domain == "ai.onnx");
  };
  auto readers_of = [&](const std::string& v) {
    auto it = readers.find(v);
    return it == readers.end() ? std::vector<size_t>{} : it->second;
  };
  // True when `v` is read only by ReduceMean(v, keepdims=1) and Sub(v, that mean).
  auto centered = [&](const std::string& v) {
    const auto r = readers_of(v);
    if (r.size() != 2 || outputs.count(v)) return false;
    for (size_t m : r) {
      if (!is_default(m, "ReduceMean") || g.nodes[m].inputs.empty() || g.nodes[m].inputs[0] != v) continue;
      const Attribute* keep = g.nodes[m].attr("keepdims");
      if (keep && keep->i != 1) return false;
      const size_t s = r[0] == m ? r[1] : r[0];
      return is_default(s, "Sub") &&
             g.nodes[s].inputs == std::vector<std::string>{v, g.nodes[m].outputs.at(0)};
    }
    return false;
  };
  std::set<std::string> stored;
  for (const Initializer& init : g.initializers) stored.insert(init.name);
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (!is_default(k, "Mul") || n.inputs.size() != 2 || n.outputs.size() != 1 || !centered(n.outputs[0]))
      continue;
    keep[k] = true;
  }
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (!is_default(k, "Reshape") || n.inputs.empty() || !stored.count(n.inputs[0]) || n.outputs.size() != 1 ||
        outputs.count(n.outputs[0]))
      continue;
    const auto r = readers_of(n.outputs[0]);
    if (!r.empty() && std::all_of(r.begin(), r.end(), [&](size_t m) { return keep[m]; })) keep[k] = true;
  }
  return keep;
}

class Folder {
 public:
  explicit Folder(const Model& model)
      : model_(model), folded_(model.graph.nodes.size(), false), kept_(computed_params(model.graph)) {
    for (const Initializer& init : model.graph.initializers) constants_[init.name] = init.value;
  }

  FoldResult run() {
    FoldResult result{model_, {}};
    result.stats.nodes_before = model_.graph.nodes.size();
    Model current = model_;  // the remaining graph, for shape inference between rounds
    while (true) {
      ++result.stats.rounds;
      if (!fold_round(static_shapes(current.graph), result.stats)) break;
      current = assemble(current.graph, nullptr);
      infer_shapes(current);
    }
    result.model = assemble(current.graph, &result.stats);
    result.stats.nodes_after = result.model.graph.nodes.size();
    return result;
  }

 private:
  // Folds every node it can, in order; true when any was folded.
  bool fold_round(const std::map<std::string, std::vector<int64_t>>& shapes, FoldStats& stats) {
    const int64_t opset = model_.opset("");
    bool progress = false;
    for (size_t k = 0; k < model_.graph.nodes.size(); ++k) {
      const Node& node = model_.graph.nodes[k];
      if (folded_[k] || kept_[k] || !node.domain.empty() || !is_foldable_op(node.op_type)) continue;
      std::vector<Tensor> dims_only;  // stable storage for Shape/Size inputs
      dims_only.reserve(1);
      std::vector<const Tensor*> inputs;
      bool all_known = true;
      for (size_t i = 0; i < node.inputs.size() && all_known; ++i) {
        const std::string& name = node.inputs[i];
        if (name.empty()) { inputs.push_back(nullptr); continue; }
        if (auto c = constants_.find(name); c != constants_.end()) {
          inputs.push_back(&c->second);
          continue;
        }
        auto s = shapes.find(name);
        if (i == 0 && reads_only_dims(node.op_type) && s != shapes.end()) {
          Tensor t;
          t.type = ElemType::Undefined;
          t.dims = s->second;
          dims_only.push_back(std::move(t));
          inputs.push_back(&dims_only.back());
          continue;
        }
        all_known = false;
      }
      if (!all_known) continue;
      // A weight a fold reads (and only such a weight) is read from its file now, for this
      // fold only (the constant stays a reference: copies of it cost nothing); an Identity
      // passes it on unread.
      std::vector<Tensor> loaded;
      loaded.reserve(inputs.size());
      if (node.op_type != "Identity")
        for (const Tensor*& t : inputs)
          if (t && t->stored) {
            loaded.push_back(*t);
            load_stored(loaded.back());
            t = &loaded.back();
          }
      const std::string where = model_.path.string() + ": " + node.describe(k);
      auto outputs = evaluate_node(node, inputs, opset, where);
      if (!outputs) continue;
      for (size_t o = 0; o < node.outputs.size(); ++o)
        if (!node.outputs[o].empty()) constants_[node.outputs[o]] = std::move((*outputs)[o]);
      folded_[k] = true;
      progress = true;
      ++stats.nodes_folded;
      ++stats.folded_by_op[node.op_type];
    }
    return progress;
  }

  // The graph without the folded nodes and the nodes nothing needs; folded values that
  // remaining nodes or graph outputs read become initializers. Value types and shapes
  // come from `typed` (the latest shape inference). `stats` (when given) receives the
  // counts.
  Model assemble(const Graph& typed, FoldStats* stats) const {
    const Graph& g = model_.graph;
    std::set<std::string> needed;
    for (const ValueInfo& v : g.outputs) needed.insert(v.name);
    std::vector<bool> live(g.nodes.size(), false);
    for (size_t k = g.nodes.size(); k-- > 0;) {
      if (folded_[k]) continue;
      const Node& n = g.nodes[k];
      bool used = false;
      for (const auto& out : n.outputs) used = used || (!out.empty() && needed.count(out));
      if (!used) continue;
      live[k] = true;
      needed.insert(n.inputs.begin(), n.inputs.end());
      const auto sub = subgraph_reads(n);
      needed.insert(sub.begin(), sub.end());
    }

    Model out = model_;
    out.graph.nodes.clear();
    out.graph.initializers.clear();
    out.graph.value_info.clear();
    std::set<std::string> produced;
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      if (!live[k]) continue;
      out.graph.nodes.push_back(g.nodes[k]);
      produced.insert(g.nodes[k].outputs.begin(), g.nodes[k].outputs.end());
    }
    std::set<std::string> read_before;
    collect_reads(g, read_before);
    for (const ValueInfo& v : g.outputs) read_before.insert(v.name);
    size_t removed = 0;
    std::set<std::string> have;
    for (const Initializer& init : g.initializers) {
      // Kept when still read, or when nothing read it before this pass either.
      if (needed.count(init.name) || !read_before.count(init.name)) {
        out.graph.initializers.push_back(init);
        have.insert(init.name);
      } else {
        ++removed;
      }
    }
    size_t added = 0;
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      if (!folded_[k]) continue;
      for (const auto& name : g.nodes[k].outputs) {
        if (name.empty() || !needed.count(name) || have.count(name)) continue;
        out.graph.initializers.push_back({name, constants_.at(name)});
        have.insert(name);
        ++added;
      }
    }
    for (const ValueInfo& v : typed.value_info)
      if (produced.count(v.name)) out.graph.value_info.push_back(v);
    out.graph.outputs = typed.outputs;
    if (stats) {
      stats->initializers_added = added;
      stats->initializers_removed = removed;
      size_t dead = 0;
      for (size_t k = 0; k < g.nodes.size(); ++k) dead += !folded_[k] && !live[k];
      stats->dead_nodes_removed = dead;
    }
    return out;
  }

  const Model& model_;
  std::vector<bool> folded_;
  std::vector<bool> kept_;  // computed_params
  std::map<std::string, Tensor> constants_;
};

}  // namespace

FoldResult fold_constants(const Model& model) { return Folder(model).run(); }

}  // namespace lnv::onnx_import
