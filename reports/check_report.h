// The results of the verdict-vs-truth checks (checkers/equivalence.h) as plain structs,
// with JSON (`"format": "lnverify.check"`) and a text summary.
//
// Three outcomes, never two (as Alive2 separates them): a check *holds*, *fails* (the rewrite is wrong,
// or a "not foldable" verdict is not tight), or is *inconclusive* (the precision could not
// separate a genuine difference from rounding, or a value was not finite).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/mode.h"
#include "reports/error_stats.h"
#include "reports/text_style.h"

namespace lnv::report {

enum class Outcome { holds, fails, inconclusive };
std::string_view outcome_name(Outcome o);
// The worse of two outcomes: fails > inconclusive > holds.
Outcome worse(Outcome a, Outcome b);

// Where an original and a rewrite part: what differs, on which trial, and the first node
// (topological order of the original) from which a chain of differing nodes reaches it.
struct Divergence {
  std::string quantity;  // "output 'y'", "gradient of param 'W1'", "gradient of input 'x'"
  int trial = 0;
  uint64_t seed = 0;  // the run seed of that trial (inputs, dropout masks, cotangents)
  double max_abs = 0.0;
  std::string first_node;          // empty when the difference starts at a param/input
  std::vector<std::string> chain;  // differing nodes from first_node to the output
  double original_value = 0.0, rewrite_value = 0.0;  // at the worst element
  int64_t element = 0;                              // flat index of the worst element
};

// One check: the exactness of one LN's fold, the tightness of one "not foldable" verdict,
// or the exactness of the whole plan.
struct CheckResult {
  std::string kind;     // "ln_exact" | "ln_tight" | "plan_exact"
  std::string subject;  // the LN's name, or "plan"
  Outcome outcome = Outcome::holds;
  std::string detail;   // one line a person can act on
  // Measured worst difference between original and rewrite over trials, outputs and (in
  // training) gradients; max_rel divides by max(1, the largest magnitude compared).
  double max_abs = 0.0, max_rel = 0.0;
  double bound = 0.0;   // the rounding-error bound those were judged against
  unsigned bits = 0;    // the precision the verdict was reached at (may be escalated)
  int attempts = 1;     // ln_tight: forced folds tried
  std::vector<std::string> centered;  // the terms centered (the failing attempt for tight)
  std::optional<Divergence> divergence;  // a failing ln_exact/plan_exact
  // ln_exact, plan_exact: per output (and, in training, per gradient) the statistics of
  // the differences over every element of every trial, at the precision of the outcome.
  std::vector<ErrorStats> error_stats;
};

// Training-mode drift of the inference rewrite of an LN foldable in inference only.
struct Drift {
  std::string layer_norm;
  std::string output;
  double max_abs = 0.0, max_rel = 0.0;
};

struct CheckReport {
  std::string model;
  Mode mode = Mode::inference;
  unsigned bits = 0;
  int trials = 0;
  uint64_t seed = 0;
  size_t layer_norms = 0, foldable = 0;
  std::vector<CheckResult> results;
  std::vector<Drift> drift;  // training mode only
  Outcome outcome() const;   // the worst result
  size_t count(Outcome o) const;
};

void to_json(nlohmann::json& j, const Divergence& d);
void to_json(nlohmann::json& j, const CheckResult& r);
void to_json(nlohmann::json& j, const Drift& d);
void to_json(nlohmann::json& j, const CheckReport& r);

// A human-readable summary: one line per check (columns aligned by display width, the
// outcome painted with options.paint), details of failures, the drift table. Verbose: the
// detail and the centered terms of every check, not only of failures.
std::string to_text(const CheckReport& r, const TextOptions& options = {});

// The last line of to_text: "result: holds (6 hold, 0 fail, 0 inconclusive)".
std::string result_line(const CheckReport& r);

// Markdown a paper can take: the run's settings, a table with one row per check, a table
// of the error statistics of every exactness check (one row per output or gradient), and
// the result line.
std::string to_markdown(const CheckReport& r);

// `text` as one Markdown table cell: '|' escaped, line breaks as spaces, "-" when empty.
std::string markdown_cell(const std::string& text);

}  // namespace lnv::report
