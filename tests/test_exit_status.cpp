// The exit code and message lnverify ends with when a command throws (cli/exit_status.h,
// what cli/main.cpp runs): the user's errors are exit 2 and say what is wrong; anything
// else is a bug, exit 4, said to be one. The exit-2 paths are also run end to end by
// tests/cli_*.sh.
#include <filesystem>
#include <map>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>

#include <gtest/gtest.h>

#include "cli/exit_status.h"
#include "core/error.h"

namespace lnv::cli {
namespace {

template <class E>
Failure failure_for(const E& e, std::string_view command = "audit") {
  return failure_of(std::make_exception_ptr(e), command);
}

bool says(const Failure& f, const std::string& text) {
  return f.message.find(text) != std::string::npos;
}

TEST(ExitStatus, AModelErrorIsBadInputAndNamesThePlace) {
  const Failure f = failure_for(ModelError("m.json", "/nodes/0: unknown op 'x'"));
  EXPECT_EQ(f.code, kBadInput);
  EXPECT_EQ(f.message, "lnverify: error: m.json: /nodes/0: unknown op 'x'\n");
}

TEST(ExitStatus, AFilesystemErrorOnAUserPathIsBadInput) {
  const std::filesystem::filesystem_error e(
      "cannot create directories", std::filesystem::path("out/case"),
      std::make_error_code(std::errc::not_a_directory));
  const Failure f = failure_for(e);
  EXPECT_EQ(f.code, kBadInput);
  EXPECT_TRUE(says(f, "lnverify: error: ")) << f.message;
  EXPECT_TRUE(says(f, "out/case")) << f.message;
  EXPECT_FALSE(says(f, "internal error")) << f.message;
}

TEST(ExitStatus, RunningOutOfMemoryIsBadInputAndSaysSo) {
  const Failure f = failure_for(std::bad_alloc(), "check");
  EXPECT_EQ(f.code, kBadInput);
  EXPECT_TRUE(says(f, "out of memory in `lnverify check`")) << f.message;
}

// A bug: exit 4, the message says it is one, names what was thrown and asks for a report.
void expect_bug(const Failure& f, const std::string& what) {
  EXPECT_EQ(f.code, kInternal) << f.message;
  EXPECT_EQ(f.message.rfind("lnverify: internal error (a bug in lnverify): ", 0), 0u) << f.message;
  EXPECT_TRUE(says(f, what)) << f.message;
  EXPECT_TRUE(says(f, "report it")) << f.message;
  EXPECT_EQ(f.message.back(), '\n');
}

TEST(ExitStatus, AnInternalErrorIsABug) {
  const Failure f = failure_for(InternalError("core/x.cpp:1: mask out of range"));
  expect_bug(f, "core/x.cpp:1: mask out of range");
  EXPECT_EQ(f.message.find("internal error", 1), f.message.rfind("internal error"))
      << "said once: " << f.message;
}

TEST(ExitStatus, AStandardLibraryErrorIsABugNamingItsType) {
  try {
    std::map<int, int>().at(1);
    FAIL() << "map::at did not throw";
  } catch (...) {
    expect_bug(failure_of(std::current_exception(), "audit"), "std::out_of_range");
  }
  expect_bug(failure_for(std::invalid_argument("stoi")), "std::invalid_argument: stoi");
  expect_bug(failure_for(std::runtime_error("boom")), "std::runtime_error: boom");
}

// LibTorch's c10::Error derives from std::exception, as this stand-in does.
struct LibraryError : std::exception {
  const char* what() const noexcept override { return "Expected all tensors on one device"; }
};

TEST(ExitStatus, ALibraryErrorIsABug) {
  expect_bug(failure_for(LibraryError()), "LibraryError: Expected all tensors on one device");
}

TEST(ExitStatus, SomethingThatIsNotAStdExceptionIsABug) {
  expect_bug(failure_of(std::make_exception_ptr(42), "fold"), "not a std::exception");
}

}  // namespace
}  // namespace lnv::cli
