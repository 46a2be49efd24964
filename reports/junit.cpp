#include "reports/junit.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lnv::report {
namespace {

// XML 1.0 text: escapes markup and drops the control characters XML cannot carry.
std::string xml_escape(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (c >= 0x20 || ch == '\n' || ch == '\t') out += ch;
        else if (ch == '\r') out += "&#13;";
    }
  }
  return out;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

constexpr const char* kModes[2] = {"inference", "training"};

std::string sci(double v, const char* fmt = "%.3g") {
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

std::string junit_xml(const std::vector<JunitSuite>& suites) {
  using R = JunitCase::Result;
  std::ostringstream os;
  size_t tests = 0, failures = 0, errors = 0, skipped = 0;
  double total = 0;
  for (const JunitSuite& s : suites) {
    tests += s.cases.size();
    total += s.seconds;
    for (const JunitCase& c : s.cases) {
      failures += c.result == R::failure;
      errors += c.result == R::error;
      skipped += c.result == R::skipped;
    }
  }
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<testsuites name=\"lnverify\" tests=\"" << tests << "\" failures=\"" << failures
     << "\" errors=\"" << errors << "\" skipped=\"" << skipped << "\" time=\"" << seconds(total)
     << "\">\n";
  for (size_t k = 0; k < suites.size(); ++k) {
    const JunitSuite& s = suites[k];
    size_t f = 0, e = 0, sk = 0;
    for (const JunitCase& c : s.cases) {
      f += c.result == R::failure;
      e += c.result == R::error;
      sk += c.result == R::skipped;
    }
    os << "  <testsuite name=\"" << xml_escape(s.name) << "\" id=\"" << k << "\" tests=\""
       << s.cases.size() << "\" failures=\"" << f << "\" errors=\"" << e << "\" skipped=\"" << sk
       << "\" time=\"" << seconds(s.seconds) << "\">\n";
    for (const JunitCase& c : s.cases) {
      os << "    <testcase classname=\"" << xml_escape(c.classname) << "\" name=\""
         << xml_escape(c.name) << "\" time=\"" << seconds(c.seconds) << "\"";
      const std::string msg = " message=\"" + xml_escape(c.message) + "\"";
      switch (c.result) {
        case R::passed:
          if (c.text.empty()) os << "/>\n";
          else os << ">\n      <system-out>" << xml_escape(c.text) << "</system-out>\n    </testcase>\n";
          break;
        case R::skipped:
          os << ">\n      <skipped" << msg << "/>\n    </testcase>\n";
          break;
        case R::failure:
        case R::error: {
          const char* tag = c.result == R::failure ? "failure" : "error";
          os << ">\n      <" << tag << msg << " type=\"" << tag << "\">" << xml_escape(c.text)
             << "</" << tag << ">\n    </testcase>\n";
          break;
        }
      }
    }
    os << "  </testsuite>\n";
  }
  os << "</testsuites>\n";
  return os.str();
}

namespace {

// A reader of junit_xml's output: a cursor over the text.
class JunitReader {
 public:
  JunitReader(const std::string& xml, const std::string& file) : xml_(xml), file_(file) {}

  std::vector<JunitSuite> suites() {
    expect("<?xml");
    skip_past("?>");
    expect("<testsuites");
    attributes();
    std::vector<JunitSuite> out;
    while (!take("</testsuites>")) {
      expect("<testsuite");
      JunitSuite s;
      s.name = attribute(attributes(), "name");
      while (!take("</testsuite>")) s.cases.push_back(test_case());
      for (const JunitCase& c : s.cases) s.seconds += c.seconds;
      out.push_back(std::move(s));
    }
    skip_space();
    if (at_ != xml_.size()) fail("text after </testsuites>");
    return out;
  }

 private:
  using Attributes = std::map<std::string, std::string>;
  const std::string& xml_;
  const std::string& file_;
  size_t at_ = 0;
  bool closed_ = false;  // the last start tag ended with "/>"

  [[noreturn]] void fail(const std::string& what) const {
    throw ModelError(file_, "not JUnit XML written by lnverify: " + what + " at byte " + std::to_string(at_));
  }
  void skip_space() {
    while (at_ < xml_.size() && std::isspace(static_cast<unsigned char>(xml_[at_]))) ++at_;
  }
  bool take(const char* token) {
    skip_space();
    const size_t n = std::char_traits<char>::length(token);
    if (xml_.compare(at_, n, token) != 0) return false;
    at_ += n;
    return true;
  }
  void expect(const char* token) {
    if (!take(token)) fail(std::string("expected ") + token);
  }
  void skip_past(const char* token) {
    const size_t p = xml_.find(token, at_);
    if (p == std::string::npos) fail(std::string("expected ") + token);
    at_ = p + std::char_traits<char>::length(token);
  }
  // NAME="VALUE" pairs up to the end of the start tag; closed_ says whether it was "/>".
  Attributes attributes() {
    Attributes a;
    for (;;) {
      if (take("/>")) { closed_ = true; return a; }
      if (take(">")) { closed_ = false; return a; }
      const size_t eq = xml_.find("=\"", at_);
      if (eq == std::string::npos) fail("expected an attribute");
      const std::string name = xml_.substr(at_, eq - at_);
      const size_t end = xml_.find('"', eq + 2);
      if (end == std::string::npos || name.empty() || name.find_first_of(" <>/") != std::string::npos)
        fail("expected an attribute");
      a[name] = unescape(xml_.substr(eq + 2, end - eq - 2));
      at_ = end + 1;
    }
  }
  std::string attribute(const Attributes& a, const std::string& name) const {
    auto it = a.find(name);
    if (it == a.end()) fail("no attribute '" + name + "'");
    return it->second;
  }
  std::string text_until(const char* end_tag) {
    const size_t p = xml_.find(end_tag, at_);
    if (p == std::string::npos) fail(std::string("expected ") + end_tag);
    std::string t = unescape(xml_.substr(at_, p - at_));
    at_ = p + std::char_traits<char>::length(end_tag);
    return t;
  }
  JunitCase test_case() {
    using R = JunitCase::Result;
    expect("<testcase");
    const Attributes a = attributes();
    JunitCase c{attribute(a, "classname"), attribute(a, "name"), R::passed, "", "",
                std::strtod(attribute(a, "time").c_str(), nullptr)};
    if (closed_) return c;
    if (take("<system-out>")) {
      c.text = text_until("</system-out>");
    } else if (take("<skipped")) {
      c.result = R::skipped;
      c.message = attribute(attributes(), "message");
      if (!closed_) fail("expected <skipped .../>");
    } else {
      const bool failure = take("<failure");
      if (!failure) expect("<error");
      c.result = failure ? R::failure : R::error;
      c.message = attribute(attributes(), "message");
      if (!closed_) c.text = text_until(failure ? "</failure>" : "</error>");
    }
    expect("</testcase>");
    return c;
  }
  static std::string unescape(const std::string& s) {
    static const std::pair<const char*, char> entities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}, {"&#13;", '\r'}};
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      bool matched = false;
      if (s[i] == '&')
        for (const auto& [name, ch] : entities)
          if (s.compare(i, std::char_traits<char>::length(name), name) == 0) {
            out += ch;
            i += std::char_traits<char>::length(name) - 1;
            matched = true;
            break;
          }
      if (!matched) out += s[i];
    }
    return out;
  }
};

}  // namespace

std::vector<JunitSuite> read_junit_xml(const std::string& xml, const std::string& file) {
  return JunitReader(xml, file).suites();
}

JunitSuite audit_junit(const nlohmann::json& audit, const AuditDiff* diff) {
  using R = JunitCase::Result;
  JunitSuite s;
  const std::string model = audit.at("model").get<std::string>();
  s.name = "lnverify audit " + model;
  const std::string classname = "lnverify.audit." + model;
  auto add = [&](const std::string& ln, int m, R result, std::string message, std::string text) {
    s.cases.push_back({classname, ln + " [" + kModes[m] + "]", result, std::move(message), std::move(text), 0});
  };
  if (!diff) {
    for (const nlohmann::json& l : audit.at("layer_norms"))
      for (int m = 0; m < 2; ++m) {
        const std::string ln = l.at("name").get<std::string>();
        if (l.at("foldable").at(kModes[m]).get<bool>())
          add(ln, m, R::passed, "", "folds into RMSNorm exactly");
        else
          add(ln, m, R::skipped, "not foldable: " + l.at("reasons").at(kModes[m]).get<std::string>(), "");
      }
    return s;
  }
  for (const LnDiff& l : diff->layer_norms)
    for (int m = 0; m < 2; ++m) {
      const Change c = l.change(m);
      const AuditVerdict& now = l.after[m];
      const AuditVerdict& was = l.before[m];
      switch (c) {
        case Change::same:
          if (now.foldable) add(l.name, m, R::passed, "", "folds, as in the baseline");
          else add(l.name, m, R::skipped, "not foldable, as in the baseline: " + now.reason, "");
          break;
        case Change::improved:
          add(l.name, m, R::passed, "", "improvement: folds now; the baseline said no (" + was.reason + ")");
          break;
        case Change::regressed:
          add(l.name, m, R::failure, "no longer folds: " + now.reason,
              "the baseline " + diff->baseline + " folds it; now: " + now.reason);
          break;
        case Change::reason_changed:
          add(l.name, m, R::failure, "the reason for \"no\" changed",
              "baseline: " + was.reason + "\nnow: " + now.reason);
          break;
        case Change::appeared:
          add(l.name, m, R::failure, "a LayerNorm not in the baseline",
              std::string("now ") + (now.foldable ? "foldable" : "not foldable: " + now.reason) +
                  "; update the baseline " + diff->baseline + " if this is intended");
          break;
        case Change::disappeared:
          add(l.name, m, R::failure, "a LayerNorm of the baseline is gone",
              std::string("the baseline ") + diff->baseline + " has it " +
                  (was.foldable ? "foldable" : "not foldable"));
          break;
      }
    }
  return s;
}

JunitSuite check_junit(const CheckReport& r) {
  using R = JunitCase::Result;
  JunitSuite s;
  const std::string mode(mode_name(r.mode));
  s.name = "lnverify check " + r.model + " (" + mode + ")";
  for (const CheckResult& c : r.results) {
    std::string numbers = "max abs " + sci(c.max_abs) + ", max rel " + sci(c.max_rel) + ", bound " +
                          sci(c.bound) + ", " + std::to_string(c.bits) + " bits";
    if (c.kind == "ln_tight") numbers += ", " + std::to_string(c.attempts) + " forced folds";
    std::string text = numbers;
    if (!c.detail.empty()) text = c.detail + "\n" + text;
    if (c.divergence)
      text += "\n" + c.divergence->quantity + " differs on trial " + std::to_string(c.divergence->trial) +
              " (run seed " + std::to_string(c.divergence->seed) + "); first node where they part: '" +
              c.divergence->first_node + "'";
    const R result = c.outcome == Outcome::holds ? R::passed
                     : c.outcome == Outcome::fails ? R::failure
                                                   : R::error;
    const std::string message =
        result == R::passed ? "" : std::string(outcome_name(c.outcome)) + ": " + (c.detail.empty() ? numbers : c.detail);
    s.cases.push_back({"lnverify.check." + r.model + "." + mode, c.kind + " " + c.subject, result,
                       message, text, 0});
  }
  return s;
}

JunitSuite equiv_junit(const EquivReport& r) {
  using R = JunitCase::Result;
  JunitSuite s;
  const std::string mode(mode_name(r.mode));
  s.name = "lnverify equiv " + r.a + " " + r.b + " (" + mode + ")";
  for (const EquivQuantity& q : r.quantities) {
    const ErrorStats& e = q.stats;
    std::string text = "max abs " + sci(e.max_abs) + ", max rel " + sci(e.max_rel) + ", p99 abs " +
                       sci(e.p99_abs) + ", bound " + sci(e.bound) + ", " + std::to_string(e.bits) +
                       " bits, " + std::to_string(e.elements) + " elements; weight storage "
                       "allowance " + r.weight_storage;
    if (!q.detail.empty()) text = q.detail + "\n" + text;
    if (q.worst)
      text += "\nworst on trial " + std::to_string(q.worst->trial) + " (run seed " +
              std::to_string(q.worst->seed) + "): element " + to_string(q.worst->index) +
              ", A " + sci(q.worst->a, "%.17g") + ", B " + sci(q.worst->b, "%.17g");
    const R result = q.outcome == Outcome::holds ? R::passed
                     : q.outcome == Outcome::fails ? R::failure
                                                   : R::error;
    std::string message;
    if (result == R::failure) message = "different: max abs " + sci(e.max_abs) + ", max rel " + sci(e.max_rel);
    else if (result == R::error) message = "inconclusive: " + q.detail;
    s.cases.push_back({"lnverify.equiv." + mode, e.quantity, result, message, text, 0});
  }
  return s;
}

}  // namespace lnv::report
