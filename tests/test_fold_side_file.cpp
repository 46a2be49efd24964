// Folding a model whose weights live in a safetensors side file: the written-out params go
// into a new side file, unchanged `file` params are referenced (not copied, not re-read),
// and the reloaded values equal an independent centering of the original weights.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/analysis/fold_plan.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "core/safetensors.h"
#include "generators/architectures.h"
#include "tests/progress_steps.h"

namespace lnv {
namespace {

namespace fs = std::filesystem;

// A fresh directory with `in/` holding a small GPT-2 whose params all live in
// in/model.safetensors as F32, and an empty `out/`.
struct Fixture {
  fs::path root, in_model, in_weights, out_dir;

  explicit Fixture(const std::string& tag) {
    root = fs::temp_directory_path() / ("lnv_fold_side_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root / "in");
    fs::create_directories(root / "out");
    in_model = root / "in" / "model.json";
    in_weights = root / "in" / "model.safetensors";
    out_dir = root / "out";
    zoo::ArchOptions o;
    o.layers = 2;
    o.hidden = 32;
    o.heads = 2;
    o.seq = 4;
    o.vocab = 64;
    o.dropout = 0.0;
    Graph g = zoo::build_architecture("gpt2", o);
    std::map<std::string, SafetensorsEntry> tensors;
    for (Param& p : g.params) {
      for (double& v : p.values) v = static_cast<float>(v);
      p.source = ParamSource::file;
      p.file = {"model.safetensors", "w." + p.name};  // keys differ from param names
      tensors.emplace(p.file.key, SafetensorsEntry{p.shape, p.values, SafetensorsDType::f32});
    }
    g.base_dir = (root / "in").string();  // where the params' file paths point from
    write_safetensors(in_weights.string(), tensors);
    save_model(g, in_model.string());
    const nlohmann::json j = nlohmann::json::parse(read_file(in_model.string()));
    for (const auto& pj : j["params"]) EXPECT_TRUE(pj.contains("file")) << pj["name"];
  }
  ~Fixture() { fs::remove_all(root); }
};

// The param's values centered over `axes`, computed here from the definition (subtract
// the mean over the axes from every element), not with the library's effective_values.
std::vector<double> center(const std::vector<double>& v, const Shape& shape, const Axes& axes) {
  const size_t rank = shape.size();
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * shape[d];
  auto group = [&](int64_t flat) {  // the flat index with the centered axes zeroed
    int64_t key = 0;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t i = (flat / stride[d]) % shape[d];
      bool centered_axis = false;
      for (int64_t a : axes) centered_axis = centered_axis || a == int64_t(d);
      if (!centered_axis) key += i * stride[d];
    }
    return key;
  };
  std::map<int64_t, std::pair<double, int64_t>> sums;
  for (int64_t k = 0; k < int64_t(v.size()); ++k) {
    auto& [s, n] = sums[group(k)];
    s += v[k];
    ++n;
  }
  std::vector<double> out(v.size());
  for (int64_t k = 0; k < int64_t(v.size()); ++k) {
    const auto& [s, n] = sums.at(group(k));
    out[k] = v[k] - s / double(n);
  }
  return out;
}

TEST(FoldSideFile, MovedGraphFoldsLikeACopy) {
  Fixture f("move");
  const Graph g = load_model(f.in_model.string());
  const FoldPlan plan = detect_foldable(g, Mode::inference);
  ASSERT_FALSE(plan.center.empty());
  const Graph by_copy = apply_fold(g, plan);
  Graph moved = load_model(f.in_model.string());
  const Graph by_move = apply_fold(std::move(moved), plan);
  EXPECT_EQ(model_to_text(by_copy, f.out_dir.string()), model_to_text(by_move, f.out_dir.string()));
  ASSERT_EQ(by_copy.params.size(), by_move.params.size());
  for (size_t i = 0; i < by_copy.params.size(); ++i) {
    EXPECT_EQ(by_copy.params[i].values, by_move.params[i].values) << by_copy.params[i].name;
    EXPECT_EQ(by_copy.params[i].center_axes, by_move.params[i].center_axes);
  }
}

// Saves the fold of the fixture's model with a side file of `dtype`; checks the reload.
void check_fold(Fixture& f, SafetensorsDType dtype) {
  const Graph g = load_model(f.in_model.string());
  for (const Param& p : g.params) EXPECT_NE(p.file_fingerprint, 0u) << p.name;
  const FoldPlan plan = detect_foldable(g, Mode::inference);
  const Graph folded = apply_fold(g, plan);
  const fs::path out = f.out_dir / "folded.json";
  SaveOptions options;
  options.weights_file = "folded.safetensors";
  options.min_file_numel = 1024;
  options.weights_dtype = dtype;
  save_model(folded, out.string(), options);

  const nlohmann::json j = nlohmann::json::parse(read_file(out.string()));
  const Graph back = load_model(out.string());
  const SafetensorsReader written((f.out_dir / "folded.safetensors").string());
  int referenced = 0, centered = 0, in_side = 0;
  for (size_t i = 0; i < folded.params.size(); ++i) {
    const Param& p = folded.params[i];
    const nlohmann::json& pj = j["params"][i];
    ASSERT_EQ(pj["name"], p.name);
    const Param& r = back.params[back.param_index(p.name)];
    if (p.center_axes.empty() && p.source == ParamSource::file) {
      // Unchanged: referenced in the input's file under its own key, not copied.
      ++referenced;
      ASSERT_TRUE(pj.contains("file")) << p.name;
      EXPECT_EQ(pj["file"]["path"], "../in/model.safetensors") << p.name;
      EXPECT_EQ(pj["file"]["key"], "w." + p.name);
      EXPECT_FALSE(written.has(p.name)) << p.name;
      EXPECT_EQ(r.values, p.values) << p.name;
      continue;
    }
    // Written out: centered (or zeroed) values, in the side file when large enough.
    const Param& src = g.params[g.param_index(p.name.substr(0, p.name.find(".centered")))];
    std::vector<double> want = p.center_axes.empty() ? p.values
                                                     : center(src.values, p.shape, p.center_axes);
    centered += !p.center_axes.empty();
    const bool large = numel(p.shape) >= options.min_file_numel;
    if (large) {
      ++in_side;
      ASSERT_TRUE(pj.contains("file")) << p.name;
      EXPECT_EQ(pj["file"]["path"], "folded.safetensors");
      EXPECT_EQ(written.dtype(p.name), dtype == SafetensorsDType::f32 ? "F32" : "F64");
    } else {
      EXPECT_TRUE(pj.contains("data")) << p.name;
    }
    ASSERT_EQ(r.values.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      if (large && dtype == SafetensorsDType::f32) {
        // Nearest float of the double centering (which may differ from ours by an ulp).
        EXPECT_NEAR(r.values[k], want[k], 1e-7 * (1 + std::abs(want[k]))) << p.name << " " << k;
        EXPECT_EQ(r.values[k], double(float(r.values[k])));
      } else {
        EXPECT_NEAR(r.values[k], want[k], 1e-15 * (1 + std::abs(want[k]))) << p.name << " " << k;
      }
    }
  }
  EXPECT_GT(referenced, 0);
  EXPECT_GT(centered, 0);
  EXPECT_GT(in_side, 0);
  for (const Node& n : back.nodes) EXPECT_NE(n.op, Op::layer_norm) << n.name;
}

using lnv::test::Step;
using lnv::test::check_steps;

TEST(FoldSideFile, SavingReportsItsSteps) {
  Fixture f("steps");
  const Graph g = load_model(f.in_model.string(), LoadOptions{.defer_file_values = true});
  const Graph folded = apply_fold(g, detect_foldable(g, Mode::inference));
  std::vector<Step> heard;
  SaveOptions options;
  options.weights_file = "folded.safetensors";
  options.min_file_numel = 1024;
  options.progress = [&](std::string_view phase, std::string_view unit, uint64_t done, uint64_t total) {
    heard.push_back({std::string(phase), std::string(unit), done, total});
  };
  const fs::path out = f.out_dir / "folded.json";
  save_model(folded, out.string(), options);
  EXPECT_EQ(check_steps(heard), (std::vector<std::string>{"encode params", "format params",
                                                          "write weights", "write model",
                                                          "commit files"}));
  const std::string side = read_file((f.out_dir / "folded.safetensors").string());
  uint64_t header = 0;
  std::memcpy(&header, side.data(), 8);
  for (const Step& s : heard) {
    if (s.phase == "encode params" || s.phase == "format params") { EXPECT_EQ(s.total, folded.params.size()); }
    // The centered params streamed from the input's file: every byte of their data.
    if (s.phase == "write weights") { EXPECT_EQ(s.total, side.size() - 8 - header); }
    if (s.phase == "write model") { EXPECT_EQ(s.total, fs::file_size(out)); }
    if (s.phase == "commit files") { EXPECT_EQ(s.total, 0u); }
  }
  // The streamed tensors moved the bar one by one, not only at the end.
  EXPECT_GT(std::count_if(heard.begin(), heard.end(), [](const Step& s) {
              return s.phase == "write weights" && s.done > 0 && s.done < s.total;
            }), 0);
}

TEST(FoldSideFile, F64SideFileHoldsTheCenteredValues) {
  Fixture f("f64");
  check_fold(f, SafetensorsDType::f64);
}

TEST(FoldSideFile, F32SideFileHoldsTheNearestFloats) {
  Fixture f("f32");
  check_fold(f, SafetensorsDType::f32);
}

TEST(FoldSideFile, AFileParamChangedAfterLoadIsWrittenOut) {
  Fixture f("changed");
  Graph g = load_model(f.in_model.string());
  Param& p = g.params.front();
  ASSERT_EQ(p.source, ParamSource::file);
  p.values[0] += 0.5;  // the fingerprint no longer matches
  const fs::path out = f.out_dir / "changed.json";
  save_model(g, out.string(), {"changed.safetensors", 0, SafetensorsDType::f64});
  const nlohmann::json j = nlohmann::json::parse(read_file(out.string()));
  EXPECT_EQ(j["params"][0]["file"]["path"], "changed.safetensors");
  EXPECT_EQ(j["params"][1]["file"]["path"], "../in/model.safetensors");  // untouched
  const Graph back = load_model(out.string());
  EXPECT_EQ(back.params.front().values, p.values);
  // Without a fingerprint (a graph built in memory) the file is compared instead.
  Graph h = load_model(f.in_model.string());
  for (Param& q : h.params) q.file_fingerprint = 0;
  h.params.front().values[0] += 0.5;
  const fs::path out2 = f.out_dir / "changed2.json";
  save_model(h, out2.string());
  const nlohmann::json j2 = nlohmann::json::parse(read_file(out2.string()));
  EXPECT_TRUE(j2["params"][0].contains("data"));
  EXPECT_EQ(j2["params"][1]["file"]["path"], "../in/model.safetensors");
}

TEST(FoldSideFile, FingerprintSeesPathKeyShapeAndValues) {
  Param p;
  p.name = "w";
  p.shape = {2, 3};
  p.values = {1, 2, 3, 4, 5, 6};
  p.file = {"a.safetensors", "k"};
  const uint64_t h = param_fingerprint(p);
  EXPECT_EQ(h, param_fingerprint(p));
  Param q = p;
  q.values[5] = 6.5;
  EXPECT_NE(param_fingerprint(q), h);
  q = p;
  q.file.key = "k2";
  EXPECT_NE(param_fingerprint(q), h);
  q = p;
  q.shape = {3, 2};
  EXPECT_NE(param_fingerprint(q), h);
}

}  // namespace
}  // namespace lnv
