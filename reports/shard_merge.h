// The reports of a campaign run as shards (`fuzz --shard K/N`, `check --models LIST
// --shard K/N`) combined into the reports one machine running the whole campaign writes:
// `lnverify merge` (docs/fuzzing.md, docs/ci.md).
//
// Verdicts merge exactly: outcome, counts, failures and inconclusive cases (fuzz), every
// model's check report (check lists), and the JUnit test cases, equal byte for byte to
// the single run's. Measurements do not: `seconds` (and JUnit times) are the shards'
// sums. A fuzz campaign without --keep-going stops at its first failing case: the merge
// keeps the cases up to the first failing case of all shards, as one machine would have
// checked them; the shards' means (nodes_per_case, layer_norms_per_case) then cover
// every case the shards checked.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/junit.h"

namespace lnv::report {

struct ShardFile {
  std::string file;     // names the shard in errors
  nlohmann::json json;  // its lnverify.fuzz or lnverify.check_list report
};

// The kind of report `json` is ("lnverify.fuzz", "lnverify.check_list"), or throws
// lnv::ModelError naming `file` when it is neither.
std::string shard_report_format(const nlohmann::json& json, const std::string& file);

// Preconditions checked, each a lnv::ModelError naming the file and the field: every
// report is of one format, has the same settings but `settings.shard` (absent: shard 0
// of 1), and the shards are 0..N-1 of one N, each once, each with the cases or models
// that are its own.
nlohmann::json merge_reports(const std::vector<ShardFile>& shards);

struct JunitFile {
  std::string file;
  std::vector<JunitSuite> suites;  // read_junit_xml of it
};

// The JUnit suites of the merged campaign `merged` (merge_reports of `shards`) from the
// shards' JUnit files, in any order: a fuzz campaign's one suite with its cases in case
// order (those past a stop dropped); a check list's suites in list order. Throws
// lnv::ModelError when the files are not the shards' (a case or model missing or twice).
std::vector<JunitSuite> merge_junit(const std::vector<ShardFile>& shards, const nlohmann::json& merged,
                                    const std::vector<JunitFile>& files);

}  // namespace lnv::report
