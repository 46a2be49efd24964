// An additive causal mask (0 kept, -inf masked) read by a Softmax imports as one masked
// softmax at every size and in every encoding the reader accepts, on both sides of each of
// its size thresholds: float data of 4096 elements or less is decoded on load, larger float
// data in an external file is left there (Tensor::stored), and raw_data of 64 KiB or more
// is left in the model file (docs/onnx.md, "Reading lazily"). A causal LM exported at 128
// tokens holds a float32 mask of exactly 64 KiB. The graphs are written here with ONNX's
// protobuf classes.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

#include "core/eval/evaluator.h"
#include "core/graph.h"
#include "onnx/float_formats.h"
#include "onnx/import.h"
#include "onnx/onnx_model.h"

namespace fs = std::filesystem;
namespace ox = ::onnx;
using namespace lnv::onnx_import;

namespace {

enum class Storage { raw, external, typed };

struct Case {
  int64_t t;              // the mask is [t, t]
  int elem;               // ONNX element type of x, the mask and y
  Storage storage;
  bool through_unsqueeze; // the mask reaches the Add through an Unsqueeze (folded on load)
  bool left_in_file;      // the reader leaves the mask's data in its file
};

std::string name_of(const Case& c) {
  const char* type = c.elem == ox::TensorProto::FLOAT16 ? "f16" : c.elem == ox::TensorProto::DOUBLE ? "f64" : "f32";
  const char* where = c.storage == Storage::raw ? "raw" : c.storage == Storage::external ? "external" : "typed";
  return std::to_string(c.t) + "_" + type + "_" + where + (c.through_unsqueeze ? "_unsqueezed" : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << name_of(c); }

// mask[i][j] = -inf above the diagonal (j > i), 0 elsewhere: every row keeps a position.
bool masked(int64_t i, int64_t j) { return j > i; }

std::string mask_bytes(const Case& c) {
  std::string out;
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < c.t; ++i)
    for (int64_t j = 0; j < c.t; ++j) {
      const double v = masked(i, j) ? -inf : 0.0;
      if (c.elem == ox::TensorProto::FLOAT16) {
        const uint16_t h = double_to_half_bits(v);
        out.append(reinterpret_cast<const char*>(&h), 2);
      } else if (c.elem == ox::TensorProto::DOUBLE) {
        out.append(reinterpret_cast<const char*>(&v), 8);
      } else {
        const float f = static_cast<float>(v);
        out.append(reinterpret_cast<const char*>(&f), 4);
      }
    }
  return out;
}

void add_value(ox::ValueInfoProto* v, const std::string& name, int elem, std::vector<int64_t> dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

// y = Softmax(x + M, axis -1), x [t, t] (or [1, t, t] with M unsqueezed), written to `dir`.
fs::path write_model(const Case& c, const fs::path& dir) {
  ox::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("mask");
  const std::vector<int64_t> xdims = c.through_unsqueeze ? std::vector<int64_t>{1, c.t, c.t}
                                                         : std::vector<int64_t>{c.t, c.t};
  add_value(g->add_input(), "x", c.elem, xdims);
  add_value(g->add_output(), "y", c.elem, xdims);
  auto* mask = g->add_initializer();
  mask->set_name("mask");
  mask->set_data_type(c.elem);
  mask->add_dims(c.t);
  mask->add_dims(c.t);
  const std::string bytes = mask_bytes(c);
  if (c.storage == Storage::raw) {
    mask->set_raw_data(bytes);
  } else if (c.storage == Storage::typed) {
    for (size_t k = 0; k < bytes.size(); k += 4) {
      float f;
      std::memcpy(&f, bytes.data() + k, 4);
      mask->add_float_data(f);
    }
  } else {
    std::ofstream(dir / "mask.bin", std::ios::binary) << bytes;
    mask->set_data_location(ox::TensorProto::EXTERNAL);
    auto* e = mask->add_external_data();
    e->set_key("location");
    e->set_value("mask.bin");
  }
  std::string m_value = "mask";
  if (c.through_unsqueeze) {
    auto* axes = g->add_initializer();
    axes->set_name("axes");
    axes->set_data_type(ox::TensorProto::INT64);
    axes->add_dims(1);
    axes->add_int64_data(0);
    auto* u = g->add_node();
    u->set_name("/attn/Unsqueeze");
    u->set_op_type("Unsqueeze");
    u->add_input("mask");
    u->add_input("axes");
    u->add_output("mask3");
    m_value = "mask3";
  }
  auto* add = g->add_node();
  add->set_name("/attn/Add");
  add->set_op_type("Add");
  add->add_input("x");
  add->add_input(m_value);
  add->add_output("scores");
  auto* sm = g->add_node();
  sm->set_name("/attn/Softmax");
  sm->set_op_type("Softmax");
  sm->add_input("scores");
  sm->add_output("y");
  auto* axis = sm->add_attribute();
  axis->set_name("axis");
  axis->set_type(ox::AttributeProto::INT);
  axis->set_i(-1);
  const fs::path path = dir / "m.onnx";
  std::ofstream out(path, std::ios::binary);
  EXPECT_TRUE(m.SerializeToOstream(&out));
  return path;
}

class CausalMask : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lnv_onnx_masks_" + std::to_string(::getpid()) + "_" +
                                        name_of(GetParam()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_P(CausalMask, IsAMaskedSoftmaxThatEvaluates) {
  const Case& c = GetParam();
  const fs::path path = write_model(c, dir_);
  // The case lies on the side of the threshold it is meant to.
  const Model loaded = load_onnx(path);
  ASSERT_NE(loaded.graph.initializer("mask"), nullptr);
  EXPECT_EQ(bool(loaded.graph.initializer("mask")->value.stored), c.left_in_file);

  for (const bool defer : {true, false}) {  // audit's import, and every other command's
    const lnv::Graph g = import_onnx(path, {}, defer);
    ASSERT_EQ(g.nodes.size(), 1u) << (defer ? "deferred" : "read");
    const lnv::Node& n = g.nodes[0];
    EXPECT_EQ(n.name, "/attn/Softmax");
    ASSERT_TRUE(lnv::is_masked_softmax(n));
    EXPECT_EQ(n.inputs, std::vector<std::string>{"x"});
    EXPECT_TRUE(g.params.empty()) << "the mask is no param";
    ASSERT_EQ(n.condition.size(), size_t(c.t * c.t));
    for (int64_t i = 0; i < c.t; ++i)
      for (int64_t j = 0; j < c.t; ++j)
        ASSERT_EQ(n.condition[size_t(i * c.t + j)], masked(i, j) ? 0 : 1) << i << ", " << j;
    if (defer) continue;

    // Evaluated in double: each row is the softmax of its first i + 1 scores, 0 after.
    lnv::Tensor<double> x;
    x.shape = c.through_unsqueeze ? lnv::Shape{1, c.t, c.t} : lnv::Shape{c.t, c.t};
    for (int64_t k = 0; k < c.t * c.t; ++k) x.data.push_back(std::sin(0.37 * double(k)));
    const auto ev = lnv::eval::evaluate<double>(g, {x}, lnv::eval::RunOptions{});
    ASSERT_EQ(ev.outputs.size(), 1u);
    for (int64_t i = 0; i < c.t; ++i) {
      double sum = 0;
      for (int64_t j = 0; j <= i; ++j) sum += std::exp(x.data[size_t(i * c.t + j)]);
      for (int64_t j = 0; j < c.t; ++j) {
        const double want = masked(i, j) ? 0.0 : std::exp(x.data[size_t(i * c.t + j)]) / sum;
        ASSERT_NEAR(ev.outputs[0].data[size_t(i * c.t + j)], want, 1e-14) << i << ", " << j;
      }
    }
  }
}

constexpr int kF32 = ox::TensorProto::FLOAT, kF16 = ox::TensorProto::FLOAT16, kF64 = ox::TensorProto::DOUBLE;

INSTANTIATE_TEST_SUITE_P(
    EverySizeAndEncoding, CausalMask,
    testing::Values(
        // raw_data: decoded below 64 KiB (4096 elements and more), left in the file from 64 KiB
        Case{64, kF32, Storage::raw, false, false}, Case{65, kF32, Storage::raw, false, false},
        Case{127, kF32, Storage::raw, false, false}, Case{128, kF32, Storage::raw, false, true},
        Case{129, kF32, Storage::raw, false, true},
        Case{181, kF16, Storage::raw, false, false}, Case{182, kF16, Storage::raw, false, true},
        Case{90, kF64, Storage::raw, false, false}, Case{91, kF64, Storage::raw, false, true},
        // external data: decoded up to 4096 elements, left in its file above
        Case{64, kF32, Storage::external, false, false}, Case{65, kF32, Storage::external, false, true},
        // float_data: protobuf decodes it, at any size
        Case{128, kF32, Storage::typed, false, false},
        // a mask left in the file read by a folded node (the fold reads it)
        Case{128, kF32, Storage::raw, true, true}, Case{65, kF32, Storage::external, true, true}),
    [](const testing::TestParamInfo<Case>& info) { return name_of(info.param); });

}  // namespace
