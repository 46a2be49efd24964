#include "cli/torch_helper.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <vector>

#include "core/error.h"

namespace lnv::cli {
namespace {

std::vector<std::string>& command_line() {
  static std::vector<std::string> args;
  return args;
}

}  // namespace

void remember_command_line(int argc, char** argv) { command_line().assign(argv, argv + argc); }

void exec_torch_helper(const std::string& where) {
#ifdef LNV_TORCH_HELPER
  const std::string name = LNV_TORCH_HELPER;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path helper = (ec ? std::filesystem::path(".") : self.parent_path()) / name;
  if (::access(helper.c_str(), X_OK) != 0)
    throw ModelError(where, "needs LibTorch, which runs in " + helper.string() + ": " +
                                std::strerror(errno) + " (build the target " + name + ")");
  std::vector<std::string> args = command_line();
  args.at(0) = helper.string();
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  ::execv(helper.c_str(), argv.data());
  throw ModelError(where, "cannot run " + helper.string() + ": " + std::strerror(errno));
#else
  throw ModelError(where, "this lnverify was built without LibTorch (LNV_WITH_TORCH=OFF)");
#endif
}

}  // namespace lnv::cli
