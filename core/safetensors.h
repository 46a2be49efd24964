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

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/shape.h"

namespace lnv {

struct SafetensorsTensor {
  Shape shape;
  std::vector<double> values;  // row-major
};

// Parses a file's header once and reads any number of tensors from it.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);

  const std::string& path() const { return path_; }
  bool has(const std::string& key) const;
  std::vector<std::string> keys() const;  // sorted, without "__metadata__"
  // The dtype string of a tensor as the header states it ("F32", ...); "" when absent.
  std::string dtype(const std::string& key) const;
  SafetensorsTensor read(const std::string& key) const;

 private:
  std::string path_;
  nlohmann::json header_;
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

}  // namespace lnv
