// `lnverify equiv A B [--mode inference|training] [--grad [--grad-params]] [--bits N] [--trials K]
// [--seed S] [--weight-bits W] [--strict] [--json F] [--junit F] [--html F] [--format text|markdown] [--dim NAME=VALUE ...]`: proves or refutes that two models (any
// mix of model.json and ONNX) compute the same function, by exact evaluation on shared
// random inputs (checkers/model_equivalence.h).
//
// Exit codes (cli/exit_status.h): 0 every output (and gradient) equal, 1 one differs
// (printed: which, by how much, the trial's run seed and the worst element), 2 bad input
// (also two models whose inputs, outputs or, in training mode, dropouts do not match by
// name and shape; nothing is written), 3 inconclusive (also when a model has an op the
// evaluators cannot run).
#include <iostream>

#include "checkers/model_equivalence.h"
#include "cli/command.h"
#include "cli/model_input.h"
#include "cli/output_paths.h"
#include "cli/report_files.h"
#include "core/error.h"
#include "core/file_io.h"
#include "reports/equiv_report.h"
#include "reports/html_report.h"
#include "reports/junit.h"

namespace lnv::cli {
namespace {

struct Options {
  std::string a, b, mode = "inference", json, junit, html, format = "text";
  std::vector<std::string> dims;
  check::EquivOptions equiv;
};

// --dim binds the symbolic dims of the ONNX models among the two; a name neither has is
// warned about once.
Graph load(const std::string& path, const std::vector<std::string>& dims) {
  return load_input(path, is_onnx_input(path) ? dims : std::vector<std::string>{}, {},
                    /*warn_unknown_dims=*/false);
}

int run(Options& opt) {
  // load both -> match interfaces -> evaluate both on shared trials -> compare -> report
  if (!opt.dims.empty() && !is_onnx_input(opt.a) && !is_onnx_input(opt.b))
    throw ModelError("--dim", "binds the symbolic dims of an ONNX model; " + opt.a + " and " +
                                  opt.b + " are model.json");
  warn_unknown_dims({opt.a, opt.b}, opt.dims);
  const Graph a = load(opt.a, opt.dims);
  const Graph b = load(opt.b, opt.dims);
  opt.equiv.mode = opt.mode == "training" ? Mode::training : Mode::inference;
  check::require_same_interface(a, opt.a, b, opt.b, opt.equiv.mode);
  for (const auto& [option, path] : {std::pair<const char*, const std::string&>{"--json", opt.json},
                                     {"--junit", opt.junit},
                                     {"--html", opt.html}}) {
    refuse_input_as_output(option, path, opt.a, a);
    refuse_input_as_output(option, path, opt.b, b);
  }
  refuse_exact_beyond_memory(a, opt.a, opt.equiv.bits, opt.equiv.grad ? 4 : 2);
  refuse_exact_beyond_memory(b, opt.b, opt.equiv.bits, opt.equiv.grad ? 4 : 2);
  opt.equiv.a_name = opt.a;
  opt.equiv.b_name = opt.b;
  const report::EquivReport rep = check::equiv_models(a, b, opt.equiv);
  std::cout << (opt.format == "markdown" ? report::to_markdown(rep) : report::to_text(rep));
  if (!opt.json.empty()) write_file_atomically(opt.json, nlohmann::json(rep).dump(2) + "\n");
  if (!opt.junit.empty()) write_file_atomically(opt.junit, report::junit_xml({report::equiv_junit(rep)}));
  if (!opt.html.empty())
    write_file_atomically(opt.html, report::html_page("lnverify equiv: " + opt.a + " and " + opt.b,
                                                      {report::html_equiv_section(rep)}));
  switch (rep.outcome()) {
    case report::Outcome::holds: return kOk;
    case report::Outcome::fails: return kCheckFails;
    case report::Outcome::inconclusive: return kInconclusive;
  }
  return kInternal;
}

Action setup(CLI::App& sub) {
  auto opt = std::make_shared<Options>();
  sub.add_option("A", opt->a, "the first model (model.json or .onnx)")->required();
  sub.add_option("B", opt->b, "the second model (model.json or .onnx)")->required();
  sub.add_option("--dim", opt->dims,
                 "ONNX models: bind a symbolic input dim, NAME=VALUE (repeatable; a dim left free is bound to 1)")
      ->take_all()
      ->allow_extra_args(false);
  sub.add_option("--mode", opt->mode,
                 "inference (default) or training (dropout masks shared by node name)")
      ->check(CLI::IsMember({"inference", "training"}));
  auto* grad = sub.add_flag("--grad", opt->equiv.grad,
                            "also compare the gradients of the loss with respect to the float inputs");
  sub.add_flag("--grad-params", opt->equiv.grad_params,
               "with --grad: also compare the gradients with respect to every param both models "
               "store under the same name and shape (a training fold's parameters)")
      ->needs(grad);
  sub.add_option("--bits", opt->equiv.bits, "MPFR precision of the evaluations (default 256)")
      ->check(CLI::Range(24u, 8192u));
  sub.add_option("--trials", opt->equiv.trials, "shared random inputs (default 3)")
      ->check(CLI::Range(1, 1000));
  sub.add_option("--seed", opt->equiv.seed, "run seed of trial 0; trial k uses seed + k")
      ->check(seed_range());
  sub.add_option("--weight-bits", opt->equiv.weight_bits,
                 "a stable difference within 16 times the change measured with the weights "
                 "that differ perturbed at this many bits is equal up to weight storage "
                 "(default: the precision they are stored in: 53 double, 24 float32, "
                 "11 float16, 8 bfloat16)")
      ->check(CLI::Range(8u, 8192u));
  sub.add_flag("--strict", opt->equiv.strict,
               "exact equality only: a stable difference is different, however small");
  sub.add_option("--json", opt->json, "also write the report as JSON to this file");
  sub.add_option("--junit", opt->junit,
                 "also write JUnit XML to this file: one test case per output and gradient");
  sub.add_option("--html", opt->html,
                 "also write a self-contained HTML page: the per-quantity error statistics");
  add_format_option(sub, opt->format);
  return inconclusive_when_not_evaluable("equiv", [opt] { return run(*opt); });
}

const bool kRegistered = register_command(
    {"equiv", "prove or refute that two models compute the same function, exactly", setup});

}  // namespace
}  // namespace lnv::cli
