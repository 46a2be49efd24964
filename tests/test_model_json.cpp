// core/model_json: a model using every op, attribute and param source survives
// load -> save -> load; init values follow the SplitMix64 streams of docs/spec/format.md (recomputed
// here independently); defaults; and each malformed input is rejected with an error that
// names the JSON path and the node or param.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <numbers>
#include <string>

#include "core/error.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "core/safetensors.h"

namespace lnv {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// --- an independent implementation of docs/spec/format.md "Random numbers" ---
struct ReferenceStream {
  uint64_t state;
  ReferenceStream(uint64_t seed, const std::string& name) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char c : name) {
      h ^= c;
      h *= 0x100000001b3ULL;
    }
    state = seed ^ h;
  }
  uint64_t next() {
    state += 0x9E3779B97F4A7C15ULL;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform() { return std::ldexp(static_cast<double>(next() >> 11), -53); }
  // Box-Muller: returns the pair (cos, sin) drawn from two uniforms.
  std::pair<double, double> normal_pair() {
    const double u1 = 1.0 - uniform();
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    return {r * std::cos(2.0 * std::numbers::pi * u2), r * std::sin(2.0 * std::numbers::pi * u2)};
  }
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// A model using every op, every attribute, all three param sources and shared params.
const char* kEveryOp = R"({
  "format": "lnverify.model", "version": 1, "name": "every-op", "seed": 7,
  "meta": {"purpose": "round trip", "expected": {"ln": true}, "list": [1, 2.5, "x"]},
  "inputs": [
    {"name": "x", "shape": [2, 4, 6], "dtype": "float"},
    {"name": "tok", "shape": [2, 4], "dtype": "index", "range": 10},
    {"name": "seq", "shape": [1, 3, 8]},
    {"name": "img", "shape": [1, 2, 5, 5], "dtype": "float"}
  ],
  "params": [
    {"name": "E", "shape": [10, 6], "file": {"path": "weights/emb.safetensors", "key": "wte"}},
    {"name": "W1", "shape": [6, 6], "data": [
      0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7, -0.8, 0.9, -1.0, 1.1, -1.2,
      1.3, -1.4, 1.5, -1.6, 1.7, -1.8, 1.9, -2.0, 2.1, -2.2, 2.3, -2.4,
      2.5, -2.6, 2.7, -2.8, 2.9, -3.0, 3.1, -3.2, 3.3, -3.4, 3.5, 1e-300]},
    {"name": "b1", "shape": [6], "init": {"dist": "normal", "mean": 0.5, "std": 0.1}},
    {"name": "Wa", "shape": [6, 6], "init": {"dist": "uniform", "low": -0.25, "high": 0.75}},
    {"name": "ba", "shape": [6], "init": {"dist": "normal", "std": 0.02}},
    {"name": "Wih", "shape": [5, 6], "init": {"dist": "normal", "std": 0.3}},
    {"name": "Whh", "shape": [5, 5], "init": {"dist": "normal", "std": 0.3}},
    {"name": "bh", "shape": [5], "data": [0, 0.5, -0.5, 1, -1]},
    {"name": "gn", "shape": [5], "init": {"dist": "uniform", "low": 0.9, "high": 1.1}},
    {"name": "bn", "shape": [5], "data": [0.1, 0.2, 0.3, 0.4, 0.5]},
    {"name": "Wm", "shape": [5, 5], "init": {"dist": "normal", "std": 1}},
    {"name": "g48", "shape": [48], "init": {"dist": "uniform", "low": 0.5, "high": 1.5}},
    {"name": "b48", "shape": [48], "init": {"dist": "normal", "std": 0.1}},
    {"name": "Wc1", "shape": [4, 3, 3], "init": {"dist": "normal", "std": 0.5}},
    {"name": "bc1", "shape": [4], "data": [1, 2, 3, 4]},
    {"name": "Wc2", "shape": [4, 1, 3, 3], "init": {"dist": "normal", "std": 0.5}},
    {"name": "bc2", "shape": [4], "init": {"dist": "uniform", "low": -1, "high": 1}}
  ],
  "nodes": [
    {"name": "e", "op": "embedding", "inputs": ["tok"], "weight": "E", "cbwc": true},
    {"name": "s", "op": "add", "inputs": ["x", "e"]},
    {"name": "h", "op": "linear", "inputs": ["s"], "weight": "W1", "bias": "b1", "cbwc": true},
    {"name": "att", "op": "attention", "inputs": ["h"], "wq": "Wa", "wk": "Wa", "wv": "Wa",
     "wo": "Wa", "bq": "ba", "bk": "ba", "bv": "ba", "bo": "ba", "heads": 2, "causal": true,
     "cbwc": true},
    {"name": "r", "op": "rnn", "inputs": ["att"], "weight_ih": "Wih", "weight_hh": "Whh",
     "bias": "bh", "activation": "tanh", "norm": {"eps": 1e-6, "weight": "gn", "bias": "bn"},
     "cbwc": false},
    {"name": "r2", "op": "rnn", "inputs": ["r"], "weight_ih": "Whh", "weight_hh": "Whh",
     "norm": {"kind": "rms_norm", "eps": 1e-5}},
    {"name": "mm", "op": "matmul", "inputs": ["r2", "Wm"], "transpose_b": true, "cbwc": true},
    {"name": "mm2", "op": "matmul", "inputs": ["mm", "r2"], "transpose_b": true},
    {"name": "sc", "op": "scale", "inputs": ["mm2"], "factor": 0.5},
    {"name": "dr", "op": "dropout", "inputs": ["sc"], "p": 0.1},
    {"name": "a1", "op": "relu", "inputs": ["dr"]},
    {"name": "a2", "op": "gelu", "inputs": ["a1"]},
    {"name": "a3", "op": "tanh", "inputs": ["a2"]},
    {"name": "a4", "op": "sigmoid", "inputs": ["a3"]},
    {"name": "a5", "op": "silu", "inputs": ["a4"]},
    {"name": "a6", "op": "exp", "inputs": ["a5"]},
    {"name": "sm", "op": "softmax", "inputs": ["a6"], "axis": -1},
    {"name": "d1", "op": "sub", "inputs": ["sm", "dr"]},
    {"name": "d2", "op": "mul", "inputs": ["d1", "sm"]},
    {"name": "d3", "op": "div", "inputs": ["d2", "a4"]},
    {"name": "mean", "op": "mean", "inputs": ["d3"], "axes": [-1], "keepdims": true},
    {"name": "mx", "op": "max", "inputs": ["mean"], "axes": [1, -1]},
    {"name": "tp", "op": "transpose", "inputs": ["x"], "perm": [0, 2, -2]},
    {"name": "rs", "op": "reshape", "inputs": ["tp"], "shape": [2, -1]},
    {"name": "cat", "op": "concat", "inputs": ["rs", "rs"], "axis": -1},
    {"name": "ce", "op": "center", "inputs": ["cat"], "axes": [-1]},
    {"name": "ln", "op": "layer_norm", "inputs": ["ce"], "axes": [-1], "eps": 1e-6,
     "weight": "g48", "bias": "b48"},
    {"name": "rms", "op": "rms_norm", "inputs": ["ln"], "axes": [1], "weight": "g48"},
    {"name": "c1", "op": "conv1d", "inputs": ["seq"], "weight": "Wc1", "bias": "bc1",
     "stride": 2, "padding": 1, "dilation": 1, "groups": 1, "cbwc": true},
    {"name": "c2", "op": "conv2d", "inputs": ["img"], "weight": "Wc2", "bias": "bc2",
     "stride": [1, 2], "padding": [1, 0], "dilation": [1, 1], "groups": 2}
  ],
  "outputs": ["mx", "rms", "c1", "c2"]
})";

class ModelJson : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("lnv_model_json_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The embedding table of kEveryOp: E[i][j] = i - j/8 (exact in binary).
  static std::vector<double> table_values() {
    std::vector<double> v;
    for (int i = 0; i < 10; ++i)
      for (int j = 0; j < 6; ++j) v.push_back(i - j / 8.0);
    return v;
  }

  fs::path write_every_op_model() {
    fs::create_directories(dir_ / "weights");
    std::map<std::string, SafetensorsEntry> t;
    t["wte"] = {{10, 6}, table_values(), SafetensorsDType::f64};
    t["other"] = {{1}, {0.0}, SafetensorsDType::f32};
    write_safetensors((dir_ / "weights" / "emb.safetensors").string(), t);
    write_text(dir_ / "model.json", kEveryOp);
    return dir_ / "model.json";
  }

  fs::path dir_;
};

TEST_F(ModelJson, LoadsEveryOpAndAttribute) {
  const Graph g = load_model(write_every_op_model().string());
  ASSERT_TRUE(g.finalized());
  EXPECT_EQ(g.name, "every-op");
  EXPECT_EQ(g.seed, 7u);
  EXPECT_EQ(parse_meta(g)["list"][1], 2.5);
  EXPECT_EQ(g.inputs[1].dtype, DType::index);
  EXPECT_EQ(g.inputs[1].range, 10);
  EXPECT_EQ(g.inputs[2].dtype, DType::float_);  // dtype defaults to float

  EXPECT_EQ(g.shape_of("mx"), (Shape{2}));
  EXPECT_EQ(g.shape_of("rms"), (Shape{2, 48}));
  EXPECT_EQ(g.shape_of("c1"), (Shape{1, 4, 4}));
  EXPECT_EQ(g.shape_of("c2"), (Shape{1, 4, 5, 2}));
  EXPECT_EQ(g.shape_of("r2"), (Shape{2, 4, 5}));
  EXPECT_EQ(g.shape_of("mm2"), (Shape{2, 4, 4}));

  const Node& att = g.nodes[g.node_index("att")];
  EXPECT_EQ(att.op, Op::attention);
  EXPECT_EQ(att.heads, 2);
  EXPECT_TRUE(att.causal);
  EXPECT_TRUE(att.cbwc);
  EXPECT_EQ(att.bo, "ba");
  const Node& r = g.nodes[g.node_index("r")];
  ASSERT_TRUE(r.norm.has_value());
  EXPECT_EQ(r.norm->kind, Op::layer_norm);
  EXPECT_EQ(r.norm->eps, 1e-6);
  EXPECT_EQ(r.norm->bias, "bn");
  EXPECT_FALSE(r.cbwc);
  EXPECT_EQ(g.nodes[g.node_index("r2")].norm->kind, Op::rms_norm);
  const Node& c2 = g.nodes[g.node_index("c2")];
  EXPECT_EQ(c2.stride, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(c2.padding, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(c2.groups, 2);
  EXPECT_EQ(g.nodes[g.node_index("c1")].stride, (std::vector<int64_t>{2}));
  EXPECT_EQ(g.nodes[g.node_index("tp")].perm, (std::vector<int64_t>{0, 2, -2}));
  EXPECT_EQ(g.nodes[g.node_index("rs")].shape, (Shape{2, -1}));
  EXPECT_EQ(g.nodes[g.node_index("mx")].axes, (Axes{1, -1}));  // kept as written
  EXPECT_TRUE(g.nodes[g.node_index("mean")].keepdims);
  EXPECT_EQ(g.nodes[g.node_index("sc")].factor, 0.5);
  EXPECT_EQ(g.nodes[g.node_index("dr")].p, 0.1);
  EXPECT_EQ(g.nodes[g.node_index("sm")].axis, -1);
  EXPECT_TRUE(g.nodes[g.node_index("mm")].transpose_b);

  // Shared params stay one param, named by every user.
  EXPECT_EQ(g.params.size(), 17u);
  EXPECT_EQ(att.wq, "Wa");
  EXPECT_EQ(att.wo, "Wa");
  EXPECT_EQ(g.nodes[g.node_index("ln")].weight, "g48");
  EXPECT_EQ(g.nodes[g.node_index("rms")].weight, "g48");
  EXPECT_EQ(g.nodes[g.node_index("r2")].weight_ih, "Whh");

  const Param& E = g.params[g.param_index("E")];
  EXPECT_EQ(E.source, ParamSource::file);
  EXPECT_EQ(E.values, table_values());
  const Param& W1 = g.params[g.param_index("W1")];
  EXPECT_EQ(W1.source, ParamSource::data);
  EXPECT_EQ(W1.values[3], -0.4);
  EXPECT_EQ(W1.values[35], 1e-300);
}

TEST_F(ModelJson, InitValuesFollowTheSplitMix64Streams) {
  const Graph g = load_model(write_every_op_model().string());
  // normal, mean 0.5, std 0.1, seed 7: pairs (cos, sin) in row-major order.
  const Param& b1 = g.params[g.param_index("b1")];
  ReferenceStream s(7, "b1");
  for (int k = 0; k < 6; k += 2) {
    const auto [c, sn] = s.normal_pair();
    EXPECT_EQ(b1.values[k], 0.5 + 0.1 * c) << k;
    EXPECT_EQ(b1.values[k + 1], 0.5 + 0.1 * sn) << k;
  }
  // uniform low + (high - low) * u.
  const Param& wa = g.params[g.param_index("Wa")];
  ReferenceStream u(7, "Wa");
  for (int k = 0; k < 36; ++k) EXPECT_EQ(wa.values[k], -0.25 + 1.0 * u.uniform()) << k;
  // An odd count: the last value is the cos half of a pair.
  const Param& bh = g.params[g.param_index("Whh")];
  ReferenceStream w(7, "Whh");
  std::vector<double> want;
  while (want.size() < 25) {
    const auto [c, sn] = w.normal_pair();
    want.push_back(0.3 * c);
    want.push_back(0.3 * sn);
  }
  want.resize(25);
  for (int k = 0; k < 25; ++k) EXPECT_EQ(bh.values[k], 0.0 + want[k]) << k;
  // A different seed gives different values.
  EXPECT_NE(init_values(g.params[g.param_index("Wa")].init, 36, 8, "Wa"), wa.values);
}

TEST_F(ModelJson, RoundTripIsStableAndByteIdentical) {
  const Graph g1 = load_model(write_every_op_model().string());
  // Save into another directory: the file param's path is re-expressed from there.
  const fs::path out1 = dir_ / "out" / "m1.json";
  fs::create_directories(out1.parent_path());
  save_model(g1, out1.string());
  const Graph g2 = load_model(out1.string());
  const fs::path out2 = dir_ / "out" / "m2.json";
  save_model(g2, out2.string());
  EXPECT_EQ(read_text(out1), read_text(out2));

  const json j1 = model_to_json(g1, dir_.string());
  const json j2 = model_to_json(g2, dir_.string());
  EXPECT_EQ(j1, j2);
  ASSERT_EQ(g1.params.size(), g2.params.size());
  for (size_t i = 0; i < g1.params.size(); ++i) {
    EXPECT_EQ(g1.params[i].values, g2.params[i].values) << g1.params[i].name;
    EXPECT_EQ(g1.params[i].source, g2.params[i].source) << g1.params[i].name;
  }
  EXPECT_EQ(g1.node_shapes, g2.node_shapes);

  // Sources are kept, the file path now points from out/, negative axes stay negative.
  const json saved = json::parse(read_text(out1));
  EXPECT_EQ(saved["params"].size(), 17u);  // shared params are written once
  EXPECT_EQ(saved["nodes"][3]["wk"], "Wa");
  EXPECT_EQ(saved["params"][0]["file"]["path"], "../weights/emb.safetensors");
  EXPECT_EQ(saved["params"][0]["file"]["key"], "wte");
  EXPECT_TRUE(saved["params"][1].contains("data"));
  EXPECT_EQ(saved["params"][2]["init"],
            json::parse(R"({"dist": "normal", "mean": 0.5, "std": 0.1})"));
  EXPECT_EQ(saved["nodes"][21]["axes"], json::parse("[1, -1]"));
  EXPECT_EQ(saved["meta"], json::parse(kEveryOp)["meta"]);
  EXPECT_EQ(saved["seed"], 7);
}

TEST_F(ModelJson, SavedTextHasOneLinePerEntry) {
  const Graph g = load_model(write_every_op_model().string());
  const std::string text = model_to_text(g, dir_.string());
  EXPECT_NE(text.find("\n    {\"name\": \"h\", \"op\": \"linear\", \"inputs\": [\"s\"], "),
            std::string::npos)
      << text;
  EXPECT_EQ(text.back(), '\n');
}

TEST_F(ModelJson, Defaults) {
  const json j = json::parse(R"({
    "format": "lnverify.model", "version": 1,
    "inputs": [{"name": "x", "shape": [1, 2, 6]}, {"name": "z", "shape": [1, 3, 4]}],
    "params": [{"name": "W", "shape": [2, 2, 3], "data": [1,2,3,4,5,6,7,8,9,10,11,12]},
               {"name": "Wi", "shape": [4, 4], "data": [1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1]}],
    "nodes": [{"name": "c", "op": "conv1d", "inputs": ["x"], "weight": "W"},
              {"name": "m", "op": "mean", "inputs": ["c"], "axes": [-1]},
              {"name": "ln", "op": "layer_norm", "inputs": ["c"], "axes": [-1]},
              {"name": "r", "op": "rnn", "inputs": ["z"], "weight_ih": "Wi", "weight_hh": "Wi",
               "norm": {}},
              {"name": "a", "op": "attention", "inputs": ["z"], "wq": "Wi", "wk": "Wi",
               "wv": "Wi", "wo": "Wi", "heads": 1},
              {"name": "mm", "op": "matmul", "inputs": ["z", "Wi"]}],
    "outputs": ["m", "ln", "r", "a", "mm"]})");
  const Graph g = parse_model(j, "");
  EXPECT_EQ(g.seed, 0u);
  EXPECT_EQ(g.name, "");
  EXPECT_TRUE(parse_meta(g).is_null());
  const Node& c = g.nodes[0];
  EXPECT_EQ(c.stride, (std::vector<int64_t>{1}));
  EXPECT_EQ(c.padding, (std::vector<int64_t>{0}));
  EXPECT_EQ(c.dilation, (std::vector<int64_t>{1}));
  EXPECT_EQ(c.groups, 1);
  EXPECT_FALSE(c.cbwc);
  EXPECT_EQ(c.bias, "");
  EXPECT_EQ(g.shape_of("c"), (Shape{1, 2, 4}));
  EXPECT_FALSE(g.nodes[1].keepdims);
  EXPECT_EQ(g.shape_of("m"), (Shape{1, 2}));
  EXPECT_EQ(g.nodes[2].eps, 1e-5);
  EXPECT_EQ(g.nodes[3].activation, "tanh");
  EXPECT_EQ(g.nodes[3].norm->kind, Op::layer_norm);
  EXPECT_EQ(g.nodes[3].norm->eps, 1e-5);
  EXPECT_FALSE(g.nodes[4].causal);
  EXPECT_FALSE(g.nodes[5].transpose_b);
  EXPECT_EQ(g.shape_of("mm"), (Shape{1, 3, 4}));

  // Defaults are not written back (except a norm's eps), and reading that gives the same.
  const json out = model_to_json(g, "");
  EXPECT_FALSE(out["nodes"][0].contains("stride"));
  EXPECT_FALSE(out["nodes"][1].contains("keepdims"));
  EXPECT_EQ(out["nodes"][2]["eps"], 1e-5);
  EXPECT_EQ(out["nodes"][3]["norm"], json::parse(R"({"eps": 1e-5})"));
  EXPECT_EQ(model_to_json(parse_model(out, ""), ""), out);
}

TEST_F(ModelJson, ChangedOrCenteredParamsAreSavedAsData) {
  Graph g = load_model(write_every_op_model().string());
  g.params[g.param_index("b1")].values[0] += 1.0;  // no longer its init
  g.params[g.param_index("E")].values[5] = 42.0;   // no longer the file's tensor
  Param& w1 = g.params[g.param_index("W1")];
  w1.center_axes = {0};
  const std::vector<double> centered = effective_values(w1);
  const json j = model_to_json(g, dir_.string());
  EXPECT_EQ(j["params"][2]["data"].get<std::vector<double>>(), g.params[2].values);
  EXPECT_FALSE(j["params"][2].contains("init"));
  EXPECT_EQ(j["params"][0]["data"][5], 42.0);
  EXPECT_EQ(j["params"][1]["data"].get<std::vector<double>>(), centered);
  // Column sums of the centered W1 vanish.
  for (int col = 0; col < 6; ++col) {
    double sum = 0;
    for (int row = 0; row < 6; ++row) sum += centered[row * 6 + col];
    EXPECT_NEAR(sum, 0.0, 1e-12);
  }
  const Graph back = parse_model(j, dir_.string());
  EXPECT_TRUE(back.params[1].center_axes.empty());
  EXPECT_EQ(back.params[1].values, centered);
  // An unchanged init param is still written as init.
  EXPECT_TRUE(j["params"][3].contains("init"));
}

TEST_F(ModelJson, SaveWithWeightsFileKeepsValuesExactly) {
  Graph g = load_model(write_every_op_model().string());
  g.params[g.param_index("W1")].center_axes = {0};
  g.params[g.param_index("E")].values[5] = 1.0 / 3.0;  // changed since read from its file
  std::vector<std::vector<double>> want;
  for (const Param& p : g.params) want.push_back(effective_values(p));

  const fs::path out = dir_ / "out" / "folded.json";
  fs::create_directories(out.parent_path());
  save_model(g, out.string(), {.weights_file = "folded.safetensors", .min_file_numel = 6});
  const json saved = json::parse(read_text(out));
  // W1 (centered), E (changed) and the 6-value data params go to the file; the 5-value
  // data param stays inline; unchanged init params stay init.
  EXPECT_EQ(saved["params"][1]["file"], json::parse(R"({"path": "folded.safetensors", "key": "W1"})"));
  EXPECT_EQ(saved["params"][0]["file"]["key"], "E");
  EXPECT_TRUE(saved["params"][7].contains("data")) << saved["params"][7];  // bh, 5 values
  EXPECT_TRUE(saved["params"][2].contains("init"));
  const Graph back = load_model(out.string());
  for (size_t i = 0; i < g.params.size(); ++i)
    EXPECT_EQ(back.params[i].values, want[i]) << g.params[i].name;

  // Saving the loaded model over itself rewrites the file it reads from: still exact, and
  // the same bytes.
  const std::string model_before = read_text(out);
  const std::string weights_before = read_text(out.parent_path() / "folded.safetensors");
  save_model(back, out.string(), {.weights_file = "folded.safetensors", .min_file_numel = 6});
  EXPECT_EQ(read_text(out), model_before);
  EXPECT_EQ(read_text(out.parent_path() / "folded.safetensors"), weights_before);

  // Changing another param and saving again must keep the tensors already in the file.
  Graph changed = back;
  changed.params[changed.param_index("b1")].values[0] += 1.0;
  want[changed.param_index("b1")][0] += 1.0;
  save_model(changed, out.string(), {.weights_file = "folded.safetensors", .min_file_numel = 6});
  const Graph again = load_model(out.string());
  for (size_t i = 0; i < g.params.size(); ++i)
    EXPECT_EQ(again.params[i].values, want[i]) << g.params[i].name;
}

TEST_F(ModelJson, SaveOverwritesAtomicallyAndFailsCleanly) {
  const Graph g = load_model(write_every_op_model().string());
  const fs::path target = dir_ / "model.json";
  save_model(g, target.string());  // overwrite the file it came from
  EXPECT_EQ(read_text(target), model_to_text(g, dir_.string()));
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) ++leftovers;
  EXPECT_EQ(leftovers, 0);
  try {
    save_model(g, (dir_ / "missing-dir" / "m.json").string());
    FAIL() << "expected a ModelError";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("missing-dir"), std::string::npos) << e.what();
  }
}

TEST(ModelJsonFixture, FormatExampleWithF16File) {
  // Loaded from another working directory than the model's: the file path is relative to
  // the model file.
  const fs::path model = fs::path(LNV_SOURCE_DIR) / "tests/data/model_format_example/model.json";
  const Graph g = load_model(model.string());
  EXPECT_EQ(g.name, "tiny-prenorm");
  EXPECT_EQ(g.shape_of("ln"), (Shape{2, 5, 16}));
  EXPECT_EQ(g.shape_of("e"), (Shape{2, 5, 8}));
  const Param& w1 = g.params[g.param_index("W1")];
  for (int i = 0; i < 128; ++i) EXPECT_EQ(w1.values[i], ((i * 7 + 3) % 17 - 8) / 10.0) << i;
  const Param& e = g.params[g.param_index("E")];
  for (int i = 0; i < 50; ++i)
    for (int j = 0; j < 8; ++j) EXPECT_EQ(e.values[i * 8 + j], (i - 25) / 8.0 + j / 64.0);
  const Param& b1 = g.params[g.param_index("b1")];
  ReferenceStream s(0, "b1");
  EXPECT_EQ(b1.values[0], 0.1 * s.normal_pair().first);
  EXPECT_EQ(g.nodes[1].eps, 1e-5);
}

// --- malformed inputs ---

const char* kSmall = R"({
  "format": "lnverify.model", "version": 1, "name": "small",
  "inputs": [{"name": "x", "shape": [2, 3], "dtype": "float"},
             {"name": "tok", "shape": [2], "dtype": "index", "range": 4}],
  "params": [{"name": "W", "shape": [3, 3], "data": [1, 2, 3, 4, 5, 6, 7, 8, 9]},
             {"name": "E", "shape": [4, 3], "init": {"dist": "normal", "std": 1}}],
  "nodes": [{"name": "h", "op": "linear", "inputs": ["x"], "weight": "W"},
            {"name": "e", "op": "embedding", "inputs": ["tok"], "weight": "E"},
            {"name": "s", "op": "add", "inputs": ["h", "e"]},
            {"name": "ln", "op": "layer_norm", "inputs": ["s"], "axes": [-1]}],
  "outputs": ["ln"]
})";

// The error of parsing kSmall after `edit` ("" when it parses).
std::string error_after(const std::function<void(json&)>& edit, const std::string& base = "") {
  json j = json::parse(kSmall);
  edit(j);
  try {
    parse_model(j, base);
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(msg, ...)                                                        \
  do {                                                                                \
    const std::string m_ = (msg);                                                     \
    EXPECT_FALSE(m_.empty()) << "no error";                                           \
    for (const char* n_ : {__VA_ARGS__})                                              \
      EXPECT_NE(m_.find(n_), std::string::npos) << "'" << n_ << "' not in: " << m_;   \
  } while (0)

TEST(ModelJsonErrors, SmallModelIsValid) { EXPECT_EQ(error_after([](json&) {}), ""); }

TEST_F(ModelJson, BadJsonNamesFileLineAndColumn) {
  write_text(dir_ / "bad.json", "{\n  \"format\": \"lnverify.model\",\n  \"version\": 1,,\n}");
  try {
    load_model((dir_ / "bad.json").string());
    FAIL() << "expected a ModelError";
  } catch (const ModelError& e) {
    EXPECT_ERROR(e.what(), "bad.json", "invalid JSON", "line 3", "column 16");
  }
}

TEST_F(ModelJson, DuplicateKeysAndOverflowAreInvalidJson) {
  write_text(dir_ / "dup.json", R"({"format": "lnverify.model", "format": "x"})");
  try {
    load_model((dir_ / "dup.json").string());
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_ERROR(e.what(), "dup.json", "'format' appears twice");
  }
  // The pointer escapes a key's "/" and "~" (RFC 6901).
  write_text(dir_ / "dup2.json", R"({"format": "lnverify.model", "meta": {"x/y~z": {"a": 1, "a": 2}}})");
  try {
    load_model((dir_ / "dup2.json").string());
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_ERROR(e.what(), "dup2.json", "'a' appears twice", "(at /meta/x~1y~0z/a)");
  }
  write_text(dir_ / "big.json", R"({"format": "lnverify.model", "version": 1e999})");
  try {
    load_model((dir_ / "big.json").string());
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_ERROR(e.what(), "big.json", "invalid JSON");
  }
}

TEST_F(ModelJson, MissingModelFile) {
  try {
    load_model((dir_ / "none.json").string());
    FAIL();
  } catch (const ModelError& e) {
    EXPECT_ERROR(e.what(), "none.json", "cannot open");
  }
}

TEST(ModelJsonErrors, FormatAndVersion) {
  EXPECT_ERROR(error_after([](json& j) { j["format"] = "onnx"; }), "/format",
               "expected \"lnverify.model\"");
  EXPECT_ERROR(error_after([](json& j) { j["version"] = 2; }), "/version",
               "unsupported version 2");
  EXPECT_ERROR(error_after([](json& j) { j = json::array(); }), "expected an object");
}

TEST(ModelJsonErrors, MissingRequiredField) {
  EXPECT_ERROR(error_after([](json& j) { j.erase("outputs"); }), "missing required field 'outputs'");
  EXPECT_ERROR(error_after([](json& j) { j["params"][0].erase("shape"); }), "/params/0",
               "missing required field 'shape'", "param 'W'");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][1].erase("op"); }), "/nodes/1",
               "missing required field 'op'", "node 'e'");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][0].erase("weight"); }), "/nodes/0",
               "needs attribute 'weight'", "node 'h'");
  EXPECT_ERROR(error_after([](json& j) { j["inputs"][1].erase("range"); }), "/inputs/1",
               "missing required field 'range'");
}

TEST(ModelJsonErrors, UnknownFields) {
  EXPECT_ERROR(error_after([](json& j) { j["extra"] = 1; }), "/extra: unknown field 'extra'");
  EXPECT_ERROR(error_after([](json& j) { j["inputs"][0]["scale"] = 1; }), "/inputs/0/scale",
               "unknown field");
  EXPECT_ERROR(error_after([](json& j) { j["inputs"][0]["a/b~"] = 1; }), "/inputs/0/a~1b~0:",
               "unknown field 'a/b~'");
  EXPECT_ERROR(error_after([](json& j) { j["params"][1]["init"]["low"] = 0; }),
               "/params/1/init/low", "unknown field");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][0]["axes"] = {-1}; }), "/nodes/0/axes",
               "op linear has no attribute 'axes'", "node 'h'");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][2]["weight"] = "W"; }), "/nodes/2/weight",
               "op add has no attribute 'weight'");
  // Anything goes inside meta.
  EXPECT_EQ(error_after([](json& j) { j["meta"] = {{"anything", {{"x", 1}}}}; }), "");
}

TEST(ModelJsonErrors, UnknownOpAndDtype) {
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][2]["op"] = "plus"; }), "/nodes/2/op",
               "unknown op 'plus'", "node 's'");
  EXPECT_ERROR(error_after([](json& j) { j["inputs"][0]["dtype"] = "int"; }), "/inputs/0/dtype",
               "expected \"float\" or \"index\"");
  EXPECT_ERROR(error_after([](json& j) { j["params"][1]["init"]["dist"] = "cauchy"; }),
               "/params/1/init/dist", "expected \"normal\" or \"uniform\"");
}

TEST(ModelJsonErrors, WrongTypes) {
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][3]["axes"] = {-1, "a"}; }),
               "/nodes/3/axes/1: expected an integer", "node 'ln'");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][3]["axes"] = {1.5}; }),
               "/nodes/3/axes/0: expected an integer");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][3]["eps"] = "small"; }),
               "/nodes/3/eps: expected a number");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][0]["bias"] = ""; }),
               "/nodes/0/bias: expected the name of a param");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][0]["bias"] = 3; }),
               "/nodes/0/bias: expected a string");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][0]["cbwc"] = 1; }),
               "/nodes/0/cbwc: expected true or false");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][0]["inputs"] = "x"; }),
               "/nodes/0/inputs: expected an array of strings");
  EXPECT_ERROR(error_after([](json& j) { j["params"][0]["data"][4] = "5"; }),
               "/params/0/data/4: expected a number", "param 'W'");
  EXPECT_ERROR(error_after([](json& j) { j["params"][0]["data"][4] = nullptr; }),
               "/params/0/data/4: expected a number");
  EXPECT_ERROR(error_after([](json& j) { j["seed"] = -1; }), "/seed",
               "expected a non-negative integer");
  EXPECT_ERROR(error_after([](json& j) { j["meta"] = "note"; }), "/meta", "expected an object");
  EXPECT_ERROR(error_after([](json& j) { j["inputs"][0]["shape"] = {2, 0}; }),
               "/inputs/0/shape/1", "positive dimension");
  EXPECT_ERROR(error_after([](json& j) {
                 j["params"][1]["shape"] = {int64_t{1} << 20, int64_t{1} << 20};
               }),
               "/params/1/shape", "more than 2^31 elements", "param 'E'");
}

TEST(ModelJsonErrors, WrongShapes) {
  EXPECT_ERROR(error_after([](json& j) {
                 j["params"][0]["shape"] = {3, 4};
                 j["params"][0]["data"] = std::vector<double>(12, 1.0);
               }),
               "/nodes/0 (node 'h')/weight", "[3, 4]");
  EXPECT_ERROR(error_after([](json& j) { j["params"][0]["data"].push_back(10); }),
               "/params/0/data", "expected 9 numbers", "got 10");
  EXPECT_ERROR(error_after([](json& j) { j["inputs"][1]["range"] = 5; }),
               "/nodes/1 (node 'e')/weight", "4 rows");
}

TEST(ModelJsonErrors, DanglingNames) {
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][0]["inputs"] = {"y"}; }),
               "/nodes/0 (node 'h')/inputs/0", "unknown name 'y'");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][0]["weight"] = "Q"; }),
               "/nodes/0 (node 'h')/weight", "'Q' is not a param");
  EXPECT_ERROR(error_after([](json& j) { j["outputs"] = {"zz"}; }), "/outputs/0",
               "unknown name 'zz'");
}

TEST(ModelJsonErrors, Cycle) {
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][0]["inputs"] = {"s"}; }), "cycle",
               "node 'h'");
}

TEST(ModelJsonErrors, ACycleIsNamedByNodesOnIt) {
  // ln reads s, which is on the cycle h -> s -> h; ln, listed first, is not on it.
  const std::string e = error_after([](json& j) {
    std::swap(j["nodes"][0], j["nodes"][3]);
    j["nodes"][3]["inputs"] = {"s"};
  });
  EXPECT_ERROR(e, "cycle through node 's' (/nodes/2 (node 's'))", "'s' -> 'h' -> 's'");
  EXPECT_EQ(e.find("'ln'"), std::string::npos) << e;
}

TEST(ModelJsonErrors, DuplicateAndBadNames) {
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][2]["name"] = "x"; }), "/nodes/2",
               "duplicate name 'x'");
  EXPECT_ERROR(error_after([](json& j) { j["params"][0]["name"] = "x"; }), "/params/0/name",
               "first used at /inputs/0",
               "duplicate name 'x'");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][2]["name"] = "a b"; }), "/nodes/2",
               "invalid name 'a b'");
}

TEST(ModelJsonErrors, NonFiniteWeights) {
  EXPECT_ERROR(error_after([](json& j) {
                 j["params"][0]["data"][4] = std::numeric_limits<double>::quiet_NaN();
               }),
               "/params/0/data/4", "expected a finite number, got NaN", "param 'W'");
  EXPECT_ERROR(error_after([](json& j) {
                 j["params"][1]["init"]["std"] = std::numeric_limits<double>::infinity();
               }),
               "/params/1/init/std", "finite");
}

TEST(ModelJsonErrors, ParamSources) {
  EXPECT_ERROR(error_after([](json& j) { j["params"][0]["init"] = {{"dist", "normal"}, {"std", 1}}; }),
               "/params/0", "exactly one of 'data', 'init' or 'file', got 2");
  EXPECT_ERROR(error_after([](json& j) { j["params"][0].erase("data"); }), "/params/0",
               "exactly one", "got 0");
  EXPECT_ERROR(error_after([](json& j) { j["params"][1]["init"] = {{"dist", "normal"}}; }),
               "/params/1/init", "missing required field 'std'");
  EXPECT_ERROR(error_after([](json& j) {
                 j["params"][1]["init"] = {{"dist", "uniform"}, {"low", 1}, {"high", 0}};
               }),
               "/params/1/init", "low <= high");
}

TEST_F(ModelJson, FileParamErrors) {
  std::map<std::string, SafetensorsEntry> t;
  t["ok"] = {{4, 3}, std::vector<double>(12, 0.5), SafetensorsDType::f32};
  t["wide"] = {{4, 4}, std::vector<double>(16, 0.5), SafetensorsDType::f32};
  t["nan"] = {{4, 3}, std::vector<double>(12, 0.5), SafetensorsDType::f32};
  t["nan"].values[7] = std::numeric_limits<double>::quiet_NaN();
  write_safetensors((dir_ / "w.safetensors").string(), t);
  auto with_file = [](const std::string& path, const std::string& key) {
    return [=](json& j) {
      j["params"][1].erase("init");
      j["params"][1]["file"] = {{"path", path}, {"key", key}};
    };
  };
  const std::string base = dir_.string();
  EXPECT_EQ(error_after(with_file("w.safetensors", "ok"), base), "");
  EXPECT_ERROR(error_after(with_file("missing.safetensors", "ok"), base), "/params/1/file",
               "missing.safetensors", "no such file", "param 'E'");
  EXPECT_ERROR(error_after(with_file("w.safetensors", "nope"), base), "/params/1/file",
               "no tensor 'nope'");
  EXPECT_ERROR(error_after(with_file("w.safetensors", "wide"), base), "/params/1/file",
               "has shape [4, 4], expected [4, 3]");
  EXPECT_ERROR(error_after(with_file("w.safetensors", "nan"), base), "/params/1/file",
               "param 'E' has a non-finite value", "flat index 7");
  EXPECT_ERROR(error_after([](json& j) {
                 j["params"][1].erase("init");
                 j["params"][1]["file"] = {{"path", "w.safetensors"}};
               }),
               "/params/1/file", "missing required field 'key'");
}

TEST(ModelJsonErrors, IndexAndFloatInputsInTheWrongPlace) {
  EXPECT_ERROR(error_after([](json& j) {
                 j["inputs"][1]["shape"] = {2, 3};
                 j["nodes"][0]["inputs"] = {"tok"};
               }),
               "/nodes/0 (node 'h')/inputs/0", "'tok' is an index input");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][1]["inputs"] = {"x"}; }),
               "/nodes/1 (node 'e')/inputs/0", "dtype index");
  EXPECT_ERROR(error_after([](json& j) { j["inputs"][0]["range"] = 3; }), "/inputs/0/range",
               "index inputs only");
}

TEST(ModelJsonErrors, ArityAndAttributeValues) {
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][2]["inputs"] = {"h"}; }),
               "/nodes/2 (node 's')/inputs", "add takes 2 inputs, got 1");
  EXPECT_ERROR(error_after([](json& j) { j["nodes"][3]["axes"] = {-3}; }),
               "/nodes/3 (node 'ln')/axes", "out of range");
  EXPECT_ERROR(error_after([](json& j) {
                 j["nodes"].push_back({{"name", "d"}, {"op", "dropout"}, {"inputs", json::array({"ln"})}, {"p", 1.5}});
               }),
               "node 'd')/p", "0 <= p < 1");
}

// --- nesting, long values and odd characters: errors, never a crash ---

// `levels` arrays nested in each other, as JSON text.
std::string nested_arrays(int levels) {
  return std::string(levels, '[') + std::string(levels, ']');
}

// The ModelError message of loading `path` ("" when it loads).
std::string load_error(const fs::path& path) {
  try {
    load_model(path.string());
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}

TEST_F(ModelJson, DeepNestingIsAnErrorNamingFileAndPath) {
  // 100000 levels overflowed the stack (in dump() for a message, in copying `meta`).
  const std::string deep = nested_arrays(100000);
  write_text(dir_ / "top.json", deep);
  EXPECT_ERROR(load_error(dir_ / "top.json"), "top.json", "invalid JSON",
               "nested deeper than 128 levels", "at /0/0/0/0/0/0/0/0/...");
  std::string small = kSmall;
  const std::string name = R"("name": "small")";
  write_text(dir_ / "name.json", small.replace(small.find(name), name.size(), R"("name": )" + deep));
  EXPECT_ERROR(load_error(dir_ / "name.json"), "name.json", "nested deeper than 128 levels",
               "at /name/0/0/0/0/0/0/0/...");
  json j = json::parse(kSmall);
  j["meta"] = {{"x", "here"}};
  const std::string here = R"("here")";
  std::string text = j.dump();
  write_text(dir_ / "meta.json", text.replace(text.find(here), here.size(), deep));
  EXPECT_ERROR(load_error(dir_ / "meta.json"), "meta.json", "nested deeper than 128 levels",
               "at /meta/x/0/0/0/0/0/0/...");
  // Within the limit (128 levels with the two objects around), meta may nest freely, and
  // it is saved as it was read.
  text = j.dump();
  write_text(dir_ / "ok.json", text.replace(text.find(here), here.size(), nested_arrays(126)));
  EXPECT_EQ(load_error(dir_ / "ok.json"), "");
  text = j.dump();
  write_text(dir_ / "129.json", text.replace(text.find(here), here.size(), nested_arrays(127)));
  EXPECT_ERROR(load_error(dir_ / "129.json"), "nested deeper than 128 levels");
  const Graph g = load_model((dir_ / "ok.json").string());
  save_model(g, (dir_ / "saved.json").string());
  EXPECT_EQ(load_model((dir_ / "saved.json").string()).meta, g.meta);
}

TEST_F(ModelJson, ACycleNamesTheFile) {
  json j = json::parse(kSmall);
  j["nodes"][0]["inputs"] = {"s"};
  write_text(dir_ / "cycle.json", j.dump());
  EXPECT_ERROR(load_error(dir_ / "cycle.json"), "cycle.json: /: the graph has a cycle",
               "node 'h'");
}

TEST(ModelJsonErrors, ValuesInMessagesAreShortExcerpts) {
  // The message of a wrong value must not depend on its depth or size: 120 levels (all a
  // model may nest; deeper is refused as too deep, test_limits) would dump to 240
  // characters.
  json deep;
  json* at = &deep;
  for (int i = 0; i < 120; ++i) {
    *at = json::array({nullptr});
    at = &(*at)[0];
  }
  const std::string m = error_after([&](json& j) { j["name"] = std::move(deep); });
  EXPECT_ERROR(m, "/name", "expected a string, got [[[[");
  EXPECT_LT(m.size(), 120u) << m;
  const std::string big = error_after([](json& j) { j["name"] = std::vector<double>(1000000, 0.5); });
  EXPECT_ERROR(big, "/name", "got [0.5,0.5,", "...");
  EXPECT_LT(big.size(), 120u) << big;
}

TEST_F(ModelJson, ErrorsAboutTheWholeDocumentNameTheFileAndTheRoot) {
  json j = json::parse(kSmall);
  j.erase("format");
  write_text(dir_ / "noformat.json", j.dump());
  EXPECT_ERROR(load_error(dir_ / "noformat.json"), "noformat.json: /: missing required field 'format'");
  EXPECT_ERROR(error_after([](json& j) { j.erase("version"); }), "/: missing required field 'version'");
}

TEST(ModelJsonErrors, ControlCharactersNeverReachAMessageRaw) {
  // A NUL in a name was echoed raw, and the message ended there.
  const std::string nul = error_after([](json& j) { j["inputs"][0]["name"] = std::string("x\0y", 3); });
  EXPECT_ERROR(nul, "/inputs/0/name", "expected a string without control characters, got \"x\\u0000y\"");
  const std::string op = error_after([](json& j) { j["nodes"][2]["op"] = "add\n"; });
  EXPECT_ERROR(op, "/nodes/2/op", "got \"add\\n\"");
  const std::string key = error_after([](json& j) { j["params"][0][std::string("a\0b", 3)] = 1; });
  EXPECT_ERROR(key, "/params/0/a\\u0000b", "unknown field 'a\\u0000b'");
  const std::string attribute = error_after([](json& j) { j["nodes"][0]["\t"] = 1; });
  EXPECT_ERROR(attribute, "/nodes/0/\\t", "no attribute '\\t'");
  for (const std::string& m : {nul, op, key, attribute})
    EXPECT_EQ(m.find_first_of(std::string("\0\n\t", 3)), std::string::npos) << m;
}

TEST(ModelJsonErrors, IntegersBeyond64BitsAreTooLarge) {
  // nlohmann reads 2^64 as a double; the message said "expected an integer, got 1.8e19".
  auto with_dim = [](const char* dim) {
    return [=](json& j) { j["inputs"][0]["shape"] = json::parse(std::string("[") + dim + ", 3]"); };
  };
  EXPECT_ERROR(error_after(with_dim("18446744073709551616")), "/inputs/0/shape/0",
               "integer 1.8446744073709552e+19 is too large");
  EXPECT_ERROR(error_after(with_dim("-18446744073709551616")), "/inputs/0/shape/0", "is too small");
  EXPECT_ERROR(error_after(with_dim("2.5")), "/inputs/0/shape/0", "expected an integer, got 2.5");
}

TEST_F(ModelJson, AFailedSaveLeavesNoFileChanged) {
  const Graph g = load_model(write_every_op_model().string());
  const SaveOptions weights{.weights_file = "w.safetensors", .min_file_numel = 6};
  // The model's path is a directory: the rename of the model fails after the weights file
  // is complete, and the weights file is taken back.
  fs::create_directories(dir_ / "out" / "m.json");
  EXPECT_THROW(save_model(g, (dir_ / "out" / "m.json").string(), weights), ModelError);
  EXPECT_FALSE(fs::exists(dir_ / "out" / "w.safetensors"));
  // A weights file that was there keeps its bytes, and so does a commit_with file.
  write_text(dir_ / "out" / "w.safetensors", "old weights");
  write_text(dir_ / "out" / "report.json", "old report");
  AtomicFileWriter report((dir_ / "out" / "report.json").string());
  report.write("new report");
  SaveOptions with_report = weights;
  with_report.commit_with = {&report};
  EXPECT_THROW(save_model(g, (dir_ / "out" / "m.json").string(), with_report), ModelError);
  EXPECT_EQ(read_text(dir_ / "out" / "w.safetensors"), "old weights");
  EXPECT_EQ(read_text(dir_ / "out" / "report.json"), "old report");
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "out"))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) ++leftovers;
  EXPECT_EQ(leftovers, 0);
}

}  // namespace
}  // namespace lnv
