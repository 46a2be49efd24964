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

// A file written piece by piece with the same guarantee: the bytes go into a temporary
// file in the target's directory, and commit() renames it over `path`. Until commit()
// succeeds `path` is untouched; a writer destroyed without commit() (an exception while
// producing the bytes) removes its temporary file. Every failure throws ModelError
// naming `path`.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  const std::string& path() const { return path_; }
  void write(std::string_view bytes);
  // `sync`: fsync the data before the rename, so that after a crash `path` holds the old
  // file or the complete new one (without it the rename can reach the disk before the
  // data does).
  void commit(bool sync = true);

 private:
  [[noreturn]] void fail(const std::string& what, int err);
  std::string path_, tmp_;
  int fd_ = -1;
};

}  // namespace lnv
