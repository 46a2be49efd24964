#include "reports/audit_diff.h"

#include <map>
#include <sstream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lnv::report {
namespace {

constexpr const char* kModes[2] = {"inference", "training"};

// The model and the LN verdicts of an audit report, in report order.
struct ReadReport {
  std::string model;
  std::vector<std::pair<std::string, std::array<AuditVerdict, 2>>> lns;
};

const nlohmann::json& field(const nlohmann::json& j, const std::string& key,
                            const std::string& file, const std::string& at) {
  if (!j.is_object() || !j.contains(key))
    throw ModelError(file + ": " + at + "/" + key, "missing; is this an lnverify audit report (lnverify audit --json)?");
  return j.at(key);
}

template <class T>
T typed(const nlohmann::json& j, const std::string& key, const std::string& file, const std::string& at,
        const char* type) {
  const nlohmann::json& v = field(j, key, file, at);
  const bool ok = std::is_same_v<T, bool> ? v.is_boolean() : v.is_string();
  if (!ok) throw ModelError(file + ": " + at + "/" + key, std::string("expected a ") + type + ", got " + v.dump());
  return v.get<T>();
}

// Throws ModelError naming `file` and the JSON path of what is missing or mistyped.
ReadReport read_report(const nlohmann::json& j, const std::string& file) {
  if (!j.is_object()) throw ModelError(file, "not an lnverify audit report: the JSON is not an object");
  const std::string format = j.contains("format") && j.at("format").is_string() ? j.at("format").get<std::string>() : "";
  if (format != "lnverify.report")
    throw ModelError(file + ": /format",
                     "not an lnverify audit report (lnverify audit --json writes \"lnverify.report\"; this is " +
                         (format.empty() ? std::string("missing") : "\"" + format + "\"") + ")");
  const nlohmann::json& version = field(j, "version", file, "");
  if (version != 1)
    throw ModelError(file + ": /version", "audit report version " + version.dump() + "; this lnverify reads version 1");
  ReadReport r;
  r.model = typed<std::string>(j, "model", file, "", "string");
  const nlohmann::json& lns = field(j, "layer_norms", file, "");
  if (!lns.is_array()) throw ModelError(file + ": /layer_norms", "expected an array");
  for (size_t k = 0; k < lns.size(); ++k) {
    const std::string at = "/layer_norms/" + std::to_string(k);
    std::array<AuditVerdict, 2> v;
    for (int m = 0; m < 2; ++m) {
      v[m].foldable = typed<bool>(field(lns[k], "foldable", file, at), kModes[m], file, at + "/foldable", "boolean");
      v[m].reason = typed<std::string>(field(lns[k], "reasons", file, at), kModes[m], file, at + "/reasons", "string");
    }
    r.lns.emplace_back(typed<std::string>(lns[k], "name", file, at, "string"), v);
  }
  return r;
}

std::string verdicts(const std::array<AuditVerdict, 2>& v) {
  return std::string("inference ") + (v[0].foldable ? "yes" : "no") + ", training " +
         (v[1].foldable ? "yes" : "no");
}

}  // namespace

bool is_regression(Change c) { return c != Change::same && c != Change::improved; }

Change LnDiff::change(int mode) const {
  if (!in_baseline) return Change::appeared;
  if (!in_current) return Change::disappeared;
  const AuditVerdict &b = before[mode], &a = after[mode];
  if (b.foldable && !a.foldable) return Change::regressed;
  if (!b.foldable && a.foldable) return Change::improved;
  if (b.reason != a.reason) return Change::reason_changed;
  return Change::same;
}

Change LnDiff::change() const {
  const Change i = change(0), t = change(1);
  if (is_regression(i)) return i;
  if (is_regression(t)) return t;
  return i == Change::improved ? i : t;
}

bool AuditDiff::regressed() const {
  for (const LnDiff& l : layer_norms)
    if (is_regression(l.change())) return true;
  return false;
}

size_t AuditDiff::count(Change c) const {
  size_t n = 0;
  for (const LnDiff& l : layer_norms) n += l.change() == c;
  return n;
}

AuditDiff diff_audits(const nlohmann::json& baseline, const nlohmann::json& current,
                      const std::string& baseline_name, const std::string& current_name) {
  const ReadReport old_r = read_report(baseline, baseline_name);
  const ReadReport new_r = read_report(current, current_name);
  if (old_r.model != new_r.model)
    throw ModelError(baseline_name + ": /model", "the baseline audits model '" + old_r.model +
                                                     "', not '" + new_r.model + "'");
  AuditDiff d;
  d.model = new_r.model;
  d.baseline = baseline_name;
  std::map<std::string, size_t> index;
  for (const auto& [name, v] : old_r.lns) {
    index[name] = d.layer_norms.size();
    d.layer_norms.push_back({name, true, false, v, {}});
  }
  for (const auto& [name, v] : new_r.lns) {
    auto it = index.find(name);
    if (it == index.end()) {
      d.layer_norms.push_back({name, false, true, {}, v});
      continue;
    }
    d.layer_norms[it->second].in_current = true;
    d.layer_norms[it->second].after = v;
  }
  return d;
}

std::string to_text(const AuditDiff& d) {
  std::ostringstream os;
  for (const LnDiff& l : d.layer_norms) {
    const Change c = l.change();
    if (c == Change::same) continue;
    os << (is_regression(c) ? "REGRESSION  " : "improvement ") << l.name << ": ";
    if (c == Change::appeared) {
      os << "not in the baseline (" << verdicts(l.after) << ")\n";
      continue;
    }
    if (c == Change::disappeared) {
      os << "in the baseline (" << verdicts(l.before) << "), not in this model\n";
      continue;
    }
    bool first = true;
    for (int m = 0; m < 2; ++m) {
      const Change cm = l.change(m);
      if (cm == Change::same) continue;
      os << (first ? "" : "; ") << kModes[m] << " ";
      first = false;
      if (cm == Change::improved) os << "no -> yes";
      if (cm == Change::regressed) os << "yes -> no (" << l.after[m].reason << ")";
      if (cm == Change::reason_changed)
        os << "still no, reason was \"" << l.before[m].reason << "\", is \"" << l.after[m].reason << "\"";
    }
    os << "\n";
  }
  const size_t regressions = d.count(Change::regressed) + d.count(Change::reason_changed) +
                             d.count(Change::appeared) + d.count(Change::disappeared);
  os << "against " << d.baseline << ": " << regressions << " regression(s) ("
     << d.count(Change::regressed) << " no longer fold, " << d.count(Change::reason_changed)
     << " reason changed, " << d.count(Change::appeared) << " appeared, "
     << d.count(Change::disappeared) << " disappeared), " << d.count(Change::improved)
     << " improvement(s), " << d.count(Change::same) << " unchanged\n";
  return os.str();
}

}  // namespace lnv::report
