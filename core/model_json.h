// model.json in and out: docs/spec/format.md v1 <-> a finalized lnv::Graph.
//
// Reading is strict: unknown fields (outside `meta`), attributes an op does not take,
// values of the wrong JSON type, missing required fields, unknown ops and dtypes all throw
// ModelError whose `where` is the JSON pointer ("/nodes/3/axes/1") and whose message says
// what was expected (and names the node or param). The graph is finalized before it is
// returned, so names, references, cycles and shapes are checked too.
//
// Writing is deterministic (saving a graph twice gives the same bytes) and keeps each
// param's source: `data` as data, `init` as init, `file` as file (path re-expressed
// relative to the new directory). A param whose values no longer match its init or file,
// or that has center_axes, is written as `data` holding its effective (centered) values.
//
// Implemented one idea a file (docs/model_io.md): core/model_read.cpp, core/node_json.cpp,
// core/param_values.cpp, core/model_write.cpp, core/model_text.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/graph.h"
#include "core/progress.h"
#include "core/safetensors.h"

namespace lnv {

// Builds and finalizes the graph of a parsed model.json. `base_dir` is the directory
// `file` params are relative to ("" = the current directory). A value nested deeper than
// kMaxJsonDepth is refused as parse_json refuses such text.
Graph parse_model(const nlohmann::json& j, const std::string& base_dir);

// Reads, parses and finalizes a model file. Invalid JSON (including duplicate keys)
// throws ModelError naming the file, with line and column when the parser knows them.
Graph load_model(const std::string& path);

struct LoadOptions {
  // `file` params are not converted to double: each is left with empty `values` and
  // Param::values_deferred set. Its tensor's header entry, shape and offsets are
  // validated as usual, and the stored data is checked for NaN/infinity directly (a
  // non-finite value is the same ModelError, naming the param and flat index), so a
  // deferred load accepts exactly the files a full load accepts. For commands that only
  // rewrite structure (fold); the evaluators need materialized values.
  bool defer_file_values = false;
  // No param's values are read on load: `init` params keep a lazy source (nothing is
  // drawn, and the memory limit below does not apply), `file` params are deferred as with
  // defer_file_values. For commands that read structure only (audit); materialize_values
  // or materialize_all read the values where they are needed.
  bool defer_values = false;
  // The most bytes the `init` params may take together as doubles; 0 means three
  // quarters of the machine's physical memory (or of the address-space limit, ulimit -v,
  // when lower). A model asking for more is refused before
  // any value is drawn, with the total.
  uint64_t max_init_bytes = 0;
};
Graph parse_model(const nlohmann::json& j, const std::string& base_dir,
                  const LoadOptions& options);
Graph load_model(const std::string& path, const LoadOptions& options);

// Reads the values of a deferred param from its lazy source, or else from its file
// (relative to `base_dir`, the graph's base_dir), and clears values_deferred; does nothing
// for other params. Throws ModelError naming the source (the file, when it no longer
// holds the tensor as loaded) or the param (a non-finite value).
void materialize_values(Param& p, const std::string& base_dir);

// materialize_values for every deferred param of `g`; `progress` hears "read weights" over
// the values of the deferred params.
void materialize_all(Graph& g, const ProgressFn& progress = {});

// The values of `p`: its own, or for a deferred param those materialize_values would read
// (`p` is left as it is; the caller holds the only copy).
std::vector<double> read_values(const Param& p, const std::string& base_dir);

// One entry of `nodes`, read as parse_model reads it (the attributes core/ops.def gives its
// op, an absent optional one at its default; errors name `path`, "/nodes/3", and the node),
// but not checked against a graph: names, arity and shapes are finalize()'s.
Node parse_node(const nlohmann::json& j, const std::string& path);

// One entry of `nodes` as save_model writes it: required attributes, optional ones that
// differ from their default, and a norm's eps.
nlohmann::json node_to_json(const Node& n);

// Graph::meta as JSON: the object it holds, or null when the model has no `meta`.
nlohmann::json parse_meta(const Graph& g);

// The model.json of `g` for a file in `out_dir` (where `file` params' paths point from).
nlohmann::json model_to_json(const Graph& g, const std::string& out_dir);

// The exact text save_model writes: one line per input, param and node.
std::string model_to_text(const Graph& g, const std::string& out_dir);

struct SaveOptions {
  // When set: params whose values must be written out (`data` params, and params changed
  // or centered since they were read) with at least `min_file_numel` values go into this
  // safetensors file (as weights_dtype) instead of inline `data`, each under its param name.
  // The path is relative to the model file's directory. Params read from that same file
  // are rewritten into it, so it may be overwritten safely.
  std::string weights_file;
  int64_t min_file_numel = 0;
  // The dtype of the tensors written into the weights file. f32 rounds each value to the
  // nearest float (centered rows then sum to ~1 ulp, not exactly 0); f64 is exact.
  SafetensorsDType weights_dtype = SafetensorsDType::f64;
  // fsync each written file before renaming it into place (see AtomicFileWriter::commit).
  bool sync = true;
  // Other files, already written, committed in the same all-or-nothing step as the model
  // (a report of the rewrite, say): all of them are renamed into place, or none.
  std::vector<AtomicFileWriter*> commit_with = {};
  // Hears the steps: "encode params", "format params" (over params), "write weights" and
  // "write model" (over bytes), "commit files" (no count).
  ProgressFn progress = {};
};

// A 64-bit fingerprint of a param's file reference (path, key), shape and value bits;
// never 0. Used to tell that a `file` param is unchanged since it was loaded.
uint64_t param_fingerprint(const Param& p);

// Writes `g` to `path` atomically (never a partial file). Overwrites an existing file.
// With a weights file, both files are written in full before either is renamed into place
// (commit_together): when anything fails, neither the model, nor the weights file, nor a
// commit_with file is left changed. Deferred params
// (LoadOptions::defer_file_values) are referenced when unchanged; when centered they are
// streamed from their file into the weights file chunk by chunk (centered in double, the
// same values effective_values gives), or materialized when they go inline.
void save_model(const Graph& g, const std::string& path, const SaveOptions& options = {});

// The values of an `init` param: the SplitMix64 stream of `name` under `seed`, `count`
// draws in row-major order (docs/spec/format.md, "Random numbers").
std::vector<double> init_values(const InitSpec& spec, int64_t count, uint64_t seed,
                                const std::string& name);

}  // namespace lnv
