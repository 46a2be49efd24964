#include "reports/audit_report.h"

#include <nlohmann/json.hpp>

#include "reports/check_report.h"

#include <cstdint>
#include <cstdio>
#include <set>
#include <sstream>

namespace lnv::report {
namespace {

std::string term_label(const CenterTerm& t) {
  return t.kind == CenterTerm::Kind::producer ? t.node : t.param;
}

std::vector<std::string> centered_names(const LnVerdict& v) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const CenterTerm& t : v.terms)
    if (seen.insert(term_label(t)).second) out.push_back(term_label(t));
  return out;
}

// Where the fold puts the norm's bias: "moves" (into the readers), "kept" (and why),
// "none" (no bias, or not folded).
std::string bias_fate(const LnVerdict& v) {
  return v.bias.moves ? "moves" : v.bias.kept.empty() ? "none" : "kept";
}

nlohmann::json term_json(const CenterTerm& t) {
  nlohmann::json j;
  j["kind"] = t.kind == CenterTerm::Kind::producer ? "producer" : "param";
  j["node"] = t.node;
  if (t.kind == CenterTerm::Kind::param) {
    j["param"] = t.param;
    j["slot"] = t.slot;
    j["axes"] = t.axes;
    j["remove"] = t.remove;
  }
  return j;
}

// (elements normalized per forward pass, affine ops per element) of one norm.
struct NormShape {
  double elements = 0;
  int affine = 0;
};

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * share);
  return buf;
}

// The opaque ops of the model (imported ops lnverify does not model), in graph order.
std::vector<const Node*> opaque_nodes(const Graph& g) {
  std::vector<const Node*> out;
  for (const Node& n : g.nodes)
    if (n.op == Op::opaque) out.push_back(&n);
  return out;
}

}  // namespace

NormCost norm_cost(const Graph& g, const FoldPlan& plan) {
  const std::set<std::string> folded(plan.fold.begin(), plan.fold.end());
  std::set<std::string> moved;
  for (const LnVerdict& v : plan.layer_norms)
    if (v.bias.moves) moved.insert(v.name);
  NormCost cost;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    double elements = 0;
    int affine = 0;
    bool layer = false, fold = false;
    if (n.op == Op::layer_norm || n.op == Op::rms_norm) {
      elements = double(numel(g.node_shapes[i]));
      affine = !n.weight.empty() + !n.bias.empty();
      layer = n.op == Op::layer_norm;
      fold = folded.count(n.name) > 0;
    } else if (n.op == Op::rnn && n.norm) {
      // [N, T, H]: one norm per step over H.
      elements = double(numel(g.node_shapes[i]));
      affine = !n.norm->weight.empty() + !n.norm->bias.empty();
      layer = n.norm->kind == Op::layer_norm;
      fold = folded.count(n.name + ".norm") > 0;
    } else {
      continue;
    }
    const double ln = elements * (5 + affine), rms = elements * (3 + affine);
    cost.before += layer ? ln : rms;
    // A moved bias costs nothing: the readers add it with the bias they add anyway.
    const double moved_bias = fold && moved.count(n.name) ? elements : 0.0;
    cost.after += layer && !fold ? ln : rms - moved_bias;
  }
  return cost;
}

nlohmann::json audit_json(const Graph& g, const FoldPlan& plan) {
  nlohmann::json j;
  j["format"] = "lnverify.report";
  j["version"] = 1;
  j["model"] = g.name;
  j["plan_mode"] = std::string(mode_name(plan.mode));
  nlohmann::json lns = nlohmann::json::array();
  for (const LnVerdict& v : plan.layer_norms) {
    nlohmann::json e;
    e["name"] = v.name;
    e["node"] = v.node;
    e["foldable"] = {{"inference", v.foldable[0]}, {"training", v.foldable[1]}};
    // The first "no" explains the entry: inference's, else training's.
    e["reason"] = !v.reason[0].empty() ? v.reason[0] : v.reason[1];
    e["reasons"] = {{"inference", v.reason[0]}, {"training", v.reason[1]}};
    e["path"] = {{"inference", v.path[0]}, {"training", v.path[1]}};
    if (!v.conflicts[0].empty() || !v.conflicts[1].empty())
      e["conflicts_with"] = {{"inference", v.conflicts[0]}, {"training", v.conflicts[1]}};
    e["centered"] = centered_names(v);
    nlohmann::json terms = nlohmann::json::array();
    for (const CenterTerm& t : v.terms) terms.push_back(term_json(t));
    e["terms"] = terms;
    e["term_count"] = v.term_count;
    e["opaque"] = v.opaque;
    e["bias"] = {{"fate", bias_fate(v)},
                 {"readers", v.bias.readers},
                 {"residual_producers", v.bias.residual},
                 {"kept", v.bias.kept}};
    lns.push_back(e);
  }
  j["layer_norms"] = lns;
  nlohmann::json center = nlohmann::json::array();
  for (const CenterTerm& t : plan.center) center.push_back(term_json(t));
  j["plan"] = {{"fold", plan.fold}, {"center", center}};
  nlohmann::json opaque = nlohmann::json::array();
  for (const Node* n : opaque_nodes(g)) opaque.push_back({{"name", n->name}, {"op_type", n->op_type}});
  j["opaque_ops"] = opaque;
  const NormCost cost = norm_cost(g, plan);
  j["summary"] = {
      {"layer_norms", plan.layer_norms.size()},
      {"foldable_inference", plan.foldable_count(Mode::inference)},
      {"foldable_training", plan.foldable_count(Mode::training)},
      {"norm_ops_before", cost.before},
      {"norm_ops_after", cost.after},
      {"norm_ops_removed_share", cost.removed_share()},
      {"norm_cost_model",
       "per normalized element: LayerNorm 5 ops in 3 passes, RMSNorm 3 ops in 2 passes, "
       "+1 per affine weight or bias; a bias moved into the readers' biases costs 0"},
  };
  return j;
}

std::string audit_summary(const Graph& g, const FoldPlan& plan) {
  std::ostringstream s;
  s << plan.foldable_count(Mode::inference) << " of " << plan.layer_norms.size()
    << " LayerNorms foldable (inference), " << plan.foldable_count(Mode::training)
    << " (training); ~" << percent(norm_cost(g, plan).removed_share())
    << " of norm arithmetic removed (" << mode_name(plan.mode) << " fold)";
  return s.str();
}

std::string audit_text(const Graph& g, const FoldPlan& plan, const TextOptions& options) {
  size_t width = 9;
  for (const LnVerdict& v : plan.layer_norms) width = std::max(width, display_width(v.name));
  auto verdict = [&](bool yes, size_t w) {
    return pad_painted(yes ? "yes" : "no", w, yes ? Tone::good : Tone::bad, options.paint);
  };
  const size_t shown = options.verbose ? SIZE_MAX : 4;
  std::ostringstream s;
  s << pad("LayerNorm", width) << "  inference  training  bias   centered\n";
  for (const LnVerdict& v : plan.layer_norms) {
    std::vector<std::string> names = centered_names(v);
    std::string centered;
    for (size_t k = 0; k < names.size() && k < shown; ++k) centered += (k ? ", " : "") + names[k];
    if (names.size() > shown) centered += ", +" + std::to_string(names.size() - shown) + " more";
    if (names.empty() && v.term_count > 0) centered = std::to_string(v.term_count) + " terms";
    if (names.empty() && v.term_count == 0) centered = "-";
    s << pad(v.name, width) << "  " << verdict(v.foldable[0], 9) << "  "
      << verdict(v.foldable[1], 8) << "  " << pad(bias_fate(v) == "none" ? "-" : bias_fate(v), 5)
      << "  " << centered << "\n";
    if (!v.bias.kept.empty()) s << "    bias kept: " << v.bias.kept << "\n";
    if (!v.bias.residual.empty()) {
      s << "    bias moves through residual adds into:";
      for (size_t k = 0; k < v.bias.residual.size(); ++k) s << (k ? ", " : " ") << v.bias.residual[k];
      s << "\n";
    }
    for (int m = 0; m < 2; ++m) {
      if (v.reason[m].empty() || (m == 1 && v.reason[1] == v.reason[0])) continue;
      s << "    why not (" << mode_name(Mode(m)) << "): " << v.reason[m] << "\n";
      if (!options.verbose || v.path[m].empty()) continue;
      s << "    path (" << mode_name(Mode(m)) << "):";
      for (size_t k = 0; k < v.path[m].size(); ++k) s << (k ? " -> " : " ") << v.path[m][k];
      s << "\n";
    }
  }
  const std::vector<const Node*> opaque = opaque_nodes(g);
  if (!opaque.empty()) {
    s << "opaque ops (not modelled; no deviation passes them, no evaluation runs them): "
      << opaque.size() << ":";
    for (size_t k = 0; k < opaque.size(); ++k)
      s << (k ? ", " : " ") << opaque[k]->name << " (" << opaque[k]->op_type << ")";
    s << "\n";
  }
  s << audit_summary(g, plan) << "\n";
  return s.str();
}

std::string audit_markdown(const Graph& g, const FoldPlan& plan) {
  std::ostringstream s;
  s << "| LayerNorm | inference | training | centered | why not |\n"
    << "|---|---|---|---|---|\n";
  for (const LnVerdict& v : plan.layer_norms) {
    std::string centered;
    for (const std::string& n : centered_names(v)) centered += (centered.empty() ? "" : ", ") + n;
    std::string why;
    if (!v.reason[0].empty()) why = "inference: " + v.reason[0];
    if (!v.reason[1].empty() && v.reason[1] != v.reason[0])
      why += (why.empty() ? "" : "; ") + std::string("training: ") + v.reason[1];
    s << "| " << markdown_cell(v.name) << " | " << (v.foldable[0] ? "yes" : "no") << " | "
      << (v.foldable[1] ? "yes" : "no") << " | " << markdown_cell(centered) << " | "
      << markdown_cell(why) << " |\n";
  }
  s << "\n" << audit_summary(g, plan) << "\n";
  return s.str();
}

}  // namespace lnv::report
