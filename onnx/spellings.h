// Private to onnx/*.cpp: the ONNX spellings of onnx/ops.def as lookups, and the unique
// names every ONNX writer and the importer give the values they add.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

#include "core/ops.h"

namespace lnv::onnx_import {

// The ONNX op (default domain) model.json op `op` is written as, one node
// (LNV_ONNX_OP, LNV_ONNX_WRITE); nullptr when `op` is written as several nodes.
inline const char* onnx_op_of(Op op) {
  static const std::map<Op, const char*> kWritten = {
#define LNV_ONNX_OP(op, OnnxOp, mapper) {Op::op, #OnnxOp},
#define LNV_ONNX_WRITE(op, OnnxOp) {Op::op, #OnnxOp},
#include "onnx/ops.def"
  };
  const auto it = kWritten.find(op);
  return it == kWritten.end() ? nullptr : it->second;
}

// The model.json op ONNX op `onnx_op` (default domain) reads as one to one (LNV_ONNX_OP,
// LNV_ONNX_READ_OP); nullopt for the others.
inline std::optional<Op> lnv_op_of(const std::string& onnx_op) {
  static const std::map<std::string, Op> kRead = {
#define LNV_ONNX_OP(op, OnnxOp, mapper) {#OnnxOp, Op::op},
#define LNV_ONNX_READ_OP(op, OnnxOp, mapper) {#OnnxOp, Op::op},
#include "onnx/ops.def"
  };
  const auto it = kRead.find(onnx_op);
  if (it == kRead.end()) return std::nullopt;
  return it->second;
}

// A norm op the norm matcher reads whole (LNV_ONNX_NORM): its model.json op, or nullopt.
inline std::optional<Op> norm_op_of(const std::string& domain, const std::string& onnx_op) {
  static const std::map<std::pair<std::string, std::string>, Op> kNorms = {
#define LNV_ONNX_NORM(op, domain, OnnxOp) {{domain, #OnnxOp}, Op::op},
#include "onnx/ops.def"
  };
  const auto it = kNorms.find({domain == "ai.onnx" ? "" : domain, onnx_op});
  if (it == kNorms.end()) return std::nullopt;
  return it->second;
}

// The nodes of the decomposed RMSNorm, in order (LNV_ONNX_RMS_STEP).
enum class RmsStep {
#define LNV_ONNX_RMS_STEP(step, OnnxOp) step,
#include "onnx/ops.def"
};
inline const char* onnx_op_of(RmsStep s) {
  switch (s) {
#define LNV_ONNX_RMS_STEP(step, OnnxOp) case RmsStep::step: return #OnnxOp;
#include "onnx/ops.def"
  }
  return nullptr;
}

// Names unique among those taken: `want`, else `want.2`, `want.3`, ...
class UniqueNames {
 public:
  std::string fresh(const std::string& want) {
    std::string name = want;
    for (int k = 2; taken_.count(name); ++k) name = want + "." + std::to_string(k);
    taken_.insert(name);
    return name;
  }
  void take(const std::string& name) { taken_.insert(name); }
  bool taken(const std::string& name) const { return taken_.count(name) != 0; }

 private:
  std::set<std::string> taken_;
};

}  // namespace lnv::onnx_import
