// The equiv reports (docs/spec/reports.md) built from an EquivReport made by hand with every
// outcome: equal, equal up to weight storage, different, inconclusive, over outputs and
// input gradients. JUnit (reports/junit.cpp, equiv_junit): one test case per quantity, a
// <failure> for a different one, an <error> for an inconclusive one, nothing skipped,
// valid against docs/spec/schemas/junit.xsd (xmllint, which scripts/setup.sh installs).
// Markdown (reports/equiv_report.cpp, to_markdown): the settings line, one table row per
// quantity with its numbers and verdict, the worst element, the result. HTML
// (reports/html_report.cpp, html_equiv_section): one row per quantity, names escaped.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "reports/equiv_report.h"
#include "reports/html_report.h"
#include "reports/junit.h"

namespace lnv::report {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = LNV_SOURCE_DIR;

// The names carry markup and a Markdown cell separator, which every report must escape.
const std::string kEqual = "output 'y<&>\"'";
const std::string kStorage = "output 'logits|2'";
const std::string kDifferent = "gradient of input 'x'";
const std::string kInconclusive = "gradient of input 'h'";

ErrorStats stats(const std::string& name, double max_abs, double max_rel, double bound, unsigned bits) {
  ErrorStats s;
  s.quantity = name;
  s.elements = 12;
  s.max_abs = max_abs;
  s.mean_abs = max_abs / 4;
  s.median_abs = max_abs / 8;
  s.p99_abs = max_abs / 2;
  s.max_rel = max_rel;
  s.mean_rel = max_rel / 4;
  s.median_rel = max_rel / 8;
  s.p99_rel = max_rel / 2;
  s.bound = bound;
  s.bits = bits;
  return s;
}

EquivReport four_outcomes() {
  EquivReport r;
  r.a = "a<model>.onnx";
  r.b = "b&fold.onnx";
  r.mode = Mode::training;
  r.bits = 257;
  r.trials = 2;
  r.seed = 7;
  r.grad = true;
  r.weight_bits = 24;
  r.weight_storage = "24 bits (the float32 storage of the weights that differ); measured: 16 × "
                     "the largest change of 2 random 2^-24 perturbations of the 20 differing params";
  r.dropouts = {"drop"};

  EquivQuantity equal;
  equal.stats = stats(kEqual, 0.0, 0.0, 1e-60, 257);
  equal.shape = {2, 6};

  EquivQuantity storage;
  storage.stats = stats(kStorage, 5.5e-08, 3.5e-07, 1.5e-65, 257);
  storage.shape = {2, 6};
  storage.up_to_weight_storage = true;
  storage.storage_bound = 2.04e-06;
  storage.detail = "the difference 5.5e-08 stays at twice the precision (above the rounding bound "
                   "1.5e-65) but is within 2.04e-06 = 16 × 1.27e-07 (the largest change measured "
                   "for the differing weights perturbed at 24 bits) + the rounding bound: equal up "
                   "to weight storage";

  EquivQuantity different;
  different.stats = stats(kDifferent, 0.125, 0.5, 2e-60, 514);
  different.shape = {2, 6};
  different.outcome = Outcome::fails;
  different.detail = "gradient of input 'x' differs by up to 0.125 (relative 0.5)";
  different.worst = WorstElement{1, 8, 7, {1, 1}, 0.25, 0.125};

  EquivQuantity inconclusive;
  inconclusive.stats = stats(kInconclusive, 0.0, 0.0, 1e-60, 257);
  inconclusive.stats.nonfinite = 3;
  inconclusive.shape = {2, 6};
  inconclusive.outcome = Outcome::inconclusive;
  inconclusive.detail = "a value of A or B is not finite";

  r.quantities = {equal, storage, different, inconclusive};
  return r;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// --- JUnit ---------------------------------------------------------------------------------

struct CommandResult {
  int status = -1;
  std::string out;
};

CommandResult shell(const std::string& command) {
  CommandResult r;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((command + " 2>&1").c_str(), "r"), pclose);
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe.get())) > 0) r.out.append(buf.data(), n);
  r.status = pclose(pipe.release());
  return r;
}

class EquivJunit : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(shell("xmllint --version").status, 0) << "xmllint (libxml2-utils, scripts/setup.sh)";
    path_ = fs::temp_directory_path() / ("lnv_test_report_equiv_" + std::to_string(::getpid()) + ".xml");
    xml_ = junit_xml({equiv_junit(four_outcomes())});
    std::ofstream(path_) << xml_;
  }
  void TearDown() override { fs::remove(path_); }
  // The value of an XPath 1.0 expression (no single quotes) over the written file.
  std::string xpath(const std::string& expr) const {
    const CommandResult r = shell("xmllint --xpath '" + expr + "' '" + path_.string() + "'");
    EXPECT_EQ(r.status, 0) << expr << ": " << r.out;
    return r.out.empty() || r.out.back() != '\n' ? r.out : r.out.substr(0, r.out.size() - 1);
  }

  fs::path path_;
  std::string xml_;
};

TEST_F(EquivJunit, ValidatesAgainstTheSchema) {
  const CommandResult r =
      shell("xmllint --noout --schema '" + (kSource / "docs/spec/schemas/junit.xsd").string() + "' '" +
            path_.string() + "'");
  EXPECT_EQ(r.status, 0) << r.out << xml_;
}

TEST_F(EquivJunit, OneTestCasePerQuantityWithTheSuiteTotals) {
  EXPECT_EQ(xpath("count(/testsuites/testsuite)"), "1");
  EXPECT_EQ(xpath("count(//testcase)"), "4");
  EXPECT_EQ(xpath("string(/testsuites/@tests)"), "4");
  EXPECT_EQ(xpath("string(/testsuites/@failures)"), "1");
  EXPECT_EQ(xpath("string(/testsuites/@errors)"), "1");
  EXPECT_EQ(xpath("string(/testsuites/@skipped)"), "0");
  EXPECT_EQ(xpath("string(//testsuite/@name)"), "lnverify equiv a<model>.onnx b&fold.onnx (training)");
  for (int k = 1; k <= 4; ++k)
    EXPECT_EQ(xpath("string(//testcase[" + std::to_string(k) + "]/@classname)"), "lnverify.equiv.training");
  EXPECT_EQ(xpath("string(//testcase[1]/@name)"), kEqual) << "names survive escaping";
  EXPECT_EQ(xpath("string(//testcase[2]/@name)"), kStorage);
  EXPECT_EQ(xpath("string(//testcase[3]/@name)"), kDifferent);
  EXPECT_EQ(xpath("string(//testcase[4]/@name)"), kInconclusive);
}

TEST_F(EquivJunit, FailureAndErrorWhereTheyBelong) {
  EXPECT_EQ(xpath("count(//skipped)"), "0") << "equiv skips nothing";
  // Equal (also up to weight storage): passing, the numbers in <system-out>.
  for (const char* k : {"1", "2"}) {
    EXPECT_EQ(xpath(std::string("count(//testcase[") + k + "]/*[not(self::system-out)])"), "0");
    EXPECT_NE(xpath(std::string("string(//testcase[") + k + "]/system-out)").find("max abs "),
              std::string::npos);
  }
  EXPECT_NE(xpath("string(//testcase[2]/system-out)").find("equal up to weight storage"), std::string::npos);
  EXPECT_NE(xpath("string(//testcase[2]/system-out)")
                .find("weight storage allowance 24 bits (the float32 storage of the weights that differ)"
                      "; measured: 16 × the largest change of 2 random 2^-24 perturbations"),
            std::string::npos);
  // Different: a failure with the size of the difference and the worst element.
  EXPECT_EQ(xpath("count(//testcase[3]/failure)"), "1");
  EXPECT_EQ(xpath("count(//testcase[3]/error)"), "0");
  EXPECT_EQ(xpath("string(//testcase[3]/failure/@message)"), "different: max abs 0.125, max rel 0.5");
  EXPECT_EQ(xpath("string(//testcase[3]/failure/@type)"), "failure");
  const std::string failure = xpath("string(//testcase[3]/failure)");
  EXPECT_NE(failure.find("differs by up to 0.125"), std::string::npos) << failure;
  EXPECT_NE(failure.find("worst on trial 1 (run seed 8): element [1, 1], A 0.25, B 0.125"), std::string::npos)
      << failure;
  // Inconclusive: an error saying why.
  EXPECT_EQ(xpath("count(//testcase[4]/error)"), "1");
  EXPECT_EQ(xpath("count(//testcase[4]/failure)"), "0");
  EXPECT_EQ(xpath("string(//testcase[4]/error/@message)"), "inconclusive: a value of A or B is not finite");
}

// --- Markdown ------------------------------------------------------------------------------

TEST(EquivMarkdown, SettingsRowsWorstElementAndResult) {
  const std::string md = to_markdown(four_outcomes());
  EXPECT_NE(md.find("Exact equivalence of a<model>.onnx and b&fold.onnx: training mode, 257-bit MPFR, "
                    "2 trials, seed 7, input gradients compared; weight storage allowance 24 bits "
                    "(the float32 storage of the weights that differ); measured: 16 × the largest "
                    "change of 2 random 2^-24 perturbations of the 20 differing params.\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| quantity | outcome | elements | abs max | abs mean | abs median | abs p99 | rel max "
                    "| rel mean | rel median | rel p99 | bound | bits |\n|---|"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| output 'y<&>\"' | equal | 12 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 1e-60 | 257 |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| output 'logits\\|2' | equal (up to weight storage) | 12 | 5.5e-08 | 1.38e-08 | "
                    "6.88e-09 | 2.75e-08 | 3.5e-07 | 8.75e-08 | 4.37e-08 | 1.75e-07 | 1.5e-65 | 257 |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| gradient of input 'x' | different | 12 | 0.125 | 0.0312 | 0.0156 | 0.0625 | 0.5 | "
                    "0.125 | 0.0625 | 0.25 | 2e-60 | 514 |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| gradient of input 'h' | inconclusive | 12 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 1e-60 | 257 |\n"),
            std::string::npos)
      << md;
  EXPECT_EQ(occurrences(md, "\n| output '") + occurrences(md, "\n| gradient of input '"), 4u)
      << "one row per quantity";
  EXPECT_NE(md.find("\ngradient of input 'x': worst on trial 1 (run seed 8), element [1, 1]: A 0.25, B 0.125.\n"),
            std::string::npos)
      << md;
  EXPECT_EQ(occurrences(md, "worst on trial"), 1u) << "only the different quantity has one";
  EXPECT_NE(md.find("\n**Result: different** (2 equal, 1 different, 1 inconclusive)\n"), std::string::npos) << md;
}

TEST(EquivMarkdown, TheResultIsTheWorstOutcome) {
  EquivReport r = four_outcomes();
  r.quantities.resize(2);  // equal and equal up to weight storage
  EXPECT_NE(to_markdown(r).find("**Result: equal** (2 equal, 0 different, 0 inconclusive)"), std::string::npos);
  r.quantities.push_back(four_outcomes().quantities[3]);
  EXPECT_NE(to_markdown(r).find("**Result: inconclusive** (2 equal, 0 different, 1 inconclusive)"),
            std::string::npos);
}

// --- HTML ----------------------------------------------------------------------------------

TEST(EquivHtml, OneRowPerQuantityWithItsOutcome) {
  const std::string html = html_equiv_section(four_outcomes());
  EXPECT_EQ(occurrences(html, "<tr class=\"quantity\">"), 4u);
  const size_t equal = html.find("<tr class=\"quantity\"><td class=\"yes\">equal</td>");
  const size_t different = html.find("<tr class=\"quantity\"><td class=\"no\">different</td>");
  const size_t inconclusive = html.find("<tr class=\"quantity\"><td class=\"maybe\">inconclusive</td>");
  ASSERT_NE(equal, std::string::npos) << html;
  ASSERT_NE(different, std::string::npos) << html;
  ASSERT_NE(inconclusive, std::string::npos) << html;
  EXPECT_EQ(occurrences(html, "<td class=\"yes\">equal</td>"), 2u) << "equal, and up to weight storage";
  EXPECT_LT(equal, different);
  EXPECT_LT(different, inconclusive) << "A's order: outputs, then gradients";
  EXPECT_NE(html.find("<td><code>gradient of input &#39;x&#39;</code></td><td>[2, 6]</td><td>12</td>"
                      "<td>0.125</td><td>0.0312</td><td>0.0156</td><td>0.0625</td><td>0.5</td>"
                      "<td>0.125</td><td>0.0625</td><td>0.25</td><td>2e-60</td><td>514</td>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<p>worst on trial 1 (run seed 8): element [1, 1], A 0.25, B 0.125</p>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<span class=\"badge no\">different</span>"), std::string::npos);
  EXPECT_NE(html.find("2 equal, 1 different, 1 inconclusive"), std::string::npos);
  EXPECT_NE(html.find("weight storage allowance 24 bits (the float32 storage of the weights that differ)"
                      "; measured: 16 × the largest change of 2 random 2^-24 perturbations"),
            std::string::npos);
}

TEST(EquivHtml, EscapesNamesAndModels) {
  const std::string html = html_equiv_section(four_outcomes());
  EXPECT_NE(html.find("<td><code>output &#39;y&lt;&amp;&gt;&quot;&#39;</code></td>"), std::string::npos) << html;
  EXPECT_EQ(html.find("y<&>"), std::string::npos) << "a raw name would open a tag";
  EXPECT_NE(html.find("A <code>a&lt;model&gt;.onnx</code>, B <code>b&amp;fold.onnx</code>"), std::string::npos)
      << html;
  EXPECT_EQ(html.find("a<model>"), std::string::npos);
}

}  // namespace
}  // namespace lnv::report
