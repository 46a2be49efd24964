// The two kinds of error lnverify throws (never aborts):
//  - ModelError: the user's input is wrong. The message names the place (a JSON pointer
//    such as "/nodes/3/axes", a node name, a file) and what was expected.
//  - InternalError: a bug in lnverify. Reported as such.
#pragma once

#include <stdexcept>
#include <string>

namespace lnv {

class ModelError : public std::runtime_error {
 public:
  // `where` is a JSON pointer, a node name or a file path; empty when unknown.
  ModelError(const std::string& where, const std::string& what)
      : std::runtime_error(where.empty() ? what : where + ": " + what), where_(where) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// An op the evaluators cannot compute: an `opaque` node (an imported op lnverify does not
// model). A ModelError naming the node and its op_type; `check` reports it as
// inconclusive rather than as bad input.
class NotEvaluableError : public ModelError {
 public:
  using ModelError::ModelError;
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what)
      : std::logic_error("internal error (a bug in lnverify): " + what) {}
};

#define LNV_INTERNAL_ASSERT(cond, msg)                                                   \
  do {                                                                                   \
    if (!(cond)) throw ::lnv::InternalError(std::string(__FILE__) + ":" +                \
                                            std::to_string(__LINE__) + ": " + (msg));    \
  } while (0)

}  // namespace lnv
