// inconclusive_when_not_evaluable of cli/command.h.
#include <iostream>
#include <utility>

#include "cli/command.h"
#include "core/error.h"

namespace lnv::cli {

Action inconclusive_when_not_evaluable(std::string command, Action action) {
  return [command = std::move(command), action = std::move(action)]() -> int {
    try {
      return action();
    } catch (const NotEvaluableError& e) {
      std::cerr << "lnverify: " << command << " inconclusive: " << e.what() << "\n";
      return kInconclusive;
    }
  };
}

}  // namespace lnv::cli
