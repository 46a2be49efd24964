// Plain-text tables and colour for the text reports: cells padded by their display width
// (UTF-8 code points, East Asian wide characters counting 2, combining marks 0), and a
// painter the CLI supplies that colours a cell after it was padded (cli/terminal.h).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace lnv::report {

enum class Tone { good, bad, warn, dim };

// Wraps text in colour, or returns it unchanged (the default).
using Paint = std::function<std::string(std::string_view text, Tone tone)>;
std::string no_paint(std::string_view text, Tone tone);

// How a text report is printed: the painter, and whether to add detail (--verbose).
struct TextOptions {
  Paint paint = no_paint;
  bool verbose = false;
};

// Columns `text` takes in a terminal.
size_t display_width(std::string_view text);

// `text` followed by spaces up to `width` columns (unchanged when already that wide).
std::string pad(std::string_view text, size_t width);

// pad, then paint only the text (the padding stays outside the colour codes).
std::string pad_painted(std::string_view text, size_t width, Tone tone, const Paint& paint);

// A duration for a progress bar's ETA: "42s" under 90 s, "3m07s" under 90 minutes (whole
// seconds rounded once, so never "1m60s"), else hours with one decimal ("2.5h").
std::string duration_text(double seconds);

}  // namespace lnv::report
