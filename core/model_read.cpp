// Reading model.json: the document's fields checked strictly against docs/spec/format.md,
// params' values taken from `data`, drawn from `init` or read from `file` (or deferred),
// and the graph finalized (parse_model, load_model of core/model_json.h).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_reader.h"
#include "core/model_json.h"
#include "core/model_json_internal.h"
#include "core/safetensors.h"

namespace lnv {
namespace {

using namespace model_format;
using nlohmann::json;
namespace fs = std::filesystem;

// The machine's physical memory, or the process's address-space limit when lower.
double usable_memory() {
  double bytes = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    bytes = std::min(bytes, double(as.rlim_cur));
  return bytes;
}

// The values of an `init` param, drawn when first needed (LoadOptions::defer_values).
class InitDraws : public ValueSource {
 public:
  InitDraws(InitSpec spec, int64_t count, uint64_t seed, std::string name, std::string path)
      : spec_(std::move(spec)), count_(count), seed_(seed), name_(std::move(name)),
        path_(std::move(path)) {}
  std::vector<double> read() const override {
    std::vector<double> v = init_values(spec_, count_, seed_, name_);
    check_finite(v, path_, name_, " drawn from its init");
    return v;
  }

 private:
  InitSpec spec_;
  int64_t count_;
  uint64_t seed_;
  std::string name_, path_;
};

class ModelParser {
 public:
  ModelParser(std::string base_dir, LoadOptions options)
      : base_dir_(std::move(base_dir)), options_(options) {}

  Graph parse(const json& j) {
    Reader r;
    r.expect_object(j, "");
    r.only_keys(j, "", {"format", "version", "name", "seed", "meta", "inputs", "params",
                        "nodes", "outputs"});
    const std::string format = r.string(r.required(j, "", "format"), "/format");
    if (format != kFormat)
      r.fail("/format", "expected \"" + std::string(kFormat) + "\", got \"" + format + "\"");
    const int64_t version = r.integer(r.required(j, "", "version"), "/version");
    if (version != kVersion)
      r.fail("/version", "unsupported version " + std::to_string(version) +
                             " (this lnverify reads version " + std::to_string(kVersion) + ")");
    Graph g;
    g.base_dir = base_dir_;
    if (j.contains("name")) g.name = r.string(j["name"], "/name");
    if (j.contains("seed")) {
      if (!j["seed"].is_number_unsigned() &&
          !(j["seed"].is_number_integer() && j["seed"].get<int64_t>() >= 0))
        r.fail("/seed", "expected a non-negative integer, got " + excerpt(j["seed"]));
      g.seed = j["seed"].get<uint64_t>();
    }
    if (j.contains("meta")) {
      r.expect_object(j["meta"], "/meta");
      g.meta = j["meta"].dump();
    }
    if (j.contains("inputs")) {
      const json& a = array(j["inputs"], "/inputs");
      for (size_t i = 0; i < a.size(); ++i) g.inputs.push_back(input(a[i], child("/inputs", i)));
    }
    if (j.contains("params")) {
      const json& a = array(j["params"], "/params");
      if (!options_.defer_values) refuse_init_beyond_memory(a);
      for (size_t i = 0; i < a.size(); ++i)
        g.params.push_back(param(a[i], child("/params", i), g.seed));
    }
    const json& nodes = array(r.required(j, "", "nodes"), "/nodes");
    for (size_t i = 0; i < nodes.size(); ++i)
      g.nodes.push_back(parse_node(nodes[i], child("/nodes", i)));
    g.outputs = r.strings(r.required(j, "", "outputs"), "/outputs");
    g.finalize();
    return g;
  }

 private:
  const json& array(const json& j, const std::string& path) const {
    if (!j.is_array()) Reader{}.fail(path, "expected an array, got " + excerpt(j));
    return j;
  }

  // Every `init` param is drawn into memory as doubles, so their total is checked before
  // the first is drawn: a model asking for more than the machine holds is refused with the
  // total instead of failing part way. (A param with an invalid shape is not counted;
  // reading it reports the shape.)
  void refuse_init_beyond_memory(const json& params) const {
    double values = 0;
    for (const json& p : params) {
      if (!p.is_object() || !p.contains("init") || !p.contains("shape")) continue;
      try {
        values += double(numel(Reader{}.shape(p["shape"], "")));
      } catch (const ModelError&) {
      }
    }
    const double bytes = values * sizeof(double);
    const bool machine = options_.max_init_bytes == 0;
    const double limit = machine ? 0.75 * usable_memory() : double(options_.max_init_bytes);
    if (bytes <= limit) return;
    auto gib = [](double b) {
      std::ostringstream out;
      out << std::setprecision(3) << b / double(int64_t{1} << 30) << " GiB";
      return out.str();
    };
    Reader{}.fail("/params", "the init params together hold " +
                                 std::to_string(int64_t(values)) + " values (" + gib(bytes) +
                                 " as doubles), more than " +
                                 (machine ? "three quarters of the memory this process may "
                                            "use (" : "the limit (") +
                                 gib(limit) + ")");
  }

  Input input(const json& j, const std::string& path) const {
    Reader r;
    r.expect_object(j, path);
    Input in;
    in.name = r.string(r.required(j, path, "name"), child(path, "name"));
    r.context = " (input '" + in.name + "')";
    r.only_keys(j, path, {"name", "shape", "dtype", "range"});
    in.shape = r.shape(r.required(j, path, "shape"), child(path, "shape"));
    const std::string dtype = j.contains("dtype") ? r.string(j["dtype"], child(path, "dtype"))
                                                  : "float";
    if (dtype == "float") {
      in.dtype = DType::float_;
      if (j.contains("range"))
        r.fail(child(path, "range"), "'range' applies to index inputs only");
    } else if (dtype == "index") {
      in.dtype = DType::index;
      in.range = r.integer(r.required(j, path, "range"), child(path, "range"));
      if (in.range <= 0)
        r.fail(child(path, "range"), "expected a positive range, got " + std::to_string(in.range));
    } else {
      r.fail(child(path, "dtype"), "expected \"float\" or \"index\", got \"" + dtype + "\"");
    }
    return in;
  }

  Param param(const json& j, const std::string& path, uint64_t seed) {
    Reader r;
    r.expect_object(j, path);
    Param p;
    p.name = r.string(r.required(j, path, "name"), child(path, "name"));
    r.context = " (param '" + p.name + "')";
    r.only_keys(j, path, {"name", "shape", "data", "init", "file"});
    p.shape = r.shape(r.required(j, path, "shape"), child(path, "shape"));
    const int sources = int(j.contains("data")) + int(j.contains("init")) + int(j.contains("file"));
    if (sources != 1)
      r.fail(path, "expected exactly one of 'data', 'init' or 'file', got " +
                       std::to_string(sources));
    const int64_t count = numel(p.shape);
    if (j.contains("data")) {
      const std::string at = child(path, "data");
      const json& d = j["data"];
      if (!d.is_array()) r.fail(at, "expected an array of numbers, got " + excerpt(d));
      if (static_cast<int64_t>(d.size()) != count)
        r.fail(at, "expected " + std::to_string(count) + " numbers for shape " +
                       to_string(p.shape) + ", got " + std::to_string(d.size()));
      p.source = ParamSource::data;
      p.values.reserve(count);
      for (size_t k = 0; k < d.size(); ++k) {
        const bool plain = d[k].is_number() && std::isfinite(d[k].get<double>());
        p.values.push_back(plain ? d[k].get<double>() : r.number(d[k], child(at, k)));
      }
    } else if (j.contains("init")) {
      const std::string at = child(path, "init");
      p.source = ParamSource::init;
      p.init = init_spec(r, j["init"], at);
      if (options_.defer_values) {
        p.lazy = std::make_shared<InitDraws>(p.init, count, seed, p.name, at);
        p.values_deferred = true;
        return p;
      }
      p.values = init_values(p.init, count, seed, p.name);
      check_finite(p.values, at, p.name, " drawn from its init");
    } else {
      const std::string at = child(path, "file");
      const json& f = j["file"];
      r.expect_object(f, at);
      r.only_keys(f, at, {"path", "key"});
      p.source = ParamSource::file;
      p.file.path = r.string(r.required(f, at, "path"), child(at, "path"));
      p.file.key = r.string(r.required(f, at, "key"), child(at, "key"));
      const std::string source = " in " + p.file.path + " [" + p.file.key + "]";
      if (options_.defer_file_values || options_.defer_values) {
        std::optional<SafetensorsNonFinite> bad;
        Shape stored;
        try {
          const SafetensorsReader& file = reader(p.file.path);
          const SafetensorsSpan span = file.span(p.file.key);
          stored = span.shape;
          p.stored_bits = dtype_significand_bits(span.dtype);
          if (stored == p.shape) bad = file.first_non_finite(span);
        } catch (const ModelError& e) {
          r.fail(at, e.what());
        }
        if (stored != p.shape)
          r.fail(at, "tensor '" + p.file.key + "' in " + p.file.path + " has shape " +
                         to_string(stored) + ", expected " + to_string(p.shape));
        if (bad)
          throw ModelError(at, "param '" + p.name + "' has a non-finite value (" +
                                   std::to_string(bad->value) + ") at flat index " +
                                   std::to_string(bad->index) + source);
        p.values_deferred = true;
        return p;
      }
      SafetensorsTensor t;
      try {
        t = reader(p.file.path).read(p.file.key);
        p.stored_bits = dtype_significand_bits(reader(p.file.path).dtype(p.file.key));
      } catch (const ModelError& e) {
        r.fail(at, e.what());
      }
      if (t.shape != p.shape)
        r.fail(at, "tensor '" + p.file.key + "' in " + p.file.path + " has shape " +
                       to_string(t.shape) + ", expected " + to_string(p.shape));
      p.values = std::move(t.values);
      check_finite(p.values, at, p.name, source);
      p.file_fingerprint = param_fingerprint(p);
    }
    return p;
  }

  InitSpec init_spec(const Reader& r, const json& j, const std::string& path) const {
    r.expect_object(j, path);
    InitSpec s;
    s.dist = r.string(r.required(j, path, "dist"), child(path, "dist"));
    if (s.dist == "normal") {
      r.only_keys(j, path, {"dist", "mean", "std"});
      if (j.contains("mean")) s.mean = r.number(j["mean"], child(path, "mean"));
      s.std = r.number(r.required(j, path, "std"), child(path, "std"));
      if (s.std < 0) r.fail(child(path, "std"), "expected std >= 0, got " + excerpt(j["std"]));
    } else if (s.dist == "uniform") {
      r.only_keys(j, path, {"dist", "low", "high"});
      s.low = r.number(r.required(j, path, "low"), child(path, "low"));
      s.high = r.number(r.required(j, path, "high"), child(path, "high"));
      if (s.low > s.high)
        r.fail(path, "expected low <= high, got low " + excerpt(j["low"]) + ", high " +
                         excerpt(j["high"]));
    } else {
      r.fail(child(path, "dist"), "expected \"normal\" or \"uniform\", got \"" + s.dist + "\"");
    }
    return s;
  }

  const SafetensorsReader& reader(const std::string& file) {
    const fs::path full = fs::path(base_dir_) / fs::path(file);
    const std::string key = full.lexically_normal().string();
    auto it = readers_.find(key);
    if (it == readers_.end())
      it = readers_.emplace(key, std::make_unique<SafetensorsReader>(full.string())).first;
    return *it->second;
  }

  std::string base_dir_;
  LoadOptions options_;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers_;
};

}  // namespace

Graph parse_model(const nlohmann::json& j, const std::string& base_dir) {
  return parse_model(j, base_dir, LoadOptions{});
}

Graph parse_model(const nlohmann::json& j, const std::string& base_dir,
                  const LoadOptions& options) {
  check_json_depth(j, "/", "the model");
  return ModelParser(base_dir, options).parse(j);
}

Graph load_model(const std::string& path) { return load_model(path, LoadOptions{}); }

Graph load_model(const std::string& path, const LoadOptions& options) {
  const json j = parse_json(read_file(path), path, "invalid JSON");
  try {
    return parse_model(j, fs::path(path).parent_path().string(), options);
  } catch (const ModelError& e) {
    // An error about the whole document ("/") names the file; deeper ones keep their path.
    if (e.where() != "/") throw;
    throw ModelError(path, e.what());
  }
}

}  // namespace lnv
