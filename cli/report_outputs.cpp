#include "cli/report_outputs.h"

#include "cli/output_paths.h"
#include "core/error.h"
#include "core/file_io.h"
#include "reports/graph_dot.h"
#include "reports/graphviz.h"
#include "reports/html_report.h"

namespace lnv::cli {

void add_report_outputs(CLI::App& sub, ReportOutputs& out, bool with_dot) {
  sub.add_option("--html", out.html,
                 "also write a self-contained HTML report here (graph drawn by Graphviz's dot)");
  if (with_dot) sub.add_option("--dot", out.dot, "also write the coloured graph as Graphviz DOT here");
}

void prepare_report_outputs(const ReportOutputs& out, const std::string& model_path, const Graph* g) {
  if (g) {
    refuse_input_as_output("--html", out.html, model_path, *g);
    refuse_input_as_output("--dot", out.dot, model_path, *g);
  }
  if (!out.html.empty() && report::find_dot().empty())
    throw ModelError("--html", "Graphviz's `dot` program is not on PATH; the HTML report draws "
                               "the graph with it (Debian: apt-get install graphviz)");
}

namespace {
std::string graph_section(const Graph& g, const FoldPlan& plan) {
  return report::html_audit_section(g, plan, report::render_svg(report::graph_dot(g, plan), "--html"));
}
}  // namespace

void write_report_outputs(const ReportOutputs& out, const Graph* g, const FoldPlan* plan,
                          const std::string& title, const std::vector<std::string>& sections) {
  if (!out.dot.empty() && g && plan) write_file_atomically(out.dot, report::graph_dot(*g, *plan));
  if (out.html.empty()) return;
  std::vector<std::string> all;
  if (g && plan) all.push_back(graph_section(*g, *plan));
  all.insert(all.end(), sections.begin(), sections.end());
  write_file_atomically(out.html, report::html_page(title, all));
}

}  // namespace lnv::cli
