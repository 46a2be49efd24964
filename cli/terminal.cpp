#include "cli/terminal.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace lnv::cli {
namespace {

bool stderr_bar_allowed() { return isatty(2) == 1 && !quiet(); }

std::string seconds_text(double s) {
  char buf[32];
  if (s < 90) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 5400) std::snprintf(buf, sizeof buf, "%.0fm%02.0fs", s / 60 - 0.5, s - 60 * int(s / 60));
  else std::snprintf(buf, sizeof buf, "%.1fh", s / 3600);
  return buf;
}

}  // namespace

Verbosity& verbosity() {
  static Verbosity level = Verbosity::normal;
  return level;
}

bool colour_on(int fd) {
  const char* no_colour = std::getenv("NO_COLOR");
  if (no_colour && *no_colour) return false;
  return isatty(fd) == 1;
}

report::Paint stdout_paint() {
  if (!colour_on(1)) return report::no_paint;
  return [](std::string_view text, report::Tone tone) {
    const char* code = tone == report::Tone::good  ? "\033[32m"
                       : tone == report::Tone::bad ? "\033[31m"
                       : tone == report::Tone::warn ? "\033[33m"
                                                    : "\033[2m";
    return code + std::string(text) + "\033[0m";
  };
}

Progress::Progress(std::string what, std::string unit)
    : what_(std::move(what)), unit_(std::move(unit)), active_(stderr_bar_allowed()),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { clear(); }

void Progress::update(int64_t done, int64_t total) {
  if (!active_ || total <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (shown_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double rate = secs > 0 ? double(done) / secs : 0;
  constexpr int kWidth = 24;
  const int filled = int(double(kWidth) * double(done) / double(total));
  std::string bar(size_t(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(size_t(kWidth - filled - 1), ' ');
  char line[256];
  std::snprintf(line, sizeof line, "\r%s [%s] %lld/%lld %s  %.2f/s  ETA %s\033[K", what_.c_str(),
                bar.c_str(), static_cast<long long>(done), static_cast<long long>(total),
                unit_.c_str(), rate,
                rate > 0 ? seconds_text(double(total - done) / rate).c_str() : "?");
  std::cerr << line << std::flush;
  shown_ = true;
}

void Progress::clear() {
  if (!shown_) return;
  std::cerr << "\r\033[K" << std::flush;
  shown_ = false;
}

}  // namespace lnv::cli
