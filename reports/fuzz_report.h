// The result of a `lnverify fuzz` campaign as plain structs, with JSON (`"format":
// "lnverify.fuzz"`, docs/spec/reports.md) and text: the progress line and the summary.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace lnv::report {

// A check of a failing case that did not hold, as the check report lists it.
struct FailingCheck {
  std::string mode, kind, subject, outcome, detail;
};
void to_json(nlohmann::json& j, const FailingCheck& c);
void from_json(const nlohmann::json& j, FailingCheck& c);

// A failing case shrunk and written: the minimal model, its text and how to replay it.
struct ShrunkCase {
  size_t nodes = 0;
  int steps = 0, attempts = 0;
  std::string model, text;  // the files written
  std::vector<std::string> check_commands;
  std::string error;
  std::vector<FailingCheck> checks;
};

struct FuzzFailure {
  int64_t index = 0;  // case i of the campaign
  uint64_t seed = 0;
  bool unsound = false;  // a wrong "yes"; else an over-cautious "no"
  size_t nodes = 0;
  std::string replay, error;
  std::vector<FailingCheck> checks;
  std::optional<ShrunkCase> shrunk;  // none for an over-cautious "no" under --keep-going
};

struct FuzzSettings {
  int cases = 0;
  uint64_t seed = 0;
  int max_nodes = 0;
  std::vector<std::string> modes;
  unsigned bits = 0;
  int trials = 0, shrink_attempts = 0;
  bool keep_going = false;
  std::string out;
  std::optional<std::array<int64_t, 2>> shard;  // index, count, when --shard was given
};

struct FuzzReport {
  FuzzSettings settings;
  int64_t share = 0;  // the cases of this shard
  size_t checked = 0;
  size_t holds = 0, fails = 0, inconclusive = 0;
  std::vector<uint64_t> wrong_yes, over_cautious_no, inconclusive_seeds;  // case seeds
  size_t nodes = 0, layer_norms = 0;  // summed over the cases checked
  double seconds = 0;
  std::vector<FuzzFailure> failures;
};

void to_json(nlohmann::json& j, const FuzzReport& r);

// "[checked/share] x cases/s  holds h  inconclusive i  (n nodes, l LNs per case)"
std::string fuzz_progress_line(const FuzzReport& r, double seconds);
// The campaign's last line: no failing case, or the wrong "yes" and over-cautious "no"
// seeds (--keep-going); prefixed with the shard under --shard.
std::string fuzz_summary(const FuzzReport& r);

}  // namespace lnv::report
