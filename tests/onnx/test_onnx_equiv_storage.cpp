// `equiv`'s weight-storage allowance by the files' float type (checkers/model_equivalence.h,
// docs/spec/decisions.md "Equal up to weight storage"): the importer records each
// initializer's precision (Param::stored_bits: FLOAT 24, DOUBLE 53, FLOAT16 11, BFLOAT16 8),
// a model.json its safetensors dtype, and equiv's allowance is measured on the two models
// with the weights that differ perturbed at the precision they are stored in (unless
// --weight-bits says otherwise): 16 times the largest change it causes, plus the rounding
// bound.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <onnx/onnx_pb.h>

#include <nlohmann/json.hpp>

#include "checkers/model_equivalence.h"
#include "core/model_json.h"
#include "core/safetensors.h"
#include "onnx/export.h"
#include "onnx/import.h"
#include "reports/equiv_report.h"

namespace {

namespace fs = std::filesystem;
using lnv::Graph;
using lnv::Mode;
using lnv::report::EquivReport;
using lnv::report::Outcome;
using nlohmann::json;

fs::path scratch() {
  const fs::path dir =
      fs::temp_directory_path() / ("lnv_test_onnx_equiv_storage_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

// y = x W + b over 8 features.
json linear_model() {
  return {{"format", "lnverify.model"},
          {"version", 1},
          {"name", "one_linear"},
          {"seed", 5},
          {"inputs", {{{"name", "x"}, {"shape", {2, 8}}}}},
          {"params",
           {{{"name", "W"}, {"shape", {8, 8}}, {"init", {{"dist", "normal"}, {"std", 1.0}}}},
            {{"name", "b"}, {"shape", {8}}, {"init", {{"dist", "normal"}, {"std", 0.5}}}}}},
          {"nodes", {{{"name", "fc"}, {"op", "linear"}, {"inputs", {"x"}}, {"weight", "W"}, {"bias", "b"}}}},
          {"outputs", {"fc"}}};
}

// The model exported to ONNX (float32, or double) and imported back, as equiv reads a file.
Graph as_onnx(const Graph& g, const std::string& tag, bool float64) {
  lnv::onnx_export::ExportOptions options;
  options.float64 = float64;
  const fs::path path = scratch() / (tag + ".onnx");
  std::ofstream(path, std::ios::binary) << lnv::onnx_export::export_onnx(g, options).model;
  return lnv::onnx_import::import_onnx(path, {});
}

// `g` with W[0][3] moved to the next value of the float type of `bits` significand bits
// up, in double: one step of that type's storage.
Graph one_step_up(Graph g, int bits) {
  double& w = g.params[static_cast<size_t>(g.param_index("W"))].values[3];
  int e = 0;
  std::frexp(w, &e);
  w += std::ldexp(1.0, e - bits);
  return g;
}

lnv::check::EquivOptions lenient(unsigned weight_bits = 0) {
  lnv::check::EquivOptions o;
  o.trials = 2;
  o.weight_bits = weight_bits;
  return o;
}

TEST(StoredBits, OnnxInitializersCarryTheirFloatType) {
  const Graph g = lnv::parse_model(linear_model(), "");
  for (const lnv::Param& p : as_onnx(g, "f32", false).params) EXPECT_EQ(p.stored_bits, 24) << p.name;
  for (const lnv::Param& p : as_onnx(g, "f64", true).params) EXPECT_EQ(p.stored_bits, 53) << p.name;
  for (const lnv::Param& p : g.params) EXPECT_EQ(p.stored_bits, 53) << "inline model.json: " << p.name;
}

// FLOAT16 and BFLOAT16 initializers, written with ONNX's own classes.
TEST(StoredBits, HalfAndBfloat16Initializers) {
  for (const auto& [type, bits] : {std::pair{onnx::TensorProto::FLOAT16, 11},
                                   std::pair{onnx::TensorProto::BFLOAT16, 8}}) {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    onnx::GraphProto* gr = m.mutable_graph();
    gr->set_name("half");
    for (const char* name : {"x", "y"}) {
      onnx::ValueInfoProto* v = name[0] == 'x' ? gr->add_input() : gr->add_output();
      v->set_name(name);
      auto* t = v->mutable_type()->mutable_tensor_type();
      t->set_elem_type(type);
      t->mutable_shape()->add_dim()->set_dim_value(4);
    }
    onnx::TensorProto* w = gr->add_initializer();
    w->set_name("w");
    w->set_data_type(type);
    w->add_dims(4);
    for (int k = 0; k < 4; ++k) w->add_int32_data(0x3c00 + k);  // raw 16-bit patterns
    onnx::NodeProto* n = gr->add_node();
    n->set_name("mul");
    n->set_op_type("Mul");
    n->add_input("x");
    n->add_input("w");
    n->add_output("y");
    const fs::path path = scratch() / ("half_" + std::to_string(bits) + ".onnx");
    std::ofstream(path, std::ios::binary) << m.SerializeAsString();
    const Graph g = lnv::onnx_import::import_onnx(path, {});
    ASSERT_EQ(g.params.size(), 1u);
    EXPECT_EQ(g.params[0].stored_bits, bits);
  }
}

TEST(StoredBits, SafetensorsDtypeOfAModelJsonParam) {
  EXPECT_EQ(lnv::dtype_significand_bits("F64"), 53);
  EXPECT_EQ(lnv::dtype_significand_bits("F32"), 24);
  EXPECT_EQ(lnv::dtype_significand_bits("F16"), 11);
  EXPECT_EQ(lnv::dtype_significand_bits("BF16"), 8);
  const fs::path dir = scratch();
  lnv::write_safetensors((dir / "w.safetensors").string(),
                         {{"W", {{8, 8}, std::vector<double>(64, 0.25), lnv::SafetensorsDType::f32}},
                          {"b", {{8}, std::vector<double>(8, 0.5), lnv::SafetensorsDType::f64}}});
  json m = linear_model();
  m["params"][0].erase("init");
  m["params"][0]["file"] = {{"path", "w.safetensors"}, {"key", "W"}};
  m["params"][1].erase("init");
  m["params"][1]["file"] = {{"path", "w.safetensors"}, {"key", "b"}};
  const Graph g = lnv::parse_model(m, dir.string());
  EXPECT_EQ(g.params[static_cast<size_t>(g.param_index("W"))].stored_bits, 24);
  EXPECT_EQ(g.params[static_cast<size_t>(g.param_index("b"))].stored_bits, 53);
}

// A float32 pair is allowed what perturbing the differing weights at 24 bits causes,
// measured: larger than the allowance measured at 53 bits for the same pair (a linear
// model: about 2^29 times, as the change is linear in the perturbation), and a float32 step
// is within the one and beyond the other.
TEST(EquivStorage, Float32FilesGetThe24BitAllowance) {
  const Graph g = lnv::parse_model(linear_model(), "");
  const Graph a = as_onnx(g, "a32", false), b = as_onnx(one_step_up(g, 24), "b32", false);
  const EquivReport files = lnv::check::equiv_models(a, b, lenient());
  const EquivReport at53 = lnv::check::equiv_models(a, b, lenient(53));
  ASSERT_EQ(files.outcome(), Outcome::holds) << lnv::report::to_text(files);
  EXPECT_EQ(files.weight_bits, 24u);
  EXPECT_NE(files.weight_storage.find("24 bits (the float32 storage of the weights that differ); "
                                      "measured: 16 × the largest change of 2 random 2^-24 "
                                      "perturbations of the 2 differing params"),
            std::string::npos)
      << files.weight_storage;
  EXPECT_TRUE(files.quantities[0].up_to_weight_storage);
  EXPECT_EQ(at53.weight_bits, 53u);
  EXPECT_NE(at53.weight_storage.find("(--weight-bits)"), std::string::npos) << at53.weight_storage;
  EXPECT_EQ(at53.outcome(), Outcome::fails)
      << "a float32 step is beyond what double storage can cause: " << lnv::report::to_text(at53);
  ASSERT_GT(at53.quantities[0].storage_bound, 0.0);
  const double s24 = files.quantities[0].storage_bound - files.quantities[0].stats.bound;
  const double s53 = at53.quantities[0].storage_bound - at53.quantities[0].stats.bound;
  EXPECT_GT(s24, s53);
  EXPECT_NEAR(std::log2(s24 / s53), 29.0, 0.01) << "same draws, linear in the perturbation";
  // The float32 step in W[0][3] moves outputs by |x|·2^-24·|W|-ish; the allowance is within
  // a few hundred times that, not the orders of magnitude of a worst-case bound.
  EXPECT_LT(files.quantities[0].storage_bound, 1000 * files.quantities[0].stats.max_abs);
}

TEST(EquivStorage, Float64FilesGetThe53BitAllowance) {
  const Graph g = lnv::parse_model(linear_model(), "");
  const Graph a = as_onnx(g, "a64", true), b = as_onnx(one_step_up(g, 53), "b64", true);
  const EquivReport files = lnv::check::equiv_models(a, b, lenient());
  const EquivReport at53 = lnv::check::equiv_models(a, b, lenient(53));
  ASSERT_EQ(files.outcome(), Outcome::holds) << lnv::report::to_text(files);
  EXPECT_EQ(files.weight_bits, 53u);
  EXPECT_TRUE(files.quantities[0].up_to_weight_storage);
  EXPECT_EQ(files.quantities[0].storage_bound, at53.quantities[0].storage_bound);
}

// Only the weights that differ count: a float32 file against its own model.json whose
// params are the same values stored in double is judged at 24 bits only through the params
// rounded to float32; two files with the same weights get no allowance at all.
TEST(EquivStorage, OnlyTheWeightsThatDifferDecide) {
  const Graph g = lnv::parse_model(linear_model(), "");
  const Graph a = as_onnx(g, "same_a", false);
  const EquivReport same = lnv::check::equiv_models(a, as_onnx(g, "same_b", false), lenient());
  EXPECT_EQ(same.weight_bits, 0u) << "same weights: no allowance";
  EXPECT_NE(same.weight_storage.find("store the same weights"), std::string::npos);
  const EquivReport json_vs_f32 = lnv::check::equiv_models(g, a, lenient());
  EXPECT_EQ(json_vs_f32.weight_bits, 24u) << "W and b rounded to float32 in the file";
}

// A genuine difference above the float32 allowance between two float32 files is
// different; one within it is equal up to weight storage (above).
TEST(EquivStorage, ADifferenceAboveTheFloat32AllowanceIsDifferent) {
  const Graph g = lnv::parse_model(linear_model(), "");
  Graph flipped = g;
  for (double& w : flipped.params[static_cast<size_t>(flipped.param_index("W"))].values) w = -w;
  const Graph a = as_onnx(g, "genuine_a", false), b = as_onnx(flipped, "genuine_b", false);
  const EquivReport r = lnv::check::equiv_models(a, b, lenient());
  ASSERT_EQ(r.outcome(), Outcome::fails) << lnv::report::to_text(r);
  EXPECT_EQ(r.weight_bits, 24u);
  const lnv::report::EquivQuantity& q = r.quantities[0];
  EXPECT_GT(q.stats.max_abs, q.storage_bound);
  EXPECT_GT(q.storage_bound, 0.0);
  EXPECT_NE(q.detail.find("above the bound for rounded weights"), std::string::npos) << q.detail;
}

// A subtle genuine difference between float32 files, one weight scaled by 1 + 1e-3, is
// different in the output and in the input gradient (--grad measures the allowance of each);
// the float32 step above is equal up to storage in both.
TEST(EquivStorage, ASubtleDifferenceBetweenFloat32FilesIsDifferent) {
  const Graph g = lnv::parse_model(linear_model(), "");
  Graph scaled = g;
  scaled.params[static_cast<size_t>(scaled.param_index("W"))].values[3] *= 1 + 1e-3;
  const Graph a = as_onnx(g, "subtle_a", false);
  lnv::check::EquivOptions opt = lenient();
  opt.grad = true;
  const EquivReport r = lnv::check::equiv_models(a, as_onnx(scaled, "subtle_b", false), opt);
  ASSERT_EQ(r.quantities.size(), 2u);
  for (const lnv::report::EquivQuantity& q : r.quantities) {
    EXPECT_EQ(q.outcome, Outcome::fails) << q.detail;
    EXPECT_GT(q.storage_bound, q.stats.bound) << "a measured allowance: " << q.stats.quantity;
    EXPECT_GT(q.stats.max_abs, 10 * q.storage_bound) << q.stats.quantity;
  }
  const EquivReport step = lnv::check::equiv_models(a, as_onnx(one_step_up(g, 24), "step_b", false), opt);
  ASSERT_EQ(step.quantities.size(), 2u);
  for (const lnv::report::EquivQuantity& q : step.quantities)
    EXPECT_TRUE(q.outcome == Outcome::holds && q.up_to_weight_storage) << q.stats.quantity << ": " << q.detail;
}

}  // namespace
