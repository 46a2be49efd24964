#include "reports/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "reports/audit_report.h"

namespace lnv::report {
namespace {

std::string num(double v, const char* fmt = "%.3g") {
  char buf[48];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// One bar series of a plot.
struct Series {
  std::string name, colour;
  std::vector<double> values;
};

// A horizontal grouped bar plot as inline SVG: one group per label, one bar per series,
// values from 0 (or the smallest negative value) to the largest, each bar labelled with
// its value. `reference` (when finite) draws a dashed vertical line there (e.g. ratio 1).
std::string svg_bars(const std::string& title, const std::vector<std::string>& labels,
                     const std::vector<Series>& series, double reference = NAN) {
  double lo = 0, hi = 0;
  for (const Series& s : series)
    for (double v : s.values)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (std::isfinite(reference)) hi = std::max(hi, reference);
  if (hi - lo <= 0) hi = lo + 1;
  const int label_w = 200, plot_w = 420, bar_h = 14, gap = 8, top = 46;
  const int group_h = int(series.size()) * bar_h + gap;
  const int height = top + int(labels.size()) * group_h + 24;
  const int width = label_w + plot_w + 90;
  auto x_of = [&](double v) { return label_w + (v - lo) / (hi - lo) * plot_w; };
  std::ostringstream s;
  s << "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width
    << "\" height=\"" << height << "\" role=\"img\"><title>" << html_escape(title)
    << "</title><text x=\"4\" y=\"16\" class=\"plot-title\">" << html_escape(title) << "</text>";
  for (size_t k = 0; k < series.size(); ++k)
    s << "<rect x=\"" << 4 + 220 * int(k) << "\" y=\"24\" width=\"10\" height=\"10\" fill=\""
      << series[k].colour << "\"/><text x=\"" << 4 + 220 * int(k) + 14
      << "\" y=\"33\" class=\"plot-legend\">" << html_escape(series[k].name) << "</text>";
  for (size_t g = 0; g < labels.size(); ++g) {
    const int y0 = top + int(g) * group_h;
    s << "<text x=\"" << label_w - 6 << "\" y=\"" << y0 + group_h / 2 + 2
      << "\" text-anchor=\"end\" class=\"plot-label\">" << html_escape(labels[g]) << "</text>";
    for (size_t k = 0; k < series.size(); ++k) {
      const double v = g < series[k].values.size() ? series[k].values[g] : NAN;
      if (!std::isfinite(v)) continue;
      const double x0 = x_of(std::min(0.0, v)), x1 = x_of(std::max(0.0, v));
      const int y = y0 + int(k) * bar_h;
      s << "<rect x=\"" << num(x0, "%.1f") << "\" y=\"" << y << "\" width=\""
        << num(std::max(1.0, x1 - x0), "%.1f") << "\" height=\"" << bar_h - 2 << "\" fill=\""
        << series[k].colour << "\"><title>" << html_escape(series[k].name + ": " + num(v))
        << "</title></rect><text x=\"" << num(x1 + 4, "%.1f") << "\" y=\"" << y + bar_h - 4
        << "\" class=\"plot-value\">" << num(v) << "</text>";
    }
  }
  if (std::isfinite(reference))
    s << "<line x1=\"" << num(x_of(reference), "%.1f") << "\" x2=\"" << num(x_of(reference), "%.1f")
      << "\" y1=\"" << top - 4 << "\" y2=\"" << height - 20
      << "\" stroke=\"#455a64\" stroke-dasharray=\"4 3\"/>";
  s << "<line x1=\"" << num(x_of(0), "%.1f") << "\" x2=\"" << num(x_of(0), "%.1f") << "\" y1=\""
    << top - 4 << "\" y2=\"" << height - 20 << "\" stroke=\"#263238\"/></svg>";
  return s.str();
}

std::string verdict_cell(bool yes) {
  return yes ? "<td class=\"yes\">yes</td>" : "<td class=\"no\">no</td>";
}

std::string centered_list(const LnVerdict& v) {
  std::vector<std::string> names;
  for (const CenterTerm& t : v.terms) {
    const std::string& n = t.kind == CenterTerm::Kind::producer ? t.node : t.param;
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  if (names.empty()) return v.term_count > 0 ? std::to_string(v.term_count) + " terms" : "-";
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + html_escape(n);
  return out;
}

// A link to where node `name` is drawn, or the plain name when it is not a node.
std::string node_link(const Graph& g, const DotLayout& layout, const std::string& name) {
  if (!g.has(name) || g.ref(name).kind != ValueRef::Kind::node)
    return "<code>" + html_escape(name) + "</code>";
  const size_t i = size_t(g.ref(name).index);
  return "<a href=\"#" + layout.anchor(i) + "\"><code>" + html_escape(name) + "</code></a>";
}

std::string outcome_cell(Outcome o) {
  const std::string name(outcome_name(o));
  return "<td class=\"" + std::string(o == Outcome::holds ? "yes" : o == Outcome::fails ? "no" : "maybe") +
         "\">" + name + "</td>";
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string html_audit_section(const Graph& g, const FoldPlan& plan, const std::string& svg,
                               const DotOptions& options) {
  const DotLayout layout = dot_layout(g, options);
  std::ostringstream s;
  s << "<section id=\"audit\"><h2>LayerNorms</h2><p class=\"summary\">"
    << html_escape(audit_summary(g, plan)) << "</p>";
  s << "<p class=\"legend\"><span class=\"chip fold\">folds in both modes</span> "
       "<span class=\"chip inference\">folds in one mode only</span> "
       "<span class=\"chip keep\">does not fold</span> "
       "<span class=\"chip centered\">centered by the plan</span> "
       "<span class=\"chip breaks\">breaks a fold (red edges: the path to the LN)</span></p>";
  if (!svg.empty()) {
    s << "<div class=\"graph\">" << svg << "</div>";
    if (layout.collapsed)
      s << "<p class=\"note\">" << g.nodes.size() << " nodes: each of the " << layout.blocks.size()
        << " repeated blocks is drawn as one box listing its LayerNorms.</p>";
  }
  s << "<table id=\"verdicts\"><thead><tr><th>LayerNorm</th><th>block</th><th>inference</th>"
       "<th>training</th><th>centered</th><th>why not</th><th>breaking node</th></tr></thead><tbody>";
  for (const LnVerdict& v : plan.layer_norms) {
    s << "<tr class=\"ln " << verdict_class(v) << "\"><td>" << node_link(g, layout, v.node)
      << (v.name != v.node ? " (" + html_escape(v.name) + ")" : "") << "</td><td>"
      << html_escape(block_of(v.node)) << "</td>" << verdict_cell(v.foldable[0])
      << verdict_cell(v.foldable[1]) << "<td class=\"terms\">" << centered_list(v) << "</td><td>";
    std::string breaking;
    for (int m = 0; m < 2; ++m) {
      if (v.reason[m].empty() || (m == 1 && v.reason[1] == v.reason[0])) continue;
      s << "<p><b>" << mode_name(Mode(m)) << ":</b> " << html_escape(v.reason[m]) << "</p>";
      if (!v.path[m].empty() && breaking.find(v.path[m].front()) == std::string::npos)
        breaking += (breaking.empty() ? "" : "<br>") + node_link(g, layout, v.path[m].front());
    }
    s << "</td><td>" << breaking << "</td></tr>";
  }
  s << "</tbody></table>";
  std::vector<const Node*> opaque;
  for (const Node& n : g.nodes)
    if (n.op == Op::opaque) opaque.push_back(&n);
  if (!opaque.empty()) {
    s << "<p class=\"note\">Opaque ops (not modelled; no deviation passes them): ";
    for (size_t k = 0; k < opaque.size(); ++k)
      s << (k ? ", " : "") << node_link(g, layout, opaque[k]->name) << " ("
        << html_escape(opaque[k]->op_type) << ")";
    s << "</p>";
  }
  s << "</section>";
  return s.str();
}

std::string html_check_section(const CheckReport& r) {
  std::ostringstream s;
  s << "<section id=\"check\"><h2>Check: <span class=\"badge "
    << (r.outcome() == Outcome::holds ? "yes" : r.outcome() == Outcome::fails ? "no" : "maybe")
    << "\">" << outcome_name(r.outcome()) << "</span></h2><p class=\"summary\">mode "
    << mode_name(r.mode) << ", " << r.bits << " bits, " << r.trials << " trials, seed " << r.seed
    << "; " << r.layer_norms << " LayerNorms, " << r.foldable << " foldable in this mode; "
    << r.count(Outcome::holds) << " hold, " << r.count(Outcome::fails) << " fail, "
    << r.count(Outcome::inconclusive) << " inconclusive</p>";
  s << "<table id=\"checks\"><thead><tr><th>outcome</th><th>check</th><th>subject</th>"
       "<th>max abs</th><th>max rel</th><th>bound</th><th>bits</th><th>forced folds</th>"
       "<th>detail</th></tr></thead><tbody>";
  std::vector<std::string> labels;
  std::vector<double> margins;
  for (const CheckResult& c : r.results) {
    s << "<tr class=\"check\">" << outcome_cell(c.outcome) << "<td>" << c.kind << "</td><td><code>"
      << html_escape(c.subject) << "</code></td><td>" << num(c.max_abs) << "</td><td>"
      << num(c.max_rel) << "</td><td>" << num(c.bound) << "</td><td>" << c.bits << "</td><td>"
      << (c.kind == "ln_tight" ? std::to_string(c.attempts) : "") << "</td><td>"
      << html_escape(c.detail);
    if (c.divergence) {
      const Divergence& d = *c.divergence;
      s << "<p>" << html_escape(d.quantity) << " differs on trial " << d.trial << " (run seed "
        << d.seed << "): element " << d.element << " original " << num(d.original_value, "%.17g")
        << ", rewrite " << num(d.rewrite_value, "%.17g");
      if (!d.first_node.empty()) s << "; first node where they part: <code>" << html_escape(d.first_node) << "</code>";
      s << "</p>";
    }
    s << "</td></tr>";
    if (c.kind != "ln_tight" && c.bound > 0) {
      labels.push_back(c.kind + " " + c.subject);
      margins.push_back(c.max_abs > 0 ? std::log10(c.bound / c.max_abs) : NAN);
    }
  }
  s << "</tbody></table>";
  if (!labels.empty())
    s << "<div class=\"plotbox\">"
      << svg_bars("margin: log10(bound / max abs difference), higher is safer", labels,
                  {{"decimal digits of margin", "#43a047", margins}})
      << "<p class=\"note\">A check with no difference at all has no bar.</p></div>";
  if (!r.drift.empty()) {
    s << "<h3>Training-mode drift of the inference rewrite</h3><table id=\"drift\"><thead><tr>"
         "<th>LayerNorm</th><th>output</th><th>max abs</th><th>max rel</th></tr></thead><tbody>";
    for (const Drift& d : r.drift)
      s << "<tr><td><code>" << html_escape(d.layer_norm) << "</code></td><td>"
        << html_escape(d.output) << "</td><td>" << num(d.max_abs) << "</td><td>" << num(d.max_rel)
        << "</td></tr>";
    s << "</tbody></table>";
  }
  s << "</section>";
  return s.str();
}

std::string html_equiv_section(const EquivReport& r) {
  auto cls = [](Outcome o) { return o == Outcome::holds ? "yes" : o == Outcome::fails ? "no" : "maybe"; };
  std::ostringstream s;
  s << "<section id=\"equiv\"><h2>Equivalence: <span class=\"badge " << cls(r.outcome()) << "\">"
    << equiv_outcome_name(r.outcome()) << "</span></h2><p class=\"summary\">A <code>"
    << html_escape(r.a) << "</code>, B <code>" << html_escape(r.b) << "</code>; mode "
    << mode_name(r.mode) << ", " << r.bits << " bits, " << r.trials << " trials, seed " << r.seed
    << (r.grad ? ", input gradients compared" : "") << "; weight storage allowance "
    << html_escape(r.weight_storage) << "; " << r.count(Outcome::holds) << " equal, "
    << r.count(Outcome::fails) << " different, " << r.count(Outcome::inconclusive)
    << " inconclusive</p>";
  s << "<table id=\"quantities\"><thead><tr><th>outcome</th><th>quantity</th><th>shape</th>"
       "<th>elements</th><th>abs max</th><th>abs mean</th><th>abs median</th><th>abs p99</th>"
       "<th>rel max</th><th>rel mean</th><th>rel median</th><th>rel p99</th><th>bound</th>"
       "<th>bits</th><th>detail</th></tr></thead><tbody>";
  std::vector<std::string> labels;
  std::vector<double> margins;
  for (const EquivQuantity& q : r.quantities) {
    const ErrorStats& e = q.stats;
    s << "<tr class=\"quantity\"><td class=\"" << cls(q.outcome) << "\">"
      << equiv_outcome_name(q.outcome) << "</td><td><code>" << html_escape(e.quantity)
      << "</code></td><td>" << to_string(q.shape) << "</td><td>" << e.elements << "</td><td>"
      << num(e.max_abs) << "</td><td>" << num(e.mean_abs) << "</td><td>" << num(e.median_abs)
      << "</td><td>" << num(e.p99_abs) << "</td><td>" << num(e.max_rel) << "</td><td>"
      << num(e.mean_rel) << "</td><td>" << num(e.median_rel) << "</td><td>" << num(e.p99_rel)
      << "</td><td>" << num(e.bound) << "</td><td>" << e.bits << "</td><td>" << html_escape(q.detail);
    if (q.worst)
      s << "<p>worst on trial " << q.worst->trial << " (run seed " << q.worst->seed << "): element "
        << to_string(q.worst->index) << ", A " << num(q.worst->a, "%.17g") << ", B "
        << num(q.worst->b, "%.17g") << "</p>";
    s << "</td></tr>";
    if (e.bound > 0) {
      labels.push_back(e.quantity);
      margins.push_back(e.max_abs > 0 ? std::log10(e.bound / e.max_abs) : NAN);
    }
  }
  s << "</tbody></table>";
  if (!labels.empty())
    s << "<div class=\"plotbox\">"
      << svg_bars("margin: log10(bound / max abs difference), higher is safer; below 0: above the bound",
                  labels, {{"decimal digits of margin", "#43a047", margins}})
      << "<p class=\"note\">A quantity with no difference at all has no bar.</p></div>";
  s << "</section>";
  return s.str();
}

std::string html_bench_section(const nlohmann::json& bench) {
  std::ostringstream s;
  s << "<section id=\"bench\"><h2>Speed</h2>";
  if (bench.contains("blas")) {
    const nlohmann::json& b = bench.at("blas");
    s << "<p class=\"summary\">BLAS: " << html_escape(b.value("kind", "")) << " ("
      << html_escape(b.value("library", "")) << "), threads " << bench.value("threads", 0)
      << ", clock " << html_escape(bench.value("clock", "")) << "</p>";
  }
  if (bench.contains("kernels") && !bench.at("kernels").empty()) {
    s << "<h3>Norm kernels, float32 (ratios of medians; below 1: RMSNorm is faster)</h3>"
         "<table id=\"kernels\"><thead><tr><th>rows</th><th>cols</th>"
         "<th>RMSNorm / our LayerNorm</th><th>RMSNorm / ATen LayerNorm</th></tr></thead><tbody>";
    std::vector<std::string> labels;
    Series ours{"RMSNorm / our LayerNorm", "#1e88e5", {}}, aten{"RMSNorm / ATen LayerNorm", "#fb8c00", {}};
    for (const nlohmann::json& k : bench.at("kernels")) {
      const double a = k.value("rms_over_our_layer_norm", NAN), b = k.value("rms_over_aten_layer_norm", NAN);
      s << "<tr class=\"kernel\"><td>" << k.value("rows", 0) << "</td><td>" << k.value("cols", 0)
        << "</td><td>" << num(a) << "</td><td>" << num(b) << "</td></tr>";
      labels.push_back(std::to_string(k.value("rows", 0)) + " x " + std::to_string(k.value("cols", 0)));
      ours.values.push_back(a);
      aten.values.push_back(b);
    }
    s << "</tbody></table><div class=\"plotbox\">"
      << svg_bars("time ratio per shape (dashed: 1, equal speed)", labels, {ours, aten}, 1.0)
      << "</div>";
  }
  if (bench.contains("models") && !bench.at("models").empty()) {
    s << "<h3>Models, original against folded</h3><table id=\"models\"><thead><tr><th>model</th>"
         "<th>tokens</th><th>LayerNorms</th><th>folded</th><th>original median s</th>"
         "<th>folded median s</th><th>folded / original</th><th>original tokens/s</th>"
         "<th>folded tokens/s</th></tr></thead><tbody>";
    std::vector<std::string> labels;
    Series orig{"original", "#78909c", {}}, fold{"folded", "#43a047", {}};
    for (const nlohmann::json& m : bench.at("models")) {
      const nlohmann::json o = m.value("original", nlohmann::json::object());
      const nlohmann::json f = m.value("folded_model", nlohmann::json::object());
      const double om = o.value("median_s", NAN), fm = f.value("median_s", NAN);
      const std::string name = m.value("model", "");
      s << "<tr class=\"model\"><td><code>" << html_escape(name) << "</code></td><td>"
        << m.value("tokens_per_forward", 0) << "</td><td>" << m.value("layer_norms", 0)
        << "</td><td>" << m.value("folded", 0) << "</td><td>" << num(om, "%.4g") << "</td><td>"
        << num(fm, "%.4g") << "</td><td>" << num(fm / om) << "</td><td>"
        << num(o.value("tokens_per_s", NAN), "%.4g") << "</td><td>"
        << num(f.value("tokens_per_s", NAN), "%.4g") << "</td></tr>";
      labels.push_back(name + " (" + std::to_string(m.value("tokens_per_forward", 0)) + " tokens)");
      orig.values.push_back(om * 1e3);
      fold.values.push_back(fm * 1e3);
    }
    s << "</tbody></table><div class=\"plotbox\">"
      << svg_bars("median forward time, ms", labels, {orig, fold}) << "</div>";
  }
  s << "</section>";
  return s.str();
}

std::string html_page(const std::string& title, const std::vector<std::string>& sections) {
  std::ostringstream s;
  s << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
       "<link rel=\"icon\" href=\"data:,\"><title>"
    << html_escape(title) << "</title><style>\n"
    << "body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em;color:#212121}"
       "h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.2em;margin:1.2em 0 .4em}"
       "h3{font-size:1.05em}code{font:12px ui-monospace,monospace}"
       "table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #cfd8dc;"
       "padding:3px 6px;text-align:left;vertical-align:top}th{background:#eceff1}"
       "td p{margin:0 0 .3em}td.yes{background:#c8e6c9}td.no{background:#ffcdd2}"
       "td.maybe{background:#fff9c4}tr.ln.fold td:first-child{border-left:5px solid #2e7d32}"
       "tr.ln.inference td:first-child,tr.ln.training td:first-child{border-left:5px solid #e65100}"
       "tr.ln.keep td:first-child{border-left:5px solid #c62828}td.terms{max-width:28em}"
       ".graph{overflow:auto;max-height:85vh;border:1px solid #cfd8dc;padding:4px;background:#fff}"
       ".graph svg{max-width:100%;height:auto}"
       ".chip{display:inline-block;padding:1px 8px;border-radius:8px;border:2px solid;margin-right:4px}"
       ".chip.fold{background:#c8e6c9;border-color:#2e7d32}.chip.inference{background:#ffe0b2;"
       "border-color:#e65100}.chip.keep{background:#ffcdd2;border-color:#c62828}"
       ".chip.centered{background:#e3f2fd;border-color:#1565c0}.chip.breaks{background:#fff;"
       "border-color:#c62828;border-style:dashed}.badge{padding:1px 8px;border-radius:6px}"
       ".badge.yes{background:#c8e6c9}.badge.no{background:#ffcdd2}.badge.maybe{background:#fff9c4}"
       ".note{color:#546e7a}.plot-title{font-weight:600;font-size:13px}.plot-legend,.plot-label,"
       ".plot-value{font-size:11px}.plotbox{overflow-x:auto}\n"
    << "</style></head><body><h1>" << html_escape(title) << "</h1>";
  for (const std::string& sec : sections) s << sec << "\n";
  s << "<p class=\"note\">Written by lnverify. Field meanings: docs/spec/reports.md.</p>"
       "</body></html>\n";
  return s.str();
}

}  // namespace lnv::report
