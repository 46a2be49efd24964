// What the model.json files of lnv_core share (core/model_read.cpp, core/model_write.cpp,
// core/param_values.cpp, core/model_text.cpp). Private to lnv_core.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/graph.h"
#include "core/progress.h"
#include "core/safetensors.h"

namespace lnv::model_format {

inline constexpr const char* kFormat = "lnverify.model";
inline constexpr int kVersion = 1;

// Throws ModelError(path, ...) naming `param`, the flat index and `source` (" in f [k]")
// at the first non-finite value of `v`.
void check_finite(const std::vector<double>& v, const std::string& path,
                  const std::string& param, const std::string& source);

// The span of deferred param `p` in `file`, which must still hold the tensor as loaded.
SafetensorsSpan loaded_span(const SafetensorsReader& file, const Param& p);

// The values of deferred param `p` from `file` (which must still hold the tensor as loaded).
void materialize_from(const SafetensorsReader& file, Param& p);

// The text of model.json `j` as save_model writes it: one line per input, param and node,
// known keys in the format's order; `progress` hears "format params" over the params.
std::string json_to_text(const nlohmann::json& j, const ProgressFn& progress = {});

}  // namespace lnv::model_format
