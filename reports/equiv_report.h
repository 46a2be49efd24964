// The result of `lnverify equiv A B` (checkers/model_equivalence.h) as plain structs, with
// JSON (`"format": "lnverify.equiv"`, docs/spec/reports.md) and a text summary.
//
// Per compared quantity (an output, or with --grad the gradient of the loss with respect
// to a float input) its error statistics and its outcome: *equal* (within the rounding
// bound), *different* (a difference that stays at twice the precision) or *inconclusive*.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/mode.h"
#include "core/shape.h"
#include "reports/check_report.h"
#include "reports/error_stats.h"

namespace lnv::report {

// "equal", "different", "inconclusive": Outcome holds, fails, inconclusive in equiv's words.
std::string_view equiv_outcome_name(Outcome o);

// Where a quantity differs most: the trial, its run seed and the element.
struct WorstElement {
  int trial = 0;
  uint64_t seed = 0;     // the run seed of that trial (inputs, dropout masks, cotangents)
  int64_t element = 0;   // flat row-major index
  Shape index;           // the same element as an index into `shape`
  double a = 0.0, b = 0.0;  // the two models' values there
};

struct EquivQuantity {
  ErrorStats stats;          // quantity name, differences, bound, bits
  Shape shape;
  Outcome outcome = Outcome::holds;
  std::string detail;        // one line: why it differs, is inconclusive or equal only up to storage
  bool up_to_weight_storage = false;  // equal: the difference exceeds the rounding bound
                                      // but not storage_bound
  double storage_bound = 0.0;  // the bound for weights rounded to --weight-bits (0: not needed)
  std::optional<WorstElement> worst;  // a different quantity
};

struct EquivReport {
  std::string a, b;          // the two models as given
  Mode mode = Mode::inference;
  unsigned bits = 0;
  int trials = 0;
  uint64_t seed = 0;
  bool grad = false;
  unsigned weight_bits = 0;  // of the storage allowance; 0 with --strict or the same weights
  std::string weight_storage;  // the allowance in words: "24 bits (the float32 storage ...)"
  std::vector<std::string> dropouts;  // training: the dropout nodes whose masks are shared
  std::vector<EquivQuantity> quantities;  // outputs in A's order, then input gradients
  Outcome outcome() const;   // the worst
  size_t count(Outcome o) const;
};

void to_json(nlohmann::json& j, const WorstElement& w);
void to_json(nlohmann::json& j, const EquivQuantity& q);
void to_json(nlohmann::json& j, const EquivReport& r);

// One line per quantity, the worst element of each different one, and a result line.
std::string to_text(const EquivReport& r);

// Markdown: a line with the models and settings, a table with one row per quantity (its
// outcome, elements and error statistics), the worst element of each different one, and
// `**Result: <outcome>**`.
std::string to_markdown(const EquivReport& r);

}  // namespace lnv::report
