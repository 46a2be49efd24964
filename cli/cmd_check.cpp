// `lnverify check MODEL.json [--mode inference|training] [--bits N] [--trials K] [--seed S]
// [--jobs N] [--json F] [--junit F] [--format text|markdown] [--engine exact|torch]`: proves the
// analysis' verdicts on a model by exact evaluation
// (checkers/equivalence.h): every foldable LN folds exactly, every "not foldable" is
// tight, the whole plan is exact (and in training mode, gradients too).
//
// `lnverify check --models LIST [--shard K/N] [--json F] [--junit F]`: the same on every
// model of LIST (one a line: "PATH [--dim NAME=VALUE]...", '#' comments), in order, or
// with --shard only the models i with i mod N = K. --json writes an `lnverify.check_list`
// report (one `lnverify.check` report per model), --junit one test suite per model;
// `lnverify merge` combines the shards' reports (docs/ci.md). The exit code is the worst
// model's.
//
// Exit codes (cli/command.h): 0 every check holds, 1 a check fails (printed: which LN or
// output, the trial's run seed, the first node where original and rewrite part), 2 bad
// input, 3 inconclusive (also when the model has an opaque op the evaluators cannot run).
#include <fstream>
#include <iostream>
#include <sstream>

#include "checkers/equivalence.h"
#include "cli/command.h"
#include "cli/model_input.h"
#include "cli/output_paths.h"
#include "cli/report_outputs.h"
#include "cli/terminal.h"
#include "cli/fidelity_run.h"
#include "cli/torch_helper.h"
#include "cli/report_files.h"
#include "cli/shard.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "core/analysis/fold_plan.h"
#include "reports/check_report.h"
#include "reports/html_report.h"
#include "reports/junit.h"

namespace lnv::cli {
namespace {

// One model of a --models list.
struct ListedModel {
  std::string path;
  std::vector<std::string> dims;  // NAME=VALUE
};

// The models of `list`: "PATH [--dim NAME=VALUE | --dim=NAME=VALUE]..." a line; blank
// lines and lines starting with '#' are skipped. Paths are taken as written (relative to
// the working directory).
std::vector<ListedModel> read_model_list(const std::string& list) {
  std::istringstream in(read_file(list));
  std::vector<ListedModel> models;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    ListedModel m;
    if (!(words >> m.path) || m.path[0] == '#') continue;
    const std::string where = list + ":" + std::to_string(number);
    for (std::string w; words >> w;) {
      if (w.rfind("--dim=", 0) == 0) {
        m.dims.push_back(w.substr(6));
      } else if (w == "--dim") {
        if (!(words >> w)) throw ModelError(where, "--dim needs NAME=VALUE");
        m.dims.push_back(w);
      } else {
        throw ModelError(where, "expected PATH [--dim NAME=VALUE]..., got '" + w + "'");
      }
    }
    models.push_back(std::move(m));
  }
  if (models.empty()) throw ModelError(list, "lists no model");
  return models;
}

// `check --models LIST`: each model of the list (of this shard) checked as `check MODEL`
// does, one after another; the reports written at the end.
template <class State>
int check_list(const State& st) {
  if (!st.model.empty() || !st.dims.empty())
    throw ModelError("--models", "checks the models of the list; drop the MODEL and --dim arguments");
  if (st.engine != "exact" || !st.reports.html.empty() || !st.reports.dot.empty() || st.format != "text")
    throw ModelError("--models", "takes --json and --junit only (the exact engine, text output)");
  const std::vector<ListedModel> models = read_model_list(st.models);
  check::CheckOptions opt = st.opt;
  opt.mode = st.mode == "training" ? Mode::training : Mode::inference;
  nlohmann::json entries = nlohmann::json::array();
  std::vector<report::JunitSuite> suites;
  report::Outcome worst = report::Outcome::holds;
  size_t counts[3] = {0, 0, 0};
  for (size_t i = 0; i < models.size(); ++i) {
    if (!st.shard.owns(int64_t(i))) continue;
    const ListedModel& m = models[i];
    nlohmann::json entry = {{"index", i}, {"model", m.path}, {"dims", m.dims}, {"error", ""},
                            {"report", nullptr}};
    report::Outcome outcome = report::Outcome::inconclusive;
    try {
      const Graph g = load_input(m.path, m.dims);
      refuse_input_as_output("--json", st.json, m.path, g);
      refuse_input_as_output("--junit", st.junit, m.path, g);
      refuse_exact_beyond_memory(g, m.path, opt.bits, 6);
      opt.model_name = m.path;
      const report::CheckReport rep = check::check_model(g, opt);
      outcome = rep.outcome();
      entry["report"] = rep;
      suites.push_back(report::check_junit(rep));
      std::cout << m.path << ": " << report::result_line(rep) << "\n" << std::flush;
    } catch (const NotEvaluableError& e) {
      entry["error"] = e.what();
      suites.push_back(report::JunitSuite{
          "lnverify check " + m.path + " (" + st.mode + ")",
          {{"lnverify.check." + m.path + "." + st.mode, "check " + m.path,
            report::JunitCase::Result::error, "inconclusive: cannot be evaluated", e.what(), 0}},
          0});
      std::cout << m.path << ": result: inconclusive (" << e.what() << ")\n" << std::flush;
    }
    entry["outcome"] = report::outcome_name(outcome);
    entries.push_back(std::move(entry));
    ++counts[static_cast<int>(outcome)];
    worst = report::worse(worst, outcome);
  }
  nlohmann::json list = {
      {"format", "lnverify.check_list"},
      {"version", 1},
      {"list", st.models},
      {"models", models.size()},
      {"settings",
       {{"mode", st.mode},
        {"bits", opt.bits},
        {"trials", opt.trials},
        {"seed", opt.seed},
        {"forced_folds", opt.max_forced_folds}}},
      {"outcome", report::outcome_name(worst)},
      {"counts", {{"holds", counts[0]}, {"fails", counts[1]}, {"inconclusive", counts[2]}}},
      {"reports", entries}};
  if (st.shard.given) list["settings"]["shard"] = shard_json(st.shard);
  std::cout << entries.size() << " model(s)" << (st.shard.given ? " of shard " + st.shard.text() : "")
            << ": " << counts[0] << " hold, " << counts[1] << " fail, " << counts[2]
            << " inconclusive\n";
  if (!st.json.empty()) write_file_atomically(st.json, list.dump(2) + "\n");
  if (!st.junit.empty()) write_file_atomically(st.junit, report::junit_xml(suites));
  return worst == report::Outcome::holds ? kOk : worst == report::Outcome::fails ? kCheckFails : kInconclusive;
}

template <class State>
int run_torch([[maybe_unused]] State& st) {
#ifdef LNV_HAVE_TORCH
  st.torch.model = st.model;
  st.torch.dims = st.dims;
  st.torch.json = st.json;
  st.torch.mode = st.mode == "training" ? Mode::training : Mode::inference;
  st.torch.seed = st.opt.seed;
  return run_fidelity(st.torch);
#else
  exec_torch_helper("--engine");
#endif
}

Action setup(CLI::App& sub) {
  struct State {
    std::string model, mode = "inference", json, junit, format = "text", engine = "exact", models;
    Shard shard;
    std::vector<std::string> dims;
    check::CheckOptions opt;
    FidelityArgs torch;
    ReportOutputs reports;
  };
  auto st = std::make_shared<State>();
  add_model_input(sub, st->model, st->dims, "the model to check (model.json or .onnx)");
  sub.get_option("MODEL")->required(false);
  sub.add_option("--models", st->models,
                 "check every model of this file instead (\"PATH [--dim NAME=VALUE]...\" a line)");
  add_shard_option(sub, st->shard, "models of --models");
  sub.add_option("--mode", st->mode, "inference (default) or training")
      ->check(CLI::IsMember({"inference", "training"}));
  sub.add_option("--bits", st->opt.bits, "MPFR precision of the evaluations (default 256)")
      ->check(CLI::Range(24u, 8192u));
  sub.add_option("--trials", st->opt.trials, "random inputs and dropout masks (default 3)")
      ->check(CLI::Range(1, 1000));
  sub.add_option("--seed", st->opt.seed, "run seed of trial 0; trial k uses seed + k")
      ->check(seed_range());
  sub.add_option("--forced-folds", st->opt.max_forced_folds,
                 "forced folds tried per LN judged not foldable (default 64)")
      ->check(CLI::Range(1, 1 << 20));
  st->opt.jobs = default_jobs();
  sub.add_option("--jobs", st->opt.jobs,
                 "threads running the checks side by side (default: the number of cores); "
                 "the report does not depend on it")
      ->check(CLI::Range(1, 1024));
  sub.add_option("--json", st->json, "also write the report as JSON to this file");
  add_report_outputs(sub, st->reports, true);
  sub.add_option("--junit", st->junit,
                 "also write JUnit XML to this file: one test case per check (exact engine)");
  add_format_option(sub, st->format);
  sub.add_option("--engine", st->engine,
                 "exact (default: MPFR proof on small graphs) or torch (LibTorch float32/"
                 "float64 fidelity of the fold at real size; same as `lnverify fidelity`)")
      ->check(CLI::IsMember({"exact", "torch"}));
  sub.add_option("--torch-trials", st->torch.trials, "--engine torch: float32 random inputs")
      ->check(CLI::Range(1, 100000));
  sub.add_option("--torch-tol", st->torch.tol,
                 "--engine torch: float64 relative difference allowed (default 1e-9)")
      ->check(positive_finite());
  auto run = [st]() -> int {
    if (!st->models.empty()) return check_list(*st);
    if (st->model.empty()) throw ModelError("check", "give a MODEL or --models LIST");
    if (st->shard.given) throw ModelError("--shard", "shares out the models of --models");
    if (st->engine == "torch") {
      if (!st->reports.html.empty() || !st->reports.dot.empty())
        throw ModelError(st->reports.html.empty() ? "--dot" : "--html",
                         "written by the exact engine only (drop --engine torch)");
      if (!st->junit.empty() || st->format != "text")
        throw ModelError(st->junit.empty() ? "--format" : "--junit", "only with --engine exact");
      return run_torch(*st);
    }
    // load -> detect -> rewrite -> evaluate both -> compare -> report
    const Graph g = load_input(st->model, st->dims);
    refuse_input_as_output("--json", st->json, st->model, g);
    refuse_input_as_output("--junit", st->junit, st->model, g);
    prepare_report_outputs(st->reports, st->model, &g);
    // The original and a rewrite, each with its gradients in training mode.
    refuse_exact_beyond_memory(g, st->model, st->opt.bits, 6);
    st->opt.mode = st->mode == "training" ? Mode::training : Mode::inference;
    st->opt.model_name = st->model;
    Progress progress("check", "checks");
    st->opt.progress = progress.callback();
    // The plan is detected once: the check proves it and the HTML and DOT outputs draw it.
    const FoldPlan plan = detect_foldable(g, st->opt.mode);
    const report::CheckReport rep = check::check_model(g, st->opt, check::detected(plan));
    progress.clear();
    if (st->format == "markdown")
      std::cout << report::to_markdown(rep);
    else if (quiet())
      std::cout << report::result_line(rep) << "\n";
    else
      std::cout << report::to_text(rep, {stdout_paint(), verbose()});
    if (!st->json.empty()) write_file_atomically(st->json, nlohmann::json(rep).dump(2) + "\n");
    if (!st->junit.empty()) write_file_atomically(st->junit, report::junit_xml({report::check_junit(rep)}));
    write_report_outputs(st->reports, &g, &plan, "lnverify check: " + g.name,
                         {report::html_check_section(rep)});
    switch (rep.outcome()) {
      case report::Outcome::holds: return kOk;
      case report::Outcome::fails: return kCheckFails;
      case report::Outcome::inconclusive: return kInconclusive;
    }
    return kInternal;
  };
  // A model with an op the evaluators cannot compute (an imported opaque op) can be
  // proved neither way: inconclusive, naming the op.
  return [run]() -> int {
    try {
      return run();
    } catch (const NotEvaluableError& e) {
      std::cerr << "lnverify: check inconclusive: " << e.what() << "\n";
      return kInconclusive;
    }
  };
}

const bool kRegistered = register_command(
    {"check", "prove the verdicts and the rewrite of a model by exact evaluation", setup});

}  // namespace
}  // namespace lnv::cli
