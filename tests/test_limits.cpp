// Sizes refused up front: `init` params that together exceed memory (with the total), and
// in-memory JSON values nested deeper than a file may be.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"
#include "core/file_io.h"
#include "core/model_json.h"

namespace lnv {
namespace {

using nlohmann::json;

json model_with_params(const json& params) {
  return {{"format", "lnverify.model"},
          {"version", 1},
          {"inputs", {{{"name", "x"}, {"shape", {1, 4}}}}},
          {"params", params},
          {"nodes", {{{"name", "ln"}, {"op", "layer_norm"}, {"inputs", {"x"}}, {"axes", {-1}}}}},
          {"outputs", {"ln"}}};
}

std::string error_of(const json& m, const LoadOptions& o = {}) {
  try {
    parse_model(m, "", o);
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}

// 64 params of 46340^2 (< 2^31) values each: every shape is valid alone, together they
// need 1.1 TB. Refused before the first value is drawn, with the total.
TEST(Limits, InitParamsBeyondMemoryAreRefusedWithTheTotal) {
  json params = json::array();
  for (int i = 0; i < 64; ++i)
    params.push_back({{"name", "p" + std::to_string(i)},
                      {"shape", {46340, 46340}},
                      {"init", {{"dist", "normal"}, {"std", 0.02}}}});
  const std::string e = error_of(model_with_params(params));
  EXPECT_NE(e.find("/params"), std::string::npos) << e;
  EXPECT_NE(e.find(std::to_string(int64_t{64} * 46340 * 46340) + " values"), std::string::npos) << e;
  EXPECT_NE(e.find("memory"), std::string::npos) << e;
}

TEST(Limits, InitParamsBeyondAGivenLimitAreRefused) {
  const json params = {{{"name", "a"}, {"shape", {300, 300}}, {"init", {{"dist", "uniform"}, {"low", -1}, {"high", 1}}}},
                       {{"name", "b"}, {"shape", {300, 300}}, {"init", {{"dist", "uniform"}, {"low", -1}, {"high", 1}}}}};
  LoadOptions small;
  small.max_init_bytes = 1 << 20;  // 131072 doubles; the two params hold 180000
  const std::string e = error_of(model_with_params(params), small);
  EXPECT_NE(e.find("180000 values"), std::string::npos) << e;
  EXPECT_EQ(error_of(model_with_params(params)), "");
}

// A value built in memory 100000 levels deep (in `meta`, which is free-form) is refused as
// parse_json refuses such text, not copied recursively until the stack runs out.
TEST(Limits, InMemoryJsonIsDepthChecked) {
  json deep = 1;
  for (int i = 0; i < 100000; ++i) deep = json::array({std::move(deep)});
  json m = model_with_params(json::array());
  m["meta"] = {{"deep", std::move(deep)}};
  const std::string e = error_of(m);
  EXPECT_NE(e.find("nested deeper than " + std::to_string(kMaxJsonDepth)), std::string::npos) << e;
  // The limit is the same as for text: kMaxJsonDepth levels load.
  json ok = 1;
  for (int i = 0; i < kMaxJsonDepth - 2; ++i) ok = json::array({std::move(ok)});
  json m2 = model_with_params(json::array());
  m2["meta"] = {{"ok", std::move(ok)}};
  EXPECT_EQ(error_of(m2), "");
  EXPECT_NO_THROW(parse_json(m2.dump(), "m2", "invalid JSON"));
}

}  // namespace
}  // namespace lnv
