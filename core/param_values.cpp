// The values of params: drawn from an `init`, read from a deferred `file` or lazy source,
// checked finite, and fingerprinted (core/model_json.h).
#include <bit>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/model_json.h"
#include "core/model_json_internal.h"
#include "core/random.h"
#include "core/safetensors.h"

namespace lnv {

namespace fs = std::filesystem;

namespace model_format {

void check_finite(const std::vector<double>& v, const std::string& path,
                  const std::string& param, const std::string& source) {
  for (size_t k = 0; k < v.size(); ++k)
    if (!std::isfinite(v[k]))
      throw ModelError(path, "param '" + param + "' has a non-finite value (" +
                                 std::to_string(v[k]) + ") at flat index " +
                                 std::to_string(k) + source);
}

// The span of deferred param `p` in `file`, which must still hold the tensor as loaded.
SafetensorsSpan loaded_span(const SafetensorsReader& file, const Param& p) {
  SafetensorsSpan span = file.span(p.file.key);
  if (span.shape != p.shape)
    throw ModelError(file.path(), "tensor '" + p.file.key + "' has shape " +
                                      to_string(span.shape) + ", but param '" + p.name +
                                      "' was loaded with shape " + to_string(p.shape) +
                                      " (the file changed since it was loaded)");
  return span;
}

// The values of deferred param `p` from `file` (which must still hold the tensor as loaded).
void materialize_from(const SafetensorsReader& file, Param& p) {
  const SafetensorsSpan span = loaded_span(file, p);
  std::vector<double> values(span.count);
  file.read_values(span, 0, span.count, values.data());
  check_finite(values, file.path() + " [" + p.file.key + "]", p.name,
               " (the file changed since it was loaded)");
  p.values = std::move(values);
  p.values_deferred = false;
}

}  // namespace model_format

using model_format::check_finite;
using model_format::materialize_from;

uint64_t param_fingerprint(const Param& p) {
  // xxHash64-style rounds over four lanes (independent multiplies keep it memory-bound).
  LNV_INTERNAL_ASSERT(!p.values_deferred,
                      "param_fingerprint of param '" + p.name + "', whose values were not loaded");
  constexpr uint64_t k1 = 0x9E3779B185EBCA87ull, k2 = 0xC2B2AE3D27D4EB4Full;
  auto round = [](uint64_t acc, uint64_t w) { return std::rotl(acc + w * k2, 31) * k1; };
  auto bytes = [&](uint64_t h, const std::string& s) {
    for (unsigned char c : s) h = round(h, c);
    return round(h, s.size());
  };
  uint64_t head = bytes(bytes(k1, p.file.path), p.file.key);
  for (int64_t d : p.shape) head = round(head, static_cast<uint64_t>(d));
  uint64_t lane[4] = {head, head + k1, head + k2, head - k1};
  const size_t n = p.values.size();
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) lane[k] = round(lane[k], std::bit_cast<uint64_t>(p.values[i + k]));
  for (; i < n; ++i) lane[0] = round(lane[0], std::bit_cast<uint64_t>(p.values[i]));
  uint64_t h = round(round(round(round(n, lane[0]), lane[1]), lane[2]), lane[3]);
  h ^= h >> 33;
  h *= k2;
  h ^= h >> 29;
  return h == 0 ? 1 : h;
}

std::vector<double> init_values(const InitSpec& spec, int64_t count, uint64_t seed,
                                const std::string& name) {
  SplitMix64 rng(seed, name);
  std::vector<double> v(static_cast<size_t>(count));
  if (spec.dist == "normal") {
    for (double& x : v) x = spec.mean + spec.std * rng.normal();
  } else if (spec.dist == "uniform") {
    for (double& x : v) x = spec.low + (spec.high - spec.low) * rng.uniform();
  } else {
    throw ModelError("", "param '" + name + "': unknown init dist '" + spec.dist + "'");
  }
  return v;
}

void materialize_values(Param& p, const std::string& base_dir) {
  if (!p.values_deferred) return;
  if (p.lazy) {
    std::vector<double> values = p.lazy->read();
    if (static_cast<int64_t>(values.size()) != numel(p.shape))
      throw InternalError("the lazy source of param '" + p.name + "' gave " +
                          std::to_string(values.size()) + " values for shape " +
                          to_string(p.shape));
    check_finite(values, p.name, p.name, "");
    p.values = std::move(values);
    p.values_deferred = false;
    p.lazy.reset();
    return;
  }
  const SafetensorsReader file((fs::path(base_dir) / p.file.path).string());
  materialize_from(file, p);
}

void materialize_all(Graph& g, const ProgressFn& progress) {
  uint64_t total = 0, done = 0;
  for (const Param& p : g.params)
    if (p.values_deferred) total += static_cast<uint64_t>(numel(p.shape));
  if (total == 0) return;
  report_progress(progress, "read weights", "values", 0, total);
  for (Param& p : g.params) {
    if (!p.values_deferred) continue;
    materialize_values(p, g.base_dir);
    done += static_cast<uint64_t>(numel(p.shape));
    report_progress(progress, "read weights", "values", done, total);
  }
}

std::vector<double> read_values(const Param& p, const std::string& base_dir) {
  if (!p.values_deferred) return p.values;
  Param loaded = p;  // a deferred param holds no values: the copy is small
  materialize_values(loaded, base_dir);
  return std::move(loaded.values);
}

}  // namespace lnv
