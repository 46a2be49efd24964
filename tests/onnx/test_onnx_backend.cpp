// ONNX's own backend node tests (Debian's libonnx-testdata) for every op the constant
// folder evaluates: the test's inputs become initializers, the graph is folded, and every
// graph output must come out as a constant equal to the expected output (integers and
// bools exactly, floats to one unit in the last place of their type).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "core/error.h"
#include "onnx/constant_fold.h"
#include "onnx/float_formats.h"
#include "onnx/fold_ops.h"
#include "tests/onnx/node_test_data.h"

namespace fs = std::filesystem;
using namespace lnv::onnx_import;

namespace {

const fs::path kNodeTests = "/usr/share/libonnx-testdata/data/node";

// One unit in the last place of `type` at `v`.
double ulp(ElemType type, double v) {
  const int mantissa = type == ElemType::Float16 ? 11 : type == ElemType::BFloat16 ? 8
                       : type == ElemType::Float ? 24 : 53;
  const int min_exp = type == ElemType::Float16 ? -14 : type == ElemType::Double ? -1022 : -126;
  int e = 0;
  std::frexp(v, &e);
  return std::ldexp(1.0, std::max(e - 1, min_exp) - (mantissa - 1));
}

// Empty when equal; otherwise what differs.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.type != want.type)
    return std::string("type ") + elem_type_name(got.type) + " vs " + elem_type_name(want.type);
  if (got.dims != want.dims) return "dims differ";
  if (got.ints != want.ints) return "integer values differ";
  for (size_t i = 0; i < want.floats.size(); ++i) {
    const double g = got.floats[i], w = want.floats[i];
    if (std::isnan(w) && std::isnan(g)) continue;
    if (g == w) continue;
    if (std::isinf(w) || std::isinf(g) || std::fabs(g - w) > ulp(want.type, w))
      return "element " + std::to_string(i) + ": " + std::to_string(g) + " vs " + std::to_string(w);
  }
  return "";
}

// ONNX 1.12's test data stores BFLOAT16 tensors as UINT16 bit patterns; read them as the
// graph declares them.
Tensor as_declared(Tensor t, ElemType declared) {
  if (declared != ElemType::BFloat16 || t.type != ElemType::Uint16) return t;
  t.type = ElemType::BFloat16;
  for (int64_t bits : t.ints) t.floats.push_back(bfloat16_bits_to_double(static_cast<uint16_t>(bits)));
  t.ints.clear();
  return t;
}


enum class Outcome { Passed, Failed, Skipped };

struct NodeTestRun {
  Outcome outcome;
  std::string why;  // a skip's reason or a failure's message
};

NodeTestRun run_node_test(const fs::path& dir) {
  Model model;
  try {
    model = load_onnx(dir / "model.onnx");
  } catch (const lnv::ModelError& e) {
    return {Outcome::Skipped, "does not load: " + std::string(e.what())};
  }
  for (const Node& n : model.graph.nodes)
    if (!n.domain.empty() || !is_foldable_op(n.op_type))
      return {Outcome::Skipped, "op " + n.op_type};
  std::vector<const ValueInfo*> feeds;
  for (const ValueInfo& v : model.graph.inputs)
    if (!model.graph.initializer(v.name)) feeds.push_back(&v);
  const auto input_files = node_test_files(dir, "input_");
  const auto output_files = node_test_files(dir, "output_");
  if (input_files.size() != feeds.size()) return {Outcome::Skipped, "optional inputs omitted"};
  for (const ValueInfo& v : model.graph.outputs)
    if (!is_supported_type(v.type)) return {Outcome::Skipped, "output type not held"};
  try {
    for (size_t k = 0; k < feeds.size(); ++k) {
      Tensor t = as_declared(load_tensor_pb(input_files[k]), feeds[k]->type);
      if (t.dims != feeds[k]->static_dims())
        return {Outcome::Skipped, "test data contradicts the declared input shape"};
      model.graph.initializers.push_back({feeds[k]->name, std::move(t)});
    }
  } catch (const lnv::ModelError&) {
    return {Outcome::Skipped, "input type not held"};
  }
  FoldResult folded;
  try {
    folded = fold_constants(model);
  } catch (const lnv::ModelError& e) {
    return {Outcome::Failed, e.what()};
  }
  if (!folded.model.graph.nodes.empty())
    return {Outcome::Failed, "not folded: " + folded.model.graph.nodes.front().op_type};
  for (size_t k = 0; k < model.graph.outputs.size(); ++k) {
    const Initializer* got = folded.model.graph.initializer(model.graph.outputs[k].name);
    if (!got) return {Outcome::Failed, "output " + model.graph.outputs[k].name + " is not constant"};
    const std::string diff = compare(
        got->value, as_declared(load_tensor_pb(output_files.at(k)), model.graph.outputs[k].type));
    if (!diff.empty()) return {Outcome::Failed, "output " + std::to_string(k) + ": " + diff};
  }
  return {Outcome::Passed, ""};
}

// The op a node test is about: its first node's op (the tests hold one node, or an
// expanded function whose ops all count).
std::string subject_op(const fs::path& dir) {
  std::string name = dir.filename().string().substr(5);  // drop "test_"
  std::string best;
  for (const std::string& op : foldable_ops()) {
    std::string lower;
    for (char c : op) lower += static_cast<char>(std::tolower(c));
    if (name.rfind(lower, 0) == 0 && lower.size() > best.size()) best = op;
  }
  if (best.empty() && (name.rfind("tril", 0) == 0 || name.rfind("triu", 0) == 0)) best = "Trilu";
  return best.empty() ? "other" : best;
}

TEST(OnnxBackendNodeTests, EveryTestOfAFoldedOpPasses) {
  if (!fs::is_directory(kNodeTests)) GTEST_SKIP() << kNodeTests << " missing (libonnx-testdata)";
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(kNodeTests)) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  std::map<std::string, std::pair<int, int>> by_op;  // op → (passed, ran)
  std::map<std::string, int> skipped_by_reason;
  int ran = 0, passed = 0, skipped = 0;
  for (const fs::path& dir : dirs) {
    const NodeTestRun r = run_node_test(dir);
    if (r.outcome == Outcome::Skipped) {
      ++skipped;
      ++skipped_by_reason[r.why.rfind("does not load", 0) == 0 ? "does not load" : r.why];
      continue;
    }
    ++ran;
    auto& counts = by_op[subject_op(dir)];
    ++counts.second;
    if (r.outcome == Outcome::Passed) {
      ++passed;
      ++counts.first;
    } else {
      ADD_FAILURE() << dir.filename().string() << ": " << r.why;
    }
  }
  std::cout << passed << " of " << ran << " node tests of folded ops pass; " << skipped
            << " of " << dirs.size() << " skipped.\nBy op (passed/ran):";
  for (const auto& [op, c] : by_op) std::cout << " " << op << " " << c.first << "/" << c.second;
  std::cout << "\nSkipped, by the first op not folded (or reason):";
  for (const auto& [why, n] : skipped_by_reason)
    if (n >= 8 || why.rfind("op ", 0) != 0) std::cout << " [" << why << ": " << n << "]";
  std::cout << " (ops with fewer than 8 tests not listed)\n";
  EXPECT_GT(ran, 150);
}

}  // namespace
