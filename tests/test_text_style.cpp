// Text tables: cells padded by display width (wide and combining characters), colour
// kept inside the padding.
#include <gtest/gtest.h>

#include "reports/text_style.h"

namespace lnv::report {
namespace {

TEST(TextStyle, DisplayWidthCountsColumnsNotBytes) {
  EXPECT_EQ(display_width("ln_f"), 4u);
  EXPECT_EQ(display_width("ln_\xC3\xA9"), 4u);                     // é: 2 bytes, 1 column
  EXPECT_EQ(display_width("e\xCC\x81"), 1u);                        // e + combining acute
  EXPECT_EQ(display_width("\xE5\xBD\x92\xE4\xB8\x80\xE5\x8C\x96"), 6u);  // 归一化: 3 wide
  EXPECT_EQ(display_width(""), 0u);
}

TEST(TextStyle, PadFillsToTheSameColumn) {
  const std::string ascii = pad("ln_f", 8), wide = pad("\xE5\xBD\x92\xE4\xB8\x80", 8);
  EXPECT_EQ(ascii, "ln_f    ");
  EXPECT_EQ(display_width(ascii), 8u);
  EXPECT_EQ(display_width(wide), 8u);
  EXPECT_EQ(wide.size(), 6u + 4u);  // 2 wide characters (6 bytes) + 4 spaces
  EXPECT_EQ(pad("too_long_name", 4), "too_long_name");
}

TEST(TextStyle, PaintWrapsTheTextNotThePadding) {
  const Paint brackets = [](std::string_view t, Tone tone) {
    return std::string(tone == Tone::good ? "<" : "[") + std::string(t) + ">";
  };
  EXPECT_EQ(pad_painted("yes", 6, Tone::good, brackets), "<yes>   ");
  EXPECT_EQ(pad_painted("no", 4, Tone::bad, brackets), "[no>  ");
  EXPECT_EQ(pad_painted("no", 4, Tone::bad, no_paint), "no  ");
}

TEST(TextStyle, DurationRoundsOnceSoSecondsNeverReachSixty) {
  EXPECT_EQ(duration_text(0.4), "0s");
  EXPECT_EQ(duration_text(89.4), "89s");
  EXPECT_EQ(duration_text(89.6), "1m30s");
  EXPECT_EQ(duration_text(119.7), "2m00s");  // not "1m60s"
  EXPECT_EQ(duration_text(179.6), "3m00s");  // not "2m60s"
  EXPECT_EQ(duration_text(187), "3m07s");
  EXPECT_EQ(duration_text(5399.4), "89m59s");
  EXPECT_EQ(duration_text(9000), "2.5h");
  EXPECT_EQ(duration_text(-3), "0s");
}

}  // namespace
}  // namespace lnv::report
