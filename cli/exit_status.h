// How lnverify ends: the exit codes every command shares (README, "Exit codes") and the
// code and message for an error that escaped a command. The user's
// input being wrong is exit 2 with a message naming the place; anything else thrown is a
// bug in lnverify: exit 4, said to be one.
#pragma once

#include <exception>
#include <string>
#include <string_view>

namespace lnv::cli {

enum Exit : int {
  kOk = 0,           // success; for `check`: every check holds
  kCheckFails = 1,   // `check`/`fuzz`: a check fails (a wrong rewrite or verdict)
  kBadInput = 2,     // malformed model, bad option, unreadable or unwritable user path
  kInconclusive = 3, // `check`: precision or budget ran out before a verdict
  kInternal = 4,     // a bug in lnverify
};

struct Failure {
  Exit code;
  std::string message;  // for stderr, ending in a newline
};

// The exit code and message for `error`, thrown by `lnverify <command>` after its options
// were parsed. Bad input (kBadInput): ModelError, a std::filesystem::filesystem_error (a
// path the user gave cannot be created or inspected), and std::bad_alloc (the model's
// values do not fit in memory). Everything else, InternalError, std::out_of_range or a
// LibTorch c10::Error, is a bug (kInternal): the message says so, names the exception's
// type and asks for a report.
Failure failure_of(std::exception_ptr error, std::string_view command);

}  // namespace lnv::cli
