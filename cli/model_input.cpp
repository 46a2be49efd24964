#include "cli/model_input.h"

#include <charconv>
#include <map>

#include "cli/terminal.h"
#include "core/error.h"
#ifdef LNV_HAVE_ONNX
#include "onnx/import.h"
#endif

namespace lnv::cli {
namespace {

std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& dims) {
  std::map<std::string, int64_t> out;
  for (const std::string& d : dims) {
    const size_t eq = d.find('=');
    int64_t value = 0;
    const char* end = d.data() + d.size();
    const auto [p, ec] = eq == std::string::npos ? std::from_chars(end, end, value)
                                                 : std::from_chars(d.data() + eq + 1, end, value);
    if (eq == std::string::npos || eq == 0 || ec != std::errc() || p != end || value < 1)
      throw ModelError("--dim " + d, "expected NAME=VALUE with VALUE a positive integer");
    if (!out.emplace(d.substr(0, eq), value).second)
      throw ModelError("--dim " + d, "the dim '" + d.substr(0, eq) + "' is bound twice");
  }
  return out;
}

}  // namespace

bool is_onnx_input(const std::string& path) {
#ifdef LNV_HAVE_ONNX
  return onnx_import::is_onnx_path(path);
#else
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".onnx") == 0;
#endif
}

void add_model_input(CLI::App& sub, std::string& path, std::vector<std::string>& dims,
                     const std::string& help) {
  sub.add_option("MODEL", path, help)->required();
  sub.add_option("--dim", dims,
                 "ONNX models: bind a symbolic input dim, NAME=VALUE (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
}

Graph load_input(const std::string& path, const std::vector<std::string>& dim_args,
                 const LoadOptions& options) {
  const auto dims = parse_dims(dim_args);
  if (!is_onnx_input(path)) {
    if (!dims.empty())
      throw ModelError(path, "--dim binds the symbolic dims of an ONNX model; this is a model.json");
    return load_model(path, options);
  }
#ifdef LNV_HAVE_ONNX
  StepProgress progress;  // erased on return, before the command prints anything
  return onnx_import::import_onnx(path, dims, options.defer_values, progress.callback());
#else
  throw ModelError(path, "this lnverify was built without ONNX support (LNV_WITH_ONNX=OFF)");
#endif
}

}  // namespace lnv::cli
