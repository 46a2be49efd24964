// Reading and writing safetensors files (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length N, N bytes of JSON header mapping each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data
// section after the header), then the data. Written on nlohmann/json, no other library.
//
// Reading supports F64, F32, F16 and BF16, each converted exactly to double. Every
// inconsistency (short file, header beyond the file, header not a JSON object, missing
// key, unknown dtype, offsets that disagree with the shape or leave the data section,
// truncated data) throws ModelError naming the file and the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/file_io.h"
#include "core/shape.h"

namespace lnv {

// The significand bits of a supported dtype (F64 53, F32 24, F16 11, BF16 8), 53 for others.
int dtype_significand_bits(const std::string& dtype);

struct SafetensorsTensor {
  Shape shape;
  std::vector<double> values;  // row-major
};

// Where a tensor's data lies in its file, validated against the header and the file size
// exactly as read() validates it.
struct SafetensorsSpan {
  std::string key;
  std::string dtype;  // "F64", "F32", "F16" or "BF16"
  Shape shape;
  uint64_t count = 0;   // elements
  int element_size = 0;  // bytes per element
  uint64_t offset = 0;   // of the first byte, from the start of the file
};

// A stored value that is NaN or infinite: its flat index and value.
struct SafetensorsNonFinite {
  uint64_t index = 0;
  double value = 0.0;
};

// Parses a file's header once and reads any number of tensors from it.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);
  ~SafetensorsReader();

  const std::string& path() const { return path_; }
  bool has(const std::string& key) const;
  std::vector<std::string> keys() const;  // sorted, without "__metadata__"
  // The dtype string of a tensor as the header states it ("F32", ...); "" when absent.
  std::string dtype(const std::string& key) const;
  SafetensorsTensor read(const std::string& key) const;

  // The validated location of a tensor (the same errors as read(), without reading data).
  SafetensorsSpan span(const std::string& key) const;
  // Elements [first, first + count) of the tensor, converted exactly to double, into
  // out[0, count). Throws ModelError naming the file and tensor on a short read.
  void read_values(const SafetensorsSpan& s, uint64_t first, uint64_t count, double* out) const;
  // The stored bytes of elements [first, first + count), as they are in the file
  // (little-endian, s.element_size each), into out. Same errors as read_values.
  void read_raw(const SafetensorsSpan& s, uint64_t first, uint64_t count, char* out) const;
  // The first NaN or infinity of the tensor, found by testing the exponent bits of the
  // stored data (nothing is converted or kept); nullopt when every value is finite.
  std::optional<SafetensorsNonFinite> first_non_finite(const SafetensorsSpan& s) const;

 private:
  std::string path_;
  std::unique_ptr<const nlohmann::json> header_;  // an object
  uint64_t data_start_ = 0;  // 8 + header length
  uint64_t data_size_ = 0;   // bytes after the header
};

// One tensor from a file (parses the header; use SafetensorsReader for many keys).
SafetensorsTensor read_safetensors_tensor(const std::string& path, const std::string& key);

enum class SafetensorsDType { f32, f64 };

struct SafetensorsEntry {
  Shape shape;
  std::vector<double> values;  // row-major, numel(shape) of them
  SafetensorsDType dtype = SafetensorsDType::f32;  // f32 rounds to nearest
};

// Writes the tensors (keys in sorted order, data contiguous in that order) atomically.
void write_safetensors(const std::string& path,
                       const std::map<std::string, SafetensorsEntry>& tensors);

// Streams a safetensors file: the header is written from the layout given up front, then
// the values of the tensors in layout order, through a small buffer, into a temporary file
// that commit() renames over `path` (never a partial file; the temporary file is removed
// when the writer is destroyed uncommitted). Memory use does not grow with the file.
class SafetensorsWriter {
 public:
  struct Tensor {
    std::string key;
    Shape shape;
    SafetensorsDType dtype = SafetensorsDType::f32;
  };
  // Throws ModelError naming `path` for a duplicate or "__metadata__" key. With
  // `finite_only`, a value that is not finite as stored (NaN, infinity, or a double beyond
  // the float range written as F32) throws ModelError naming the tensor and flat index.
  SafetensorsWriter(const std::string& path, std::vector<Tensor> layout,
                    bool finite_only = false);

  // Appends the next `count` values (they may span tensors), each rounded to the
  // nearest float (F32) or stored exactly (F64). Appending more values than the layout
  // holds throws ModelError.
  void append(const double* values, size_t count);
  // The same for float values (stored unchanged as F32, widened exactly as F64).
  void append(const float* values, size_t count);
  // Throws unless every tensor got all its values; `sync` as AtomicFileWriter::commit.
  void commit(bool sync = true);
  // The same checks, and every value written to the temporary file, without renaming it:
  // the returned writer is for commit_together with other files.
  AtomicFileWriter& finish();

 private:
  void flush();
  template <class V>
  void append_values(const V* values, size_t count);
  std::vector<Tensor> layout_;
  AtomicFileWriter file_;
  size_t tensor_ = 0;       // the tensor being appended to
  uint64_t written_ = 0;    // values of that tensor so far
  bool finite_only_ = false;
  std::vector<char> buffer_;
  size_t used_ = 0;
};

}  // namespace lnv
