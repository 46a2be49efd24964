// The serialized tensors of one ONNX backend node test: <dir>/test_data_set_0/<prefix>K.pb
// for K = 0, 1, ... while they exist (prefix "input_" or "output_").
#pragma once

#include <filesystem>
#include <string>
#include <vector>

inline std::vector<std::filesystem::path> node_test_files(const std::filesystem::path& dir,
                                                         const char* prefix) {
  std::vector<std::filesystem::path> files;
  for (int k = 0;; ++k) {
    std::filesystem::path p = dir / "test_data_set_0" / (std::string(prefix) + std::to_string(k) + ".pb");
    if (!std::filesystem::exists(p)) break;
    files.push_back(p);
  }
  return files;
}
