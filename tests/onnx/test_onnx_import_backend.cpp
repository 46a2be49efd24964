// ONNX's own backend node tests (Debian's libonnx-testdata) through the importer: every
// test whose ops all map onto model.json ops (after folding its static shapes) is
// imported, evaluated in double by lnverify's exact evaluator, and compared with the
// expected outputs at the tolerances of ONNX's backend runner (rtol 1e-3, atol 1e-7).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>

#include "core/error.h"
#include "core/eval/evaluator.h"
#include "onnx/constant_fold.h"
#include "onnx/import.h"
#include "tests/onnx/node_test_data.h"

namespace fs = std::filesystem;
using namespace lnv::onnx_import;

namespace {

const fs::path kNodeTests = "/usr/share/libonnx-testdata/data/node";


enum class Outcome { Passed, Failed, Skipped };

struct TestRun {
  Outcome outcome;
  std::string why;  // a skip's reason (the op not mapped) or a failure's message
  double worst_rel = 0;
};

lnv::Tensor<double> as_double(const Tensor& t) {
  lnv::Tensor<double> out;
  out.shape = t.dims;
  if (t.is_float()) out.data = t.floats;
  else out.data.assign(t.ints.begin(), t.ints.end());
  return out;
}

// Whether graph input `v` is read only as the indices of a Gather (token ids).
bool only_gather_indices(const Graph& g, const std::string& v) {
  bool read = false;
  for (const Node& n : g.nodes)
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (n.inputs[k] == v) {
        if (n.op_type != "Gather" || k != 1) return false;
        read = true;
      }
  return read;
}

// Whether graph input `v` is read as a weight (a Conv's, a ConvTranspose's, a norm's, a
// PRelu slope), statistics, an exponent, a Clip bound or Resize's scales: a constant in a
// real model.
bool read_as_weight(const Graph& g, const std::string& v) {
  for (const Node& n : g.nodes)
    for (size_t k = 1; k < n.inputs.size(); ++k)
      if (n.inputs[k] == v &&
          (n.op_type == "Conv" || n.op_type == "ConvTranspose" || n.op_type == "BatchNormalization" || n.op_type == "Pow" ||
           n.op_type == "LayerNormalization" || n.op_type == "RMSNormalization" ||
           n.op_type == "Clip" || n.op_type == "Pad" || n.op_type == "PRelu" ||
           n.op_type == "InstanceNormalization" || n.op_type == "Resize" || n.op_type == "Upsample" ||
           n.op_type == "LSTM" || n.op_type == "GRU" || n.op_type == "RNN"))  // W, R, B, initial states, peepholes
        return true;
  return false;
}

// The test's integer and bool inputs that are not token ids (shapes, axes, a ratio, a
// training flag), and weights, are constants in a real model: they become initializers, as the folder
// needs them. The float inputs (and ids) stay graph inputs; their data is returned.
std::optional<std::vector<lnv::Tensor<double>>> feed(Model& model, const fs::path& dir) {
  const auto input_files = node_test_files(dir, "input_");
  std::vector<const ValueInfo*> declared;
  for (const ValueInfo& v : model.graph.inputs)
    if (!model.graph.initializer(v.name)) declared.push_back(&v);
  if (input_files.size() != declared.size()) return std::nullopt;
  std::vector<lnv::Tensor<double>> feeds;
  std::vector<std::string> constants;
  for (size_t k = 0; k < declared.size(); ++k) {
    Tensor t = load_tensor_pb(input_files[k]);
    if (t.type != declared[k]->type || t.dims != declared[k]->static_dims()) return std::nullopt;
    if ((t.is_float() && !read_as_weight(model.graph, declared[k]->name)) ||
        only_gather_indices(model.graph, declared[k]->name)) {
      feeds.push_back(as_double(t));
      continue;
    }
    constants.push_back(declared[k]->name);
    model.graph.initializers.push_back({declared[k]->name, std::move(t)});
  }
  std::erase_if(model.graph.inputs, [&](const ValueInfo& v) {
    return std::find(constants.begin(), constants.end(), v.name) != constants.end();
  });
  return feeds;
}

TestRun run_node_test(const fs::path& dir) {
  Model folded;
  std::optional<std::vector<lnv::Tensor<double>>> inputs;
  try {
    Model model = load_onnx(dir / "model.onnx");
    inputs = feed(model, dir);
    if (!inputs) return {Outcome::Skipped, "test data other than declared"};
    folded = fold_constants(model).model;
  } catch (const lnv::ModelError& e) {
    return {Outcome::Skipped, "does not load or fold"};
  }
  for (const Node& n : folded.graph.nodes)
    if (!is_imported_op(n.domain, n.op_type)) return {Outcome::Skipped, n.op_type};
  const auto output_files = node_test_files(dir, "output_");
  lnv::Graph g;
  try {
    g = import_graph(folded);
  } catch (const lnv::ModelError& e) {
    const std::string what = e.what();
    if (what.find("dimensions must be positive") != std::string::npos ||
        what.find("takes no element") != std::string::npos)
      return {Outcome::Skipped, "zero-size tensors"};
    if (what.find("not a float tensor") != std::string::npos ||
        what.find("where a float tensor is read") != std::string::npos)
      return {Outcome::Skipped, "integer tensors"};
    return {Outcome::Failed, what};
  }
  for (const lnv::Node& n : g.nodes)
    if (n.op == lnv::Op::opaque) return {Outcome::Skipped, n.op_type + " (opaque)"};
  lnv::eval::Evaluation<double> ev;
  try {
    ev = lnv::eval::evaluate<double>(g, *inputs, lnv::eval::RunOptions{});
  } catch (const std::exception& e) {
    return {Outcome::Failed, std::string("evaluation: ") + e.what()};
  }
  TestRun run{Outcome::Passed, ""};
  for (size_t k = 0; k < output_files.size(); ++k) {
    const Tensor want = load_tensor_pb(output_files[k]);
    const lnv::Tensor<double>& got = ev.outputs.at(k);
    if (got.shape != want.dims) return {Outcome::Failed, "output " + std::to_string(k) + ": shape differs"};
    for (size_t i = 0; i < want.floats.size(); ++i) {
      const double w = want.floats[i], d = std::fabs(got.data[i] - w);
      if (w != 0) run.worst_rel = std::max(run.worst_rel, d / std::fabs(w));
      if (!(d <= 1e-7 + 1e-3 * std::fabs(w)))
        return {Outcome::Failed, "output " + std::to_string(k) + " element " + std::to_string(i) +
                                     ": " + std::to_string(got.data[i]) + " vs " + std::to_string(w)};
    }
  }
  return run;
}

TEST(OnnxImportBackendNodeTests, EveryTestWhoseOpsMapPasses) {
  if (!fs::is_directory(kNodeTests)) GTEST_SKIP() << kNodeTests << " missing (libonnx-testdata)";
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(kNodeTests)) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  std::map<std::string, std::pair<int, int>> by_op;  // subject op -> passed, run
  std::map<std::string, int> skipped;
  int run = 0, passed = 0, skip = 0;
  double worst = 0;
  std::string worst_test;
  for (const fs::path& dir : dirs) {
    const TestRun r = run_node_test(dir);
    if (r.outcome == Outcome::Skipped) {
      ++skip;
      ++skipped[r.why];
      continue;
    }
    ++run;
    Model m = load_onnx(dir / "model.onnx");
    auto& [p, n] = by_op[m.graph.nodes.empty() ? "none" : m.graph.nodes.front().op_type];
    ++n;
    if (r.outcome == Outcome::Passed) {
      ++passed;
      ++p;
      if (r.worst_rel > worst) worst = r.worst_rel, worst_test = dir.filename().string();
    } else {
      ADD_FAILURE() << dir.filename().string() << ": " << r.why;
    }
  }
  std::cout << passed << " of " << run << " supported node tests pass; " << skip
            << " skipped, by op:";
  for (const auto& [why, count] : skipped) std::cout << " " << why << " " << count << ",";
  std::cout << "\nrun by op (passed/run):";
  for (const auto& [op, pr] : by_op) std::cout << " " << op << " " << pr.first << "/" << pr.second;
  std::cout << "\nworst relative error of a passing test: " << worst << " (" << worst_test << ")\n";
  EXPECT_GT(run, 100);
}

// ONNX's recurrent node tests run through `lstm`, `gru` and `rnn` (every direction the
// test data has, biases, initial states, linear_before_reset, RNN's layout 1); peepholes
// and layout 1 of LSTM and GRU are not modelled (opaque: skipped).
TEST(OnnxImportBackendNodeTests, RecurrentOpsPass) {
  if (!fs::is_directory(kNodeTests)) GTEST_SKIP() << kNodeTests << " missing (libonnx-testdata)";
  for (const char* name : {"test_lstm_defaults", "test_lstm_with_initial_bias", "test_gru_defaults",
                           "test_gru_seq_length", "test_gru_with_initial_bias", "test_simple_rnn_defaults",
                           "test_simple_rnn_with_initial_bias", "test_rnn_seq_length",
                           "test_simple_rnn_batchwise"}) {
    if (!fs::is_directory(kNodeTests / name)) continue;
    const TestRun r = run_node_test(kNodeTests / name);
    EXPECT_EQ(r.outcome, Outcome::Passed) << name << ": " << r.why;
  }
  for (const char* name : {"test_lstm_with_peepholes", "test_lstm_batchwise", "test_gru_batchwise"}) {
    if (!fs::is_directory(kNodeTests / name)) continue;
    EXPECT_EQ(run_node_test(kNodeTests / name).outcome, Outcome::Skipped) << name;
  }
}

// ONNX RNN nodes in the forms ONNX's node tests and PyTorch leave out
// (tests/data/onnx/rnn_forms/, scripts/make_onnx_recurrent_models.py): reverse and
// bidirectional, initial_h a constant or a graph input, constant sequence_lens, layout 1.
// Each imports without an opaque node, X and initial_h staying inputs, and lnverify's
// double evaluation of Y and Y_h equals ONNX Runtime's float32 outputs to float32 noise.
TEST(OnnxImportBackendNodeTests, RnnFormsAgreeWithOnnxRuntime) {
  const fs::path root = fs::path(LNV_SOURCE_DIR) / "tests/data/onnx/rnn_forms";
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    const fs::path dir = entry.path();
    const std::string name = dir.filename().string();
    const Model folded = fold_constants(load_onnx(dir / "model.onnx")).model;
    const lnv::Graph g = import_graph(folded);
    for (const lnv::Node& n : g.nodes) EXPECT_NE(n.op, lnv::Op::opaque) << name << ": " << n.name;
    std::vector<lnv::Tensor<double>> inputs;
    for (const fs::path& f : node_test_files(dir, "input_")) inputs.push_back(as_double(load_tensor_pb(f)));
    ASSERT_EQ(inputs.size(), g.inputs.size()) << name;
    const auto ev = lnv::eval::evaluate<double>(g, inputs, lnv::eval::RunOptions{});
    const auto outputs = node_test_files(dir, "output_");
    ASSERT_EQ(outputs.size(), 2u) << name;
    for (size_t k = 0; k < outputs.size(); ++k) {
      const Tensor want = load_tensor_pb(outputs[k]);
      const lnv::Tensor<double>& got = ev.outputs.at(k);
      ASSERT_EQ(got.shape, want.dims) << name << " output " << k;
      for (size_t e = 0; e < want.floats.size(); ++e)
        EXPECT_NEAR(got.data[e], want.floats[e], 1e-5) << name << " output " << k << " element " << e;
    }
    ++cases;
  }
  EXPECT_EQ(cases, 8);
}

}  // namespace
