// The terminal: how much to print (global --quiet / --verbose), colour (only on a TTY and
// never with NO_COLOR set, https://no-color.org) and a progress bar on stderr for long
// work (only when stderr is a TTY, so logs and pipes stay clean).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "reports/text_style.h"

namespace lnv::cli {

enum class Verbosity { quiet, normal, verbose };
// The level the global options set (normal unless --quiet or --verbose).
Verbosity& verbosity();
inline bool quiet() { return verbosity() == Verbosity::quiet; }
inline bool verbose() { return verbosity() == Verbosity::verbose; }

// Whether text written to `fd` (1 or 2) may carry colour: `fd` is a terminal and NO_COLOR
// is unset or empty.
bool colour_on(int fd);

// The painter for text written to stdout: ANSI colours when colour_on(1), else plain.
report::Paint stdout_paint();

// A one-line bar on stderr, "what [=====>    ] 12/40 3.1/s ETA 9s", redrawn at most ten
// times a second and erased when done or destroyed. Inert (prints nothing at all) when
// stderr is not a terminal or under --quiet.
class Progress {
 public:
  Progress(std::string what, std::string unit);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(int64_t done, int64_t total);
  // The callback form the checkers and benchmarks take.
  auto callback() {
    return [this](int64_t done, int64_t total) { update(done, total); };
  }
  void clear();

 private:
  std::string what_, unit_;
  bool active_ = false, shown_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace lnv::cli
