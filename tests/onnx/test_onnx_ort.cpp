// ONNX Runtime as a real runtime for the exports of tests/data/onnx/ (each
// `<model>_opset<N>.onnx` with a `<model>_data` folder, found on disk): each runs in
// onnxruntime-node (tools/ort_run.js, one thread) on its committed input, and its float32
// output is held to lnverify's float64 evaluation of the import:
//
//   - max |ORT - lnverify| <= kNoiseFactor * noise, where noise is the export's own float32
//     noise: max |PyTorch's committed float32 output - lnverify's float64 evaluation|, or
//     one float32 unit in the last place of the largest output if that is larger (a model
//     PyTorch happens to compute to the last bit still rounds once in float32);
//   - top-1 agreement 100%: the argmax over the last axis of every row is the same.
//
// Where lnverify cannot evaluate an export yet (an op imported as opaque), ORT is held to
// PyTorch's output instead: top-1 agreement, and the difference is printed.
//
// When `lnverify fold` writes ONNX (`--rms-op decomposed|ort|onnx23`), each spelling of
// each export's fold, inference and training (`--mode training`: centering computed in the
// graph, in float32), runs in ORT too and is held to the same bound against the
// *original's* float64 evaluation (the fold changes nothing but float32 rounding). Below
// opset 13, `--rms-op onnx23` must be refused with a message instead (raising the opset to
// 23 would change other ops' meaning).
//
// Skipped, saying why, when node or onnxruntime-node (scripts/setup.sh) is missing.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>

#include <unistd.h>

#include "core/error.h"
#include "core/eval/evaluator.h"
#include "onnx/import.h"
#include "onnx/onnx_model.h"

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using namespace lnv::onnx_import;

namespace {

const fs::path kSource = LNV_SOURCE_DIR;
const fs::path kDir = kSource / "tests/data/onnx";
constexpr double kNoiseFactor = 4.0;

// An export of tests/data/onnx/ (every `<model>_opset<N>.onnx` with a `<model>_data`
// folder), found on disk so that a new export is tested as soon as it is committed.
struct Export {
  std::string model;  // file stem
  std::string data;   // data folder
};

std::vector<Export> exports() {
  std::vector<Export> list;
  for (const fs::directory_entry& f : fs::directory_iterator(kDir)) {
    if (f.path().extension() != ".onnx") continue;
    const std::string stem = f.path().stem().string();
    const std::string data = stem.substr(0, stem.find("_opset")) + "_data";
    if (fs::exists(kDir / data / "test_data_set_0/input_0.pb")) list.push_back({stem, data});
  }
  std::sort(list.begin(), list.end(), [](const Export& a, const Export& b) { return a.model < b.model; });
  return list;
}

// The export's symbolic input dims bound as its committed input has them (batch 2 and
// seq 8 for the transformers, seq 5 for the recurrent LMs); a symbol the committed input
// does not bind, or a model without one: batch 2, any other symbol 8.
DimBindings dims_of(const fs::path& model) {
  DimBindings dims;
  const auto symbols = input_dim_symbols(model);
  if (!symbols) return dims;
  for (const std::string& name : *symbols) dims[name] = name == "batch" ? 2 : 8;
  const std::string stem = model.stem().string();
  const fs::path input = model.parent_path() / (stem.substr(0, stem.find("_opset")) + "_data") /
                         "test_data_set_0/input_0.pb";
  if (!fs::exists(input)) return dims;
  onnx::ModelProto proto;
  std::ifstream f(model, std::ios::binary);
  if (!proto.ParseFromIstream(&f) || proto.graph().input_size() == 0) return dims;
  const Tensor x = load_tensor_pb(input);
  const auto& shape = proto.graph().input(0).type().tensor_type().shape();
  for (int k = 0; k < shape.dim_size() && size_t(k) < x.dims.size(); ++k)
    if (!shape.dim(k).dim_param().empty()) dims[shape.dim(k).dim_param()] = x.dims[size_t(k)];
  return dims;
}

std::string ort_dir() {
  if (const char* d = std::getenv("LNV_ORT_DIR")) return d;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/lnverify/onnxruntime";
}

// Why ORT cannot run here, or "" when it can.
std::string ort_missing() {
  if (std::system("node --version > /dev/null 2>&1") != 0) return "node is not installed";
  if (!fs::exists(fs::path(ort_dir()) / "node_modules/onnxruntime-node"))
    return "onnxruntime-node is not installed under " + ort_dir() + " (bash scripts/setup.sh)";
  return "";
}

std::string shell_quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// Runs `model` in ORT on `input` with `threads` intra-op threads; returns its first output.
// With `optimized`, ORT also saves the graph it ran (after its fusions) there.
Tensor run_ort(const fs::path& model, const fs::path& input, const fs::path& out, int threads = 1,
               const fs::path& optimized = {}) {
  const std::string cmd = "node " + shell_quoted(kSource / "tools/ort_run.js") + " " + shell_quoted(model) +
                          " " + shell_quoted(out) + " --threads " + std::to_string(threads) + " " +
                          (optimized.empty() ? "" : "--optimized " + shell_quoted(optimized) + " ") +
                          shell_quoted(input) + " > " +
                          shell_quoted(out.string() + ".log") + " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(out.string() + ".log");
    std::stringstream s;
    s << log.rdbuf();
    throw std::runtime_error("ort_run failed on " + model.string() + ": " + s.str());
  }
  return load_tensor_pb(out / "output_0.pb");
}

// This process's scratch folder, removed at exit.
const fs::path& scratch_root() {
  struct Root {
    fs::path path = fs::temp_directory_path() / ("lnv_ort_" + std::to_string(::getpid()));
    ~Root() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const Root root;
  return root.path;
}

fs::path scratch(const std::string& name) {
  const fs::path d = scratch_root() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// The argmax over the last axis of every row.
std::vector<size_t> top1(const std::vector<double>& v, const std::vector<int64_t>& dims) {
  const size_t cols = static_cast<size_t>(dims.back());
  std::vector<size_t> out;
  for (size_t r = 0; r + cols <= v.size(); r += cols)
    out.push_back(static_cast<size_t>(std::max_element(v.begin() + r, v.begin() + r + cols) - (v.begin() + r)));
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

double largest(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

size_t agreeing(const std::vector<size_t>& a, const std::vector<size_t>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] == b[i];
  return n;
}

// lnverify's float64 evaluation of the import on `x`; nullopt (with the reason) when an
// op is not evaluable.
std::optional<std::vector<double>> exact(const Export& e, const Tensor& x, std::string& why) {
  const lnv::Graph g = import_onnx(kDir / (e.model + ".onnx"), dims_of(kDir / (e.model + ".onnx")));
  lnv::Tensor<double> in;
  in.shape = x.dims;
  if (x.is_float()) in.data = x.floats;
  else in.data.assign(x.ints.begin(), x.ints.end());
  try {
    return lnv::eval::evaluate<double>(g, {in}, lnv::eval::RunOptions{}).outputs.at(0).data;
  } catch (const lnv::NotEvaluableError& err) {
    why = err.what();
    return std::nullopt;
  }
}

// Whether this lnverify's `fold` writes ONNX (the --rms-op option).
bool fold_writes_onnx() {
  const std::string cmd = std::string("'") + LNV_CLI + "' fold --help 2>&1 | grep -q -- --rms-op";
  return std::system(cmd.c_str()) == 0;
}

// The opset of an export, from its file name (`<model>_opset<N>`).
int opset_of(const std::string& model) { return std::stoi(model.substr(model.find("_opset") + 6)); }

// Whether `fold --rms-op onnx23` must refuse the export: raising an opset below 13 to 23
// changes what its Softmax, Split, Squeeze and Unsqueeze compute (docs/onnx.md).
bool refuses_onnx23(const std::string& rms_op, const std::string& model) {
  return rms_op == std::string("onnx23") && opset_of(model) < 13;
}

class Ort : public testing::TestWithParam<Export> {};

TEST_P(Ort, AgreesWithExactEvaluationWithinTheExportsOwnFloat32Noise) {
  if (const std::string why = ort_missing(); !why.empty()) GTEST_SKIP() << why;
  const Export& e = GetParam();
  const fs::path data = kDir / e.data / "test_data_set_0";
  const fs::path input = data / "input_0.pb";
  const Tensor torch = load_tensor_pb(data / "output_0.pb");
  const Tensor ort = run_ort(kDir / (e.model + ".onnx"), input, scratch(e.model));
  ASSERT_EQ(ort.dims, torch.dims);
  const auto ort_top1 = top1(ort.floats, ort.dims);

  std::string why;
  const std::optional<std::vector<double>> ref = exact(e, load_tensor_pb(input), why);
  if (!ref) {
    const auto torch_top1 = top1(torch.floats, torch.dims);
    std::cout << e.model << ": lnverify cannot evaluate it (" << why << "); ORT against PyTorch: "
              << "max abs " << max_abs_diff(ort.floats, torch.floats) << ", top-1 "
              << agreeing(ort_top1, torch_top1) << "/" << torch_top1.size() << "\n";
    EXPECT_EQ(agreeing(ort_top1, torch_top1), torch_top1.size());
    return;
  }
  const double ulp = std::ldexp(largest(*ref), -23);
  const double torch_noise = max_abs_diff(torch.floats, *ref);
  const double bound = kNoiseFactor * std::max(torch_noise, ulp);
  const double ort_diff = max_abs_diff(ort.floats, *ref);
  const auto ref_top1 = top1(*ref, torch.dims);
  std::cout << e.model << ": max |ORT - lnverify f64| " << ort_diff << ", max |PyTorch - lnverify f64| "
            << torch_noise << " (1 ulp " << ulp << "; bound " << bound << "), top-1 "
            << agreeing(ort_top1, ref_top1) << "/" << ref_top1.size() << "\n";
  EXPECT_LE(ort_diff, bound);
  EXPECT_EQ(agreeing(ort_top1, ref_top1), ref_top1.size());

  if (!fold_writes_onnx()) return;
  for (const char* mode : {"inference", "training"})
  for (const char* rms_op : {"decomposed", "ort", "onnx23"}) {
    const fs::path dir = scratch(e.model + "." + mode + "." + rms_op);
    const fs::path folded = dir / "folded.onnx";
    std::string cmd = std::string("'") + LNV_CLI + "' fold " + shell_quoted(kDir / (e.model + ".onnx")) +
                      " -o " + shell_quoted(folded) + " --rms-op " + rms_op + " --mode " + mode;
    for (const auto& [name, value] : dims_of(kDir / (e.model + ".onnx")))
      cmd += " --dim " + name + "=" + std::to_string(value);
    const int rc = std::system((cmd + " > " + shell_quoted(dir / "fold.log") + " 2>&1").c_str());
    if (refuses_onnx23(rms_op, e.model)) {
      std::ifstream log(dir / "fold.log");
      std::stringstream msg;
      msg << log.rdbuf();
      std::cout << "  fold --mode " << mode << " --rms-op " << rms_op
                << ": refused as expected below opset 13\n";
      EXPECT_NE(rc, 0) << cmd;
      EXPECT_NE(msg.str().find("raises the opset"), std::string::npos) << msg.str();
      continue;
    }
    ASSERT_EQ(rc, 0) << cmd;
    const Tensor f = run_ort(folded, input, dir / "out");
    const double fold_diff = max_abs_diff(f.floats, *ref);
    const auto fold_top1 = top1(f.floats, f.dims);
    std::cout << "  fold --mode " << mode << " --rms-op " << rms_op
              << ": max |ORT - lnverify f64 of the original| " << fold_diff << ", top-1 "
              << agreeing(fold_top1, ref_top1) << "/" << ref_top1.size() << "\n";
    EXPECT_LE(fold_diff, bound) << mode << " " << rms_op;
    EXPECT_EQ(agreeing(fold_top1, ref_top1), ref_top1.size()) << mode << " " << rms_op;
  }
}

// ORT's SimplifiedLayerNormFusion turns each decomposed RMSNorm the writer spells
// (Pow(x, 2), ReduceMean, Add eps, Sqrt, Div(x, .), Mul weight) into one fused kernel: in the
// graph ORT runs, no node of a `/RMS/` decomposition is left and there is one
// (Skip)SimplifiedLayerNormalization per folded norm (every export's norms are last-axis
// norms with a weight, the case the fusion covers). ConvNeXt's stem norm is the exception:
// it normalizes a Conv output transposed to channels-last, ORT's transpose optimizer moves
// that Transpose past the elementwise decomposition, the ReduceMean then reduces axis 1 of
// NCHW, and the fusion (which wants the last axis) no longer matches; that norm runs as
// seven kernels, so models like it want `--rms-op ort` on ORT (docs/onnx.md).
TEST(OrtFusion, RunsEachDecomposedRmsNormAsOneFusedKernel) {
  if (const std::string why = ort_missing(); !why.empty()) GTEST_SKIP() << why;
  if (!fold_writes_onnx()) GTEST_SKIP() << "this lnverify does not write ONNX";
  int checked = 0;
  for (const Export& e : exports()) {
    if (opset_of(e.model) != 17) continue;
    const fs::path dir = scratch(e.model + ".fusion");
    std::string cmd = std::string("'") + LNV_CLI + "' fold " + shell_quoted(kDir / (e.model + ".onnx")) +
                      " -o " + shell_quoted(dir / "folded.onnx");
    for (const auto& [name, value] : dims_of(kDir / (e.model + ".onnx")))
      cmd += " --dim " + name + "=" + std::to_string(value);
    ASSERT_EQ(std::system((cmd + " > " + shell_quoted(dir / "fold.log") + " 2>&1").c_str()), 0) << cmd;
    std::ifstream log(dir / "fold.log");
    std::stringstream text;
    text << log.rdbuf();
    std::smatch m;
    const std::string line = text.str();
    ASSERT_TRUE(std::regex_search(line, m, std::regex(": (\\d+) LayerNorms? -> RMSNorm"))) << line;
    const int norms = std::stoi(m[1]);
    if (norms == 0) continue;
    const fs::path opt = dir / "optimized.onnx";
    run_ort(dir / "folded.onnx", kDir / e.data / "test_data_set_0/input_0.pb", dir / "out", 1, opt);
    onnx::ModelProto mp;
    std::ifstream in(opt, std::ios::binary);
    ASSERT_TRUE(mp.ParseFromIstream(&in)) << opt;
    int fused = 0;
    std::vector<std::string> unfused;
    for (const auto& n : mp.graph().node()) {
      if (n.op_type() == "SimplifiedLayerNormalization" || n.op_type() == "SkipSimplifiedLayerNormalization")
        ++fused;  // named after the Mul it replaced: `<norm>/RMS/Mul/SimplifiedLayerNormFusion/`
      else if (n.name().find("/RMS/") != std::string::npos && n.name().find("/RMS/Add") == std::string::npos)
        unfused.push_back(n.name() + " (" + n.op_type() + ")");  // the bias Add stays
    }
    std::cout << e.model << ": " << norms << " folded norms, " << fused << " fused RMSNorm kernels in ORT's graph, "
              << unfused.size() << " unfused decomposition nodes\n";
    if (e.model.rfind("convnext", 0) == 0) {
      EXPECT_EQ(fused, 0) << e.model << ": ORT fuses the transposed stem norm: update docs/onnx.md";
      EXPECT_FALSE(unfused.empty()) << e.model;
      continue;
    }
    EXPECT_EQ(fused, norms) << e.model;
    EXPECT_TRUE(unfused.empty()) << e.model << ": " << unfused.front();
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

// The com.microsoft nodes of a model, serialized, by node name.
std::map<std::string, std::string> contrib_nodes(const fs::path& model, bool with_inputs) {
  onnx::ModelProto mp;
  std::ifstream in(model, std::ios::binary);
  if (!mp.ParseFromIstream(&in)) throw std::runtime_error("cannot parse " + model.string());
  std::map<std::string, std::string> out;
  for (onnx::NodeProto n : mp.graph().node()) {
    if (n.domain() != "com.microsoft") continue;
    if (!with_inputs) n.clear_input();
    out[n.name()] += n.op_type() + ":" + n.SerializeAsString() + ";";
  }
  return out;
}

// The fold of a graph ONNX Runtime optimized (tests/data/onnx/ort_optimized/, level
// extended) stays optimized: each folded SkipLayerNormalization becomes one
// SkipSimplifiedLayerNormalization, every other fused node is kept byte for byte (in
// training its inputs may be renamed to the centered values), and ORT runs the fold within
// the source export's own float32 noise of lnverify's float64 evaluation of the source, top-1
// 100%, in both modes.
TEST(OrtOptimized, FoldStaysFusedAndAgreesWithTheSource) {
  if (const std::string why = ort_missing(); !why.empty()) GTEST_SKIP() << why;
  if (!fold_writes_onnx()) GTEST_SKIP() << "this lnverify does not write ONNX";
  int files = 0, skip_norms = 0;
  for (const fs::directory_entry& f : fs::directory_iterator(kDir / "ort_optimized")) {
    const std::string stem = f.path().stem().string();
    if (stem.size() < 9 || stem.substr(stem.size() - 9) != "_extended") continue;
    const Export source{stem.substr(0, stem.rfind('_')), stem.substr(0, stem.find("_opset")) + "_data"};
    const fs::path input = kDir / source.data / "test_data_set_0/input_0.pb";
    const Tensor torch = load_tensor_pb(kDir / source.data / "test_data_set_0/output_0.pb");
    std::string why;
    const auto ref = exact(source, load_tensor_pb(input), why);
    ASSERT_TRUE(ref) << why;
    const double bound = kNoiseFactor * std::max(max_abs_diff(torch.floats, *ref), std::ldexp(largest(*ref), -23));
    const auto ref_top1 = top1(*ref, torch.dims);
    for (const char* mode : {"inference", "training"}) {
      const fs::path dir = scratch(stem + "." + mode);
      std::string cmd = std::string("'") + LNV_CLI + "' fold " + shell_quoted(f.path()) + " -o " +
                        shell_quoted(dir / "folded.onnx") + " --mode " + mode;
      for (const auto& [name, value] : dims_of(f.path())) cmd += " --dim " + name + "=" + std::to_string(value);
      ASSERT_EQ(std::system((cmd + " > " + shell_quoted(dir / "fold.log") + " 2>&1").c_str()), 0) << cmd;
      const bool inference = std::string(mode) == "inference";
      const auto before = contrib_nodes(f.path(), inference);
      const auto after = contrib_nodes(dir / "folded.onnx", inference);
      int skip_before = 0, skip_after = 0, simplified = 0;
      for (const auto& [name, node] : before) {
        if (node.rfind("SkipLayerNormalization:", 0) == 0) ++skip_before;
        else EXPECT_EQ(after.count(name) ? after.at(name) : "", node) << stem << " " << mode << ": " << name;
      }
      for (const auto& [name, node] : after) {
        skip_after += node.rfind("SkipLayerNormalization:", 0) == 0;
        simplified += node.rfind("SkipSimplifiedLayerNormalization:", 0) == 0;
      }
      EXPECT_EQ(simplified, skip_before - skip_after) << stem << " " << mode;
      skip_norms += simplified;
      const Tensor out = run_ort(dir / "folded.onnx", input, dir / "out");
      const double diff = max_abs_diff(out.floats, *ref);
      const auto out_top1 = top1(out.floats, out.dims);
      std::cout << stem << " fold --mode " << mode << ": " << simplified << " SkipSimplifiedLayerNormalization, "
                << "max |ORT - lnverify f64 of the source| " << diff << " (bound " << bound << "), top-1 "
                << agreeing(out_top1, ref_top1) << "/" << ref_top1.size() << "\n";
      EXPECT_LE(diff, bound) << stem << " " << mode;
      EXPECT_EQ(agreeing(out_top1, ref_top1), ref_top1.size()) << stem << " " << mode;
    }
    ++files;
  }
  EXPECT_EQ(files, 16);
  EXPECT_GE(skip_norms, 2) << "no SkipLayerNormalization was folded";
}

onnx::ModelProto parsed(const fs::path& model) {
  onnx::ModelProto mp;
  std::ifstream in(model, std::ios::binary);
  if (!mp.ParseFromIstream(&in)) throw std::runtime_error("cannot parse " + model.string());
  return mp;
}

// BERT as ONNX Runtime's transformer optimizer leaves it, its embeddings fused into one
// EmbedLayerNormalization (tests/data/onnx/contrib/embed_layer_norm_bert): the fold keeps
// that node, over tables centered row by row (in place in inference, by a ReduceMean and a
// Sub in the graph in training), and every other node byte for byte; ORT runs it within
// the source's float32 noise of lnverify's float64 evaluation of the source, top-1 100%.
TEST(OrtOptimized, EmbedLayerNormalizationFoldsOverCenteredTables) {
  if (const std::string why = ort_missing(); !why.empty()) GTEST_SKIP() << why;
  if (!fold_writes_onnx()) GTEST_SKIP() << "this lnverify does not write ONNX";
  const fs::path dir = kDir / "contrib/embed_layer_norm_bert";
  const fs::path source = dir / "model.onnx", input = dir / "test_data_set_0/input_0.pb";
  const Tensor ids = load_tensor_pb(input);
  lnv::Tensor<double> x;
  x.shape = ids.dims;
  x.data.assign(ids.ints.begin(), ids.ints.end());
  const std::vector<double> ref =
      lnv::eval::evaluate<double>(import_onnx(source, {}), {x}, lnv::eval::RunOptions{}).outputs.at(0).data;
  const Tensor ort_source = load_tensor_pb(dir / "test_data_set_0/output_0.pb");
  const double bound = kNoiseFactor * std::max(max_abs_diff(ort_source.floats, ref), std::ldexp(largest(ref), -23));
  const auto ref_top1 = top1(ref, ort_source.dims);
  const onnx::ModelProto src = parsed(source);
  for (const char* mode : {"inference", "training"}) {
    const fs::path out = scratch(std::string("embed.") + mode);
    const std::string cmd = std::string("'") + LNV_CLI + "' fold " + shell_quoted(source) + " -o " +
                            shell_quoted(out / "folded.onnx") + " --mode " + mode;
    ASSERT_EQ(std::system((cmd + " > " + shell_quoted(out / "fold.log") + " 2>&1").c_str()), 0) << cmd;
    const onnx::ModelProto fold = parsed(out / "folded.onnx");
    std::map<std::string, std::string> after;
    for (const auto& n : fold.graph().node()) after[n.name()] = n.SerializeAsString();
    const bool inference = std::string(mode) == "inference";
    for (onnx::NodeProto n : src.graph().node()) {
      ASSERT_TRUE(after.count(n.name())) << mode << ": " << n.name();
      onnx::NodeProto folded;
      folded.ParseFromString(after.at(n.name()));
      if (n.op_type() == "EmbedLayerNormalization" && !inference) {
        // In training it reads the tables centered in the graph; the rest is as it was.
        EXPECT_EQ(folded.input(2), "word.weight.centered") << folded.DebugString();
        EXPECT_EQ(folded.input(3), "position.weight.centered") << folded.DebugString();
        for (int k : {2, 3}) folded.set_input(k, n.input(k));
      }
      EXPECT_EQ(folded.SerializeAsString(), n.SerializeAsString()) << mode << ": " << n.name();
    }
    if (inference) {
      // The tables' rows centered in place; every other initializer byte for byte.
      std::map<std::string, std::string> stored;
      for (const auto& t : src.graph().initializer()) stored[t.name()] = t.SerializeAsString();
      for (const auto& t : fold.graph().initializer()) {
        if (t.name() != "word.weight" && t.name() != "position.weight") {
          EXPECT_EQ(t.SerializeAsString(), stored[t.name()]) << t.name();
          continue;
        }
        EXPECT_NE(t.SerializeAsString(), stored[t.name()]) << t.name() << " is not centered";
        const fs::path pb = out / (t.name() + ".pb");
        std::ofstream(pb, std::ios::binary) << t.SerializeAsString();
        const Tensor table = load_tensor_pb(pb);
        const size_t d = size_t(table.dims.back());
        for (size_t r = 0; r < table.floats.size(); r += d) {
          double sum = 0, size = 0;
          for (size_t c = 0; c < d; ++c) sum += table.floats[r + c], size = std::max(size, std::fabs(table.floats[r + c]));
          EXPECT_LE(std::fabs(sum / double(d)), std::ldexp(size, -22)) << t.name() << " row " << r / d;
        }
      }
    }
    const Tensor got = run_ort(out / "folded.onnx", input, out / "out");
    const double diff = max_abs_diff(got.floats, ref);
    std::cout << "embed_layer_norm_bert fold --mode " << mode << ": max |ORT - lnverify f64 of the source| "
              << diff << " (bound " << bound << "), top-1 " << agreeing(top1(got.floats, got.dims), ref_top1)
              << "/" << ref_top1.size() << "\n";
    EXPECT_LE(diff, bound) << mode;
    EXPECT_EQ(agreeing(top1(got.floats, got.dims), ref_top1), ref_top1.size()) << mode;
  }
}

// The op types of the graph ONNX Runtime runs for `model` (its optimized graph), counted.
std::map<std::string, int> ort_ops(const fs::path& model, const fs::path& input, const fs::path& dir) {
  const fs::path opt = dir / (model.stem().string() + ".optimized.onnx");
  run_ort(model, input, dir / "out", 1, opt);
  onnx::ModelProto mp;
  std::ifstream in(opt, std::ios::binary);
  EXPECT_TRUE(mp.ParseFromIstream(&in)) << opt;
  std::map<std::string, int> ops;
  for (const auto& n : mp.graph().node()) ++ops[n.op_type()];
  return ops;
}

// --rms-op ort-skip: every folded norm whose input is a residual Add runs as one
// SkipSimplifiedLayerNormalization kernel with the Add inside, so ORT's graph of the fold
// has a fused skip norm wherever the original's has a SkipLayerNormalization of a folded
// norm, and more where ORT's own fusion leaves the residual Add apart (a sum that the next
// residual reads too); a folded norm whose bias moved has no bias Add left.
TEST(OrtFusion, RunsEachResidualAddInsideTheFoldedNorm) {
  if (const std::string why = ort_missing(); !why.empty()) GTEST_SKIP() << why;
  if (!fold_writes_onnx()) GTEST_SKIP() << "this lnverify does not write ONNX";
  int checked = 0;
  for (const Export& e : exports()) {
    if (opset_of(e.model) != 17) continue;
    const fs::path dir = scratch(e.model + ".skip");
    std::string cmd = std::string("'") + LNV_CLI + "' fold " + shell_quoted(kDir / (e.model + ".onnx")) +
                      " --rms-op ort-skip -o " + shell_quoted(dir / "folded.onnx") + " --json " +
                      shell_quoted(dir / "audit.json");
    for (const auto& [name, value] : dims_of(kDir / (e.model + ".onnx")))
      cmd += " --dim " + name + "=" + std::to_string(value);
    ASSERT_EQ(std::system((cmd + " > " + shell_quoted(dir / "fold.log") + " 2>&1").c_str()), 0) << cmd;
    std::ifstream report(dir / "audit.json");
    const nlohmann::json audit = nlohmann::json::parse(report);
    int folded = 0, kept_bias = 0;
    for (const auto& v : audit.at("layer_norms")) {
      const auto& fold = audit.at("plan").at("fold");
      if (std::find(fold.begin(), fold.end(), v.at("name")) == fold.end()) continue;
      ++folded;
      kept_bias += v.at("bias").at("fate") == "kept";
    }
    if (folded == 0) continue;
    const fs::path input = kDir / e.data / "test_data_set_0/input_0.pb";
    auto orig = ort_ops(kDir / (e.model + ".onnx"), input, dir);
    auto fold = ort_ops(dir / "folded.onnx", input, dir);
    // Bias Adds of the folded norms: ORT names them `<norm>/RMS/Add`.
    onnx::ModelProto mp;
    std::ifstream in(dir / "folded.optimized.onnx", std::ios::binary);
    ASSERT_TRUE(mp.ParseFromIstream(&in));
    int bias_adds = 0;
    for (const auto& n : mp.graph().node())
      bias_adds += n.op_type() == "Add" && n.name().find("/RMS/Add") != std::string::npos;
    const int unfolded_lns = orig["LayerNormalization"] + orig["SkipLayerNormalization"] - folded;
    std::cout << e.model << ": original " << orig["SkipLayerNormalization"] << " SkipLayerNormalization, "
              << orig["LayerNormalization"] << " LayerNormalization, " << orig["Add"] << " Add; fold "
              << fold["SkipSimplifiedLayerNormalization"] << " SkipSimplifiedLayerNormalization, "
              << fold["SimplifiedLayerNormalization"] << " SimplifiedLayerNormalization, " << fold["Add"]
              << " Add (" << bias_adds << " norm bias Adds, " << kept_bias << " biases kept)\n";
    EXPECT_EQ(fold["SkipSimplifiedLayerNormalization"] + fold["SimplifiedLayerNormalization"], folded) << e.model;
    EXPECT_EQ(fold["LayerNormalization"] + fold["SkipLayerNormalization"], unfolded_lns) << e.model;
    EXPECT_GE(fold["SkipSimplifiedLayerNormalization"] + fold["SkipLayerNormalization"],
              orig["SkipLayerNormalization"]) << e.model;
    EXPECT_EQ(bias_adds, kept_bias) << e.model;
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST(OrtExports, AreFound) { EXPECT_GE(exports().size(), 11u); }

// The RNN forms of tests/data/onnx/rnn_forms/ (which test_onnx_import_backend holds
// lnverify's evaluation to) carry ONNX Runtime's outputs: each layout-0 case, run again
// here on all its inputs, gives its committed Y and Y_h to float32 rounding (ORT does not
// run layout 1; those cases' outputs are a layout-0 run's, transposed).
TEST(OrtRnnForms, CommittedOutputsAreOnnxRuntimes) {
  if (const std::string why = ort_missing(); !why.empty()) GTEST_SKIP() << why;
  int checked = 0;
  for (const fs::directory_entry& d : fs::directory_iterator(kDir / "rnn_forms")) {
    const std::string name = d.path().filename().string();
    if (name.find("batchwise") != std::string::npos) continue;
    const fs::path data = d.path() / "test_data_set_0", out = scratch("rnn_forms." + name);
    std::string cmd = "node " + shell_quoted(kSource / "tools/ort_run.js") + " " +
                      shell_quoted(d.path() / "model.onnx") + " " + shell_quoted(out);
    for (const char* input : {"input_0.pb", "input_1.pb"})
      if (fs::exists(data / input)) cmd += " " + shell_quoted(data / input);
    ASSERT_EQ(std::system((cmd + " > " + shell_quoted(out / "log") + " 2>&1").c_str()), 0) << cmd;
    for (const char* output : {"output_0.pb", "output_1.pb"}) {
      const Tensor want = load_tensor_pb(data / output), got = load_tensor_pb(out / output);
      ASSERT_EQ(got.dims, want.dims) << name << " " << output;
      EXPECT_LE(max_abs_diff(got.floats, want.floats), std::ldexp(largest(want.floats), -22)) << name << " " << output;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

INSTANTIATE_TEST_SUITE_P(RealExports, Ort, testing::ValuesIn(exports()),
                         [](const testing::TestParamInfo<Export>& info) { return info.param.model; });

// --threads reaches ORT: BERT's output with 2 threads is its 1-thread output up to
// float32 rounding of another summation order (one unit in the last place per element).
TEST(OrtRun, ThreadsChangeOnlyRounding) {
  if (const std::string why = ort_missing(); !why.empty()) GTEST_SKIP() << why;
  const fs::path model = kDir / "bert_tiny_opset17.onnx";
  const fs::path input = kDir / "bert_tiny_data/test_data_set_0/input_0.pb";
  const Tensor one = run_ort(model, input, scratch("threads1"), 1);
  const Tensor two = run_ort(model, input, scratch("threads2"), 2);
  ASSERT_EQ(one.dims, two.dims);
  EXPECT_LE(max_abs_diff(one.floats, two.floats), std::ldexp(largest(one.floats), -22));
}

// The runner refuses what it cannot do, with a message, instead of writing anything.
TEST(OrtRun, RefusesBadArguments) {
  if (const std::string why = ort_missing(); !why.empty()) GTEST_SKIP() << why;
  const fs::path dir = scratch("bad");
  const std::string runner = "node " + shell_quoted(kSource / "tools/ort_run.js");
  const fs::path model = kDir / "mlp_tiny_opset17.onnx";
  const fs::path input = kDir / "mlp_tiny_data/test_data_set_0/input_0.pb";
  EXPECT_NE(std::system((runner + " " + shell_quoted(model) + " " + shell_quoted(dir / "a") + " 2>/dev/null").c_str()), 0)
      << "no input file for a model with one input";
  EXPECT_NE(std::system((runner + " " + shell_quoted(model) + " " + shell_quoted(dir / "b") + " --threads 0 " +
                         shell_quoted(input) + " 2>/dev/null").c_str()), 0);
  EXPECT_NE(std::system((runner + " " + shell_quoted(model) + " " + shell_quoted(dir / "c") + " " + shell_quoted(model) +
                         " 2>/dev/null").c_str()), 0)
      << "an .onnx file is not a TensorProto";
  EXPECT_FALSE(fs::exists(dir / "a/output_0.pb") || fs::exists(dir / "b/output_0.pb") ||
               fs::exists(dir / "c/output_0.pb"));
}

}  // namespace
