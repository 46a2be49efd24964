#include "cli/terminal.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace lnv::cli {
namespace {

bool stderr_bar_allowed() { return isatty(2) == 1 && !quiet(); }

constexpr double kScaleFrom = 100000;  // counts and rates from here on are scaled

// A count as printed: exact below kScaleFrom, else scaled with k, M or G ("45.1M").
std::string count_text(double n) {
  char buf[32];
  if (n < kScaleFrom) std::snprintf(buf, sizeof buf, "%.0f", n);
  else if (n < 1e6) std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else if (n < 1e9) std::snprintf(buf, sizeof buf, "%.1fM", n / 1e6);
  else std::snprintf(buf, sizeof buf, "%.1fG", n / 1e9);
  return buf;
}

// Units per second: two decimals below kScaleFrom ("3.10"), else scaled ("1.2G").
std::string rate_text(double rate) {
  if (rate >= kScaleFrom) return count_text(rate);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", rate);
  return buf;
}

// LNV_PROGRESS_DELAY in milliseconds: seconds, a non-negative number; 0.5 s otherwise.
std::chrono::milliseconds step_delay() {
  const char* text = std::getenv("LNV_PROGRESS_DELAY");
  if (text && *text) {
    char* end = nullptr;
    const double s = std::strtod(text, &end);
    if (*end == '\0' && s >= 0 && s < 1e6) return std::chrono::milliseconds(int64_t(s * 1000));
  }
  return std::chrono::milliseconds(500);
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

Progress::Progress(std::string what, std::string unit, std::chrono::milliseconds delay)
    : what_(std::move(what)), unit_(std::move(unit)), active_(stderr_bar_allowed()),
      delay_(delay), created_(std::chrono::steady_clock::now()), start_(created_) {}

Progress::~Progress() { clear(); }

bool Progress::may_draw(std::chrono::steady_clock::time_point now) const {
  return active_ && now - created_ >= delay_;
}

void Progress::update(int64_t done, int64_t total) {
  if (!active_ || total <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (!may_draw(now)) return;
  if (shown_ && !fresh_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
  fresh_ = false;
  last_ = now;
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double rate = secs > 0 ? double(done) / secs : 0;
  constexpr int kWidth = 24;
  const int filled = int(double(kWidth) * double(done) / double(total));
  std::string bar(size_t(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(size_t(kWidth - filled - 1), ' ');
  char line[512];
  std::snprintf(line, sizeof line, "\r%s [%s] %s/%s %s  %s/s  ETA %s\033[K", what_.c_str(),
                bar.c_str(), count_text(double(done)).c_str(), count_text(double(total)).c_str(),
                unit_.c_str(), rate_text(rate).c_str(),
                rate > 0 ? report::duration_text(double(total - done) / rate).c_str() : "?");
  std::cerr << line << std::flush;
  shown_ = true;
}

void Progress::relabel(std::string what, std::string unit) {
  what_ = std::move(what);
  unit_ = std::move(unit);
  start_ = std::chrono::steady_clock::now();
  fresh_ = true;
}

void Progress::label_only() {
  const auto now = std::chrono::steady_clock::now();
  if (!may_draw(now) || (shown_ && !fresh_)) return;
  fresh_ = false;
  last_ = now;
  std::cerr << "\r" << what_ << " ...\033[K" << std::flush;
  shown_ = true;
}

void Progress::clear() {
  if (!shown_) return;
  std::cerr << "\r\033[K" << std::flush;
  shown_ = false;
}

StepProgress::StepProgress() {
  if (stderr_bar_allowed()) bar_.emplace("", "", step_delay());
}

ProgressFn StepProgress::callback() {
  if (!bar_) return {};
  return [this](std::string_view step, std::string_view unit, uint64_t done, uint64_t total) {
    if (step != step_) {
      step_ = step;
      bar_->relabel(step_, std::string(unit));
    }
    if (total == 0) bar_->label_only();
    else bar_->update(int64_t(done), int64_t(total));
  };
}

}  // namespace lnv::cli
