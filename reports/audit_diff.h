// The regression gate: two audit reports (`"format": "lnverify.report"`) of one model
// compared LN by LN and mode by mode (docs/ci.md).
//
//   AuditDiff d = diff_audits(baseline_json, current_json, "OLD.json");
//   d.regressed()  // an LN folded in the baseline and no longer does, appeared or
//                  // disappeared, or a "no" changed its reason
//
// A baseline that is not an audit report, or is of another model, is a ModelError naming
// the file and the JSON path.
#pragma once

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace lnv::report {

// One LN's verdict in one mode, as an audit report states it.
struct AuditVerdict {
  bool foldable = false;
  std::string reason;  // empty for a "yes"
};

// What became of one LN in one mode between the baseline and the current report.
enum class Change {
  same,            // same verdict, same reason
  improved,        // "no" -> "yes"
  regressed,       // "yes" -> "no"
  reason_changed,  // "no" -> "no" for another reason
  appeared,        // not in the baseline
  disappeared,     // not in the current report
};
// Whether the gate fails on it: everything but same and improved.
bool is_regression(Change c);

struct LnDiff {
  std::string name;
  bool in_baseline = false, in_current = false;
  std::array<AuditVerdict, 2> before, after;  // indexed by Mode
  Change change(int mode) const;
  // The worst change over both modes (regression first, then improvement).
  Change change() const;
};

struct AuditDiff {
  std::string model, baseline;      // the model's name, the baseline's file name
  std::vector<LnDiff> layer_norms;  // baseline order, then LNs new in the current report
  bool regressed() const;
  size_t count(Change c) const;     // LNs whose change() is c
};

// Throws ModelError("<baseline_name>: <json path>", ...) for a baseline that is not a
// version-1 audit report or is of another model; `current` is a report lnverify wrote
// (or, for `lnverify diff`, a file checked the same way under `current_name`).
AuditDiff diff_audits(const nlohmann::json& baseline, const nlohmann::json& current,
                      const std::string& baseline_name, const std::string& current_name);

// One line per LN that changed, then a summary line.
std::string to_text(const AuditDiff& d);

}  // namespace lnv::report
