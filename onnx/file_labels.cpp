// labels_computing of onnx/file_labels.h.
#include "onnx/file_labels.h"

namespace lnv::onnx_import {

std::vector<std::string> labels_computing(const std::string& name) {
  std::vector<std::string> labels = {name};
  for (size_t k = 0; k < name.size(); ++k)
    if (name[k] == '.' || name[k] == ':') labels.push_back(name.substr(0, k));
  return labels;
}

}  // namespace lnv::onnx_import
