// The audit report: every LayerNorm of a model with its verdict in both modes, the terms
// its fold centers and, for a "no", the reason. JSON (`"format": "lnverify.report"`,
// docs/spec/format.md "Reports") and a text table.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/analysis/fold_plan.h"
#include "core/graph.h"
#include "reports/text_style.h"

namespace lnv::report {

// Estimated arithmetic of the model's norms per forward pass, before and after folding
// the LNs foldable in the plan's mode. Per normalized element: a LayerNorm does 5
// operations (mean: add; subtract; variance: multiply + add; scale) in 3 passes over the
// row, an RMSNorm 3 (square + add; scale) in 2 passes; an affine weight or bias adds 1
// each to both, except a bias the fold moves into the readers (LnVerdict::bias), which
// costs the fold nothing. Norms already rms_norm in the model are counted on both sides.
struct NormCost {
  double before = 0, after = 0;  // operations
  double removed_share() const { return before > 0 ? (before - after) / before : 0.0; }
};
NormCost norm_cost(const Graph& g, const FoldPlan& plan);

// The LN entries use the plan's terms for "centered" (names of producers and params).
nlohmann::json audit_json(const Graph& g, const FoldPlan& plan);

// A table: one row per LN (name, both verdicts, where the fold's bias goes, what is
// centered), each kept bias and each "no" followed by its reason; then the one-line summary. Columns are aligned by display width; verdicts
// are painted with options.paint. Verbose: every centered term (not the first four) and,
// for each "no", the path from the breaking node to the LN.
std::string audit_text(const Graph& g, const FoldPlan& plan, const TextOptions& options = {});

// The same as a Markdown table a paper can take: one row per LN (name, both verdicts,
// what is centered, why not), then the summary line.
std::string audit_markdown(const Graph& g, const FoldPlan& plan);

// "k of n LayerNorms foldable (inference), j (training); ~x% of norm arithmetic removed"
std::string audit_summary(const Graph& g, const FoldPlan& plan);

}  // namespace lnv::report
