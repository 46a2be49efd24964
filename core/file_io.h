// Whole-file reads and atomic writes, with errors a user can act on.
#pragma once

#include <string>
#include <string_view>

namespace lnv {

// The file's bytes. Throws ModelError naming the path when it cannot be read.
std::string read_file(const std::string& path);

// Writes `bytes` to `path` atomically: a temporary file in the same directory is written,
// flushed to disk and renamed over `path`, so readers see the old file or the complete new
// one, never a partial file. Throws ModelError naming the path on failure (the temporary
// file is removed).
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace lnv
