#pragma once

#include <string_view>

namespace lnv {

// Inference: dropout is the identity. Training: dropout draws its mask.
enum class Mode { inference, training };

inline std::string_view mode_name(Mode m) { return m == Mode::inference ? "inference" : "training"; }

}  // namespace lnv
