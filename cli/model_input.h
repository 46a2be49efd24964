// The model a command reads: a model.json, or an ONNX file (`.onnx`, or ONNX bytes under
// another name) imported with its symbolic input dims bound by `--dim NAME=VALUE`. Every
// command that takes a model adds it with add_model_input and loads it with load_input.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/graph.h"
#include "core/model_json.h"

namespace lnv::cli {

// Adds the MODEL positional (required) into `path`, described by `help`, and the
// repeatable --dim option into `dims` ("NAME=VALUE", as given).
void add_model_input(CLI::App& sub, std::string& path, std::vector<std::string>& dims,
                     const std::string& help);

// Whether `path` is read as an ONNX model (its extension, or its first byte).
bool is_onnx_input(const std::string& path);

// Reads the model. ONNX files are imported (onnx/import.h); `options` applies to
// model.json only, but for defer_values, which leaves an ONNX model's large float
// initializers in their file too. An ONNX model's symbolic input dims are bound from
// `dims` (NAME=VALUE); each one `dims` does not name is bound to 1, with one warning line
// on stderr naming them all (as Polygraphy does); a name no input has is a warning (with
// `warn_unknown_dims`), not an error. Throws ModelError (exit 2): a malformed --dim, --dim
// given for a model.json, anything the reader or importer refuses (when that depends on a
// free dim bound to 1, the message names the dim and says to pass --dim). Importing ONNX
// shows its steps on a terminal (StepProgress).
Graph load_input(const std::string& path, const std::vector<std::string>& dims,
                 const LoadOptions& options = {}, bool warn_unknown_dims = true);

// One warning line naming the --dim names that no input of any ONNX model among `paths`
// has (for a command that reads several models with one --dim list, which then loads
// each with warn_unknown_dims false). Throws ModelError on a malformed --dim.
void warn_unknown_dims(const std::vector<std::string>& paths, const std::vector<std::string>& dims);

}  // namespace lnv::cli
