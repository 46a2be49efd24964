// The commands that run LibTorch (`fidelity`, `bench`, `check --engine torch`) live in a
// second executable, lnverify-torch, installed next to lnverify: linking LibTorch costs
// every process ~165 MB and ~0.4 s of start-up (its libraries' relocations and static op
// registration), which `audit`, `fold` and the exact engine never need. lnverify parses
// the command line itself, so bad options fail without LibTorch, then replaces itself with
// lnverify-torch on the same arguments.
#pragma once

#include <string>

namespace lnv::cli {

// Keeps the process' arguments for exec_torch_helper; main() calls it first.
void remember_command_line(int argc, char** argv);

// Replaces this process with lnverify-torch (next to this executable) run on the same
// arguments. Throws ModelError naming `where` (the command or option that needs
// LibTorch) when the helper is missing or cannot run.
[[noreturn]] void exec_torch_helper(const std::string& where);

}  // namespace lnv::cli
