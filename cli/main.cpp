// lnverify: find the LayerNorms that can become RMSNorm exactly, rewrite, and prove it.
// `lnverify MODEL.json` is `lnverify audit MODEL.json`.
#include <exception>
#include <iostream>
#include <map>

#include "cli/command.h"
#include "cli/exit_status.h"

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
  std::vector<std::string> args(argv + 1, argv + argc);
  // `lnverify MODEL.json ...` is an audit.
  bool known = false;
  for (const Command& c : registry())
    if (!args.empty() && args[0] == c.name) known = true;
  if (!args.empty() && !known && args[0].size() > 0 && args[0][0] != '-')
    args.insert(args.begin(), "audit");

  CLI::App app{"lnverify: exact LayerNorm -> RMSNorm folding, with proof by exact evaluation",
               "lnverify"};
  app.require_subcommand(1);
  std::map<std::string, Action> actions;
  std::map<const CLI::App*, std::string> names;
  for (const Command& c : registry()) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
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
  try {
    for (CLI::App* sub : app.get_subcommands()) return actions.at(names.at(sub))();
    return kBadInput;
  } catch (...) {
    const Failure failure = failure_of(std::current_exception(), args.front());
    std::cerr << failure.message;
    return failure.code;
  }
}
