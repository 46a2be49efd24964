// Subcommands of the `lnverify` executable register themselves here, one file each
// (cli/cmd_<name>.cpp), so that adding a command is adding one file.
//
// A command's `setup` adds its options to the CLI11 subcommand and returns the action to
// run after parsing. The action returns the process exit code (cli/exit_status.h). Errors
// are thrown: ModelError (bad input) exits 2 with its message; a bug exits 4.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/exit_status.h"

namespace lnv::cli {

using Action = std::function<int()>;
using Setup = std::function<Action(CLI::App& sub)>;

struct Command {
  std::string name;
  std::string help;
  Setup setup;
};

std::vector<Command>& registry();

// The default of a --jobs option: the cores.
inline int default_jobs() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

// Option checks CLI11 lacks. A seed: CLI11 reads a uint64 with strtoull, which wraps "-1"
// and saturates past 2^64 - 1, so the text is checked first.
inline CLI::Validator seed_range() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t seed = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seed);
        if (ec != std::errc() || end != text.data() + text.size())
          return "expected an integer from 0 to 2^64 - 1, got '" + text + "'";
        return "";
      },
      "0..2^64-1", "seed");
}
// A finite number above zero (a tolerance): CLI::PositiveNumber lets NaN through.
inline CLI::Validator positive_finite() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double x = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
        if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(x) || x <= 0)
          return "expected a finite number above 0, got '" + text + "'";
        return "";
      },
      "POSITIVE", "positive finite");
}
// A whole number of at least 1 (a size, a count); CLI::PositiveNumber's message prints
// the range up to the largest double.
inline CLI::Validator positive_count() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int64_t n = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
        if (ec != std::errc() || end != text.data() + text.size() || n < 1)
          return "expected a whole number of at least 1, got '" + text + "'";
        return "";
      },
      "N>=1", "positive count");
}

// Use at namespace scope in a cmd_*.cpp:
//   const bool kRegistered = lnv::cli::register_command({"eval", "...", setup});
bool register_command(Command c);

}  // namespace lnv::cli
