#include "reports/fuzz_report.h"

#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

namespace lnv::report {
namespace {

double per_case(size_t total, size_t checked) { return checked ? total / double(checked) : 0.0; }

std::string seed_list(const std::vector<uint64_t>& seeds) {
  std::string s;
  for (uint64_t x : seeds) s += " " + std::to_string(x);
  return s;
}

}  // namespace

void to_json(nlohmann::json& j, const FailingCheck& c) {
  j = {{"mode", c.mode}, {"kind", c.kind}, {"subject", c.subject}, {"outcome", c.outcome},
       {"detail", c.detail}};
}

void from_json(const nlohmann::json& j, FailingCheck& c) {
  j.at("mode").get_to(c.mode);
  j.at("kind").get_to(c.kind);
  j.at("subject").get_to(c.subject);
  j.at("outcome").get_to(c.outcome);
  j.at("detail").get_to(c.detail);
}

void to_json(nlohmann::json& j, const ShrunkCase& s) {
  j = {{"nodes", s.nodes},
       {"steps", s.steps},
       {"attempts", s.attempts},
       {"model", s.model},
       {"text", s.text},
       {"check_commands", s.check_commands},
       {"error", s.error},
       {"checks", s.checks}};
}

void to_json(nlohmann::json& j, const FuzzFailure& f) {
  j = {{"case", f.index},
       {"seed", f.seed},
       {"kind", f.unsound ? "wrong_yes" : "over_cautious_no"},
       {"nodes", f.nodes},
       {"replay", f.replay},
       {"error", f.error},
       {"checks", f.checks},
       {"shrunk", nullptr}};
  if (f.shrunk) j["shrunk"] = *f.shrunk;
}

void to_json(nlohmann::json& j, const FuzzReport& r) {
  const FuzzSettings& s = r.settings;
  j = {{"format", "lnverify.fuzz"},
       {"version", 1},
       {"settings",
        {{"cases", s.cases},
         {"seed", s.seed},
         {"max_nodes", s.max_nodes},
         {"modes", s.modes},
         {"bits", s.bits},
         {"trials", s.trials},
         {"shrink_attempts", s.shrink_attempts},
         {"keep_going", s.keep_going},
         {"out", s.out}}},
       {"outcome", r.fails == 0 ? "holds" : "fails"},
       {"checked", r.checked},
       {"stopped_early", r.checked < size_t(r.share)},
       {"counts",
        {{"holds", r.holds},
         {"fails", r.fails},
         {"inconclusive", r.inconclusive},
         {"wrong_yes", r.wrong_yes.size()},
         {"over_cautious_no", r.over_cautious_no.size()}}},
       {"nodes_per_case", per_case(r.nodes, r.checked)},
       {"layer_norms_per_case", per_case(r.layer_norms, r.checked)},
       {"seconds", r.seconds},
       {"failures", r.failures},
       {"inconclusive_seeds", r.inconclusive_seeds}};
  if (s.shard) j["settings"]["shard"] = {{"index", (*s.shard)[0]}, {"count", (*s.shard)[1]}};
}

std::string fuzz_progress_line(const FuzzReport& r, double seconds) {
  std::ostringstream os;
  os << "[" << r.checked << "/" << r.share << "] " << std::fixed << std::setprecision(1)
     << r.checked / seconds << " cases/s  holds " << r.holds << "  inconclusive "
     << r.inconclusive << "  (" << r.nodes / double(r.checked) << " nodes, "
     << r.layer_norms / double(r.checked) << " LNs per case)\n";
  return os.str();
}

std::string fuzz_summary(const FuzzReport& r) {
  const FuzzSettings& s = r.settings;
  std::ostringstream os;
  const std::string in_cases = s.shard ? "its " + std::to_string(r.share) + " of " +
                                             std::to_string(s.cases) + " cases"
                                       : std::to_string(s.cases);
  if (s.shard) os << "shard " << (*s.shard)[0] << "/" << (*s.shard)[1] << ": ";
  const std::string seeds = " (seeds " + std::to_string(s.seed) + ".." +
                            std::to_string(s.seed + s.cases - 1) + ")";
  if (r.fails == 0) {
    os << "no failing case in " << in_cases << seeds << "\n";
    return os.str();
  }
  os << r.fails << " failing case(s) in " << in_cases << seeds << ": " << r.wrong_yes.size()
     << " wrong \"yes\" (written to " << s.out << ")"
     << (r.wrong_yes.empty() ? "" : ":" + seed_list(r.wrong_yes)) << "; "
     << r.over_cautious_no.size() << " over-cautious \"no\""
     << (r.over_cautious_no.empty() ? "" : ":" + seed_list(r.over_cautious_no)) << "\n";
  return os.str();
}

}  // namespace lnv::report
