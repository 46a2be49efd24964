// The ONNX reader: tensors in every encoding it accepts, attributes of every kind, dims
// bound by name, opset 18's ReduceMean, and malformed files, each refused with an error
// that names the file and the place (never a crash). The malformed files are built here
// with ONNX's protobuf classes.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "core/error.h"
#include "onnx/constant_fold.h"
#include "onnx/onnx_model.h"

namespace fs = std::filesystem;
namespace ox = ::onnx;
using namespace lnv::onnx_import;

namespace {

class OnnxReader : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lnv_onnx_reader_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "model");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A model with one graph input x [2,3] (dims as given), one Identity node and output y.
  static ox::ModelProto identity_model(int opset = 17) {
    ox::ModelProto m;
    m.set_ir_version(8);
    m.set_producer_name("test");
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    auto* g = m.mutable_graph();
    g->set_name("g");
    add_value(g->add_input(), "x", {2, 3});
    add_value(g->add_output(), "y", {2, 3});
    auto* n = g->add_node();
    n->set_name("id");
    n->set_op_type("Identity");
    n->add_input("x");
    n->add_output("y");
    return m;
  }

  static void add_value(ox::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims,
                        int elem = ox::TensorProto::FLOAT) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  }

  // Adds an initializer w (and a node reading it) to `m`; returns it for filling in.
  static ox::TensorProto* add_weight(ox::ModelProto& m, std::vector<int64_t> dims,
                                     int elem = ox::TensorProto::FLOAT) {
    auto* g = m.mutable_graph();
    auto* t = g->add_initializer();
    t->set_name("w");
    t->set_data_type(elem);
    for (int64_t d : dims) t->add_dims(d);
    auto* n = g->add_node();
    n->set_name("use_w");
    n->set_op_type("Identity");
    n->add_input("w");
    n->add_output("w_out");
    add_value(g->add_output(), "w_out", dims, elem);
    return t;
  }

  fs::path write(const ox::ModelProto& m, const std::string& name = "m.onnx") {
    const fs::path p = dir_ / "model" / name;
    std::ofstream out(p, std::ios::binary);
    m.SerializeToOstream(&out);
    return p;
  }

  fs::path write_bytes(const std::string& bytes, const std::string& name) {
    const fs::path p = dir_ / "model" / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

  // The error load_onnx throws, or "" when it loads.
  static std::string load_error(const fs::path& p, const DimBindings& dims = {}) {
    try {
      load_onnx(p, dims);
      return "";
    } catch (const lnv::ModelError& e) {
      return e.what();
    }
  }

  fs::path dir_;
};

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

std::string float_bytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

TEST_F(OnnxReader, ReadsEveryTensorEncoding) {
  ox::ModelProto m = identity_model();
  auto* g = m.mutable_graph();
  auto add = [&](const char* name, int elem, std::vector<int64_t> dims) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(elem);
    for (int64_t d : dims) t->add_dims(d);
    return t;
  };
  add("f32_raw", ox::TensorProto::FLOAT, {2})->set_raw_data(float_bytes({1.5f, -2.25f}));
  auto* f32 = add("f32_typed", ox::TensorProto::FLOAT, {2});
  f32->add_float_data(0.1f);
  f32->add_float_data(3.0f);
  auto* f64 = add("f64_typed", ox::TensorProto::DOUBLE, {1});
  f64->add_double_data(0.1);
  const uint16_t half_bits[2] = {0x3c00, 0xc500};  // 1.0, -5.0
  add("f16_raw", ox::TensorProto::FLOAT16, {2})->set_raw_data(std::string(reinterpret_cast<const char*>(half_bits), 4));
  auto* f16 = add("f16_typed", ox::TensorProto::FLOAT16, {1});
  f16->add_int32_data(0x3555);  // 0.333251953125
  auto* i64 = add("i64_typed", ox::TensorProto::INT64, {3});
  for (int64_t v : {int64_t{-1}, int64_t{1} << 40, int64_t{7}}) i64->add_int64_data(v);
  const int64_t i64_raw[2] = {-3, 9};
  add("i64_raw", ox::TensorProto::INT64, {2})->set_raw_data(std::string(reinterpret_cast<const char*>(i64_raw), 16));
  auto* i32 = add("i32_typed", ox::TensorProto::INT32, {2});
  i32->add_int32_data(-5);
  i32->add_int32_data(6);
  add("bool_raw", ox::TensorProto::BOOL, {3})->set_raw_data(std::string("\1\0\1", 3));
  add("scalar", ox::TensorProto::INT64, {})->add_int64_data(42);
  add("empty", ox::TensorProto::FLOAT, {0, 4});

  const Model model = load_onnx(write(m));
  auto get = [&](const char* name) { return model.graph.initializer(name)->value; };
  EXPECT_EQ(get("f32_raw").floats, (std::vector<double>{1.5, -2.25}));
  EXPECT_EQ(get("f32_typed").floats, (std::vector<double>{static_cast<float>(0.1), 3.0}));
  EXPECT_EQ(get("f64_typed").floats, (std::vector<double>{0.1}));
  EXPECT_EQ(get("f16_raw").floats, (std::vector<double>{1.0, -5.0}));
  EXPECT_EQ(get("f16_typed").floats, (std::vector<double>{0.333251953125}));
  EXPECT_EQ(get("i64_typed").ints, (std::vector<int64_t>{-1, int64_t{1} << 40, 7}));
  EXPECT_EQ(get("i64_raw").ints, (std::vector<int64_t>{-3, 9}));
  EXPECT_EQ(get("i32_typed").ints, (std::vector<int64_t>{-5, 6}));
  EXPECT_EQ(get("i32_typed").type, ElemType::Int32);
  EXPECT_EQ(get("bool_raw").ints, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_TRUE(get("bool_raw").floats.empty());
  EXPECT_EQ(get("scalar").dims, std::vector<int64_t>{});
  EXPECT_EQ(get("scalar").ints, std::vector<int64_t>{42});
  EXPECT_EQ(get("empty").numel(), 0);
}

TEST_F(OnnxReader, ReadsExternalDataBesideTheModel) {
  ox::ModelProto m = identity_model();
  auto* w = add_weight(m, {3});
  w->set_data_location(ox::TensorProto::EXTERNAL);
  auto kv = [&](const char* k, const std::string& v) {
    auto* e = w->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  kv("location", "weights.bin");
  kv("offset", "8");
  kv("length", "12");
  write_bytes(std::string(8, 'x') + float_bytes({1.f, 2.f, 4.f}), "weights.bin");
  const Model model = load_onnx(write(m));
  EXPECT_EQ(model.graph.initializer("w")->value.floats, (std::vector<double>{1, 2, 4}));
}

// A large float initializer is left in its file (raw_data of a single-file model, or
// external data) until it is read, and reads back the values written; a small one, and
// an integer one, are decoded on load.
TEST_F(OnnxReader, LargeFloatInitializersAreReadWhenNeeded) {
  std::vector<float> big(20000);  // 80 kB: over the 64 KiB left in the file
  for (size_t k = 0; k < big.size(); ++k) big[k] = 0.25f * static_cast<float>(k) - 7.0f;
  const std::vector<double> expected(big.begin(), big.end());
  {  // one file: raw_data of 80000 bytes stays out of protobuf
    ox::ModelProto m = identity_model();
    add_weight(m, {20000})->set_raw_data(float_bytes(big));
    const Model model = load_onnx(write(m));
    const Tensor& w = model.graph.initializer("w")->value;
    ASSERT_TRUE(w.stored);
    EXPECT_TRUE(w.floats.empty());
    EXPECT_EQ(w.stored->file.filename(), "m.onnx");
    EXPECT_EQ(stored_floats(w), expected);
  }
  {  // external data
    ox::ModelProto m = identity_model();
    auto* w = add_weight(m, {20000});
    w->set_data_location(ox::TensorProto::EXTERNAL);
    auto* e = w->add_external_data();
    e->set_key("location");
    e->set_value("weights.bin");
    write_bytes(float_bytes(big), "weights.bin");
    const Model model = load_onnx(write(m));
    Tensor t = model.graph.initializer("w")->value;
    ASSERT_TRUE(t.stored);
    load_stored(t);
    EXPECT_FALSE(t.stored);
    EXPECT_EQ(t.floats, expected);
    // Changed after loading: reading it names the initializer.
    write_bytes(float_bytes({1.f}), "weights.bin");
    try {
      stored_floats(model.graph.initializer("w")->value);
      ADD_FAILURE() << "a truncated data file was read";
    } catch (const lnv::ModelError& err) {
      EXPECT_CONTAINS(err.what(), "initializer 'w'");
      EXPECT_CONTAINS(err.what(), "is too short");
    }
  }
  {  // small: decoded on load
    ox::ModelProto m = identity_model();
    add_weight(m, {3})->set_raw_data(float_bytes({1.f, 2.f, 4.f}));
    const Model model = load_onnx(write(m));
    EXPECT_FALSE(model.graph.initializer("w")->value.stored);
    EXPECT_EQ(model.graph.initializer("w")->value.floats, (std::vector<double>{1, 2, 4}));
  }
  {  // a NaN reads back as stored (as a small tensor's does on load); read as finite
     // values (a param's), it is an error naming the initializer
    ox::ModelProto m = identity_model();
    big[4321] = std::nanf("");
    big[4322] = -std::numeric_limits<float>::infinity();
    add_weight(m, {20000})->set_raw_data(float_bytes(big));
    const Model model = load_onnx(write(m));
    const std::vector<double> read = stored_floats(model.graph.initializer("w")->value);
    EXPECT_TRUE(std::isnan(read[4321]));
    EXPECT_EQ(read[4322], -std::numeric_limits<double>::infinity());
    EXPECT_EQ(read[4323], expected[4323]);
    try {
      finite_floats(model.graph.initializer("w")->value, "unused");
      ADD_FAILURE() << "a NaN was read as finite";
    } catch (const lnv::ModelError& err) {
      EXPECT_CONTAINS(err.what(), "m.onnx: initializer 'w': holds a non-finite value (nan) at flat index 4321");
    }
  }
}

// A cycle is refused naming the nodes around it, before ONNX's checker (which would call
// it a node out of order).
TEST_F(OnnxReader, ACycleIsRefusedNamingItsNodes) {
  ox::ModelProto m = identity_model();
  auto* g = m.mutable_graph();
  g->mutable_node(0)->set_input(0, "b");  // id: y = Identity(b)
  auto* a = g->add_node();
  a->set_name("a");
  a->set_op_type("Relu");
  a->add_input("y");
  a->add_output("b");
  EXPECT_CONTAINS(load_error(write(m)),
                  "node 'id' (Identity): the graph has a cycle: 'id' (Identity) reads 'a' (Relu) reads 'id' (Identity)");
}

TEST_F(OnnxReader, RefusesExternalDataOutsideTheFolderMissingOrShort) {
  auto with_location = [&](const std::string& location, const std::string& length) {
    ox::ModelProto m = identity_model();
    auto* w = add_weight(m, {3});
    w->set_data_location(ox::TensorProto::EXTERNAL);
    auto* e = w->add_external_data();
    e->set_key("location");
    e->set_value(location);
    if (!length.empty()) {
      e = w->add_external_data();
      e->set_key("length");
      e->set_value(length);
    }
    return load_error(write(m));
  };
  std::ofstream(dir_ / "outside.bin", std::ios::binary) << float_bytes({1.f, 2.f, 3.f});
  for (const std::string& loc : {std::string("../outside.bin"), (dir_ / "outside.bin").string(),
                                 std::string("sub/../../outside.bin")}) {
    const std::string err = with_location(loc, "");
    EXPECT_CONTAINS(err, "initializer 'w'");
    EXPECT_CONTAINS(err, "outside the model's folder");
  }
  {  // a Constant node's tensor is checked too
    ox::ModelProto m = identity_model();
    auto* n = m.mutable_graph()->add_node();
    n->set_name("const");
    n->set_op_type("Constant");
    n->add_output("k");
    auto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(ox::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(ox::TensorProto::FLOAT);
    a->mutable_t()->add_dims(3);
    a->mutable_t()->set_data_location(ox::TensorProto::EXTERNAL);
    auto* e = a->mutable_t()->add_external_data();
    e->set_key("location");
    e->set_value("../outside.bin");
    const std::string err = load_error(write(m));
    EXPECT_CONTAINS(err, "node 'const' (Constant): external data location '../outside.bin' is outside");
  }
  fs::create_symlink(dir_ / "outside.bin", dir_ / "model" / "link.bin");
  EXPECT_CONTAINS(with_location("link.bin", ""), "outside the model's folder");

  // A missing file is the checker's finding, shown as it words it.
  const std::string missing = with_location("absent.bin", "");
  EXPECT_CONTAINS(missing, "tensor name: w) should be stored in");
  EXPECT_CONTAINS(missing, "absent.bin, but it doesn't exist");
  write_bytes(float_bytes({1.f, 2.f}), "short.bin");
  EXPECT_CONTAINS(with_location("short.bin", ""), "external data holds 8 bytes");
  EXPECT_CONTAINS(with_location("short.bin", "12"), "is too short");
  EXPECT_CONTAINS(with_location("short.bin", "-4"), "not a non-negative integer");
}

TEST_F(OnnxReader, RefusesMalformedInitializersNamingThem) {
  {
    ox::ModelProto m = identity_model();
    add_weight(m, {2, 3})->set_raw_data(float_bytes({1.f, 2.f, 3.f, 4.f, 5.f}));
    const std::string err = load_error(write(m));
    EXPECT_CONTAINS(err, "m.onnx: initializer 'w': raw_data holds 20 bytes; FLOAT of these dims needs 24");
  }
  {
    ox::ModelProto m = identity_model();
    auto* w = add_weight(m, {4}, ox::TensorProto::INT64);
    w->add_int64_data(1);
    EXPECT_CONTAINS(load_error(write(m)), "initializer 'w': int64_data holds 1 values; the dims need 4");
  }
  {
    ox::ModelProto m = identity_model();
    auto* w = add_weight(m, {2});
    w->set_dims(0, -2);
    w->add_float_data(1);
    const std::string err = load_error(write(m));
    EXPECT_CONTAINS(err, "m.onnx");
    EXPECT_CONTAINS(err, "-2");
  }
  {
    ox::ModelProto m = identity_model();
    auto* w = add_weight(m, {1}, ox::TensorProto::STRING);
    w->add_string_data("a");
    EXPECT_CONTAINS(load_error(write(m)), "initializer 'w': element type STRING (8) is not supported");
  }
}

TEST_F(OnnxReader, TruncatedOrForeignBytesAreErrorsNotCrashes) {
  std::ifstream in(std::string(LNV_SOURCE_DIR) + "/tests/data/onnx/vit_tiny_opset17.onnx", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  const std::string err = load_error(write_bytes(bytes.substr(0, bytes.size() / 2), "half.onnx"),
                                     {{"batch", 1}});
  EXPECT_CONTAINS(err, "half.onnx: ");
  EXPECT_CONTAINS(load_error(write_bytes("not an onnx file at all\n", "text.onnx")), "text.onnx: ");
  EXPECT_CONTAINS(load_error(write_bytes("", "empty.onnx")), "empty.onnx: ");
  EXPECT_CONTAINS(load_error(dir_ / "model" / "absent.onnx"), "cannot open");
  // Every cut point in steps, and flipped bytes: each load and fold succeeds or throws
  // ModelError (any other exception fails the test).
  auto load_and_fold = [](const fs::path& p) {
    try {
      fold_constants(load_onnx(p, {{"batch", 1}}));
    } catch (const lnv::ModelError&) {
    }
  };
  std::mt19937 rng(7);
  for (size_t cut = 0; cut < bytes.size(); cut += bytes.size() / 97 + 1) {
    load_and_fold(write_bytes(bytes.substr(0, cut), "cut.onnx"));
    std::string flipped = bytes;
    for (int k = 0; k < 8; ++k) flipped[rng() % flipped.size()] = static_cast<char>(rng());
    load_and_fold(write_bytes(flipped, "flipped.onnx"));
  }
}

// ONNX 1.12's data propagation crashed on this (Shape of a Split output whose sizes do
// not add up); the reader runs shape inference without it.
TEST_F(OnnxReader, ASplitWithBadSizesBeforeAShapeIsNoCrash) {
  ox::ModelProto m = identity_model();
  auto* g = m.mutable_graph();
  auto* sizes = g->add_initializer();
  sizes->set_name("sizes");
  sizes->set_data_type(ox::TensorProto::INT64);
  sizes->add_dims(2);
  sizes->add_int64_data(1);
  sizes->add_int64_data(-7);
  auto* split = g->add_node();
  split->set_name("split");
  split->set_op_type("Split");
  split->add_input("x");
  split->add_input("sizes");
  split->add_output("a");
  split->add_output("b");
  auto* shape = g->add_node();
  shape->set_name("shape");
  shape->set_op_type("Shape");
  shape->add_input("a");
  shape->add_output("s");
  add_value(g->add_output(), "s", {2}, ox::TensorProto::INT64);
  const Model model = load_onnx(write(m));
  EXPECT_EQ(fold_constants(model).model.graph.nodes.size(), 3u);  // nothing known to fold
}

TEST_F(OnnxReader, TheCheckersMessageIsShownAsIs) {
  ox::ModelProto m = identity_model();
  m.mutable_graph()->mutable_node(0)->set_op_type("NoSuchOp");
  const std::string err = load_error(write(m));
  EXPECT_EQ(err.rfind((dir_ / "model" / "m.onnx").string() +
                          ": fails ONNX's checker: No Op registered for NoSuchOp", 0),
            0u) << err;
}

TEST_F(OnnxReader, SymbolicDimsAreBoundByNameOrNamedInTheError) {
  ox::ModelProto m = identity_model();
  auto* dims = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  dims->mutable_dim(0)->set_dim_param("batch");
  m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape()
      ->mutable_dim(0)->set_dim_param("batch");
  const fs::path p = write(m);
  EXPECT_CONTAINS(load_error(p), "input 'x': dim 0 is the symbol 'batch', which is not bound (pass --dim batch=VALUE)");
  EXPECT_CONTAINS(load_error(p, {{"batch", -1}}), "negative");
  const Model model = load_onnx(p, {{"batch", 5}});
  EXPECT_EQ(model.graph.inputs[0].static_dims(), (std::vector<int64_t>{5, 3}));

  dims->mutable_dim(1)->set_dim_value(-3);
  EXPECT_CONTAINS(load_error(write(m), {{"batch", 5}}), "m.onnx");
  EXPECT_CONTAINS(load_error(write(m), {{"batch", 5}}), "-3");
  dims->mutable_dim(1)->Clear();  // neither a value nor a name
  EXPECT_CONTAINS(load_error(write(m), {{"batch", 5}}),
                  "input 'x': dim 1 has neither a size nor a name");
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  // ONNX's checker requires the main graph's inputs to have a shape; its words.
  EXPECT_CONTAINS(load_error(write(m)), "m.onnx: fails ONNX's checker: Field 'shape' of 'type' is required but missing.");
}

// The free dims the CLI binds: the inputs' dim_params, each once, in order of use, not
// those of an input an initializer gives a value; nullopt for bytes that are not a model.
TEST_F(OnnxReader, InputDimSymbolsListsTheInputsSymbolsInOrder) {
  ox::ModelProto m = identity_model();
  auto* g = m.mutable_graph();
  auto* x = g->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  x->mutable_dim(0)->set_dim_param("seq");
  x->mutable_dim(1)->set_dim_param("batch");
  add_value(g->add_input(), "mask", {1, 1});
  auto* mask = g->mutable_input(1)->mutable_type()->mutable_tensor_type()->mutable_shape();
  mask->mutable_dim(0)->set_dim_param("batch");
  mask->mutable_dim(1)->set_dim_param("width");
  add_value(g->add_input(), "w", {1});
  g->mutable_input(2)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("rows");
  add_weight(m, {1})->set_raw_data(float_bytes({2.f}));  // "w" has an initializer: no free dim
  EXPECT_EQ(input_dim_symbols(write(m)), (std::vector<std::string>{"seq", "batch", "width"}));
  EXPECT_EQ(input_dim_symbols(write(identity_model())), std::vector<std::string>{});
  EXPECT_EQ(input_dim_symbols(write_bytes("PK\003\004 not onnx", "zip.onnx")), std::nullopt);
  EXPECT_EQ(input_dim_symbols(dir_ / "model" / "absent.onnx"), std::nullopt);
}

TEST_F(OnnxReader, ReadsAttributesOfEveryKindAndMetadata) {
  ox::ModelProto m = identity_model();
  auto* prop = m.add_metadata_props();
  prop->set_key("author");
  prop->set_value("me");
  auto* dom = m.add_opset_import();
  dom->set_domain("com.example");
  dom->set_version(1);
  auto* n = m.mutable_graph()->add_node();
  n->set_name("custom");
  n->set_op_type("Anything");
  n->set_domain("com.example");
  n->add_input("x");
  n->add_output("z");
  using AP = ox::AttributeProto;
  auto attr = [&](const char* name, AP::AttributeType type) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(type);
    return a;
  };
  attr("f", AP::FLOAT)->set_f(0.5f);
  attr("i", AP::INT)->set_i(-3);
  attr("s", AP::STRING)->set_s("text");
  auto* t = attr("t", AP::TENSOR)->mutable_t();
  t->set_data_type(ox::TensorProto::INT64);
  t->add_dims(1);
  t->add_int64_data(11);
  auto* fs_ = attr("floats", AP::FLOATS);
  fs_->add_floats(1);
  fs_->add_floats(2);
  auto* is = attr("ints", AP::INTS);
  is->add_ints(4);
  attr("strings", AP::STRINGS)->add_strings("u");
  auto* ts = attr("tensors", AP::TENSORS)->add_tensors();
  ts->set_data_type(ox::TensorProto::FLOAT);
  ts->add_float_data(1);
  auto* sub = attr("g", AP::GRAPH)->mutable_g();
  sub->set_name("body");
  attr("graphs", AP::GRAPHS)->add_graphs()->set_name("body2");
  auto* sp = attr("sparse", AP::SPARSE_TENSOR)->mutable_sparse_tensor();
  sp->add_dims(4);
  sp->mutable_values()->set_data_type(ox::TensorProto::FLOAT);
  sp->mutable_values()->add_dims(1);
  sp->mutable_values()->add_float_data(9);
  sp->mutable_indices()->set_data_type(ox::TensorProto::INT64);
  sp->mutable_indices()->add_dims(1);
  sp->mutable_indices()->add_int64_data(2);
  attr("sparses", AP::SPARSE_TENSORS);
  attr("type", AP::TYPE_PROTO)->mutable_tp()->mutable_tensor_type()->set_elem_type(ox::TensorProto::FLOAT);
  attr("types", AP::TYPE_PROTOS);

  const Model model = load_onnx(write(m));
  EXPECT_EQ(model.metadata, (std::vector<std::pair<std::string, std::string>>{{"author", "me"}}));
  EXPECT_EQ(model.opset(""), 17);
  EXPECT_EQ(model.opset("com.example"), 1);
  const Node& c = model.graph.nodes.back();
  EXPECT_EQ(c.domain, "com.example");
  EXPECT_EQ(c.attr("f")->f, 0.5);
  EXPECT_EQ(c.attr("i")->i, -3);
  EXPECT_EQ(c.attr("s")->s, "text");
  EXPECT_EQ(c.attr("t")->t.ints, std::vector<int64_t>{11});
  EXPECT_EQ(c.attr("floats")->floats, (std::vector<double>{1, 2}));
  EXPECT_EQ(c.attr("ints")->ints, std::vector<int64_t>{4});
  EXPECT_EQ(c.attr("strings")->strings, std::vector<std::string>{"u"});
  EXPECT_EQ(c.attr("tensors")->tensors.size(), 1u);
  EXPECT_EQ(c.attr("g")->g->name, "body");
  EXPECT_EQ(c.attr("graphs")->graphs.at(0)->name, "body2");
  EXPECT_EQ(c.attr("sparse")->sparse.values.floats, std::vector<double>{9});
  EXPECT_EQ(c.attr("sparse")->kind, AttrKind::SparseTensor);
  EXPECT_EQ(c.attr("sparses")->kind, AttrKind::SparseTensors);
  EXPECT_EQ(c.attr("type")->type_proto, "tensor(FLOAT)");
  EXPECT_EQ(c.attr("types")->kind, AttrKind::TypeProtos);
}

TEST_F(OnnxReader, Opset18ReduceMeanTakesAxesAsAnInput) {
  ox::ModelProto m = identity_model(18);
  auto* g = m.mutable_graph();
  auto* axes = g->add_initializer();
  axes->set_name("axes");
  axes->set_data_type(ox::TensorProto::INT64);
  axes->add_dims(1);
  axes->add_int64_data(-1);
  auto* n = g->add_node();
  n->set_name("mean");
  n->set_op_type("ReduceMean");
  n->add_input("y");
  n->add_input("axes");
  n->add_output("mu");
  add_value(g->add_output(), "mu", {2, 1});
  const Model model = load_onnx(write(m));
  EXPECT_EQ(model.opset(""), 18);
  EXPECT_EQ(model.graph.outputs.at(1).static_dims(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(fold_constants(model).model.graph.nodes.size(), 2u);
}

TEST_F(OnnxReader, Opset9SliceAndUnsqueezeTakeTheirAttributes) {
  ox::ModelProto m = identity_model(9);
  auto* g = m.mutable_graph();
  auto* x = g->add_initializer();
  x->set_name("c");
  x->set_data_type(ox::TensorProto::INT64);
  x->add_dims(2);
  x->add_dims(3);
  for (int v = 0; v < 6; ++v) x->add_int64_data(v);
  auto node = [&](const char* name, const char* op, const char* in, const char* out) {
    auto* n = g->add_node();
    n->set_name(name);
    n->set_op_type(op);
    n->add_input(in);
    n->add_output(out);
    return n;
  };
  auto ints = [](ox::NodeProto* n, const char* name, std::vector<int64_t> values) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(ox::AttributeProto::INTS);
    for (int64_t v : values) a->add_ints(v);
  };
  auto* slice = node("slice", "Slice", "c", "s");  // rows [0,1), columns [-2, end)
  ints(slice, "starts", {0, -2});
  ints(slice, "ends", {1, 1000});
  ints(slice, "axes", {0, 1});
  ints(node("unsqueeze", "Unsqueeze", "s", "u"), "axes", {0});
  ints(node("squeeze", "Squeeze", "u", "q"), "axes", {1});
  add_value(g->add_output(), "q", {1, 2}, ox::TensorProto::INT64);
  const FoldResult r = fold_constants(load_onnx(write(m)));
  const Initializer* q = r.model.graph.initializer("q");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->value.dims, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(q->value.ints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(r.model.graph.initializer("c"), nullptr);  // read only by folded nodes
  EXPECT_EQ(r.stats.nodes_folded, 3u);
  EXPECT_EQ(r.model.graph.nodes.size(), 1u);  // the Identity of the graph input
}

TEST_F(OnnxReader, AFoldErrorNamesTheNode) {
  ox::ModelProto m = identity_model();
  auto* g = m.mutable_graph();
  auto* data = g->add_initializer();
  data->set_name("data");
  data->set_data_type(ox::TensorProto::INT64);
  data->add_dims(3);
  for (int v : {1, 2, 3}) data->add_int64_data(v);
  auto* zero = g->add_initializer();
  zero->set_name("zero");
  zero->set_data_type(ox::TensorProto::INT64);
  zero->add_int64_data(0);
  auto* n = g->add_node();
  n->set_name("/size/Mod");
  n->set_op_type("Mod");
  n->add_input("data");
  n->add_input("zero");
  n->add_output("rest");
  add_value(g->add_output(), "rest", {3}, ox::TensorProto::INT64);
  const Model model = load_onnx(write(m));
  try {
    fold_constants(model);
    FAIL() << "folded a modulo by zero";
  } catch (const lnv::ModelError& e) {
    EXPECT_CONTAINS(e.what(), "m.onnx: node '/size/Mod' (Mod): integer modulo by zero");
  }
}

TEST_F(OnnxReader, SaveThenLoadKeepsTheModel) {
  const Model a = load_onnx(std::string(LNV_SOURCE_DIR) + "/tests/data/onnx/bert_tiny_opset14.onnx",
                            {{"batch", 1}, {"seq", 4}});
  const fs::path p = dir_ / "model" / "copy.onnx";
  save_onnx(a, p);
  const Model b = load_onnx(p);
  ASSERT_EQ(a.graph.nodes.size(), b.graph.nodes.size());
  for (size_t k = 0; k < a.graph.nodes.size(); ++k) EXPECT_EQ(a.graph.nodes[k].name, b.graph.nodes[k].name);
  ASSERT_EQ(a.graph.initializers.size(), b.graph.initializers.size());
  for (size_t k = 0; k < a.graph.initializers.size(); ++k) {
    EXPECT_EQ(a.graph.initializers[k].name, b.graph.initializers[k].name);
    EXPECT_EQ(a.graph.initializers[k].value.floats, b.graph.initializers[k].value.floats);
    EXPECT_EQ(a.graph.initializers[k].value.ints, b.graph.initializers[k].value.ints);
  }
  EXPECT_EQ(fold_constants(a).stats.nodes_after, fold_constants(b).stats.nodes_after);
}

}  // namespace
