// `fold MODEL.onnx -o FOLDED.onnx` of a single-file model streams its initializers' data
// from the input into the output (FoldWriteOptions::stream_min_bytes): the file it writes
// is byte for byte the one written from the whole ModelProto held in memory, on the real
// exports of tests/data/onnx, in both modes. With a threshold of 1 byte every initializer
// holding raw_data is streamed: copied, centered chunk by chunk, or zeroed, and put back
// where protobuf's serializer places it.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/analysis/fold_plan.h"
#include "core/file_io.h"
#include "onnx/fold_writer.h"
#include "onnx/import.h"

namespace fs = std::filesystem;
namespace ox = ::onnx;
using namespace lnv::onnx_import;

namespace {

const std::string kDir = std::string(LNV_SOURCE_DIR) + "/tests/data/onnx/";

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("lnv_fold_stream_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// As `lnverify fold` does: the import leaves the weights in the file.
void fold(const fs::path& src, const DimBindings& dims, lnv::Mode mode, uint64_t stream_min_bytes,
          const fs::path& out) {
  lnv::Graph g = import_onnx(src, dims, /*defer_values=*/true);
  lnv::FoldPlan plan = lnv::detect_foldable(g, mode);
  const std::vector<std::string> norms = plan.fold;
  plan.mode = lnv::Mode::inference;
  const ImportedParams params = imported_params(g);
  const lnv::Graph folded = lnv::apply_fold(std::move(g), plan);
  FoldWriteOptions options;
  options.mode = mode;
  options.sync = false;
  options.stream_min_bytes = stream_min_bytes;
  write_folded_onnx(src, params, folded, norms, out, options);
}

// Initializers holding raw_data, and those of them the fold rewrote.
struct RawCounts {
  size_t raw = 0, changed = 0;
};
RawCounts raw_counts(const fs::path& original, const fs::path& folded) {
  ox::ModelProto a, b;
  EXPECT_TRUE(a.ParseFromString(bytes_of(original)));
  EXPECT_TRUE(b.ParseFromString(bytes_of(folded)));
  std::map<std::string, std::string> before;
  for (const auto& t : a.graph().initializer()) before[t.name()] = t.raw_data();
  RawCounts c;
  for (const auto& t : b.graph().initializer()) {
    if (!t.has_raw_data()) continue;
    ++c.raw;
    auto it = before.find(t.name());
    c.changed += it == before.end() || it->second != t.raw_data();
  }
  return c;
}

struct Case {
  std::string file;
  DimBindings dims;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.file; }

// The streamed folds of `src` (every raw_data; those of 4 KiB or more) equal the fold of
// the whole model, in both modes.
void expect_streamed_equal(const fs::path& src, const DimBindings& dims, const fs::path& dir) {
  for (const lnv::Mode mode : {lnv::Mode::inference, lnv::Mode::training}) {
    SCOPED_TRACE(std::string(lnv::mode_name(mode)));
    const fs::path whole = dir / "whole.onnx", every = dir / "every.onnx", large = dir / "large.onnx";
    fold(src, dims, mode, std::numeric_limits<uint64_t>::max(), whole);
    fold(src, dims, mode, 1, every);
    fold(src, dims, mode, 4096, large);
    const std::string expected = bytes_of(whole);
    ASSERT_FALSE(expected.empty());
    EXPECT_TRUE(bytes_of(every) == expected) << every << " differs from " << whole;
    EXPECT_TRUE(bytes_of(large) == expected) << large << " differs from " << whole;
    // Something was streamed, and in inference something centered was streamed too.
    const RawCounts counts = raw_counts(src, whole);
    EXPECT_GT(counts.raw, 0u);
    if (mode == lnv::Mode::inference) EXPECT_GT(counts.changed, 0u);
  }
}

class StreamedFold : public ::testing::TestWithParam<Case> {};

TEST_P(StreamedFold, EqualsTheFoldOfTheWholeModelByteForByte) {
  const Case& c = GetParam();
  expect_streamed_equal(kDir + c.file, c.dims, temp_dir(fs::path(c.file).stem().string()));
}

// Fields numbered after raw_data (doc_string 12) stay after the data put back.
TEST(StreamedFoldHandMade, InitializerFieldsAfterTheDataKeepTheirPlace) {
  const fs::path dir = temp_dir("doc_strings");
  ox::ModelProto mp;
  ASSERT_TRUE(mp.ParseFromString(bytes_of(kDir + "gpt2_tiny_opset17.onnx")));
  for (auto& t : *mp.mutable_graph()->mutable_initializer()) t.set_doc_string("doc of " + t.name());
  const fs::path src = dir / "gpt2_doc.onnx";
  {
    std::ofstream out(src, std::ios::binary);
    ASSERT_TRUE(mp.SerializeToOstream(&out));
  }
  expect_streamed_equal(src, {{"batch", 2}, {"seq", 8}}, dir);
}

INSTANTIATE_TEST_SUITE_P(
    RealExports, StreamedFold,
    ::testing::Values(Case{"gpt2_tiny_opset17.onnx", {{"batch", 2}, {"seq", 8}}},
                      Case{"bert_tiny_opset17.onnx", {{"batch", 2}, {"seq", 8}}},
                      Case{"prenorm_lm_tiny_opset17.onnx", {{"batch", 2}, {"seq", 8}}},
                      Case{"vit_tiny_opset17.onnx", {{"batch", 2}}},
                      Case{"convnext_tiny_opset17.onnx", {{"batch", 2}}}),
    [](const auto& info) { return fs::path(info.param.file).stem().string(); });

}  // namespace
