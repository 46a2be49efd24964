// The human-readable reports a command writes besides its text: `--html FILE` (a
// self-contained page, reports/html_report.h) and `--dot FILE` (the coloured graph as
// Graphviz DOT, reports/graph_dot.h).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/analysis/fold_plan.h"
#include "core/graph.h"

namespace lnv::cli {

struct ReportOutputs {
  std::string html, dot;
};

// Adds --html (and --dot when `with_dot`) writing into `out`.
void add_report_outputs(CLI::App& sub, ReportOutputs& out, bool with_dot);

// Before the command's work: refuses an output path naming the model or its weights
// (exit 2), and a missing Graphviz `dot` when --html is given (exit 2: the page cannot be
// drawn; docs/spec/decisions.md), so that minutes of checking never end in that error.
void prepare_report_outputs(const ReportOutputs& out, const std::string& model_path, const Graph* g);

// Writes --dot (the graph of `g`) and --html (`title` over the audit section of `g` and
// `plan`, when given, then `sections`), each atomically.
void write_report_outputs(const ReportOutputs& out, const Graph* g, const FoldPlan* plan,
                          const std::string& title, const std::vector<std::string>& sections);

}  // namespace lnv::cli
