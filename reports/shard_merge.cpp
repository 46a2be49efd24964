#include "reports/shard_merge.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "core/error.h"

namespace lnv::report {
namespace {

using json = nlohmann::json;

struct ShardIndex {
  int64_t index = 0, count = 1;
  // Items of 0..total-1 with i mod count = index (cli/shard.h).
  int64_t share(int64_t total) const { return total > index ? (total - index + count - 1) / count : 0; }
};

ShardIndex shard_of(const ShardFile& s) {
  const json& settings = s.json.at("settings");
  if (!settings.contains("shard")) return {};
  const json& j = settings.at("shard");
  const ShardIndex k{j.at("index").get<int64_t>(), j.at("count").get<int64_t>()};
  if (k.count < 1 || k.index < 0 || k.index >= k.count)
    throw ModelError(s.file, "settings.shard: expected 0 <= index < count");
  return k;
}

json without_shard(json settings) {
  settings.erase("shard");
  return settings;
}

// The shards in shard order, once each shard 0..N-1 of one N is found with the settings
// (and `same` top-level fields) of the first.
std::vector<const ShardFile*> one_campaign(const std::vector<ShardFile>& shards,
                                           const std::vector<std::string>& same) {
  const ShardFile& first = shards.front();
  const json settings = without_shard(first.json.at("settings"));
  const int64_t count = shard_of(first).count;
  std::vector<const ShardFile*> by_index(size_t(count), nullptr);
  for (const ShardFile& s : shards) {
    const json mine = without_shard(s.json.at("settings"));
    for (const auto& [key, value] : settings.items())
      if (!mine.contains(key) || mine.at(key) != value)
        throw ModelError(s.file, "settings." + key + " is " + (mine.contains(key) ? mine.at(key).dump() : "absent") +
                                     ", but " + value.dump() + " in " + first.file +
                                     ": not shards of one campaign");
    if (mine.size() != settings.size())
      throw ModelError(s.file, "settings differ from those of " + first.file + ": not shards of one campaign");
    for (const std::string& key : same)
      if (s.json.at(key) != first.json.at(key))
        throw ModelError(s.file, key + " is " + s.json.at(key).dump() + ", but " + first.json.at(key).dump() +
                                     " in " + first.file + ": not shards of one campaign");
    const ShardIndex k = shard_of(s);
    if (k.count != count)
      throw ModelError(s.file, "settings.shard.count is " + std::to_string(k.count) + ", but " +
                                   std::to_string(count) + " in " + first.file);
    if (by_index[size_t(k.index)])
      throw ModelError(s.file, "shard " + std::to_string(k.index) + "/" + std::to_string(count) +
                                   " is also " + by_index[size_t(k.index)]->file);
    by_index[size_t(k.index)] = &s;
  }
  for (int64_t k = 0; k < count; ++k)
    if (!by_index[size_t(k)])
      throw ModelError(first.file, "shard " + std::to_string(k) + "/" + std::to_string(count) +
                                       " is missing among the reports given");
  return by_index;
}

// The fuzz campaign of its shards.
json merge_fuzz(const std::vector<const ShardFile*>& shards) {
  const json& settings = shards.front()->json.at("settings");
  const int64_t cases = settings.at("cases").get<int64_t>();
  const uint64_t seed = settings.at("seed").get<uint64_t>();
  const bool keep_going = settings.at("keep_going").get<bool>();
  // Without --keep-going the first failing case of all stops the campaign.
  int64_t checked = cases;
  for (const ShardFile* s : shards)
    for (const json& f : s->json.at("failures"))
      if (!keep_going) checked = std::min(checked, f.at("case").get<int64_t>() + 1);
  std::vector<std::pair<int64_t, json>> failures;
  std::vector<std::pair<uint64_t, uint64_t>> inconclusive;  // (case, seed)
  uint64_t nodes = 0, layer_norms = 0, shards_checked = 0;
  double seconds = 0;
  for (const ShardFile* s : shards) {
    const json& r = s->json;
    const ShardIndex k = shard_of(*s);
    const int64_t mine = r.at("checked").get<int64_t>();
    // The cases a shard checked are its first `mine`: all of its share, or those up to
    // the failing case that stopped it.
    int64_t expected = k.share(cases);
    if (r.at("stopped_early").get<bool>()) {
      if (r.at("failures").empty()) throw ModelError(s->file, "stopped_early without a failing case");
      expected = k.share(r.at("failures").back().at("case").get<int64_t>() + 1);
    }
    if (mine != expected)
      throw ModelError(s->file, "checked is " + std::to_string(mine) + ", but shard " +
                                    std::to_string(k.index) + "/" + std::to_string(k.count) +
                                    " of " + std::to_string(cases) + " cases checks " + std::to_string(expected));
    if (mine < k.share(checked))
      throw InternalError("merge: a shard stopped before the campaign's first failing case");
    auto own = [&](int64_t i, const char* field) {
      if (i < 0 || i >= cases || i % k.count != k.index)
        throw ModelError(s->file, std::string(field) + ": case " + std::to_string(i) + " is not this shard's");
    };
    for (const json& f : r.at("failures")) {
      const int64_t i = f.at("case").get<int64_t>();
      own(i, "failures");
      if (i < checked) failures.emplace_back(i, f);
    }
    for (const json& j : r.at("inconclusive_seeds")) {
      const uint64_t case_seed = j.get<uint64_t>();
      const auto i = int64_t(case_seed - seed);  // case i has seed + i (mod 2^64)
      own(i, "inconclusive_seeds");
      if (i < checked) inconclusive.emplace_back(uint64_t(i), case_seed);
    }
    // The shard's means times its cases: its sums (exact below 2^52).
    nodes += uint64_t(std::llround(r.at("nodes_per_case").get<double>() * double(mine)));
    layer_norms += uint64_t(std::llround(r.at("layer_norms_per_case").get<double>() * double(mine)));
    shards_checked += uint64_t(mine);
    seconds += r.at("seconds").get<double>();
  }
  std::sort(failures.begin(), failures.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::sort(inconclusive.begin(), inconclusive.end());
  json merged = shards.front()->json;
  merged["settings"] = without_shard(settings);
  json failure_list = json::array(), seeds = json::array();
  size_t wrong = 0;
  for (const auto& [i, f] : failures) {
    failure_list.push_back(f);
    wrong += f.at("kind") == "wrong_yes";
  }
  for (const auto& [i, case_seed] : inconclusive) seeds.push_back(case_seed);
  const size_t fails = failures.size();
  merged["outcome"] = fails == 0 ? "holds" : "fails";
  merged["checked"] = size_t(checked);
  merged["stopped_early"] = checked < cases;
  merged["counts"] = {{"holds", size_t(checked) - fails - inconclusive.size()},
                      {"fails", fails},
                      {"inconclusive", inconclusive.size()},
                      {"wrong_yes", wrong},
                      {"over_cautious_no", fails - wrong}};
  merged["nodes_per_case"] = shards_checked ? nodes / double(shards_checked) : 0.0;
  merged["layer_norms_per_case"] = shards_checked ? layer_norms / double(shards_checked) : 0.0;
  merged["seconds"] = seconds;
  merged["failures"] = failure_list;
  merged["inconclusive_seeds"] = seeds;
  return merged;
}

Outcome outcome_of(const std::string& name, const std::string& file) {
  for (Outcome o : {Outcome::holds, Outcome::fails, Outcome::inconclusive})
    if (outcome_name(o) == name) return o;
  throw ModelError(file, "reports: unknown outcome '" + name + "'");
}

// The check list of its shards.
json merge_check_lists(const std::vector<const ShardFile*>& shards) {
  const size_t models = shards.front()->json.at("models").get<size_t>();
  std::vector<std::optional<json>> by_index(models);
  for (const ShardFile* s : shards) {
    const ShardIndex k = shard_of(*s);
    for (const json& entry : s->json.at("reports")) {
      const size_t i = entry.at("index").get<size_t>();
      if (i >= models || int64_t(i) % k.count != k.index)
        throw ModelError(s->file, "reports: model " + std::to_string(i) + " is not this shard's");
      if (by_index[i]) throw ModelError(s->file, "reports: model " + std::to_string(i) + " twice");
      by_index[i] = entry;
    }
    if (int64_t(s->json.at("reports").size()) != k.share(int64_t(models)))
      throw ModelError(s->file, "reports: " + std::to_string(s->json.at("reports").size()) +
                                    " models, but the shard has " + std::to_string(k.share(int64_t(models))));
  }
  json merged = shards.front()->json;
  merged["settings"] = without_shard(merged.at("settings"));
  json reports = json::array();
  size_t counts[3] = {0, 0, 0};
  Outcome worst = Outcome::holds;
  for (size_t i = 0; i < models; ++i) {
    const Outcome o = outcome_of(by_index[i]->at("outcome").get<std::string>(), shards.front()->file);
    ++counts[static_cast<int>(o)];
    worst = worse(worst, o);
    reports.push_back(*by_index[i]);
  }
  merged["reports"] = reports;
  merged["outcome"] = outcome_name(worst);
  merged["counts"] = {{"holds", counts[0]}, {"fails", counts[1]}, {"inconclusive", counts[2]}};
  return merged;
}

std::vector<JunitSuite> merge_fuzz_junit(const json& merged, const std::vector<JunitFile>& files) {
  const uint64_t seed = merged.at("settings").at("seed").get<uint64_t>();
  const auto cases = merged.at("settings").at("cases").get<uint64_t>();
  const auto checked = merged.at("checked").get<uint64_t>();
  JunitSuite suite;
  std::map<uint64_t, JunitCase> by_case;
  for (const JunitFile& f : files) {
    if (f.suites.size() != 1) throw ModelError(f.file, "expected the one test suite of a fuzz campaign");
    const JunitSuite& s = f.suites.front();
    if (suite.name.empty()) suite.name = s.name;
    if (s.name != suite.name)
      throw ModelError(f.file, "test suite '" + s.name + "', but '" + suite.name + "' in " + files.front().file);
    for (const JunitCase& c : s.cases) {
      uint64_t case_seed = 0;
      if (c.name.rfind("case ", 0) != 0 || (case_seed = std::strtoull(c.name.c_str() + 5, nullptr, 10),
                                             "case " + std::to_string(case_seed) != c.name))
        throw ModelError(f.file, "test case '" + c.name + "' is not a fuzz case");
      const uint64_t i = case_seed - seed;
      if (i >= cases) throw ModelError(f.file, "test case '" + c.name + "' is not a case of the campaign");
      if (i >= checked) continue;  // past the failing case that stopped the campaign
      if (!by_case.emplace(i, c).second) throw ModelError(f.file, "test case '" + c.name + "' twice");
    }
  }
  if (by_case.size() != checked)
    throw ModelError(files.front().file, std::to_string(by_case.size()) + " test cases among the JUnit files, but " +
                                             std::to_string(checked) + " cases checked");
  for (auto& [i, c] : by_case) {
    suite.seconds += c.seconds;
    suite.cases.push_back(std::move(c));
  }
  return {suite};
}

std::vector<JunitSuite> merge_check_list_junit(const std::vector<ShardFile>& shards, const json& merged,
                                               const std::vector<JunitFile>& files) {
  const std::string mode = merged.at("settings").at("mode").get<std::string>();
  // A shard's suites: one per model it checked, in its order.
  auto names_of = [&](const ShardFile& s) {
    std::vector<std::string> names;
    for (const json& entry : s.json.at("reports"))
      names.push_back("lnverify check " + entry.at("model").get<std::string>() + " (" + mode + ")");
    return names;
  };
  std::vector<std::optional<JunitSuite>> by_index(merged.at("models").get<size_t>());
  std::vector<bool> used(shards.size(), false);
  for (const JunitFile& f : files) {
    std::vector<std::string> names;
    for (const JunitSuite& s : f.suites) names.push_back(s.name);
    size_t k = 0;
    while (k < shards.size() && (used[k] || names_of(shards[k]) != names)) ++k;
    if (k == shards.size())
      throw ModelError(f.file, "its test suites are those of no shard report given (or of one given twice)");
    used[k] = true;
    for (size_t j = 0; j < f.suites.size(); ++j)
      by_index[shards[k].json.at("reports").at(j).at("index").get<size_t>()] = f.suites[j];
  }
  std::vector<JunitSuite> out;
  for (size_t i = 0; i < by_index.size(); ++i) {
    if (!by_index[i]) throw ModelError("--junit", "no JUnit file gives model " + std::to_string(i) + "'s suite");
    out.push_back(*by_index[i]);
  }
  return out;
}

// Every field the merge reads, of the type it reads: a lnv::ModelError naming the file
// and the field (JSON_DIAGNOSTICS gives its path) otherwise.
void require_fields(const ShardFile& s, const std::string& format) {
  try {
    const json& r = s.json;
    shard_of(s);
    if (format == "lnverify.fuzz") {
      const json& settings = r.at("settings");
      settings.at("cases").get<int64_t>();
      settings.at("seed").get<uint64_t>();
      settings.at("keep_going").get<bool>();
      r.at("checked").get<int64_t>();
      r.at("stopped_early").get<bool>();
      r.at("nodes_per_case").get<double>();
      r.at("layer_norms_per_case").get<double>();
      r.at("seconds").get<double>();
      for (const json& f : r.at("failures")) {
        f.at("case").get<int64_t>();
        f.at("kind").get<std::string>();
      }
      for (const json& seed : r.at("inconclusive_seeds")) seed.get<uint64_t>();
    } else {
      r.at("list").get<std::string>();
      r.at("models").get<size_t>();
      r.at("settings").at("mode").get<std::string>();
      for (const json& entry : r.at("reports")) {
        entry.at("index").get<size_t>();
        entry.at("model").get<std::string>();
        entry.at("outcome").get<std::string>();
      }
    }
  } catch (const json::exception& e) {
    throw ModelError(s.file, std::string("not a shard report: ") + e.what());
  }
}

}  // namespace

std::string shard_report_format(const json& j, const std::string& file) {
  const std::string format = j.is_object() && j.contains("format") && j.at("format").is_string()
                                 ? j.at("format").get<std::string>()
                                 : "";
  if (format != "lnverify.fuzz" && format != "lnverify.check_list")
    throw ModelError(file, "format: expected a report of `lnverify fuzz --json` (lnverify.fuzz) or "
                           "`lnverify check --models --json` (lnverify.check_list)");
  return format;
}

json merge_reports(const std::vector<ShardFile>& shards) {
  if (shards.empty()) throw InternalError("merge_reports: no report");
  const std::string format = shard_report_format(shards.front().json, shards.front().file);
  for (const ShardFile& s : shards) {
    if (shard_report_format(s.json, s.file) != format)
      throw ModelError(s.file, "format: a " + shard_report_format(s.json, s.file) + " report, but " +
                                   shards.front().file + " is " + format);
    require_fields(s, format);
  }
  const std::vector<const ShardFile*> ordered =
      one_campaign(shards, format == "lnverify.fuzz" ? std::vector<std::string>{}
                                                     : std::vector<std::string>{"list", "models"});
  return format == "lnverify.fuzz" ? merge_fuzz(ordered) : merge_check_lists(ordered);
}

std::vector<JunitSuite> merge_junit(const std::vector<ShardFile>& shards, const json& merged,
                                    const std::vector<JunitFile>& files) {
  if (files.empty()) throw InternalError("merge_junit: no JUnit file");
  if (merged.at("format") == "lnverify.fuzz") return merge_fuzz_junit(merged, files);
  return merge_check_list_junit(shards, merged, files);
}

}  // namespace lnv::report
