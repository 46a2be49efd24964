#include "cli/output_paths.h"

#include <unistd.h>

#include <filesystem>

#include "core/error.h"

namespace lnv::cli {

namespace fs = std::filesystem;

bool same_file(const std::string& a, const std::string& b) {
  // Both made absolute first: weakly_canonical leaves a relative path to a file that does
  // not exist relative, and it would never equal the absolute form of the same path.
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return fs::weakly_canonical(fs::absolute(a), ec) == fs::weakly_canonical(fs::absolute(b), ec);
}

std::string param_file(const Graph& g, const Param& p) {
  const fs::path f(p.file.path);
  const fs::path base = fs::absolute(g.base_dir.empty() ? "." : g.base_dir);
  return (f.is_absolute() ? f : base / f).lexically_normal().string();
}

void refuse_input_as_output(const std::string& option, const std::string& path,
                            const std::string& model_path, const Graph& g) {
  if (path.empty()) return;
  if (same_file(path, model_path))
    throw ModelError(option, "'" + path + "' is the model being read; choose another file");
  for (const Param& p : g.params)
    if (p.source == ParamSource::file && same_file(param_file(g, p), path))
      throw ModelError(option, "'" + path + "' is the weights file param '" + p.name +
                                   "' reads; choose another file");
}

void refuse_exact_beyond_memory(const Graph& g, const std::string& model_path, unsigned bits,
                                int copies) {
  double elements = 0;
  for (const Input& in : g.inputs) elements += double(numel(in.shape));
  for (const Param& p : g.params) elements += double(numel(p.shape));
  for (const Shape& s : g.node_shapes) elements += double(numel(s));
  // An MPFR number: its 32-byte struct and its limbs; a double: 8 bytes.
  const double per_element = bits == 53 ? 8.0 : 32.0 + 8.0 * double((bits + 63) / 64);
  const double need = elements * per_element * copies;
  const double have = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  if (need <= 0.75 * have) return;
  auto gib = [](double b) { return std::to_string(int64_t(b / double(int64_t(1) << 30))); };
  throw ModelError(model_path, "exact evaluation at " + std::to_string(bits) + " bits needs about " +
                                   gib(need) + " GiB for the model's values, more than this "
                                   "machine's memory (" + gib(have) + " GiB) allows; use fewer "
                                   "--bits, or the LibTorch engine (`check --engine torch`, "
                                   "`lnverify fidelity`) at real size");
}

}  // namespace lnv::cli
