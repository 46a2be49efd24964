// lnverify: find the LayerNorms that can become RMSNorm exactly, rewrite, and prove it.
// `lnverify MODEL.json` is `lnverify audit MODEL.json`.
#include <exception>
#include <iostream>
#include <map>

#include "cli/command.h"
#include "cli/exit_status.h"
#include "cli/terminal.h"
#include "cli/torch_helper.h"

namespace lnv::cli {

std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

bool register_command(Command c) {
  registry().push_back(std::move(c));
  return true;
}

}  // namespace lnv::cli

int main(int argc, char** argv) {
  using namespace lnv::cli;
  remember_command_line(argc, argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  // `lnverify MODEL.json ...` is an audit (after the global --quiet/--verbose, if any).
  auto first = args.begin();
  while (first != args.end() && (*first == "-q" || *first == "--quiet" || *first == "-v" ||
                                 *first == "--verbose"))
    ++first;
  bool known = false;
  for (const Command& c : registry())
    if (first != args.end() && *first == c.name) known = true;
  if (first != args.end() && !known && !first->empty() && (*first)[0] != '-')
    args.insert(first, "audit");

  CLI::App app{"lnverify: exact LayerNorm -> RMSNorm folding, with proof by exact evaluation",
               "lnverify"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("lnverify ") + LNV_VERSION);
  bool quiet = false, verbose = false;
  app.add_flag("-q,--quiet", quiet, "print only errors and the final summary line");
  app.add_flag("-v,--verbose", verbose, "print more detail (every centered term, paths, checks)");
  std::map<std::string, Action> actions;
  std::map<const CLI::App*, std::string> names;
  for (const Command& c : registry()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    sub->fallthrough();  // the global options may also come after the command
    names[sub] = c.name;
    actions[c.name] = c.setup(*sub);
  }
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kOk : kBadInput;
  }
  if (quiet && verbose) {
    std::cerr << "lnverify: error: --quiet and --verbose exclude each other\n";
    return kBadInput;
  }
  verbosity() = quiet ? Verbosity::quiet : verbose ? Verbosity::verbose : Verbosity::normal;
  try {
    for (CLI::App* sub : app.get_subcommands()) return actions.at(names.at(sub))();
    return kBadInput;
  } catch (...) {
    const auto subs = app.get_subcommands();
    const Failure failure =
        failure_of(std::current_exception(), subs.empty() ? args.front() : subs[0]->get_name());
    std::cerr << failure.message;
    return failure.code;
  }
}
