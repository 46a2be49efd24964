// Checks a command runs before its work: the paths it writes against what it reads (an
// output never replaces the model a command reads or a weights file the model points at;
// a report written over the input model left it gone, exit 0), and exact evaluation
// against this machine's memory.
#pragma once

#include <string>

#include "core/graph.h"

namespace lnv::cli {

// Whether a and b name the same file: the same inode when both exist, else the same
// absolute, normalized path (relative paths made absolute first).
bool same_file(const std::string& a, const std::string& b);

// The absolute, normalized path a `file` param of `g` reads.
std::string param_file(const Graph& g, const Param& p);

// Throws ModelError at `option` when `path` (non-empty) names `model_path` or a file a
// param of `g` reads.
void refuse_input_as_output(const std::string& option, const std::string& path,
                            const std::string& model_path, const Graph& g);

// Throws ModelError (naming `model_path` and `bits`) when evaluating `g` exactly - every
// input, param and node value at once, `copies` times (gradients, a rewrite beside the
// original) - would not fit in this machine's memory. GMP aborts the process when an
// allocation fails, so running out of memory is refused before it starts.
void refuse_exact_beyond_memory(const Graph& g, const std::string& model_path, unsigned bits,
                                int copies);

}  // namespace lnv::cli
