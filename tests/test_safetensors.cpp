// core/safetensors: files written byte by byte here, read back with exact values for every
// dtype, each corruption rejected with a message naming the file and the tensor; and the
// writer's output read back.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/safetensors.h"

namespace lnv {
namespace {

namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("lnv_safetensors_" + std::string(::testing::UnitTest::GetInstance()
                                                 ->current_test_info()
                                                 ->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Little-endian bytes of an unsigned integer.
  static std::string le(uint64_t v, int bytes) {
    std::string s;
    for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return s;
  }

  // A file: 8-byte header length, the header text, the data bytes.
  std::string write(const std::string& name, const std::string& header, const std::string& data,
                    int64_t claimed_header_len = -1) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out << le(claimed_header_len < 0 ? header.size() : uint64_t(claimed_header_len), 8)
        << header << data;
    return path;
  }
  std::string write_raw(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // The ModelError message of reading `key` from `path` ("" when none).
  static std::string error_of(const std::string& path, const std::string& key) {
    try {
      read_safetensors_tensor(path, key);
    } catch (const ModelError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

#define EXPECT_CONTAINS(haystack, needle)                                   \
  do {                                                                      \
    const std::string h_ = (haystack);                                      \
    EXPECT_NE(h_.find(needle), std::string::npos) << "message: " << h_;     \
  } while (0)

TEST_F(Safetensors, ReadsF32) {
  // 1.5 = 0x3FC00000, -2.0 = 0xC0000000, 0.1f = 0x3DCCCCCD
  const std::string data = le(0x3FC00000, 4) + le(0xC0000000, 4) + le(0x3DCCCCCD, 4);
  const auto path = write(
      "a.safetensors", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", data);
  const SafetensorsTensor t = read_safetensors_tensor(path, "w");
  EXPECT_EQ(t.shape, (Shape{3}));
  ASSERT_EQ(t.values.size(), 3u);
  EXPECT_EQ(t.values[0], 1.5);
  EXPECT_EQ(t.values[1], -2.0);
  EXPECT_EQ(t.values[2], static_cast<double>(0.1f));
}

TEST_F(Safetensors, ReadsF64WithOffsetsAndManyKeys) {
  // Two tensors; the second starts after the first, and the header has __metadata__.
  const std::string data = le(0x3FB999999999999AULL, 8) + le(0xC00C000000000000ULL, 8) +
                           le(0x3FF0000000000000ULL, 8) + le(0x4000000000000000ULL, 8);
  const auto path = write("b.safetensors",
                          R"({"__metadata__":{"format":"pt"},)"
                          R"("a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},)"
                          R"("m":{"dtype":"F64","shape":[1,2],"data_offsets":[16,32]}})",
                          data);
  SafetensorsReader r(path);
  EXPECT_EQ(r.keys(), (std::vector<std::string>{"a", "m"}));
  EXPECT_FALSE(r.has("__metadata__"));
  const SafetensorsTensor a = r.read("a");
  EXPECT_EQ(a.values, (std::vector<double>{0.1, -3.5}));
  const SafetensorsTensor m = r.read("m");
  EXPECT_EQ(m.shape, (Shape{1, 2}));
  EXPECT_EQ(m.values, (std::vector<double>{1.0, 2.0}));
}

TEST_F(Safetensors, ReadsF16Exactly) {
  // 1.0, -2.5, 65504 (max), 2^-24 (smallest subnormal), 0x3555 = 0.333251953125, -0.0, +inf
  const std::string data = le(0x3C00, 2) + le(0xC100, 2) + le(0x7BFF, 2) + le(0x0001, 2) +
                           le(0x3555, 2) + le(0x8000, 2) + le(0x7C00, 2);
  const auto path = write(
      "h.safetensors", R"({"h":{"dtype":"F16","shape":[7],"data_offsets":[0,14]}})", data);
  const SafetensorsTensor t = read_safetensors_tensor(path, "h");
  ASSERT_EQ(t.values.size(), 7u);
  EXPECT_EQ(t.values[0], 1.0);
  EXPECT_EQ(t.values[1], -2.5);
  EXPECT_EQ(t.values[2], 65504.0);
  EXPECT_EQ(t.values[3], std::ldexp(1.0, -24));
  EXPECT_EQ(t.values[4], 0.333251953125);
  EXPECT_EQ(t.values[5], 0.0);
  EXPECT_TRUE(std::signbit(t.values[5]));
  EXPECT_TRUE(std::isinf(t.values[6]) && t.values[6] > 0);
}

TEST_F(Safetensors, ReadsBF16Exactly) {
  // 1.0 = 0x3F80, -0.5 = 0xBF00, 0x4049 = 3.140625, 0x0001 = 2^-133 (subnormal)
  const std::string data = le(0x3F80, 2) + le(0xBF00, 2) + le(0x4049, 2) + le(0x0001, 2);
  const auto path = write(
      "bf.safetensors", R"({"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})", data);
  const SafetensorsTensor t = read_safetensors_tensor(path, "b");
  EXPECT_EQ(t.shape, (Shape{2, 2}));
  EXPECT_EQ(t.values, (std::vector<double>{1.0, -0.5, 3.140625, std::ldexp(1.0, -133)}));
}

TEST_F(Safetensors, RejectsFileTooShortForHeaderLength) {
  const auto path = write_raw("short.safetensors", std::string("\x05\x00\x00", 3));
  EXPECT_CONTAINS(error_of(path, "w"), "too short for the 8-byte header length");
  EXPECT_CONTAINS(error_of(path, "w"), "short.safetensors");
}

TEST_F(Safetensors, RejectsHeaderLengthBeyondFile) {
  const auto path = write("long.safetensors", R"({"w":1})", "", 1000);
  EXPECT_CONTAINS(error_of(path, "w"), "header length 1000 reaches beyond the end of the file");
}

TEST_F(Safetensors, RejectsHeaderThatIsNotJsonOrNotAnObject) {
  const auto bad = write("bad.safetensors", R"({"w": [1, 2)", "");
  EXPECT_CONTAINS(error_of(bad, "w"), "header is not valid JSON");
  const auto arr = write("arr.safetensors", R"([1, 2])", "");
  EXPECT_CONTAINS(error_of(arr, "w"), "header is not a JSON object");
}

TEST_F(Safetensors, RejectsMissingKeyListingWhatIsThere) {
  const auto path = write(
      "k.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      le(0x3F800000, 4));
  const std::string msg = error_of(path, "v");
  EXPECT_CONTAINS(msg, "no tensor 'v'");
  EXPECT_CONTAINS(msg, "'w'");
}

TEST_F(Safetensors, RejectsUnknownDtype) {
  const auto path = write(
      "d.safetensors", R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", le(7, 8));
  const std::string msg = error_of(path, "w");
  EXPECT_CONTAINS(msg, "unsupported dtype 'I64'");
  EXPECT_CONTAINS(msg, "[w]");
}

TEST_F(Safetensors, RejectsOffsetsThatDisagreeWithTheShape) {
  // 3 floats need 12 bytes, the offsets claim 8.
  const auto path = write(
      "o.safetensors", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
      std::string(12, '\0'));
  EXPECT_CONTAINS(error_of(path, "w"), "span 8 bytes, but shape [3] of F32 needs 12");
}

TEST_F(Safetensors, RejectsBeginAfterEnd) {
  const auto path = write(
      "be.safetensors", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})",
      std::string(12, '\0'));
  EXPECT_CONTAINS(error_of(path, "w"), "begin after they end");
}

TEST_F(Safetensors, RejectsOffsetsBeyondTheDataSection) {
  const auto path = write(
      "out.safetensors", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
      std::string(12, '\0'));
  EXPECT_CONTAINS(error_of(path, "w"), "reach beyond the data section (12 bytes)");
}

TEST_F(Safetensors, RejectsTruncatedData) {
  // A correct header for 4 doubles, but the file stops after 3.
  const auto path = write(
      "t.safetensors", R"({"w":{"dtype":"F64","shape":[4],"data_offsets":[0,32]}})",
      std::string(24, '\0'));
  EXPECT_CONTAINS(error_of(path, "w"), "truncated");
}

TEST_F(Safetensors, RejectsMalformedEntries) {
  const auto shape = write(
      "s.safetensors", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
      std::string(4, '\0'));
  EXPECT_CONTAINS(error_of(shape, "w"), "shape: expected a non-negative integer");
  const auto fields = write("f.safetensors", R"({"w":{"dtype":"F32"}})", "");
  EXPECT_CONTAINS(error_of(fields, "w"), "expected an object with dtype, shape and data_offsets");
}

TEST_F(Safetensors, MissingFileIsAModelError) {
  EXPECT_CONTAINS(error_of((dir_ / "nope.safetensors").string(), "w"), "no such file");
}

TEST_F(Safetensors, WriterRoundTripsF64ExactlyAndRoundsF32) {
  const std::string path = (dir_ / "out.safetensors").string();
  std::map<std::string, SafetensorsEntry> tensors;
  tensors["b"] = {{2, 3}, {0.1, -1.0 / 3.0, 1e-300, 2.0, -0.0, 12345.678}, SafetensorsDType::f64};
  tensors["a"] = {{2}, {0.1, 3.0}, SafetensorsDType::f32};
  write_safetensors(path, tensors);

  SafetensorsReader r(path);
  EXPECT_EQ(r.keys(), (std::vector<std::string>{"a", "b"}));
  const SafetensorsTensor b = r.read("b");
  EXPECT_EQ(b.shape, (Shape{2, 3}));
  EXPECT_EQ(b.values, tensors["b"].values);
  const SafetensorsTensor a = r.read("a");
  EXPECT_EQ(a.values, (std::vector<double>{static_cast<double>(0.1f), 3.0}));

  // Byte layout: the header length is a multiple of 8, and "a" comes first in the data.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint8_t(bytes[i]);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_len + 2 * 4 + 6 * 8);
  EXPECT_EQ(bytes.substr(8 + header_len + 4, 4), le(0x40400000, 4));  // 3.0f

  // Atomic: nothing but the file itself is left in the directory.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(Safetensors, WriterRejectsWrongValueCount) {
  std::map<std::string, SafetensorsEntry> tensors;
  tensors["w"] = {{2, 2}, {1.0, 2.0, 3.0}, SafetensorsDType::f32};
  const std::string path = (dir_ / "w.safetensors").string();
  EXPECT_THROW(write_safetensors(path, tensors), ModelError);
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(Safetensors, RejectsDeeplyNestedHeader) {
  // 100000 nested arrays overflowed the stack when the message showed the entry.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const auto path = write("deep.safetensors", R"({"w": )" + deep + "}", "");
  const std::string msg = error_of(path, "w");
  EXPECT_CONTAINS(msg, "deep.safetensors");
  EXPECT_CONTAINS(msg, "header is not valid JSON: arrays and objects nested deeper than 128 levels");
  EXPECT_CONTAINS(msg, "at /w/0/0/0/0/0/0/0/...");
}

TEST_F(Safetensors, OffsetsBeyond64BitsAreTooLarge) {
  // nlohmann reads 2^64 as a double; the message said "expected a non-negative integer".
  const auto path = write(
      "big.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616]}})",
      le(0x3F800000, 4));
  EXPECT_CONTAINS(error_of(path, "w"), "data_offsets: integer 1.8446744073709552e+19 is too large");
}

TEST_F(Safetensors, EntryShownInAnErrorIsAnExcerpt) {
  std::string list = "[0";
  for (int i = 1; i < 100000; ++i) list += ",0";
  const auto path = write("long.safetensors", R"({"w": )" + list + "]}", "");
  const std::string msg = error_of(path, "w");
  EXPECT_CONTAINS(msg, "expected an object with dtype, shape and data_offsets, got [0,0,0,");
  EXPECT_LT(msg.size(), 250u) << msg;
}

}  // namespace
}  // namespace lnv
