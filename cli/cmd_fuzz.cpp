// `lnverify fuzz [--cases N] [--seed S] [--max-nodes M] [--out DIR] [--mode MODE]
// [--bits B] [--trials K]`: a campaign over generated graphs (generators/random_graph.h).
// Each case is checked like `lnverify check` in both modes (or one); on the first failing
// case the graph is shrunk and the minimal model.json, the seed that replays it and the
// report are written to DIR. Prints progress and cases per second.
//
// --keep-going: a failing case does not stop the campaign. Failures are told apart: a
// wrong "yes" (an ln_exact or plan_exact that fails, or a check that throws) is shrunk and
// written to DIR as above; an over-cautious "no" (only ln_tight fails) is counted and its
// seed listed. The summary gives both counts.
//
// --junit FILE: one test case per case checked, "case <seed>": a failing case is a
// failure, an inconclusive one is skipped (neither fails the campaign's exit code).
// --json FILE: the `lnverify.fuzz` report (docs/spec/reports.md): the settings, the
// counts, and per failing case its seed, kind, replay commands and the files written.
// Both are written when the campaign ends, also when a failing case stops it.
//
// --shard K/N: only the cases i with i mod N = K (cli/shard.h); case i is checked as
// without --shard. `lnverify merge` combines the shards' --json and --junit files into
// the reports of the whole campaign (docs/fuzzing.md).
//
// --jobs N: N worker processes check the cases (the k-th case of this shard on worker k mod N) while this
// process takes their results in case order, so the counts, the reports and the case
// shrunk are those of one job; a failing case is shrunk here, one candidate at a time.
//
// Exit codes: 0 no case fails, 1 a case fails (written to DIR unless only over-cautious
// under --keep-going), 2 bad options.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <filesystem>
#include <sstream>
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "checkers/campaign.h"
#include "cli/command.h"
#include "cli/output_paths.h"
#include "cli/shard.h"
#include "cli/terminal.h"
#include "core/file_io.h"
#include "core/error.h"
#include "core/model_json.h"
#include "generators/random_graph.h"
#include "reports/check_report.h"
#include "reports/fuzz_report.h"
#include "reports/junit.h"

namespace lnv::cli {
namespace {

namespace fs = std::filesystem;

struct Options {
  int cases = 1000;
  uint64_t seed = 1;
  int max_nodes = 24;
  std::string out = "fuzz-failures";
  std::string mode = "both";
  check::CheckOptions check;
  int shrink_attempts = 2000;
  bool keep_going = false;
  std::string junit;  // JUnit XML: one test case per case checked
  std::string json;   // the lnverify.fuzz report
  Shard shard;
  int jobs = default_jobs();
};

// The command that replays case `case_seed` with this campaign's settings.
std::string replay_command(const Options& o, uint64_t case_seed) {
  std::string cmd = "lnverify fuzz --seed " + std::to_string(case_seed) + " --cases 1 --max-nodes " +
                    std::to_string(o.max_nodes);
  if (o.mode != "both") cmd += " --mode " + o.mode;
  if (o.check.bits != 256) cmd += " --bits " + std::to_string(o.check.bits);
  if (o.check.trials != 2) cmd += " --trials " + std::to_string(o.check.trials);
  return cmd;
}

// The `lnverify check` command that replays the shrunk model of `stem` in `r`'s mode.
std::string check_command(const Options& o, const std::string& stem, const report::CheckReport& r) {
  return "lnverify check " + stem + ".model.json --mode " + std::string(mode_name(r.mode)) +
         " --seed " + std::to_string(r.seed) + " --trials " + std::to_string(r.trials) +
         " --bits " + std::to_string(o.check.bits);
}

// The checks of `out` that did not hold, as the report lists them.
std::vector<report::FailingCheck> failing_checks(const check::CaseOutcome& out) {
  std::vector<report::FailingCheck> checks;
  for (const report::CheckReport& r : out.reports)
    for (const report::CheckResult& c : r.results)
      if (c.outcome != report::Outcome::holds)
        checks.push_back({std::string(mode_name(r.mode)), c.kind, c.subject,
                          std::string(report::outcome_name(c.outcome)), c.detail});
  return checks;
}

// Whether a failing case is a wrong "yes" (a rewrite that changes the outputs, or a check
// that throws) rather than only an over-cautious "no".
bool unsound(const check::CaseOutcome& out) {
  if (!out.error.empty()) return true;
  for (const report::CheckReport& r : out.reports)
    for (const report::CheckResult& c : r.results)
      if (c.outcome == report::Outcome::fails && c.kind != "ln_tight") return true;
  return false;
}

// Writes the shrunk counterexample and how to replay it; returns the model path.
std::string write_failure(const Options& o, uint64_t case_seed, const check::Shrunk& s) {
  fs::create_directories(o.out);
  const std::string stem = (fs::path(o.out) / ("case-" + std::to_string(case_seed))).string();
  Graph g = s.graph;
  const nlohmann::json fuzz = {
      {"case_seed", case_seed},
      {"max_nodes", o.max_nodes},
      {"replay", replay_command(o, case_seed)}};
  g.meta = nlohmann::json{{"fuzz", fuzz}}.dump();
  save_model(g, stem + ".model.json");
  std::ostringstream txt;
  txt << "case seed " << case_seed << " (replay: " << replay_command(o, case_seed) << ")\n"
      << "shrunk in " << s.steps << " steps (" << s.attempts << " candidates) to "
      << s.graph.nodes.size() << " nodes\n";
  if (!s.outcome.error.empty()) txt << "threw: " << s.outcome.error << "\n";
  for (const report::CheckReport& r : s.outcome.reports) {
    txt << "\n" << check_command(o, stem, r) << "\n" << report::to_text(r);
  }
  txt << "\n" << gen::describe(s.graph);
  write_file_atomically(stem + ".txt", txt.str());
  return stem + ".model.json";
}

// A failing case may come after hours: --out must be usable before the campaign starts.
// It is created only when a case fails; here its nearest existing ancestor (itself, when it
// exists) must be a directory we may write in.
void check_out_dir(const std::string& out) {
  check_path_length((fs::path(out) / "case-18446744073709551615.model.json").string());
  std::error_code ec;
  fs::path at = fs::absolute(out, ec);
  while (!fs::exists(at, ec) && at.has_parent_path() && at != at.parent_path())
    at = at.parent_path();
  if (!fs::is_directory(at, ec))
    throw ModelError("fuzz/--out", "'" + out + "': " + at.string() + " is not a directory");
  if (::access(at.c_str(), W_OK | X_OK) != 0)
    throw ModelError("fuzz/--out", "'" + out + "': cannot write in " + at.string() + ": " +
                                       std::strerror(errno));
}

// What the campaign keeps of one checked case: what a worker process sends back.
struct CaseSummary {
  report::Outcome outcome = report::Outcome::holds;
  std::string error;
  bool unsound = false;  // a wrong "yes" (see unsound())
  size_t nodes = 0, layer_norms = 0;
  double seconds = 0;
  std::string text;  // the JUnit text: size, replay, what threw, the reports not holding
  std::vector<report::FailingCheck> checks;  // failing_checks()
};

void to_json(nlohmann::json& j, const CaseSummary& c) {
  j = {{"outcome", static_cast<int>(c.outcome)}, {"error", c.error}, {"unsound", c.unsound},
       {"nodes", c.nodes}, {"layer_norms", c.layer_norms}, {"seconds", c.seconds},
       {"text", c.text}, {"checks", c.checks}};
}
void from_json(const nlohmann::json& j, CaseSummary& c) {
  c.outcome = static_cast<report::Outcome>(j.at("outcome").get<int>());
  j.at("error").get_to(c.error);
  j.at("unsound").get_to(c.unsound);
  j.at("nodes").get_to(c.nodes);
  j.at("layer_norms").get_to(c.layer_norms);
  j.at("seconds").get_to(c.seconds);
  j.at("text").get_to(c.text);
  j.at("checks").get_to(c.checks);
}

CaseSummary summarize(uint64_t case_seed, const Graph& g, const check::CaseOutcome& out,
                      double seconds) {
  CaseSummary c{out.outcome, out.error, unsound(out), g.nodes.size(),
                out.reports.empty() ? 0 : out.reports.front().layer_norms, seconds, "",
                failing_checks(out)};
  c.text = std::to_string(g.nodes.size()) + " nodes; replay: lnverify fuzz --seed " +
           std::to_string(case_seed) + " --cases 1";
  if (!out.error.empty()) c.text += "\nthrew: " + out.error;
  for (const report::CheckReport& r : out.reports)
    if (r.outcome() != report::Outcome::holds) c.text += "\n" + report::to_text(r);
  return c;
}

// The JUnit test case of one fuzz case.
report::JunitCase junit_case(uint64_t case_seed, const CaseSummary& out, bool over_cautious) {
  using R = report::JunitCase::Result;
  report::JunitCase c{"lnverify.fuzz", "case " + std::to_string(case_seed), R::passed, "",
                      out.text, out.seconds};
  if (out.outcome == report::Outcome::fails) {
    c.result = R::failure;
    c.message = over_cautious ? "over-cautious \"no\" (ln_tight fails)" : "a check fails";
  } else if (out.outcome == report::Outcome::inconclusive) {
    c.result = R::skipped;
    c.message = "inconclusive";
  }
  return c;
}

// The generator's settings and the modes of a campaign.
struct Campaign {
  gen::GenConfig cfg;
  std::vector<Mode> modes;

  explicit Campaign(const Options& o) {
    cfg.max_nodes = o.max_nodes;
    cfg.max_steps = std::max(2, o.max_nodes / 2);
    if (o.mode != "training") modes.push_back(Mode::inference);
    if (o.mode != "inference") modes.push_back(Mode::training);
  }
  check::CheckOptions options(const Options& o, uint64_t case_seed) const {
    check::CheckOptions opt = o.check;
    opt.seed = case_seed;
    return opt;
  }
  // Generates and checks case `case_seed`.
  CaseSummary check(const Options& o, uint64_t case_seed) const {
    const Graph g = gen::generate_case(cfg, case_seed).value();
    const auto start = std::chrono::steady_clock::now();
    const check::CaseOutcome out = check::check_case(g, options(o, case_seed), modes);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return summarize(case_seed, g, out, secs);
  }
};

// The cases of a campaign, checked by `jobs` worker processes (case i by worker i mod
// jobs, each writing one JSON line per case to its pipe) and taken in case order; with one
// job, checked in this process.
class CaseSource {
 public:
  CaseSource(const Options& o, const Campaign& c) : o_(o), c_(c) {
    const int64_t share = o.shard.share(o.cases);
    if (o.jobs <= 1 || share <= 1) return;
    const int n = static_cast<int>(std::min<int64_t>(o.jobs, share));
    std::fflush(stdout);
    std::cout << std::flush;
    for (int w = 0; w < n; ++w) {
      int fd[2];
      if (::pipe(fd) != 0) throw std::runtime_error(std::string("fuzz: pipe: ") + std::strerror(errno));
      const pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error(std::string("fuzz: fork: ") + std::strerror(errno));
      if (pid == 0) {
        ::close(fd[0]);
        for (Worker& other : workers_) std::fclose(other.in);
        work(w, n, fd[1]);
      }
      ::close(fd[1]);
      workers_.push_back({pid, ::fdopen(fd[0], "r")});
    }
  }
  ~CaseSource() {
    for (Worker& w : workers_) {
      ::kill(w.pid, SIGTERM);
      std::fclose(w.in);
      ::waitpid(w.pid, nullptr, 0);
    }
  }
  CaseSource(const CaseSource&) = delete;
  CaseSource& operator=(const CaseSource&) = delete;

  // The summary of this shard's k-th case (case i = K + k·N under --shard K/N); taken in
  // order k = 0, 1, 2, ...
  CaseSummary next(int64_t k) {
    const int64_t i = case_index(k);
    if (workers_.empty()) return c_.check(o_, o_.seed + static_cast<uint64_t>(i));
    Worker& w = workers_[static_cast<size_t>(k) % workers_.size()];
    std::string line;
    for (int ch; (ch = std::fgetc(w.in)) != EOF && ch != '\n';) line += static_cast<char>(ch);
    if (line.empty())
      throw std::runtime_error("fuzz: worker process " + std::to_string(w.pid) +
                               " ended before case " + std::to_string(i));
    return nlohmann::json::parse(line).get<CaseSummary>();
  }

 private:
  struct Worker {
    pid_t pid;
    FILE* in;
  };

  // A worker: its share of the cases, one line each, then exit without unwinding.
  [[noreturn]] void work(int w, int n, int fd) {
    FILE* out = ::fdopen(fd, "w");
    int code = 0;
    try {
      const int64_t share = o_.shard.share(o_.cases);
      for (int64_t k = w; k < share && out; k += n) {
        const uint64_t case_seed = o_.seed + static_cast<uint64_t>(case_index(k));
        const std::string line = nlohmann::json(c_.check(o_, case_seed)).dump() + "\n";
        if (std::fwrite(line.data(), 1, line.size(), out) != line.size() || std::fflush(out) != 0) break;
      }
    } catch (const std::exception& e) {
      std::cerr << "lnverify fuzz: worker " << w << ": " << e.what() << "\n";
      code = 70;
    }
    if (out) std::fclose(out);
    std::_Exit(code);
  }

  int64_t case_index(int64_t k) const { return o_.shard.index + k * o_.shard.count; }

  const Options& o_;
  const Campaign& c_;
  std::vector<Worker> workers_;
};

// A report file is written when the campaign ends, possibly hours later: its directory
// must exist now, and --json and --junit must not name one file.
void check_report_paths(const Options& o) {
  for (const auto& [option, path] : {std::pair<const char*, const std::string&>{"--json", o.json},
                                     {"--junit", o.junit}}) {
    if (path.empty()) continue;
    check_path_length(path);
    const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      throw ModelError(std::string("fuzz/") + option, "'" + path + "': " + dir.string() + " is not a directory");
  }
  if (!o.json.empty() && !o.junit.empty() && same_file(o.json, o.junit))
    throw ModelError("fuzz/--json", "'" + o.json + "' is also the --junit output");
}

// The campaign's settings as its report states them.
report::FuzzSettings settings(const Options& o, const std::vector<Mode>& modes) {
  report::FuzzSettings s{o.cases, o.seed, o.max_nodes, {}, o.check.bits, o.check.trials,
                         o.shrink_attempts, o.keep_going, o.out, std::nullopt};
  for (Mode m : modes) s.modes.emplace_back(mode_name(m));
  if (o.shard.given) s.shard = std::array<int64_t, 2>{o.shard.index, o.shard.count};
  return s;
}

// Shrinks failing case `case_seed`, writes it (write_failure) and prints what fails.
report::ShrunkCase shrink_and_write(const Options& o, const Campaign& campaign, uint64_t case_seed) {
  const rc::Shrinkable<Graph> s = gen::generate_case(campaign.cfg, case_seed);
  const check::CheckOptions opt = campaign.options(o, case_seed);
  auto check = [&](const Graph& g) { return check::check_case(g, opt, campaign.modes); };
  const check::Shrunk shrunk = check::shrink_case(s, check, o.shrink_attempts);
  const std::string path = write_failure(o, case_seed, shrunk);
  std::cout << "minimal counterexample: " << shrunk.graph.nodes.size() << " nodes, written to "
            << path << "\n";
  for (const report::CheckReport& r : shrunk.outcome.reports)
    if (r.outcome() == report::Outcome::fails) std::cout << report::to_text(r);
  if (!shrunk.outcome.error.empty()) std::cout << "threw: " << shrunk.outcome.error << "\n";
  const std::string stem = path.substr(0, path.size() - std::string(".model.json").size());
  report::ShrunkCase out{shrunk.graph.nodes.size(), shrunk.steps, shrunk.attempts, path,
                         stem + ".txt", {}, shrunk.outcome.error, failing_checks(shrunk.outcome)};
  for (const report::CheckReport& r : shrunk.outcome.reports)
    out.check_commands.push_back(check_command(o, stem, r));
  return out;
}

int run(const Options& o) {
  check_out_dir(o.out);
  check_report_paths(o);
  report::JunitSuite suite{"lnverify fuzz (seeds " + std::to_string(o.seed) + "..)", {}, 0};
  const Campaign campaign(o);

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last_print = start;
  report::FuzzReport rep;
  rep.settings = settings(o, campaign.modes);
  rep.share = o.shard.share(o.cases);
  // Writes the JUnit and JSON files (if asked for) and passes the exit code on.
  auto finish = [&](int code) {
    if (!o.junit.empty()) write_file_atomically(o.junit, report::junit_xml({suite}));
    if (o.json.empty()) return code;
    rep.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    write_file_atomically(o.json, nlohmann::json(rep).dump(2) + "\n");
    return code;
  };
  Progress progress("fuzz", "cases");
  CaseSource source(o, campaign);
  for (int64_t k = 0; k < rep.share; ++k) {
    const int64_t i = o.shard.index + k * o.shard.count;
    progress.update(rep.checked, rep.share);
    const uint64_t case_seed = o.seed + static_cast<uint64_t>(i);
    const CaseSummary out = source.next(k);
    const bool fails = out.outcome == report::Outcome::fails;
    suite.seconds += out.seconds;
    suite.cases.push_back(junit_case(case_seed, out, fails && o.keep_going && !out.unsound));
    ++rep.checked;
    ++(out.outcome == report::Outcome::holds ? rep.holds : fails ? rep.fails : rep.inconclusive);
    rep.nodes += out.nodes;
    rep.layer_norms += out.layer_norms;
    if (out.outcome == report::Outcome::inconclusive) rep.inconclusive_seeds.push_back(case_seed);
    if (fails) {
      progress.clear();
      (out.unsound ? rep.wrong_yes : rep.over_cautious_no).push_back(case_seed);
      rep.failures.push_back({i, case_seed, out.unsound, out.nodes, replay_command(o, case_seed),
                              out.error, out.checks, std::nullopt});
    }
    if (fails && o.keep_going && !out.unsound) {
      if (!quiet())
        std::cout << "case " << i << " (seed " << case_seed << ", " << out.nodes
                << " nodes): over-cautious \"no\" (ln_tight fails); going on\n" << std::flush;
    } else if (fails) {
      std::cout << "case " << i << " (seed " << case_seed << ", " << out.nodes
                << " nodes) FAILS; shrinking...\n" << std::flush;
      rep.failures.back().shrunk = shrink_and_write(o, campaign, case_seed);
      if (!o.keep_going) return finish(kCheckFails);
    }
    const auto now = Clock::now();
    if (!quiet() && (now - last_print > std::chrono::seconds(2) || int64_t(rep.checked) == rep.share)) {
      progress.clear();
      std::cout << report::fuzz_progress_line(rep, std::chrono::duration<double>(now - start).count())
                << std::flush;
      last_print = now;
    }
  }
  progress.clear();
  std::cout << report::fuzz_summary(rep);
  return finish(rep.fails == 0 ? kOk : kCheckFails);
}

Action setup(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  o->check.trials = 2;
  sub.add_option("--cases", o->cases, "graphs to generate and check (default 1000)")
      ->check(CLI::Range(1, 1 << 30));
  sub.add_option("--seed", o->seed, "seed of case 0; case i uses seed + i (default 1)")
      ->check(seed_range());
  sub.add_option("--max-nodes", o->max_nodes, "nodes per generated graph at most (default 24)")
      ->check(CLI::Range(1, 4096));
  sub.add_option("--out", o->out, "where to write a failing case (default fuzz-failures)");
  sub.add_option("--mode", o->mode, "inference, training or both (default)")
      ->check(CLI::IsMember({"inference", "training", "both"}));
  sub.add_option("--bits", o->check.bits, "MPFR precision (default 256)")
      ->check(CLI::Range(24u, 8192u));
  sub.add_option("--trials", o->check.trials, "random inputs per comparison (default 2)")
      ->check(CLI::Range(1, 1000));
  sub.add_option("--shrink-attempts", o->shrink_attempts,
                 "candidate graphs tried while shrinking (default 2000)")
      ->check(CLI::Range(0, 1 << 30));
  sub.add_option("--junit", o->junit, "also write JUnit XML to FILE: one test case per case");
  sub.add_option("--json", o->json,
                 "also write the campaign's report as JSON to FILE: settings, counts, failing cases");
  add_shard_option(sub, o->shard, "cases");
  sub.add_option("--jobs", o->jobs,
                 "worker processes checking cases (default: the number of cores); the "
                 "results do not depend on it")
      ->check(CLI::Range(1, 1024));
  sub.add_flag("--keep-going", o->keep_going,
               "go on after a failing case; count wrong \"yes\" and over-cautious \"no\" apart");
  return [o]() -> int { return run(*o); };
}

const bool kRegistered = register_command(
    {"fuzz", "check the analysis against exact evaluation on random graphs", setup});

}  // namespace
}  // namespace lnv::cli
