// The naming rule of onnx/file_labels.h: the file's node labelled L computes lnv node N
// when N == L or N starts with "L." or "L:". labels_computing lists those L for an N; here
// it is held to the rule as stated, over every pair of short strings, in both directions.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "onnx/file_labels.h"

using lnv::onnx_import::labels_computing;

namespace {

// The rule as the header states it.
bool computes(const std::string& label, const std::string& name) {
  return name == label || name.rfind(label + ".", 0) == 0 || name.rfind(label + ":", 0) == 0;
}

// Every string of up to `length` characters from `alphabet`.
std::vector<std::string> strings_upto(const std::string& alphabet, size_t length) {
  std::vector<std::string> out = {""}, last = {""};
  for (size_t n = 0; n < length; ++n) {
    std::vector<std::string> next;
    for (const std::string& s : last)
      for (char c : alphabet) next.push_back(s + c);
    out.insert(out.end(), next.begin(), next.end());
    last = next;
  }
  return out;
}

}  // namespace

TEST(FileLabels, ListsTheNameThenEachPrefixBeforeADotOrColon) {
  EXPECT_EQ(labels_computing("proj"), std::vector<std::string>({"proj"}));
  EXPECT_EQ(labels_computing("blk.0.attn:q"),
            std::vector<std::string>({"blk.0.attn:q", "blk", "blk.0", "blk.0.attn"}));
  EXPECT_EQ(labels_computing("fc:bias.moved"),
            std::vector<std::string>({"fc:bias.moved", "fc", "fc:bias"}));
  // '/' (as torch.onnx.export names nodes: "/blk/fc/Gemm") is not a separator.
  EXPECT_EQ(labels_computing("/blk/fc/Gemm"), std::vector<std::string>({"/blk/fc/Gemm"}));
}

TEST(FileLabels, AgreeWithTheRuleOverEveryShortPair) {
  const std::vector<std::string> all = strings_upto("a.:", 5);
  int computed = 0, prefixes = 0;
  for (const std::string& name : all) {
    const std::vector<std::string> labels = labels_computing(name);
    EXPECT_EQ(labels.front(), name);
    for (const std::string& label : all) {
      const bool listed = std::find(labels.begin(), labels.end(), label) != labels.end();
      EXPECT_EQ(listed, computes(label, name)) << "label '" << label << "', name '" << name << "'";
      computed += listed;
      prefixes += listed && label != name;
    }
  }
  // Both kinds of match occur, and most pairs are no match.
  EXPECT_GT(prefixes, 100);
  EXPECT_LT(computed, int(all.size() * all.size() / 10));
}
