#include "reports/check_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

namespace lnv::report {

std::string_view outcome_name(Outcome o) {
  switch (o) {
    case Outcome::holds: return "holds";
    case Outcome::fails: return "fails";
    case Outcome::inconclusive: return "inconclusive";
  }
  return "?";
}

Outcome worse(Outcome a, Outcome b) {
  auto rank = [](Outcome o) { return o == Outcome::fails ? 2 : o == Outcome::inconclusive ? 1 : 0; };
  return rank(a) >= rank(b) ? a : b;
}

Outcome CheckReport::outcome() const {
  Outcome o = Outcome::holds;
  for (const CheckResult& r : results) o = worse(o, r.outcome);
  return o;
}

size_t CheckReport::count(Outcome o) const {
  size_t n = 0;
  for (const CheckResult& r : results) n += r.outcome == o;
  return n;
}

void to_json(nlohmann::json& j, const Divergence& d) {
  j = {{"quantity", d.quantity},         {"trial", d.trial},
       {"seed", d.seed},                 {"max_abs", d.max_abs},
       {"first_node", d.first_node},     {"chain", d.chain},
       {"element", d.element},           {"original_value", d.original_value},
       {"rewrite_value", d.rewrite_value}};
}

void to_json(nlohmann::json& j, const CheckResult& r) {
  j = {{"kind", r.kind},       {"subject", r.subject},   {"outcome", outcome_name(r.outcome)},
       {"detail", r.detail},   {"max_abs", r.max_abs},   {"max_rel", r.max_rel},
       {"bound", r.bound},     {"bits", r.bits},         {"attempts", r.attempts},
       {"centered", r.centered}, {"error_stats", r.error_stats}};
  if (r.divergence) j["divergence"] = *r.divergence;
}

void to_json(nlohmann::json& j, const Drift& d) {
  j = {{"layer_norm", d.layer_norm}, {"output", d.output}, {"max_abs", d.max_abs},
       {"max_rel", d.max_rel}};
}

void to_json(nlohmann::json& j, const CheckReport& r) {
  j = {{"format", "lnverify.check"},
       {"version", 1},
       {"model", r.model},
       {"mode", mode_name(r.mode)},
       {"bits", r.bits},
       {"trials", r.trials},
       {"seed", r.seed},
       {"layer_norms", r.layer_norms},
       {"foldable", r.foldable},
       {"outcome", outcome_name(r.outcome())},
       {"counts",
        {{"holds", r.count(Outcome::holds)},
         {"fails", r.count(Outcome::fails)},
         {"inconclusive", r.count(Outcome::inconclusive)}}},
       {"checks", r.results},
       {"training_drift", r.drift}};
}

namespace {
std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}
std::string stats_line(const ErrorStats& e) {
  std::ostringstream os;
  os << e.quantity << ": abs max " << sci(e.max_abs) << " mean " << sci(e.mean_abs) << " median "
     << sci(e.median_abs) << " p99 " << sci(e.p99_abs) << "; rel max " << sci(e.max_rel) << " mean "
     << sci(e.mean_rel) << " median " << sci(e.median_rel) << " p99 " << sci(e.p99_rel) << " ("
     << e.elements << " elements)";
  return os.str();
}

// The statistics of every output, and of the gradient with the largest difference (the
// JSON has them all).
std::string stats_text(const std::vector<ErrorStats>& stats) {
  std::ostringstream os;
  const ErrorStats* worst_gradient = nullptr;
  size_t gradients = 0;
  for (const ErrorStats& e : stats) {
    if (e.quantity.rfind("output ", 0) == 0) {
      os << "      " << stats_line(e) << "\n";
      continue;
    }
    ++gradients;
    if (!worst_gradient || e.max_abs > worst_gradient->max_abs) worst_gradient = &e;
  }
  if (worst_gradient)
    os << "      " << stats_line(*worst_gradient) << " (the largest of " << gradients
       << " gradients)\n";
  return os.str();
}

}  // namespace

std::string result_line(const CheckReport& r) {
  std::ostringstream os;
  os << "result: " << outcome_name(r.outcome()) << " (" << r.count(Outcome::holds) << " hold, "
     << r.count(Outcome::fails) << " fail, " << r.count(Outcome::inconclusive)
     << " inconclusive)";
  return os.str();
}

std::string to_text(const CheckReport& r, const TextOptions& options) {
  std::ostringstream os;
  os << "check " << r.model << "  mode " << mode_name(r.mode) << "  " << r.bits << " bits  "
     << r.trials << " trials  seed " << r.seed << "\n"
     << r.layer_norms << " LayerNorm(s), " << r.foldable << " foldable in this mode\n";
  size_t outcome_w = 0, kind_w = 0, subject_w = 0;
  for (const CheckResult& c : r.results) {
    outcome_w = std::max(outcome_w, outcome_name(c.outcome).size());
    kind_w = std::max(kind_w, display_width(c.kind));
    subject_w = std::max(subject_w, display_width(c.subject));
  }
  for (const CheckResult& c : r.results) {
    const Tone tone = c.outcome == Outcome::holds ? Tone::good
                      : c.outcome == Outcome::fails ? Tone::bad : Tone::warn;
    os << "  " << pad_painted(outcome_name(c.outcome), outcome_w, tone, options.paint) << "  "
       << pad(c.kind, kind_w) << "  " << pad(c.subject, subject_w) << "  max abs "
       << sci(c.max_abs) << " rel " << sci(c.max_rel) << " (bound " << sci(c.bound) << ", "
       << c.bits << " bits";
    if (c.kind == "ln_tight") os << ", " << c.attempts << " forced folds";
    os << ")\n";
    if (c.kind == "plan_exact") os << stats_text(c.error_stats);
    if ((c.outcome != Outcome::holds || options.verbose) && !c.detail.empty())
      os << "      " << c.detail << "\n";
    if (options.verbose && !c.centered.empty()) {
      os << "      centered:";
      for (const std::string& t : c.centered) os << " " << t;
      os << "\n";
    }
    if (c.divergence) {
      const Divergence& d = *c.divergence;
      os << "      " << d.quantity << " differs on trial " << d.trial << " (run seed " << d.seed
         << "): element " << d.element << " original " << d.original_value << " rewrite "
         << d.rewrite_value << "\n"
         << "      (inputs, dropout masks and loss cotangents are the SplitMix64 streams of run seed "
         << d.seed << "; `--seed " << d.seed << " --trials 1` replays this trial)\n";
      if (!d.first_node.empty()) {
        os << "      first node where they part: '" << d.first_node << "'; chain:";
        for (const std::string& n : d.chain) os << " " << n;
        os << "\n";
      }
    }
  }
  if (!r.drift.empty()) {
    os << "training-mode drift of the inference rewrite (LNs foldable in inference only):\n";
    for (const Drift& d : r.drift)
      os << "  " << d.layer_norm << " -> output " << d.output << ": max abs " << sci(d.max_abs)
         << ", max rel " << sci(d.max_rel) << "\n";
  }
  os << result_line(r) << "\n";
  return os.str();
}

std::string to_markdown(const CheckReport& r) {
  std::ostringstream os;
  os << "Exact check of " << markdown_cell(r.model) << ": " << mode_name(r.mode) << " mode, "
     << r.bits << "-bit MPFR, " << r.trials << " trials, seed " << r.seed << "; "
     << r.layer_norms << " LayerNorm(s), " << r.foldable << " foldable in this mode.\n\n"
     << "| check | subject | outcome | max abs | max rel | bound | bits |\n"
     << "|---|---|---|---|---|---|---|\n";
  for (const CheckResult& c : r.results)
    os << "| " << c.kind << " | " << markdown_cell(c.subject) << " | " << outcome_name(c.outcome)
       << " | " << sci(c.max_abs) << " | " << sci(c.max_rel) << " | " << sci(c.bound) << " | "
       << c.bits << " |\n";
  os << "\n| check | subject | quantity | elements | abs max | abs mean | abs median | abs p99 "
        "| rel max | rel mean | rel median | rel p99 |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const CheckResult& c : r.results)
    for (const ErrorStats& e : c.error_stats)
      os << "| " << c.kind << " | " << markdown_cell(c.subject) << " | " << markdown_cell(e.quantity)
         << " | " << e.elements << " | " << sci(e.max_abs) << " | " << sci(e.mean_abs) << " | "
         << sci(e.median_abs) << " | " << sci(e.p99_abs) << " | " << sci(e.max_rel) << " | "
         << sci(e.mean_rel) << " | " << sci(e.median_rel) << " | " << sci(e.p99_rel) << " |\n";
  os << "\n**Result: " << outcome_name(r.outcome()) << "** (" << r.count(Outcome::holds)
     << " hold, " << r.count(Outcome::fails) << " fail, " << r.count(Outcome::inconclusive)
     << " inconclusive)\n";
  return os.str();
}

std::string markdown_cell(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out.empty() ? "-" : out;
}

}  // namespace lnv::report
