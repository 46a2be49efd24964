// ONNX export round trips (onnx/export.h): every model of examples/ and tests/golden/ and
// every zoo architecture at a small size is exported, the file is imported back
// (onnx/import.h), and
//  - every node of the original is a node of the re-import with the same name, of the
//    same op (or, for the ops opset 17 spells with several nodes and the importer does not
//    gather back, the op that computes the node's value: silu -> mul, center -> sub,
//    attention -> its output projection, rnn -> concat; a linear on more than two axes is
//    a matmul, or the add of its bias; a norm over axes other than the trailing ones is
//    the Transpose back, the norm itself `<name>.normalize`); nodes no output depends on are dropped by the importer; a node that reads params only is folded by the importer into a param of
//    its name;
//  - evaluated exactly (MPFR, 128 bits) on the same random inputs, the re-import computes
//    the original's outputs up to the float32 rounding of the export: every output within
//    kTolerance of the largest value of that output;
//  - the audit gives every LayerNorm of the original the same verdicts in inference and
//    training (an rnn's norm is unrolled into one norm per step: not compared by name);
//  - exported with --dtype float64 and imported back, `equiv` (checkers/model_equivalence.h)
//    proves the re-import equal to the original, and equal outright (not up to weight
//    storage) unless the model has a constant double cannot hold: an attention's 1/√(head
//    dim) for a head dim that is not a square, or a cbwc producer's centered weight.
// `opaque` nodes cannot be exported: the error names the node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "checkers/model_equivalence.h"
#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/eval/evaluator.h"
#include "core/model_json.h"
#include "generators/architectures.h"
#include "onnx/export.h"
#include "onnx/import.h"
#include "reports/equiv_report.h"

namespace fs = std::filesystem;
using lnv::Graph;
using lnv::Mode;
using lnv::Op;
using lnv::eval::Mpfr;

namespace {

// Float32 params (relative rounding 2^-24), float32 eps and attributes, 1/sqrt(head dim)
// rounded: the outputs of these small models move by less than 1e-6 of their largest value
// (measured); a wrong mapping moves them by O(1).
constexpr double kTolerance = 1e-5;

const fs::path kSource = LNV_SOURCE_DIR;

fs::path scratch() {
  const fs::path dir = fs::temp_directory_path() / ("lnv_test_onnx_export_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

Graph round_trip(const Graph& g, const std::string& tag, const lnv::onnx_export::ExportOptions& options = {}) {
  const auto onnx = lnv::onnx_export::export_onnx(g, options);
  const fs::path path = scratch() / (tag + ".onnx");
  std::ofstream(path, std::ios::binary) << onnx.model;
  if (!options.external_data.empty())
    std::ofstream(path.parent_path() / options.external_data, std::ios::binary) << onnx.data;
  return lnv::onnx_import::import_onnx(path, {});
}

// The op the re-import computes a node's value with: a linear's and an attention's
// (output) product is a Gemm (`linear`) on a matrix, else a MatMul by the transposed weight
// (`matmul`), followed by the Add of the bias (`add`) when there is one.
// Whether norm node `n` normalizes other axes than the trailing ones in order: the export
// moves them there by a Transpose and back, the Transpose back named as the node and the
// norm `<name>.normalize`.
bool transposed_norm(const Graph& g, const lnv::Node& n) {
  if (n.op != Op::layer_norm && n.op != Op::rms_norm) return false;
  const int64_t rank = int64_t(g.shape_of(n.inputs[0]).size());
  const lnv::Axes axes = lnv::normalize_axes(n.axes, rank, n.name);
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != rank - int64_t(axes.size()) + int64_t(i)) return true;
  return false;
}

Op reimported_op(const Graph& g, const lnv::Node& n) {
  const bool matrix = g.shape_of(n.inputs[0]).size() == 2;
  if (transposed_norm(g, n)) return Op::transpose;
  switch (n.op) {
    case Op::silu: return Op::mul;
    case Op::center: return Op::sub;
    case Op::linear: return matrix ? Op::linear : n.bias.empty() ? Op::matmul : Op::add;
    case Op::attention: return matrix ? Op::linear : n.bo.empty() ? Op::matmul : Op::add;
    case Op::rnn: return Op::concat;
    // A mul by a one-element param (a scalar LayerScale) of the other operand's shape
    // comes back as `scale` (the importer reads x * c with a scalar constant c so).
    case Op::mul:
      for (size_t k = 0; k < 2; ++k)
        if (g.ref(n.inputs[k]).kind == lnv::ValueRef::Kind::param &&
            lnv::numel(g.shape_of(n.inputs[k])) == 1 &&
            g.shape_of(n.inputs[1 - k]) == g.shape_of(n.name))
          return Op::scale;
      return Op::mul;
    default: return n.op;
  }
}

// The nodes some graph output depends on (the importer drops the others).
std::set<std::string> live_nodes(const Graph& g) {
  std::set<std::string> live;
  std::vector<std::string> todo(g.outputs.begin(), g.outputs.end());
  while (!todo.empty()) {
    const std::string v = todo.back();
    todo.pop_back();
    if (g.ref(v).kind != lnv::ValueRef::Kind::node || !live.insert(v).second) continue;
    const lnv::Node& n = g.nodes[size_t(g.node_index(v))];
    todo.insert(todo.end(), n.inputs.begin(), n.inputs.end());
  }
  return live;
}

// Whether node `n` reads params only (the importer folds it into a param of its name).
bool constant(const Graph& g, const lnv::Node& n) {
  return !n.inputs.empty() && std::all_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& v) {
    return g.ref(v).kind == lnv::ValueRef::Kind::param;
  });
}

double max_abs(const lnv::Tensor<Mpfr>& t) {
  double m = 0;
  for (const Mpfr& v : t.data) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

// The largest difference of any output, relative to the largest magnitude of that output.
double output_difference(const Graph& a, const Graph& b) {
  lnv::eval::set_mpfr_bits(128);
  const auto inputs = lnv::eval::random_inputs<Mpfr>(a, 1);
  std::vector<lnv::Tensor<Mpfr>> b_inputs;
  for (const lnv::Input& in : b.inputs) {
    const auto it = std::find_if(a.inputs.begin(), a.inputs.end(), [&](const lnv::Input& x) { return x.name == in.name; });
    EXPECT_NE(it, a.inputs.end()) << "the re-import has an input the original lacks: " << in.name;
    if (it == a.inputs.end()) return INFINITY;
    b_inputs.push_back(inputs[size_t(it - a.inputs.begin())]);
  }
  const auto ea = lnv::eval::evaluate(a, inputs, {Mode::inference, 1});
  const auto eb = lnv::eval::evaluate(b, b_inputs, {Mode::inference, 1});
  EXPECT_EQ(ea.outputs.size(), eb.outputs.size());
  double worst = 0;
  for (size_t k = 0; k < std::min(ea.outputs.size(), eb.outputs.size()); ++k) {
    const auto& x = ea.outputs[k];
    const auto& y = eb.outputs[k];
    EXPECT_EQ(x.shape, y.shape) << "output " << a.outputs[k];
    if (x.shape != y.shape) return INFINITY;
    const double scale = std::max(max_abs(x), 1e-30);
    for (size_t i = 0; i < x.data.size(); ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(Mpfr(x.data[i] - y.data[i]))) / scale);
  }
  return worst;
}

struct Stats {
  int models = 0, same_function = 0, same_verdicts = 0;
  double worst = 0;
  int exact_models = 0, equal = 0;  // the float64 round trips
  std::vector<std::string> equal_up_to_storage;
};
Stats& stats() {
  static Stats s;
  return s;
}

void check_round_trip(const Graph& g, const std::string& tag) {
  SCOPED_TRACE(tag);
  const Graph re = round_trip(g, tag);
  ++stats().models;

  const std::set<std::string> live = live_nodes(g);
  for (const lnv::Node& n : g.nodes) {
    if (!live.count(n.name)) continue;
    if (constant(g, n)) {
      EXPECT_TRUE(re.has(n.name)) << "node '" << n.name << "' (of params only) is not in the re-import";
      continue;
    }
    const auto it = std::find_if(re.nodes.begin(), re.nodes.end(), [&](const lnv::Node& m) { return m.name == n.name; });
    ASSERT_NE(it, re.nodes.end()) << "node '" << n.name << "' is not in the re-import";
    EXPECT_EQ(it->op, reimported_op(g, n)) << "node '" << n.name << "'";
  }
  ASSERT_EQ(re.outputs.size(), g.outputs.size());

  const double diff = output_difference(g, re);
  EXPECT_LE(diff, kTolerance);
  stats().same_function += diff <= kTolerance;
  stats().worst = std::max(stats().worst, diff);

  bool same = true;
  for (Mode mode : {Mode::inference, Mode::training}) {
    const lnv::FoldPlan pa = lnv::detect_foldable(g, mode), pb = lnv::detect_foldable(re, mode);
    for (const lnv::LnVerdict& v : pa.layer_norms) {
      if (g.nodes[size_t(g.node_index(v.node))].op == Op::rnn || !live.count(v.node)) continue;
      const lnv::Node& ln = g.nodes[size_t(g.node_index(v.node))];
      const std::string name = transposed_norm(g, ln) ? v.name + ".normalize" : v.name;
      const auto it = std::find_if(pb.layer_norms.begin(), pb.layer_norms.end(),
                                   [&](const lnv::LnVerdict& w) { return w.name == name; });
      ASSERT_NE(it, pb.layer_norms.end()) << "LayerNorm '" << v.name << "' is not in the re-import";
      const size_t m = size_t(mode);
      EXPECT_EQ(it->foldable[m], v.foldable[m])
          << "LayerNorm '" << v.name << "' (" << (mode == Mode::inference ? "inference" : "training")
          << "): original says " << v.foldable[m] << " (" << v.reason[m] << "), re-import " << it->foldable[m]
          << " (" << it->reason[m] << ")";
      same = same && it->foldable[m] == v.foldable[m];
    }
  }
  stats().same_verdicts += same;
}

// Whether the float64 export must round a number model.json evaluates exactly: an
// attention's 1/√(head dim) when the head dim is not a square (the importer folds any
// constant spelling of it into a double), a cbwc producer's centered weight (ONNX has no
// centering: the initializer holds it computed in double).
bool rounds_a_constant(const Graph& g) {
  return std::any_of(g.nodes.begin(), g.nodes.end(), [&](const lnv::Node& n) {
    if (n.cbwc) return true;
    if (n.op != Op::attention) return false;
    const int64_t dh = g.shape_of(n.inputs[0])[2] / n.heads;
    const auto root = static_cast<int64_t>(std::llround(std::sqrt(double(dh))));
    return root * root != dh;
  });
}

// The float64 export round-trips exactly: `equiv` of the original and the re-import says
// equal (exact evaluation at 256 bits, one trial), and not merely up to weight storage
// unless rounds_a_constant.
void check_exact_round_trip(const Graph& g, const std::string& tag) {
  SCOPED_TRACE(tag + " (float64)");
  lnv::onnx_export::ExportOptions options;
  options.float64 = true;
  const Graph re = round_trip(g, tag + "_float64", options);
  ++stats().exact_models;
  lnv::check::require_same_interface(g, tag, re, tag + ".onnx", Mode::inference);
  lnv::check::EquivOptions opt;  // 256 bits: at 128 the bound of a model's rounding hides a
  opt.trials = 1;                 // double's 2^-53 (an attention's 1/√(head dim))
  const lnv::report::EquivReport r = lnv::check::equiv_models(g, re, opt);
  ASSERT_EQ(r.outcome(), lnv::report::Outcome::holds) << lnv::report::to_text(r);
  const bool storage = std::any_of(r.quantities.begin(), r.quantities.end(),
                                   [](const lnv::report::EquivQuantity& q) { return q.up_to_weight_storage; });
  if (!rounds_a_constant(g)) EXPECT_FALSE(storage) << lnv::report::to_text(r);
  if (storage) stats().equal_up_to_storage.push_back(tag);
  else ++stats().equal;
}

std::vector<std::string> model_files() {
  std::vector<std::string> files;
  for (const char* dir : {"examples", "tests/golden"})
    for (const auto& e : fs::directory_iterator(kSource / dir))
      if (e.path().extension() == ".json") files.push_back(e.path().lexically_relative(kSource).string());
  std::sort(files.begin(), files.end());
  return files;
}

bool has_opaque(const Graph& g) {
  return std::any_of(g.nodes.begin(), g.nodes.end(), [](const lnv::Node& n) { return n.op == Op::opaque; });
}

class ModelFiles : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelFiles, RoundTrips) {
  const Graph g = lnv::load_model((kSource / GetParam()).string());
  if (has_opaque(g)) {
    try {
      lnv::onnx_export::export_onnx(g);
      FAIL() << "an opaque node was exported";
    } catch (const lnv::ModelError& e) {
      EXPECT_NE(std::string(e.what()).find("(opaque)"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cannot be exported"), std::string::npos) << e.what();
    }
    return;
  }
  check_round_trip(g, fs::path(GetParam()).stem().string());
  check_exact_round_trip(g, fs::path(GetParam()).stem().string());
}

INSTANTIATE_TEST_SUITE_P(All, ModelFiles, ::testing::ValuesIn(model_files()), [](const auto& info) {
  std::string s = fs::path(info.param).parent_path().filename().string() + "_" + fs::path(info.param).stem().string();
  std::replace_if(s.begin(), s.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return s;
});

lnv::zoo::ArchOptions small(const std::string& arch) {
  lnv::zoo::ArchOptions o;
  if (arch == "vit") {
    o.layers = 2, o.hidden = 16, o.heads = 2, o.image = 16, o.patch = 4, o.classes = 5, o.batch = 2;
  } else if (arch == "swin" || arch == "convnext") {
    o.depths = {1, 1, 1, 1}, o.hidden = 8, o.classes = 5;
    if (arch == "swin") o.heads = 1, o.image = 16, o.patch = 2, o.window = 2;
    else o.image = 32, o.patch = 4;
  } else {
    o.layers = 2, o.hidden = 16, o.heads = 2, o.seq = 6, o.vocab = 20, o.batch = 2;
  }
  return o;
}

std::vector<std::string> architectures() {
  std::vector<std::string> names;
  for (const auto& a : lnv::zoo::architectures()) names.push_back(a.name);
  return names;
}

class Zoo : public ::testing::TestWithParam<std::string> {};

TEST_P(Zoo, RoundTrips) {
  const Graph g = lnv::zoo::build_architecture(GetParam(), small(GetParam()));
  check_round_trip(g, "zoo_" + GetParam());
  check_exact_round_trip(g, "zoo_" + GetParam());
}

INSTANTIATE_TEST_SUITE_P(All, Zoo, ::testing::ValuesIn(architectures()));

// The folds of the examples (inference: centered weights and rms_norm; training: cbwc
// producers, `center` nodes) export and round-trip too.
TEST(Folds, RoundTrip) {
  for (const char* file : {"examples/gpt2_tiny.json", "examples/bert_tiny.json"})
    for (Mode mode : {Mode::inference, Mode::training}) {
      const Graph g = lnv::load_model((kSource / file).string());
      const Graph folded = lnv::apply_fold(g, lnv::detect_foldable(g, mode));
      const std::string tag = fs::path(file).stem().string() + (mode == Mode::inference ? "_fold_inference" : "_fold_training");
      check_round_trip(folded, tag);
      check_exact_round_trip(folded, tag);
    }
}

// External data: the same model with its large initializers in a side file imports to the
// same values.
TEST(ExternalData, ImportsTheSameValues) {
  const Graph g = lnv::load_model((kSource / "examples/gpt2_tiny.json").string());
  const Graph inline_ = round_trip(g, "inline");
  const Graph external = round_trip(g, "external", {"external.onnx.data"});
  ASSERT_EQ(inline_.params.size(), external.params.size());
  int large = 0;
  for (size_t k = 0; k < inline_.params.size(); ++k) {
    EXPECT_EQ(inline_.params[k].values, external.params[k].values) << inline_.params[k].name;
    large += lnv::numel(inline_.params[k].shape) >= lnv::onnx_export::kMinExternalNumel;
  }
  EXPECT_GT(large, 0) << "no initializer went to the external file";
}

TEST(Errors, ValueBeyondFloat32NamesTheParam) {
  Graph g = lnv::load_model((kSource / "tests/golden/linear_ln.json").string());
  g.params[0].values[0] = 1e300;
  try {
    lnv::onnx_export::export_onnx(g);
    FAIL() << "1e300 was exported as float32";
  } catch (const lnv::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("param '" + g.params[0].name + "'"), std::string::npos) << e.what();
  }
}

class Report : public ::testing::Environment {
 public:
  void TearDown() override {
    const Stats& s = stats();
    std::cout << "ONNX export round trips: " << s.models << " models; " << s.same_function
              << " compute the same function (worst relative difference " << s.worst << "), "
              << s.same_verdicts << " give the same verdicts\n"
              << "float64 export round trips proved by equiv: " << s.exact_models << " models; " << s.equal
              << " equal, " << s.equal_up_to_storage.size() << " equal up to weight storage (";
    for (size_t k = 0; k < s.equal_up_to_storage.size(); ++k) std::cout << (k ? " " : "") << s.equal_up_to_storage[k];
    std::cout << ")\n";
    std::error_code ec;
    fs::remove_all(scratch(), ec);
  }
};
const auto* const kReport = ::testing::AddGlobalTestEnvironment(new Report);

}  // namespace
