// The terminal: how much to print (global --quiet / --verbose), colour (only on a TTY and
// never with NO_COLOR set, https://no-color.org) and a progress bar on stderr for long
// work (only when stderr is a TTY, so logs and pipes stay clean).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/progress.h"
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
// stderr is not a terminal or under --quiet. Counts from 100000 on are shown scaled
// ("45.1M/124.4M values"). With a `delay`, nothing is drawn until the bar has existed
// that long, so work that ends sooner shows nothing.
class Progress {
 public:
  Progress(std::string what, std::string unit,
           std::chrono::milliseconds delay = std::chrono::milliseconds(0));
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(int64_t done, int64_t total);
  // The callback form the checkers and benchmarks take.
  auto callback() {
    return [this](int64_t done, int64_t total) { update(done, total); };
  }
  // The next step of the same work: a new label and unit; the rate and ETA start again and
  // the next update or label_only draws at once.
  void relabel(std::string what, std::string unit);
  // Draws "what ..." alone, for a step with no count.
  void label_only();
  void clear();

 private:
  bool may_draw(std::chrono::steady_clock::time_point now) const;
  std::string what_, unit_;
  bool active_ = false, shown_ = false, fresh_ = true;
  std::chrono::milliseconds delay_;
  std::chrono::steady_clock::time_point created_, start_, last_;
};

// The bar of work that reports its steps through lnv::ProgressFn (importing an ONNX model,
// writing a fold): one Progress relabelled with each step ("read weights [==>   ]
// 45.1M/124.4M values ...", "infer shapes ..."), drawn only after the work has run for
// LNV_PROGRESS_DELAY seconds (0.5 when unset or not a number), erased when destroyed.
// Inert, and its callback empty, when stderr is not a terminal or under --quiet.
class StepProgress {
 public:
  StepProgress();
  StepProgress(const StepProgress&) = delete;
  StepProgress& operator=(const StepProgress&) = delete;

  ProgressFn callback();

 private:
  std::optional<Progress> bar_;
  std::string step_;
};

}  // namespace lnv::cli
