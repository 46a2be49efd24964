// An ONNX model as an lnv::Graph: the folded IR (onnx/constant_fold.h) mapped onto
// model.json's ops, with LayerNorms and RMSNorms recognized in the spellings exporters use.
//
// Names: every input, param and node keeps the name the file gives it (a node the name of
// its ONNX node; a value without a node name its value name), with characters model.json
// does not allow replaced by '_' and a suffix ".2", ".3", ... where two would collide.
// Nodes an ONNX node expands into (Gemm's product and bias, BatchNormalization's mul and
// add) are named after it with a suffix; a norm recognized from several nodes is named
// after their common path ("/h.0/ln_1/" + "LayerNormalization"). The graph's `meta.onnx`
// records the source (docs/onnx.md, "Importing"): the file, its opsets, the original
// spelling of every renamed value, the ONNX value each graph output is, and per norm the
// ONNX nodes it replaces.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "core/graph.h"
#include "onnx/onnx_model.h"

namespace lnv::onnx_import {

// Precondition: `folded` comes from fold_constants (so value_info holds static shapes of
// every value a compute node reads). Returns a finalized Graph. Throws lnv::ModelError
// naming the file and the node as the file spells it when a node cannot be imported.
// With `defer_values`, the params of initializers load_onnx left in their file stay
// there (Param::values_deferred, a lazy source naming the initializer); otherwise they
// are read (materialize_all), and one holding NaN or infinity is an error naming it.
// `progress` hears "import nodes" (over the nodes of `folded`) and "read weights" (over the
// params' values, as materialize_all reads them).
lnv::Graph import_graph(const Model& folded, bool defer_values = false,
                        const ProgressFn& progress = {});

// load_onnx, fold_constants, import_graph. `progress` hears load_onnx's steps, then
// "fold constants" (no count), "import nodes" (over the folded graph's nodes) and, unless
// `defer_values`, "read weights" (over the params' values).
lnv::Graph import_onnx(const std::filesystem::path& path, const DimBindings& dims,
                       bool defer_values = false, const ProgressFn& progress = {});

// load_onnx_bytes, fold_constants, import_graph: an ONNX model held in memory (the Python
// package's in-memory export), `name` standing for the file in errors.
lnv::Graph import_onnx_bytes(std::string_view bytes, const std::string& name,
                             const DimBindings& dims);

// Whether the importer maps ONNX op `op_type` of `domain` ("" for ONNX's own) onto
// model.json ops (for some of its attributes and operands at least), norms included.
bool is_imported_op(const std::string& domain, const std::string& op_type);

// Whether `path` names an ONNX file: its extension is ".onnx", or it is a regular file whose
// first byte starts a ModelProto (0x08: field 1, ir_version; model.json starts with '{').
// Other files (a FIFO) are not read, so nothing is consumed.
bool is_onnx_path(const std::filesystem::path& path);

}  // namespace lnv::onnx_import
