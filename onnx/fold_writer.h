// The fold written as ONNX: the original file's graph with the nodes of every folded norm
// replaced by an RMSNorm and the centered initializers replaced by centered copies
// (inference), or read through nodes that center them in the graph (training); every
// other node, initializer, name, doc string, metadata entry and opset import as it was
// (docs/onnx.md, "ONNX out").
//
// Plain C++ types only, like the other public headers of lnv_onnx.
#pragma once

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/mode.h"
#include "core/progress.h"
#include "onnx/onnx_model.h"

namespace lnv {
class AtomicFileWriter;
}

namespace lnv::onnx_import {

// How an RMSNorm is spelled in the written file.
enum class RmsOp {
  decomposed,  // Pow(x, 2), ReduceMean, Add eps, Sqrt, Div, Mul weight (standard ops)
  ort,         // SimplifiedLayerNormalization (ONNX Runtime's fused kernel, which ONNX
               // Runtime registers in the default domain)
  ort_skip,    // ort; a norm whose input is a residual Add of two tensors of its shape:
               // com.microsoft.SkipSimplifiedLayerNormalization taking both addends (and a
               // 1-D bias Add on one of them)
  onnx23,      // RMSNormalization (ONNX opset 23)
};

struct FoldWriteOptions {
  RmsOp rms_op = RmsOp::decomposed;
  // inference: centered values are stored (in place, or in untied ".centered" copies).
  // training: every initializer keeps its bytes; each centered use reads
  // Sub(W, ReduceMean(W)) computed in the graph from the original initializer W.
  Mode mode = Mode::inference;
  // With onnx23: a model whose default-domain opset is below 23 is refused instead of
  // raised to 23.
  bool keep_opset = false;
  bool sync = true;  // fsync before the renames
  // Single-file input: an initializer whose raw_data has this many bytes or more is never
  // held in memory; its data goes from the input into the output as the output is
  // written (copied, or centered chunk by chunk). The output does not depend on it;
  // UINT64_MAX parses and holds the whole model.
  uint64_t stream_min_bytes = uint64_t{1} << 16;
  // Written and committed together with the model (a report), all or nothing.
  std::vector<AtomicFileWriter*> commit_with;
  // Hears the steps: "parse model", "center weights" (over the centered initializers),
  // "copy external data" and "write model" (over bytes), "commit files" (no count).
  ProgressFn progress;
};

struct FoldWriteSummary {
  size_t norms = 0;             // norms replaced
  size_t centered_in_place = 0; // initializers whose data was replaced, name kept
  size_t moved_in_place = 0;    // more of them: biases a moved norm bias joined, not centered
  size_t centered_copies = 0;   // new initializers (untied centered copies, norm params)
  size_t centered_in_graph = 0; // training: centered values computed by new nodes
  size_t dropped = 0;           // initializers only the replaced norms' nodes read
  size_t skip_fused = 0;        // --rms-op ort-skip: norms written with their residual Add fused
  std::string side_file;        // the new external data file ("" when none was written)
  std::vector<std::string> copied_files;  // external data files copied beside the output
};

// What the writer needs of the imported graph before the fold: its params' names and
// which of them are all zeros (so that a param the fold zeroed is told from one that was;
// a param whose values were deferred is not known to be zero),
// without their values, so the fold may rewrite the graph in place.
struct ImportedParams {
  std::set<std::string> names;
  std::set<std::string> zero;
};
ImportedParams imported_params(const lnv::Graph& original);

// Precondition: `original` describes import_onnx(source, dims) and `folded` is apply_fold
// of that graph with a plan applied in inference mode, the norms `folded_norms` swapped
// (for a training fold: the training plan's terms applied as in inference, which marks
// every centered use with the centering it wants; options.mode says how it is written). Reads `source`
// again as a ModelProto and writes `out` (and its side files) atomically. Throws lnv::ModelError
// (nothing written) when `out` or a side file would replace the input or a file it reads,
// when onnx23 meets --keep-opset on an older opset or an op whose meaning changed before
// opset 23, or when a centered term cannot be expressed in the original graph (in
// training: also a norm param the RMSNorm cannot read as the file stores it).
FoldWriteSummary write_folded_onnx(const std::filesystem::path& source,
                                   const ImportedParams& original, const lnv::Graph& folded,
                                   const std::vector<std::string>& folded_norms,
                                   const std::filesystem::path& out,
                                   const FoldWriteOptions& options);

// The external data files the initializers of the ONNX model at `path` read (absolute,
// normalized; each once), so that no output of a command replaces one.
std::vector<std::filesystem::path> external_data_files(const std::filesystem::path& path);

// ONNX's checker on the file at `path` with full checking: the model checks (IR version,
// opset imports, graph, external data beside it) and strict shape inference, both with the
// schemas of the opsets newer than ONNX 1.12 that onnx/newer_opsets.cpp adds
// (check_onnx_model of onnx/onnx_checker.h, OnnxCheck::full). Throws lnv::ModelError(path,
// "fails ONNX's checker: " + the checker's message).
void check_onnx_file(const std::filesystem::path& path);

}  // namespace lnv::onnx_import
