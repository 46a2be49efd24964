#include "cli/exit_status.h"

#include <cxxabi.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <new>
#include <typeinfo>

#include "core/error.h"

namespace lnv::cli {
namespace {

// The exception's dynamic type as the source spells it ("std::out_of_range").
std::string type_name(const std::exception& e) {
  const char* mangled = typeid(e).name();
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name ? name.get() : mangled;
}

// `e` is InternalError's message: "internal error (a bug in lnverify): ...".
Failure bug(const InternalError& e) {
  return {kInternal, "lnverify: " + std::string(e.what()) +
                         "\nPlease report it, with the command line and its input files.\n"};
}

}  // namespace

Failure failure_of(std::exception_ptr error, std::string_view command) {
  try {
    std::rethrow_exception(error);
  } catch (const ModelError& e) {
    return {kBadInput, "lnverify: error: " + std::string(e.what()) + "\n"};
  } catch (const std::filesystem::filesystem_error& e) {
    return {kBadInput, "lnverify: error: " + std::string(e.what()) + "\n"};
  } catch (const std::bad_alloc&) {
    // Every tensor is bounded (2^31 elements), but not their sum: say what ran out.
    return {kBadInput, "lnverify: error: out of memory in `lnverify " + std::string(command) +
                           "`: the model's values (params, inputs, node outputs) do not fit "
                           "in this machine's memory\n"};
  } catch (const InternalError& e) {
    return bug(e);
  } catch (const std::exception& e) {
    return bug(InternalError(type_name(e) + ": " + e.what()));
  } catch (...) {
    return bug(InternalError("an exception that is not a std::exception"));
  }
}

}  // namespace lnv::cli
