// The HTML report: one self-contained page (inline CSS and SVG, no script, no network)
// that a person reads in a browser or a CI system keeps as an artifact.
//
//   std::vector<std::string> sections = {html_audit_section(g, plan, render_svg(dot, "--html"))};
//   write_file_atomically(path, html_page("audit " + g.name, sections));
//
// The audit section draws the graph (graph_dot.h) and lists every LayerNorm in a table
// with its verdicts and reasons; `check` adds its checks, `bench` its timing tables and
// bar plots drawn here as SVG. Contents: docs/spec/reports.md, "HTML and DOT".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/analysis/fold_plan.h"
#include "core/graph.h"
#include "reports/check_report.h"
#include "reports/equiv_report.h"
#include "reports/graph_dot.h"

namespace lnv::report {

// `text` with &, <, >, " and ' escaped.
std::string html_escape(std::string_view text);

// The graph (`svg` from render_svg of graph_dot(g, plan, options); empty: no drawing), the
// legend, the verdict table (one <tr class="ln ..."> per LN) and the opaque ops.
std::string html_audit_section(const Graph& g, const FoldPlan& plan, const std::string& svg,
                               const DotOptions& options = {});

// The outcome, one table row per check with its measured differences, bound and precision,
// a plot of each check's margin (decimal digits between the difference and its bound), the
// divergences and the training drift.
std::string html_check_section(const CheckReport& r);

// The two models, the outcome, one table row per compared quantity with its outcome and
// error statistics, a plot of each quantity's margin, and the worst element of each
// different one.
std::string html_equiv_section(const EquivReport& r);

// `bench` is the report `lnverify bench --json` writes: the BLAS, the kernel table and its
// ratio plot, the model timings and their plot.
std::string html_bench_section(const nlohmann::json& bench);

// A whole page around the sections.
std::string html_page(const std::string& title, const std::vector<std::string>& sections);

}  // namespace lnv::report
