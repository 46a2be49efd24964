#include "reports/graph_dot.h"

#include <map>
#include <set>
#include <sstream>

namespace lnv::report {
namespace {

// Fill and border colours per verdict class; the HTML legend uses the same.
struct Tone {
  const char* fill;
  const char* border;
};
Tone tone_of(const std::string& cls) {
  if (cls == "fold") return {"#c8e6c9", "#2e7d32"};
  if (cls == "inference" || cls == "training") return {"#ffe0b2", "#e65100"};
  return {"#ffcdd2", "#c62828"};
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// Text inside a Graphviz HTML-like label.
std::string html_escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string short_name(const std::string& name, const std::string& block) {
  if (block.empty() || name.size() <= block.size()) return name;
  std::string rest = name.substr(block.size());
  while (!rest.empty() && (rest[0] == '/' || rest[0] == '.')) rest.erase(0, 1);
  return rest.empty() ? name : rest;
}

std::string yes_no(bool b) { return b ? "yes" : "no"; }

// What the audit says about the nodes of the graph.
struct Marks {
  std::map<int32_t, const LnVerdict*> layer_norm;      // node holding an LN -> its verdict
  std::set<int32_t> centered;                          // producers and readers of centered params
  std::map<int32_t, std::vector<std::string>> breaks;  // breaking node -> the LNs it breaks
  std::set<std::pair<int32_t, int32_t>> path_edges;    // edges along a "why not" path
};

int32_t node_or_none(const Graph& g, const std::string& name) {
  if (!g.has(name)) return -1;
  const ValueRef& r = g.ref(name);
  return r.kind == ValueRef::Kind::node ? r.index : -1;
}

Marks marks_of(const Graph& g, const FoldPlan& plan) {
  Marks m;
  for (const LnVerdict& v : plan.layer_norms) {
    const int32_t ln = node_or_none(g, v.node);
    if (ln >= 0) m.layer_norm[ln] = &v;
    for (int mode = 0; mode < 2; ++mode) {
      const std::vector<std::string>& path = v.path[mode];
      if (v.foldable[mode] || path.empty()) continue;
      const int32_t first = node_or_none(g, path.front());
      if (first >= 0) {
        std::vector<std::string>& lns = m.breaks[first];
        if (lns.empty() || lns.back() != v.name) lns.push_back(v.name);
      }
      for (size_t k = 0; k + 1 < path.size(); ++k) {
        const int32_t a = node_or_none(g, path[k]), b = node_or_none(g, path[k + 1]);
        if (a >= 0 && b >= 0) m.path_edges.insert({a, b});
      }
    }
  }
  for (const CenterTerm& t : plan.center) {
    const int32_t n = node_or_none(g, t.node);
    if (n >= 0) m.centered.insert(n);
  }
  return m;
}

std::string verdict_words(const LnVerdict& v) {
  return "inference " + yes_no(v.foldable[0]) + ", training " + yes_no(v.foldable[1]);
}

// The attributes of one drawn node (not collapsed).
std::string node_attrs(const Graph& g, size_t i, const Marks& m, const std::string& block) {
  const Node& n = g.nodes[i];
  std::string label = short_name(n.name, block) + "\n" +
                      (n.op == Op::opaque ? n.op_type : std::string(op_name(n.op)));
  std::string fill = "#ffffff", border = "#78909c", shape = "box", penwidth = "1";
  std::string tooltip = n.name;
  const auto ln = m.layer_norm.find(int32_t(i));
  if (ln != m.layer_norm.end()) {
    const Tone t = tone_of(verdict_class(*ln->second));
    fill = t.fill;
    border = t.border;
    penwidth = "2";
    label += "\n" + verdict_words(*ln->second);
    tooltip += ": " + verdict_words(*ln->second);
  }
  if (m.centered.count(int32_t(i))) {
    border = "#1565c0";
    penwidth = "2.5";
    label += "\ncentered";
    if (fill == "#ffffff") fill = "#e3f2fd";
  }
  const auto br = m.breaks.find(int32_t(i));
  if (br != m.breaks.end()) {
    shape = "octagon";
    border = "#c62828";
    penwidth = "3";
    label += "\nbreaks " + std::to_string(br->second.size()) + " LN" +
             (br->second.size() == 1 ? "" : "s");
    tooltip += "; breaks:";
    for (const std::string& l : br->second) tooltip += " " + l;
  }
  std::ostringstream a;
  a << "id=\"n" << i << "\", label=" << quoted(label) << ", tooltip=" << quoted(tooltip)
    << ", shape=" << shape << ", fillcolor=\"" << fill << "\", color=\"" << border
    << "\", penwidth=" << penwidth;
  return a.str();
}

// A collapsed block: one node whose label lists its LNs with their verdicts, the nodes
// in it that break a fold, and how many it centers.
std::string block_attrs(const Graph& g, const DotLayout& layout, int b, const Marks& m) {
  const std::string& prefix = layout.blocks[size_t(b)];
  size_t count = 0, centered = 0;
  std::ostringstream rows;
  std::string tooltip = prefix;
  bool breaks = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (layout.node_block[i] != b) continue;
    ++count;
    centered += m.centered.count(int32_t(i));
    const auto ln = m.layer_norm.find(int32_t(i));
    if (ln != m.layer_norm.end()) {
      const LnVerdict& v = *ln->second;
      rows << "<TR><TD ALIGN=\"LEFT\" BGCOLOR=\"" << tone_of(verdict_class(v)).fill << "\">"
           << html_escaped(short_name(v.name, prefix)) << ": " << verdict_words(v)
           << "</TD></TR>";
      tooltip += "\n" + v.name + ": " + verdict_words(v);
    }
    const auto br = m.breaks.find(int32_t(i));
    if (br != m.breaks.end()) {
      breaks = true;
      rows << "<TR><TD ALIGN=\"LEFT\" BGCOLOR=\"#ffebee\"><FONT COLOR=\"#c62828\">breaks "
           << br->second.size() << " LN" << (br->second.size() == 1 ? "" : "s") << ": "
           << html_escaped(short_name(g.nodes[i].name, prefix)) << "</FONT></TD></TR>";
      tooltip += "\nbreaks:";
      for (const std::string& l : br->second) tooltip += " " + l;
    }
  }
  std::ostringstream a;
  a << "id=\"b" << b << "\", shape=plain, tooltip=" << quoted(tooltip) << ", label=<"
    << "<TABLE BORDER=\"" << (breaks ? 2 : 1) << "\" COLOR=\"" << (breaks ? "#c62828" : "#78909c")
    << "\" CELLBORDER=\"0\" CELLSPACING=\"0\" CELLPADDING=\"3\" BGCOLOR=\"#ffffff\">"
    << "<TR><TD ALIGN=\"LEFT\" BGCOLOR=\"#eceff1\"><B>" << html_escaped(prefix) << "</B> ("
    << count << " nodes" << (centered ? ", " + std::to_string(centered) + " centered" : "")
    << ")</TD></TR>" << rows.str() << "</TABLE>>";
  return a.str();
}

}  // namespace

std::string block_of(const std::string& node_name) {
  // The end of the last numeric segment that is not the name's last segment.
  size_t best = 0, start = 0;
  for (size_t k = 0; k <= node_name.size(); ++k) {
    if (k < node_name.size() && node_name[k] != '/' && node_name[k] != '.') continue;
    const bool numeric = k > start && node_name.find_first_not_of("0123456789", start) >= k;
    if (numeric && k < node_name.size()) best = k;
    start = k + 1;
  }
  return node_name.substr(0, best);
}

std::string verdict_class(const LnVerdict& v) {
  if (v.foldable[0] && v.foldable[1]) return "fold";
  if (v.foldable[0]) return "inference";
  if (v.foldable[1]) return "training";
  return "keep";
}

std::string DotLayout::anchor(size_t node) const {
  if (collapsed && node_block[node] >= 0) return "b" + std::to_string(node_block[node]);
  return "n" + std::to_string(node);
}

DotLayout dot_layout(const Graph& g, const DotOptions& options) {
  DotLayout layout;
  layout.collapsed = g.nodes.size() > options.collapse_above;
  std::map<std::string, int> index;
  for (const Node& n : g.nodes) {
    const std::string b = block_of(n.name);
    if (b.empty()) {
      layout.node_block.push_back(-1);
      continue;
    }
    auto [it, fresh] = index.emplace(b, int(layout.blocks.size()));
    if (fresh) layout.blocks.push_back(b);
    layout.node_block.push_back(it->second);
  }
  // A block of one node (a numbered wrapper around a single op) is drawn as that node.
  std::vector<int> size(layout.blocks.size(), 0), renumber(layout.blocks.size(), -1);
  for (int b : layout.node_block)
    if (b >= 0) ++size[size_t(b)];
  std::vector<std::string> kept;
  for (size_t b = 0; b < layout.blocks.size(); ++b)
    if (size[b] > 1) {
      renumber[b] = int(kept.size());
      kept.push_back(layout.blocks[b]);
    }
  layout.blocks = std::move(kept);
  for (int& b : layout.node_block)
    if (b >= 0) b = renumber[size_t(b)];
  return layout;
}

std::string graph_dot(const Graph& g, const FoldPlan& plan, const DotOptions& options) {
  const DotLayout layout = dot_layout(g, options);
  const Marks m = marks_of(g, plan);
  std::ostringstream d;
  d << "digraph " << quoted(g.name.empty() ? "model" : g.name) << " {\n"
    << "  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=10, nodesep=0.2, ranksep=0.3];\n"
    << "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=9, "
       "height=0.3, margin=\"0.08,0.03\"];\n"
    << "  edge [color=\"#90a4ae\", arrowsize=0.5];\n";
  for (size_t k = 0; k < g.inputs.size(); ++k)
    d << "  i" << k << " [id=\"i" << k << "\", label=" << quoted(g.inputs[k].name)
      << ", shape=ellipse, fillcolor=\"#eceff1\", color=\"#78909c\"];\n";

  // The drawn element of each node.
  auto drawn = [&](size_t i) { return layout.anchor(i); };
  if (layout.collapsed) {
    for (size_t b = 0; b < layout.blocks.size(); ++b)
      d << "  b" << b << " [" << block_attrs(g, layout, int(b), m) << "];\n";
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (layout.node_block[i] < 0) d << "  n" << i << " [" << node_attrs(g, i, m, "") << "];\n";
  } else {
    for (size_t b = 0; b < layout.blocks.size(); ++b) {
      d << "  subgraph cluster_" << b << " {\n    label=" << quoted(layout.blocks[b])
        << "; style=\"rounded,dashed\"; color=\"#90a4ae\"; fontcolor=\"#546e7a\";\n";
      for (size_t i = 0; i < g.nodes.size(); ++i)
        if (layout.node_block[i] == int(b))
          d << "    n" << i << " [" << node_attrs(g, i, m, layout.blocks[b]) << "];\n";
      d << "  }\n";
    }
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (layout.node_block[i] < 0) d << "  n" << i << " [" << node_attrs(g, i, m, "") << "];\n";
  }

  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const ValueRef& r : g.node_inputs[i]) {
      if (r.kind == ValueRef::Kind::param) continue;
      const std::string from = r.kind == ValueRef::Kind::input ? "i" + std::to_string(r.index)
                                                               : drawn(size_t(r.index));
      const std::string to = drawn(i);
      if (from == to || !seen.insert({from, to}).second) continue;
      const bool on_path =
          r.kind == ValueRef::Kind::node && m.path_edges.count({r.index, int32_t(i)}) > 0;
      d << "  " << from << " -> " << to;
      if (on_path) d << " [color=\"#c62828\", penwidth=1.5]";
      d << ";\n";
    }
  }
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const ValueRef& r = g.output_refs[k];
    if (r.kind == ValueRef::Kind::param) continue;
    d << "  o" << k << " [id=\"o" << k << "\", label=" << quoted("output " + g.outputs[k])
      << ", shape=plaintext, style=\"\"];\n  "
      << (r.kind == ValueRef::Kind::input ? "i" + std::to_string(r.index) : drawn(size_t(r.index)))
      << " -> o" << k << ";\n";
  }
  d << "}\n";
  return d.str();
}

}  // namespace lnv::report
