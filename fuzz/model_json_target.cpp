// Fuzz target (fuzz/targets.h): model.json text through the strict JSON parser, the model reader,
// validation (Graph::finalize) and shape inference. Params may reference
// `weights.safetensors`, a small valid file in the target's directory.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/model_json.h"
#include "core/safetensors.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/targets.h"

namespace lnv::fuzz {

namespace {

// weights.safetensors: W [2, 3] (F32) and b [3] (F64), as the seed corpus references them.
void write_weights(const std::string& dir) {
  static bool written = false;
  if (written) return;
  std::map<std::string, lnv::SafetensorsEntry> t;
  t["W"] = {{2, 3}, {1, -2, 0.5, 0.25, 3, -1}, lnv::SafetensorsDType::f32};
  t["b"] = {{3}, {0.5, -0.5, 0}, lnv::SafetensorsDType::f64};
  lnv::write_safetensors(dir + "/weights.safetensors", t);
  written = true;
}

}  // namespace

int model_json(const uint8_t* data, size_t size) {
  const std::string& dir = lnv::fuzz::scratch_dir();
  write_weights(dir);
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool deferred : {false, true}) {
    try {
      const nlohmann::json j = lnv::parse_json(text, "fuzz.json", "invalid JSON");
      lnv::LoadOptions o = lnv::fuzz::fuzz_load_options();
      o.defer_file_values = deferred;
      const lnv::Graph g = lnv::parse_model(j, dir, o);
      // A model that loads is written back and must load again with the same text.
      const std::string once = lnv::model_to_text(g, dir);
      const lnv::Graph again =
          lnv::parse_model(lnv::parse_json(once, "round trip", "invalid JSON"), dir, o);
      if (lnv::model_to_text(again, dir) != once) __builtin_trap();
    } catch (const lnv::ModelError&) {
      return 0;  // rejected with a message: the expected outcome for bad input
    }
  }
  return 0;
}

}  // namespace lnv::fuzz
