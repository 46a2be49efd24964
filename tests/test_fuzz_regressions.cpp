// Every input a fuzz target found a problem with (tests/regressions/fuzz/<target>/, one
// file each, named after what it found) is replayed through the same target function
// (fuzz/targets.h) in the normal build; so are the seeds (examples/, tests/golden/,
// fuzz/seeds/safetensors/, tests/data/onnx/), on which no target may report a finding.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/targets.h"

namespace lnv {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

void replay(const fuzz::Target& t, const fs::path& file) {
  SCOPED_TRACE(std::string(t.name) + " on " + file.string());
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(t.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
}

TEST(FuzzRegressions, KeptInputsReplayClean) {
  const fs::path root = fs::path(LNV_SOURCE_DIR) / "tests" / "regressions" / "fuzz";
  int replayed = 0;
  for (const fuzz::Target& t : fuzz::all_targets())
    for (const fs::path& f : files_in(root / t.name)) {
      replay(t, f);
      ++replayed;
    }
  RecordProperty("replayed", replayed);
  // A kept input in a folder no target is named for would never be replayed, and a replay
  // of nothing passes without testing anything.
  for (const fs::directory_entry& d : fs::directory_iterator(root)) {
    if (!d.is_directory()) continue;
    bool known = false;
    for (const fuzz::Target& t : fuzz::all_targets()) known = known || d.path().filename() == t.name;
    EXPECT_TRUE(known) << d.path() << " is named for no fuzz target";
  }
  EXPECT_GE(replayed, 1) << "no kept input under " << root;
}

TEST(FuzzRegressions, SeedsReplayClean) {
  const fs::path src(LNV_SOURCE_DIR);
  std::vector<fs::path> models = files_in(src / "examples");
  for (const fs::path& f : files_in(src / "tests" / "golden")) models.push_back(f);
  for (const fuzz::Target& t : fuzz::all_targets()) {
    const std::string name = t.name;
    if (name == "model_json" || name == "pipeline")
      for (const fs::path& f : models)
        if (f.extension() == ".json") replay(t, f);
    if (name == "safetensors")
      for (const fs::path& f : files_in(src / "fuzz" / "seeds" / "safetensors")) replay(t, f);
    if (name == "onnx")
      for (const fs::path& f : files_in(src / "tests" / "data" / "onnx")) replay(t, f);
  }
}

}  // namespace
}  // namespace lnv
