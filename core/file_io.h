// Whole-file reads, JSON text, and atomic writes, with errors a user can act on.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace lnv {

// The longest text read_file reads: a model.json holds structure (weights inline only
// for small models); a file or FIFO longer than this is refused, not read until memory
// runs out.
constexpr size_t kMaxTextBytes = size_t(4) << 30;

// The file's bytes. Throws ModelError naming the path when it cannot be read (a
// directory, a device or socket, longer than kMaxTextBytes).
std::string read_file(const std::string& path);

// The deepest nesting of arrays and objects parse_json accepts. model.json needs five
// levels and a safetensors header three; `meta` is free-form, so the limit is generous.
// Bounding it keeps every recursive walk of a parsed value (copy, dump, compare) far from
// the stack's end; 128 is also serde_json's default, which the reference safetensors
// implementation parses headers with.
constexpr int kMaxJsonDepth = 128;

// Parses `text` as JSON, strictly: a syntax error, a key that appears twice in an object
// (nlohmann would silently keep one) or nesting deeper than kMaxJsonDepth throws
// ModelError(where, what + ": " + the reason, with line and column or the JSON path).
nlohmann::json parse_json(const std::string& text, const std::string& where,
                          const std::string& what);

// Throws ModelError(where, what + ": ...") when `j` nests arrays and objects deeper than
// kMaxJsonDepth, as parse_json does for text; for values built in memory. Iterative, so
// any depth is checked without recursion.
void check_json_depth(const nlohmann::json& j, const std::string& where, const std::string& what);

// A short rendering of a JSON value for error messages: the start of what dump() writes,
// cut to about 60 characters ("..."); NaN and infinities by name. Its cost and recursion
// depth are bounded by that length, whatever the size or depth of the value.
std::string excerpt(const nlohmann::json& j);

// `text` with its control characters written as JSON escapes (\n, \u0000), so that an
// error quoting a user's string stays on one line and is not cut short at a NUL.
std::string printable(std::string_view text);

// An object key as one JSON pointer reference token (RFC 6901: "~" as "~0", "/" as "~1").
std::string pointer_token(std::string_view key);

// Throws ModelError(path, ...) when `path` cannot name a file here because it is too
// long: its last component longer than the directory's file system allows (NAME_MAX), or
// the whole path longer than PATH_MAX. The message gives both lengths.
void check_path_length(const std::string& path);

// Writes `bytes` to `path` atomically: a temporary file in the same directory is written,
// flushed to disk and renamed over `path`, so readers see the old file or the complete new
// one, never a partial file. Throws ModelError naming the path on failure (the temporary
// file is removed).
void write_file_atomically(const std::string& path, std::string_view bytes);

// A file written piece by piece with the same guarantee: the bytes go into a temporary
// file in the target's directory (named after the target, shortened to fit), and commit() renames it over `path`. Until commit()
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
  // Appends `length` bytes of the file `from` starting at `offset`, copied by the kernel
  // (copy_file_range) where it can, else through a buffer. ModelError naming `from` when
  // it cannot be read or ends early.
  void append_from(const std::string& from, int64_t offset, uint64_t length);
  // `sync`: fsync the data before the rename, so that after a crash `path` holds the old
  // file or the complete new one (without it the rename can reach the disk before the
  // data does).
  void commit(bool sync = true);

 private:
  friend void commit_together(const std::vector<AtomicFileWriter*>& files, bool sync);
  void close_file(bool sync);
  [[noreturn]] void fail(const std::string& what, int err);
  std::string path_, tmp_;
  int fd_ = -1;
};

// Commits several writers as one step, all or nothing: every file is flushed (and
// fsync'ed with `sync`) before any is renamed into place, in the order given. When a
// rename fails, the targets already replaced get their old contents back (kept aside as
// hard links) or are removed when they did not exist, and the ModelError is rethrown; so
// a failure leaves every target as it was. (On a file system without hard links an
// overwritten target cannot be restored.)
void commit_together(const std::vector<AtomicFileWriter*>& files, bool sync = true);

}  // namespace lnv
