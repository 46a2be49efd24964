#include "reports/text_style.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace lnv::report {
namespace {

// Decodes one UTF-8 code point at s[i] (advancing i); a malformed byte counts as itself.
uint32_t next_code_point(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  int extra = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : 0;
  uint32_t cp = extra == 3 ? b & 0x07 : extra == 2 ? b & 0x0F : extra == 1 ? b & 0x1F : b;
  ++i;
  for (; extra > 0 && i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80; --extra)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i++]) & 0x3F);
  return cp;
}

int columns(uint32_t cp) {
  if ((cp >= 0x0300 && cp <= 0x036F) || (cp >= 0x200B && cp <= 0x200F) || cp == 0xFE0F) return 0;
  const bool wide = (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) ||
                    (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
                    (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
                    (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x1F300 && cp <= 0x1FAFF) ||
                    (cp >= 0x20000 && cp <= 0x3FFFD);
  return wide ? 2 : 1;
}

}  // namespace

std::string no_paint(std::string_view text, Tone) { return std::string(text); }

size_t display_width(std::string_view text) {
  size_t width = 0;
  for (size_t i = 0; i < text.size();) width += size_t(columns(next_code_point(text, i)));
  return width;
}

std::string pad(std::string_view text, size_t width) {
  const size_t w = display_width(text);
  return std::string(text) + (w >= width ? "" : std::string(width - w, ' '));
}

std::string pad_painted(std::string_view text, size_t width, Tone tone, const Paint& paint) {
  const size_t w = display_width(text);
  return (paint ? paint(text, tone) : std::string(text)) +
         (w >= width ? "" : std::string(width - w, ' '));
}

std::string duration_text(double seconds) {
  char buf[32];
  if (!(seconds < 5400)) {
    std::snprintf(buf, sizeof buf, "%.1fh", seconds / 3600);
    return buf;
  }
  const long whole = std::lround(std::max(seconds, 0.0));
  if (whole < 90) std::snprintf(buf, sizeof buf, "%lds", whole);
  else std::snprintf(buf, sizeof buf, "%ldm%02lds", whole / 60, whole % 60);
  return buf;
}

}  // namespace lnv::report
