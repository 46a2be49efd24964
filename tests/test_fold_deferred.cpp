// Folding with deferred file params (LoadOptions::defer_file_values, what `lnverify fold`
// uses): the written model equals, value for value and byte for byte, what the fold of a
// fully loaded model writes; bad files are rejected just as by a full load (a NaN in a
// param the fold never touches, a truncated file), a file that goes bad before the save
// leaves no output, and code that needs the values of a deferred param fails loudly.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "core/analysis/fold_plan.h"
#include "core/error.h"
#include "core/eval/evaluator.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "core/safetensors.h"
#include "generators/architectures.h"

namespace lnv {
namespace {

namespace fs = std::filesystem;

// A fresh directory (removed at the end) with `in/` and `out/`.
struct Dir {
  fs::path root, in, out;
  explicit Dir(const std::string& tag) {
    root = fs::temp_directory_path() / ("lnv_fold_deferred_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(root);
    in = root / "in";
    out = root / "out";
    fs::create_directories(in);
    fs::create_directories(out);
  }
  ~Dir() { fs::remove_all(root); }
};

zoo::ArchOptions small(const std::string& arch) {
  zoo::ArchOptions o;
  o.dropout = 0.0;
  if (arch == "vit") {
    o.layers = 2, o.hidden = 16, o.heads = 2, o.image = 16, o.patch = 4, o.classes = 5;
  } else if (arch == "swin" || arch == "convnext") {
    o.depths = {1, 1, 1, 1}, o.hidden = 8, o.classes = 5;
    if (arch == "swin") o.heads = 1, o.image = 16, o.patch = 2, o.window = 2;
    else o.image = 32, o.patch = 4;
  } else {
    o.layers = 2, o.hidden = 16, o.heads = 2, o.seq = 6, o.vocab = 20;
  }
  return o;
}

// Writes `g` as dir/model.json with every param a `file` param of dir/model.safetensors
// (F32, under the key "w.<name>"); returns the model path.
fs::path write_file_model(Graph g, const fs::path& dir) {
  std::map<std::string, SafetensorsEntry> tensors;
  for (Param& p : g.params) {
    for (double& v : p.values) v = static_cast<float>(v);
    p.source = ParamSource::file;
    p.file = {"model.safetensors", "w." + p.name};
    tensors.emplace(p.file.key, SafetensorsEntry{p.shape, p.values, SafetensorsDType::f32});
  }
  g.base_dir = dir.string();
  write_safetensors((dir / "model.safetensors").string(), tensors);
  const fs::path model = dir / "model.json";
  save_model(g, model.string());
  return model;
}

// Folds the model at `in` (loaded fully or deferred) and saves it as out_dir/<stem>.json
// with the side file <stem>.safetensors (params of 16+ values; smaller ones inline).
void fold_to(const fs::path& in, bool deferred, Mode mode, const fs::path& out_dir,
             const std::string& stem, SafetensorsDType dtype) {
  LoadOptions load;
  load.defer_file_values = deferred;
  Graph g = load_model(in.string(), load);
  for (const Param& p : g.params) {
    EXPECT_EQ(p.values_deferred, deferred) << p.name;
    EXPECT_EQ(p.values.empty(), deferred) << p.name;
  }
  const FoldPlan plan = detect_foldable(g, mode);
  const Graph folded = apply_fold(std::move(g), plan);
  SaveOptions save;
  save.weights_file = stem + ".safetensors";
  save.min_file_numel = 16;
  save.weights_dtype = dtype;
  save.sync = false;
  save_model(folded, (out_dir / (stem + ".json")).string(), save);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// The deferred fold of `in` writes the model the materialized fold writes: the same text
// (up to the side file's name), the same side file bytes (up to the name of the tensors
// in the header, which are equal), and the same values after reload.
void expect_same_fold(const fs::path& in, Mode mode, SafetensorsDType dtype, const fs::path& out) {
  fold_to(in, false, mode, out, "full", dtype);
  fold_to(in, true, mode, out, "deferred", dtype);
  const std::string full = read_file((out / "full.json").string());
  const std::string deferred = read_file((out / "deferred.json").string());
  EXPECT_EQ(replace_all(full, "full.safetensors", "deferred.safetensors"), deferred);
  const bool side = fs::exists(out / "full.safetensors");
  EXPECT_EQ(side, fs::exists(out / "deferred.safetensors"));
  if (side) {
    EXPECT_EQ(read_file((out / "full.safetensors").string()),
              read_file((out / "deferred.safetensors").string()));
  }
  const Graph a = load_model((out / "full.json").string());
  const Graph b = load_model((out / "deferred.json").string());
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_EQ(a.params[i].name, b.params[i].name);
    EXPECT_EQ(a.params[i].values, b.params[i].values) << a.params[i].name;
  }
}

class DeferredFold : public ::testing::TestWithParam<std::string> {};

TEST_P(DeferredFold, WritesWhatTheMaterializedFoldWrites) {
  const std::string arch = GetParam();
  Dir d("same_" + arch);
  const fs::path in = write_file_model(zoo::build_architecture(arch, small(arch)), d.in);
  for (Mode mode : {Mode::inference, Mode::training})
    for (SafetensorsDType dtype : {SafetensorsDType::f32, SafetensorsDType::f64}) {
      SCOPED_TRACE(std::string(mode == Mode::inference ? "inference" : "training") +
                   (dtype == SafetensorsDType::f32 ? " F32" : " F64"));
      fs::remove_all(d.out);
      fs::create_directories(d.out);
      expect_same_fold(in, mode, dtype, d.out);
    }
}

INSTANTIATE_TEST_SUITE_P(Zoo, DeferredFold,
                         ::testing::Values("gpt2", "bert", "opt", "phi", "vit", "swin",
                                           "convnext", "rnnlm"));

// Tensors larger than the streaming chunk (2^17 values), with rows that straddle chunk
// boundaries: the embedding table [600, 300] centered along rows, the MLP weights
// [1200, 300] / [300, 1200] centered across rows.
TEST(DeferredFoldLarge, ChunkBoundariesDoNotChangeTheSums) {
  Dir d("large");
  zoo::ArchOptions o;
  o.layers = 1, o.hidden = 300, o.heads = 2, o.seq = 4, o.vocab = 600, o.dropout = 0.0;
  const fs::path in = write_file_model(zoo::build_architecture("gpt2", o), d.in);
  expect_same_fold(in, Mode::inference, SafetensorsDType::f32, d.out);
  fs::remove_all(d.out);
  fs::create_directories(d.out);
  expect_same_fold(in, Mode::inference, SafetensorsDType::f64, d.out);
  // And the streamed side file really holds the big centered tensors.
  const SafetensorsReader side((d.out / "deferred.safetensors").string());
  int64_t big = 0;
  for (const std::string& k : side.keys()) big += side.span(k).count > (uint64_t{1} << 17);
  EXPECT_GE(big, 2);
}

// Writes a float at flat index `at` of tensor `key` of a safetensors file, in place.
void poke_f32(const fs::path& file, const std::string& key, uint64_t at, float value) {
  const SafetensorsSpan s = SafetensorsReader(file.string()).span(key);
  ASSERT_EQ(s.dtype, "F32");
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(s.offset + 4 * at));
  f.write(reinterpret_cast<const char*>(&value), 4);
  ASSERT_TRUE(f.good());
}

TEST(DeferredLoad, ANanInAParamTheFoldDoesNotTouchIsAnError) {
  Dir d("nan");
  zoo::ArchOptions o = small("gpt2");
  const fs::path in = write_file_model(zoo::build_architecture("gpt2", o), d.in);
  // A param the fold leaves alone: referenced, never read again by the save.
  const Graph g = load_model(in.string());
  const Graph folded = apply_fold(g, detect_foldable(g, Mode::inference));
  std::string untouched;
  for (const Param& p : folded.params)
    if (p.center_axes.empty() && p.source == ParamSource::file && numel(p.shape) > 3) {
      untouched = p.name;
      break;
    }
  ASSERT_FALSE(untouched.empty());
  const int index = g.param_index(untouched);
  poke_f32(d.in / "model.safetensors", "w." + untouched, 3, std::numeric_limits<float>::quiet_NaN());

  LoadOptions deferred;
  deferred.defer_file_values = true;
  std::string deferred_error, full_error;
  try {
    load_model(in.string(), deferred);
    ADD_FAILURE() << "the deferred load accepted a NaN in '" << untouched << "'";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.where(), "/params/" + std::to_string(index) + "/file");
    deferred_error = e.what();
  }
  EXPECT_NE(deferred_error.find("param '" + untouched + "'"), std::string::npos) << deferred_error;
  EXPECT_NE(deferred_error.find("non-finite"), std::string::npos) << deferred_error;
  EXPECT_NE(deferred_error.find("flat index 3"), std::string::npos) << deferred_error;
  EXPECT_NE(deferred_error.find("[w." + untouched + "]"), std::string::npos) << deferred_error;
  try {
    load_model(in.string());
  } catch (const ModelError& e) {
    full_error = e.what();
  }
  EXPECT_EQ(deferred_error, full_error);  // the same error as a full load

  // An infinity is caught the same way, and so is one in the last value.
  poke_f32(d.in / "model.safetensors", "w." + untouched, 3, 1.0f);
  const int64_t last = numel(g.params[index].shape) - 1;
  poke_f32(d.in / "model.safetensors", "w." + untouched, last, -std::numeric_limits<float>::infinity());
  try {
    load_model(in.string(), deferred);
    ADD_FAILURE() << "the deferred load accepted -inf";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("flat index " + std::to_string(last)), std::string::npos)
        << e.what();
  }
}

TEST(DeferredLoad, ATruncatedFileIsAnError) {
  Dir d("truncated");
  const fs::path in = write_file_model(zoo::build_architecture("gpt2", small("gpt2")), d.in);
  const fs::path weights = d.in / "model.safetensors";
  fs::resize_file(weights, fs::file_size(weights) - 10);
  LoadOptions deferred;
  deferred.defer_file_values = true;
  try {
    load_model(in.string(), deferred);
    ADD_FAILURE() << "the deferred load accepted a truncated file";
  } catch (const ModelError& e) {
    EXPECT_NE(e.where().find("/params/"), std::string::npos) << e.where();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  // A file shorter than its 8-byte header length.
  fs::resize_file(weights, 5);
  EXPECT_THROW(load_model(in.string(), deferred), ModelError);
}

// The input file loses its data between the load and the save: the save fails with a
// ModelError and leaves no file at all in the output directory (no model, no side file,
// no temporary file).
TEST(DeferredLoad, AFileTruncatedBeforeTheSaveLeavesNoOutput) {
  Dir d("late");
  const fs::path in = write_file_model(zoo::build_architecture("gpt2", small("gpt2")), d.in);
  LoadOptions deferred;
  deferred.defer_file_values = true;
  Graph g = load_model(in.string(), deferred);
  const FoldPlan plan = detect_foldable(g, Mode::inference);
  const Graph folded = apply_fold(std::move(g), plan);
  const fs::path weights = d.in / "model.safetensors";
  const uint64_t data_start = SafetensorsReader(weights.string()).span(
      SafetensorsReader(weights.string()).keys().front()).offset;
  fs::resize_file(weights, data_start + 4);  // the header stays, the data is gone
  SaveOptions save;
  save.weights_file = "folded.safetensors";
  save.min_file_numel = 16;
  save.weights_dtype = SafetensorsDType::f32;
  EXPECT_THROW(save_model(folded, (d.out / "folded.json").string(), save), ModelError);
  EXPECT_TRUE(fs::is_empty(d.out)) << (fs::directory_iterator(d.out)->path());
}

TEST(DeferredLoad, ValuesAreMaterializedOnDemandOrRefusedLoudly) {
  Dir d("guards");
  const fs::path in = write_file_model(zoo::build_architecture("gpt2", small("gpt2")), d.in);
  const Graph full = load_model(in.string());
  LoadOptions deferred;
  deferred.defer_file_values = true;
  Graph g = load_model(in.string(), deferred);
  Param& p = g.params.front();
  ASSERT_TRUE(p.values_deferred);
  EXPECT_THROW(effective_values(p), InternalError);
  EXPECT_THROW(param_fingerprint(p), InternalError);
  EXPECT_THROW(eval::param_values<double>(g), InternalError);
  // The in-memory text of a deferred graph reads the values it writes inline.
  EXPECT_EQ(model_to_text(g, d.out.string()), model_to_text(full, d.out.string()));
  materialize_values(p, g.base_dir);
  EXPECT_FALSE(p.values_deferred);
  EXPECT_EQ(p.values, full.params.front().values);
  // A deferred param is a `file` param without values; finalize() checks it.
  Graph bad = load_model(in.string(), deferred);
  bad.params.front().values = {1.0};
  EXPECT_THROW(bad.finalize(), InternalError);
}

// LoadOptions::defer_values (audit, fidelity): `init` params are not drawn until asked,
// then give exactly the values a full load draws; unchanged, they are saved as `init`;
// read_values reads without changing the param; the analysis runs without any value.
TEST(DeferredLoad, DeferValuesLeavesInitParamsUndrawn) {
  Dir d("defer_init");
  const fs::path in = d.in / "init.json";
  save_model(zoo::build_architecture("gpt2", small("gpt2")), in.string());
  const Graph full = load_model(in.string());
  LoadOptions options;
  options.defer_values = true;
  Graph g = load_model(in.string(), options);
  ASSERT_EQ(g.params.size(), full.params.size());
  for (const Param& p : g.params) {
    EXPECT_TRUE(p.values_deferred) << p.name;
    EXPECT_TRUE(p.values.empty()) << p.name;
  }
  EXPECT_EQ(detect_foldable(g, Mode::inference).fold, detect_foldable(full, Mode::inference).fold);
  EXPECT_EQ(model_to_text(g, d.out.string()), model_to_text(full, d.out.string()));
  EXPECT_EQ(read_values(g.params[0], g.base_dir), full.params[0].values);
  EXPECT_TRUE(g.params[0].values_deferred);
  materialize_all(g);
  for (size_t k = 0; k < g.params.size(); ++k) {
    EXPECT_FALSE(g.params[k].values_deferred);
    EXPECT_EQ(g.params[k].values, full.params[k].values) << g.params[k].name;
  }
}

// Writes a safetensors file holding one tensor of `dtype` with the given raw bytes.
void write_raw(const fs::path& file, const std::string& dtype, uint64_t count, const std::string& data) {
  const std::string header = "{\"t\":{\"dtype\":\"" + dtype + "\",\"shape\":[" +
                             std::to_string(count) + "],\"data_offsets\":[0," +
                             std::to_string(data.size()) + "]}}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write_file_atomically(file.string(), bytes + header + data);
}

// The exponent-bit test on stored data, for every dtype, in the first and a later chunk.
TEST(SafetensorsNonFinite, FindsTheFirstNanOrInfinityOfEveryDtype) {
  Dir d("nonfinite");
  const uint64_t count = 600000;  // > 1 MB for F16/BF16 too: several chunks
  struct Case {
    std::string dtype;
    int size;
    uint64_t bits;  // a non-finite value
    double value;   // its meaning (NaN compared by isnan)
  };
  const Case cases[] = {{"F64", 8, 0x7ff0000000000000ull, INFINITY},
                        {"F32", 4, 0xff800000u, -INFINITY},
                        {"F32", 4, 0x7fc00000u, NAN},
                        {"F16", 2, 0x7c00u, INFINITY},
                        {"F16", 2, 0xfe00u, NAN},
                        {"BF16", 2, 0x7f80u, INFINITY}};
  for (const Case& c : cases)
    for (uint64_t at : {uint64_t{0}, uint64_t{7}, count - 1, uint64_t{550001}}) {
      SCOPED_TRACE(c.dtype + " at " + std::to_string(at));
      // 1.0 everywhere (and the largest finite values once), then the non-finite one.
      std::string data(count * c.size, '\0');
      const uint64_t one = c.size == 8 ? 0x3ff0000000000000ull : c.size == 4 ? 0x3f800000u
                                                              : c.dtype == "F16" ? 0x3c00u : 0x3f80u;
      const uint64_t max = c.size == 8 ? 0x7fefffffffffffffull : c.size == 4 ? 0x7f7fffffu
                                                              : c.dtype == "F16" ? 0x7bffu : 0x7f7fu;
      for (uint64_t i = 0; i < count; ++i)
        for (int b = 0; b < c.size; ++b)
          data[i * c.size + b] = static_cast<char>(((i == 5 ? max : one) >> (8 * b)) & 0xff);
      for (int b = 0; b < c.size; ++b) data[at * c.size + b] = static_cast<char>((c.bits >> (8 * b)) & 0xff);
      const fs::path file = d.root / "t.safetensors";
      write_raw(file, c.dtype, count, data);
      const SafetensorsReader r(file.string());
      const auto bad = r.first_non_finite(r.span("t"));
      ASSERT_TRUE(bad.has_value());
      EXPECT_EQ(bad->index, at);
      if (std::isnan(c.value)) EXPECT_TRUE(std::isnan(bad->value));
      else EXPECT_EQ(bad->value, c.value);
      // Without it, every value is finite.
      for (int b = 0; b < c.size; ++b) data[at * c.size + b] = static_cast<char>((one >> (8 * b)) & 0xff);
      write_raw(file, c.dtype, count, data);
      EXPECT_FALSE(SafetensorsReader(file.string()).first_non_finite(r.span("t")).has_value());
    }
}

TEST(SafetensorsWriterTest, StreamsInPiecesAndNeverLeavesAPartialFile) {
  Dir d("writer");
  const fs::path file = d.out / "w.safetensors";
  {
    // Values appended in pieces that straddle tensors equal a one-shot write.
    std::vector<double> a(300000), b(7);
    for (size_t i = 0; i < a.size(); ++i) a[i] = 0.1 * double(i) - 3.0;
    for (size_t i = 0; i < b.size(); ++i) b[i] = 1.0 / (1.0 + double(i));
    SafetensorsWriter w(file.string(), {{"a", {600, 500}, SafetensorsDType::f32},
                                        {"b", {7}, SafetensorsDType::f64}});
    std::vector<double> all = a;
    all.insert(all.end(), b.begin(), b.end());
    w.append(all.data(), 1000);
    w.append(all.data() + 1000, all.size() - 1000);
    w.commit(false);
    const SafetensorsTensor ra = read_safetensors_tensor(file.string(), "a");
    const SafetensorsTensor rb = read_safetensors_tensor(file.string(), "b");
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(ra.values[i], double(float(a[i]))) << i;
    EXPECT_EQ(rb.values, b);
    const fs::path again = d.out / "again.safetensors";
    write_safetensors(again.string(), {{"a", {{600, 500}, a, SafetensorsDType::f32}},
                                       {"b", {{7}, b, SafetensorsDType::f64}}});
    EXPECT_EQ(read_file(file.string()), read_file(again.string()));
    fs::remove(again);
  }
  fs::remove(file);
  // finite_only (what save_model uses): a double beyond the float range is an error
  // naming the tensor, and no file is left. Without it the value is written (as inf), so
  // that tests can write bad files.
  {
    SafetensorsWriter w(file.string(), {{"big", {3}, SafetensorsDType::f32}}, true);
    const double v[3] = {1.0, 1e300, 2.0};
    try {
      w.append(v, 3);
      ADD_FAILURE() << "1e300 written as F32";
    } catch (const ModelError& e) {
      EXPECT_NE(std::string(e.what()).find("'big'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("flat index 1"), std::string::npos) << e.what();
    }
  }
  {
    SafetensorsWriter w(file.string(), {{"big", {3}, SafetensorsDType::f32}});
    const double v[3] = {1.0, 1e300, 2.0};
    w.append(v, 3);
    w.commit(false);
    EXPECT_EQ(read_safetensors_tensor(file.string(), "big").values[1], INFINITY);
    fs::remove(file);
  }
  // Uncommitted (abandoned) and incomplete writers leave nothing either.
  { SafetensorsWriter w(file.string(), {{"x", {2}, SafetensorsDType::f64}}); }
  {
    SafetensorsWriter w(file.string(), {{"x", {2}, SafetensorsDType::f64}});
    const double v = 1.0;
    w.append(&v, 1);
    EXPECT_THROW(w.commit(), InternalError);
    EXPECT_THROW(w.append(&v, 2), ModelError);  // more values than the layout holds
  }
  EXPECT_TRUE(fs::is_empty(d.out));
}

}  // namespace
}  // namespace lnv
