// Fuzz target (fuzz/targets.h): an .onnx file through the ONNX reader (protobuf parse,
// ONNX's checker, dim binding, shape inference, initializer decoding) and constant
// folding of its static shape subgraphs. The symbolic dims of the seed exports (batch,
// seq) are bound small.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/targets.h"
#include "onnx/constant_fold.h"
#include "onnx/onnx_model.h"

namespace lnv::fuzz {

int onnx(const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/input.onnx";
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::write(fd, data, size) != static_cast<ssize_t>(size)) __builtin_trap();
    ::close(fd);
  }
  try {
    const onnx_import::Model model = onnx_import::load_onnx(path, {{"batch", 2}, {"seq", 4}});
    (void)onnx_import::fold_constants(model);
  } catch (const ModelError&) {
  }
  return 0;
}

}  // namespace lnv::fuzz
