// Builders of named architectures (the "zoo"): GPT-2, BERT, OPT, Phi, ViT, a Swin-like
// windowed ViT, a ConvNeXt-like conv net and an RNN language model, as lnv::Graphs made
// only of docs/spec/format.md ops.
//
// Defaults give the real sizes (GPT-2 small, BERT base, OPT-125m, Phi-1.5, ViT-B/16,
// Swin-T, ConvNeXt-T, a 2-layer PTB-sized RNN LM); every size option can be overridden to
// get test-sized models. Weights are `init` params (normal, std 0.02; norm weights mean
// 1) drawn from the model's seed, so a model file is small and reproducible.
//
// What the format cannot express is left out and recorded in the model's `meta`:
// attention-probability dropout, rotary and relative position encodings, Swin's shifted
// windows, stochastic depth. Dropout nodes (p = `dropout`) sit where the reference
// implementations have dropout modules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/graph.h"

namespace lnv::zoo {

// Every size is optional: unset means the architecture's real default.
struct ArchOptions {
  std::optional<int64_t> layers;  // transformer blocks / RNN layers; per stage for swin, convnext
  std::optional<int64_t> hidden;  // model width (first-stage width for swin, convnext)
  std::optional<int64_t> heads;   // attention heads (first-stage heads for swin)
  std::optional<int64_t> seq;     // tokens per sequence (text models)
  std::optional<int64_t> vocab;   // vocabulary size (text models)
  std::optional<int64_t> batch;   // default 1
  std::optional<int64_t> image;   // image side in pixels (vision models)
  std::optional<int64_t> patch;   // patch side in pixels (vit, swin, convnext stem)
  std::optional<int64_t> window;  // swin window side in patches
  std::optional<int64_t> classes; // classifier outputs (vision models)
  std::vector<int64_t> depths;    // swin / convnext blocks per stage (overrides `layers`)
  std::optional<double> dropout;  // dropout p (0: no dropout nodes); default 0.1
  double init_std = 0.02;         // finite, >= 0
  uint64_t seed = 0;              // the model's init seed
};

// Limits on what one build may ask for, so that it can neither write a model lnverify
// rejects nor run out of time or memory; all are checked before any weight is drawn.
//  - Every tensor has at most kMaxElements (core/shape.h: 2^31) elements, the loader's
//    limit: inputs, params, node outputs, and each attention node's probabilities
//    [batch, heads, seq, seq], which the evaluators hold at once.
//  - The params hold at most kMaxParamValues values in all. A build keeps them as
//    doubles, 16 GiB at the limit; GPT-2 XL has 1.56e9, Phi-1.5 1.42e9.
//  - At most kMaxBlocks blocks (layers; summed over the stages of swin and convnext), so
//    a deep model at the smallest widths still builds in seconds.
inline constexpr int64_t kMaxParamValues = int64_t{1} << 31;
inline constexpr int64_t kMaxBlocks = 10000;

struct ArchInfo {
  std::string name;
  std::string summary;  // one line: what it is and its default size
};

// The architectures build_architecture knows, in a fixed order.
const std::vector<ArchInfo>& architectures();

// Builds and finalizes the named architecture. Throws ModelError ("zoo/<option>") for an
// unknown name, sizes that do not fit together (heads not dividing hidden, an image not
// divisible into patches and windows, ...) or that break the limits above (then "zoo/"
// followed by the size options that were set, e.g. "zoo/--batch 8 --seq 65536").
Graph build_architecture(const std::string& name, const ArchOptions& options);

// Checks everything build_architecture checks, by the same build without drawing any
// weight: as cheap at the limits as at test sizes. Throws the same ModelError.
void check_architecture(const std::string& name, const ArchOptions& options);

}  // namespace lnv::zoo
