// Fuzz target (fuzz/targets.h): the whole pipeline on every model.json that loads and is small
// (at most kMaxValues values in inputs, params and nodes together): audit in both modes,
// fold, the audit report, a double-precision evaluation of the original and the folded
// graph, and the folded model written and read back.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/eval/evaluator.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/targets.h"
#include "reports/audit_report.h"

namespace lnv::fuzz {

namespace {

constexpr double kMaxValues = 1 << 14;

double values_of(const lnv::Graph& g) {
  double n = 0;
  for (const lnv::Input& in : g.inputs) n += double(lnv::numel(in.shape));
  for (const lnv::Param& p : g.params) n += double(lnv::numel(p.shape));
  for (const lnv::Shape& s : g.node_shapes) n += double(lnv::numel(s));
  return n;
}

void evaluate_both(const lnv::Graph& g, lnv::Mode mode) {
  const lnv::FoldPlan plan = lnv::detect_foldable(g, mode);
  (void)lnv::report::audit_text(g, plan);
  (void)lnv::report::audit_json(g, plan).dump();
  const lnv::Graph folded = lnv::apply_fold(g, plan);
  lnv::eval::RunOptions ro;
  ro.mode = mode;
  ro.seed = 7;
  for (const lnv::Graph* m : {&g, &folded}) {
    const auto ev = lnv::eval::evaluate(*m, lnv::eval::random_inputs<double>(*m, ro.seed), ro);
    if (mode == lnv::Mode::training) (void)lnv::eval::gradients(*m, ev, ro);
  }
  // The folded model is a valid model.json.
  const std::string& dir = lnv::fuzz::scratch_dir();
  (void)lnv::parse_model(lnv::model_to_json(folded, dir), dir, lnv::fuzz::fuzz_load_options());
}

}  // namespace

int pipeline(const uint8_t* data, size_t size) {
  lnv::Graph g;
  try {
    const std::string text(reinterpret_cast<const char*>(data), size);
    g = lnv::parse_model(lnv::parse_json(text, "fuzz.json", "invalid JSON"),
                         lnv::fuzz::scratch_dir(), lnv::fuzz::fuzz_load_options());
  } catch (const lnv::ModelError&) {
    return 0;
  }
  if (values_of(g) > kMaxValues) return 0;
  for (lnv::Mode mode : {lnv::Mode::inference, lnv::Mode::training}) {
    try {
      evaluate_both(g, mode);
    } catch (const lnv::ModelError&) {
      // e.g. an index input whose ids the evaluator refuses; not a finding
    }
  }
  return 0;
}

}  // namespace lnv::fuzz
