#include "core/model_json.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/random.h"
#include "core/safetensors.h"
#include "core/stream_center.h"

namespace lnv {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kFormat = "lnverify.model";
constexpr int kVersion = 1;

// A JSON pointer one level down (RFC 6901 escaping).
std::string child(const std::string& path, const std::string& key) {
  std::string out = path + "/";
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}
std::string child(const std::string& path, size_t index) {
  return path + "/" + std::to_string(index);
}

// Reads typed values out of the JSON, each error naming the JSON pointer and, through
// `context`, the node or param being read (" (node 'h')").
class Reader {
 public:
  std::string context;

  // `path` "" is the whole document, written "/".
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw ModelError(path.empty() ? "/" : path, what + context);
  }

  void expect_object(const json& j, const std::string& path) const {
    if (!j.is_object()) fail(path, "expected an object, got " + excerpt(j));
  }

  // Every key of `obj` must be in `allowed`.
  void only_keys(const json& obj, const std::string& path,
                 std::initializer_list<const char*> allowed) const {
    for (const auto& [k, v] : obj.items()) {
      bool ok = false;
      for (const char* a : allowed) ok = ok || k == a;
      if (!ok) {
        std::string list;
        for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
        fail(child(path, printable(k)),
             "unknown field '" + printable(k) + "' (allowed here: " + list + ")");
      }
    }
  }

  const json& required(const json& obj, const std::string& path, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end()) fail(path, std::string("missing required field '") + key + "'");
    return *it;
  }

  // Errors quote these strings (names, ops, paths), so they hold no control characters:
  // a message must print on one line, and whole (what() ends at a NUL).
  std::string string(const json& j, const std::string& path) const {
    if (!j.is_string()) fail(path, "expected a string, got " + excerpt(j));
    std::string s = j.get<std::string>();
    if (printable(s) != s)
      fail(path, "expected a string without control characters, got " + excerpt(j));
    return s;
  }

  // The name of a param, as an attribute names it (an absent attribute is left out,
  // never written as "").
  std::string param_name(const json& j, const std::string& path) const {
    std::string s = string(j, path);
    if (s.empty()) fail(path, "expected the name of a param, got \"\"");
    return s;
  }

  bool boolean(const json& j, const std::string& path) const {
    if (!j.is_boolean()) fail(path, "expected true or false, got " + excerpt(j));
    return j.get<bool>();
  }

  int64_t integer(const json& j, const std::string& path) const {
    if (j.is_number_unsigned()) {
      if (j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        fail(path, "integer " + excerpt(j) + " is too large");
      return static_cast<int64_t>(j.get<uint64_t>());
    }
    // Integers beyond 64 bits reach here as doubles.
    if (j.is_number_float() && std::abs(j.get<double>()) >= 0x1p63)
      fail(path, "integer " + excerpt(j) + " is too " + (j.get<double>() > 0 ? "large" : "small"));
    if (!j.is_number_integer()) fail(path, "expected an integer, got " + excerpt(j));
    return j.get<int64_t>();
  }

  double number(const json& j, const std::string& path) const {
    if (!j.is_number()) fail(path, "expected a number, got " + excerpt(j));
    const double v = j.get<double>();
    if (!std::isfinite(v)) fail(path, "expected a finite number, got " + excerpt(j));
    return v;
  }

  std::vector<int64_t> integers(const json& j, const std::string& path) const {
    if (!j.is_array()) fail(path, "expected an array of integers, got " + excerpt(j));
    std::vector<int64_t> out;
    for (size_t i = 0; i < j.size(); ++i) out.push_back(integer(j[i], child(path, i)));
    return out;
  }

  std::vector<std::string> strings(const json& j, const std::string& path) const {
    if (!j.is_array()) fail(path, "expected an array of strings, got " + excerpt(j));
    std::vector<std::string> out;
    for (size_t i = 0; i < j.size(); ++i) out.push_back(string(j[i], child(path, i)));
    return out;
  }

  // An int, or a non-empty list of ints (conv stride/padding/dilation).
  std::vector<int64_t> int_or_list(const json& j, const std::string& path) const {
    if (j.is_array()) {
      if (j.empty()) fail(path, "expected an integer or a non-empty list of integers");
      return integers(j, path);
    }
    if (!j.is_number_integer())
      fail(path, "expected an integer or a list of integers, got " + excerpt(j));
    return {integer(j, path)};
  }

  // A shape: an array of positive integers, at most 2^31 elements in all (so that every
  // value can be materialized and indexed).
  Shape shape(const json& j, const std::string& path) const {
    Shape s = integers(j, path);
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] <= 0)
        fail(child(path, i), "expected a positive dimension, got " + std::to_string(s[i]));
    if (!within_max_elements(s)) fail(path, "shape " + excerpt(j) + " has more than 2^31 elements");
    return s;
  }
};

// The machine's physical memory, or the process's address-space limit when lower.
double usable_memory() {
  double bytes = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    bytes = std::min(bytes, double(as.rlim_cur));
  return bytes;
}

void check_finite(const std::vector<double>& v, const std::string& path,
                  const std::string& param, const std::string& source) {
  for (size_t k = 0; k < v.size(); ++k)
    if (!std::isfinite(v[k]))
      throw ModelError(path, "param '" + param + "' has a non-finite value (" +
                                 std::to_string(v[k]) + ") at flat index " +
                                 std::to_string(k) + source);
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

// --- node attributes, read and written as core/ops.def declares them ---

// The Node member type that holds an attribute of kind K.
template <AttrKind K> struct AttrType;
template <> struct AttrType<AttrKind::param> { using type = std::string; };
template <> struct AttrType<AttrKind::boolean> { using type = bool; };
template <> struct AttrType<AttrKind::integer> { using type = int64_t; };
template <> struct AttrType<AttrKind::integer_list> { using type = std::vector<int64_t>; };
template <> struct AttrType<AttrKind::integer_or_list> { using type = std::vector<int64_t>; };
template <> struct AttrType<AttrKind::number> { using type = double; };
template <> struct AttrType<AttrKind::string> { using type = std::string; };
template <> struct AttrType<AttrKind::rnn_norm> { using type = std::optional<RnnNorm>; };

RnnNorm read_rnn_norm(const Reader& r, const json& j, const std::string& path) {
  r.expect_object(j, path);
  r.only_keys(j, path, {"kind", "eps", "weight", "bias"});
  RnnNorm norm;
  if (j.contains("kind")) {
    const std::string kind = r.string(j["kind"], child(path, "kind"));
    if (kind == "layer_norm") norm.kind = Op::layer_norm;
    else if (kind == "rms_norm") norm.kind = Op::rms_norm;
    else
      r.fail(child(path, "kind"),
             "expected \"layer_norm\" or \"rms_norm\", got \"" + kind + "\"");
  }
  if (j.contains("eps")) norm.eps = r.number(j["eps"], child(path, "eps"));
  if (j.contains("weight")) norm.weight = r.param_name(j["weight"], child(path, "weight"));
  if (j.contains("bias")) norm.bias = r.param_name(j["bias"], child(path, "bias"));
  return norm;
}

// An rnn's norm as written: its kind when not layer_norm, its eps always, its params when set.
json rnn_norm_json(const std::optional<RnnNorm>& norm) {
  if (!norm) return nullptr;
  json o = json::object();
  if (norm->kind != Op::layer_norm) o["kind"] = std::string(op_name(norm->kind));
  o["eps"] = norm->eps;
  if (!norm->weight.empty()) o["weight"] = norm->weight;
  if (!norm->bias.empty()) o["bias"] = norm->bias;
  return o;
}

template <AttrKind K>
typename AttrType<K>::type read_value(const Reader& r, const json& v, const std::string& at) {
  if constexpr (K == AttrKind::param) return r.param_name(v, at);
  else if constexpr (K == AttrKind::boolean) return r.boolean(v, at);
  else if constexpr (K == AttrKind::integer) return r.integer(v, at);
  else if constexpr (K == AttrKind::integer_list) return r.integers(v, at);
  else if constexpr (K == AttrKind::integer_or_list) return r.int_or_list(v, at);
  else if constexpr (K == AttrKind::number) return r.number(v, at);
  else if constexpr (K == AttrKind::string) return r.string(v, at);
  else {
    static_assert(K == AttrKind::rnn_norm, "read_value: an AttrKind without a reader");
    return read_rnn_norm(r, v, at);
  }
}

template <AttrKind K>
json write_value(const typename AttrType<K>::type& v) {
  if constexpr (K == AttrKind::integer_or_list) return v.size() == 1 ? json(v[0]) : json(v);
  else if constexpr (K == AttrKind::rnn_norm) return rnn_norm_json(v);
  else return v;
}

// Reads and writes the attribute of kind K held by Node member M.
template <AttrKind K, auto M>
struct AttrAccess {
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(std::declval<Node&>().*M)>,
                               typename AttrType<K>::type>,
                "core/ops.def: an attribute's kind does not match its Node member's type");
  static void read(const Reader& r, Node& n, const json& v, const std::string& at) {
    n.*M = read_value<K>(r, v, at);
  }
  static json write(const Node& n) { return write_value<K>(n.*M); }
};

struct AttrCodec {
  void (*read)(const Reader&, Node&, const json&, const std::string&);
  json (*write)(const Node&);
  void (*set_default)(Node&);
};

// One codec per row of kOpAttrs, in the same order.
constexpr AttrCodec kAttrCodecs[] = {
#define LNV_ATTR(op, key, kind, presence, default_value)            \
  {&AttrAccess<AttrKind::kind, &Node::key>::read,                   \
   &AttrAccess<AttrKind::kind, &Node::key>::write,                  \
   [](Node& n) { n.key = default_value; }},
#include "core/ops.def"
};
static_assert(std::size(kAttrCodecs) == std::size(kOpAttrs), "one codec per attribute row");

const AttrCodec& codec(const OpAttr& a) { return kAttrCodecs[&a - kOpAttrs]; }

// The JSON of attribute `a` at its default value.
const json& default_json(const OpAttr& a) {
  static const std::vector<json> defaults = [] {
    std::vector<json> out;
    for (const AttrCodec& c : kAttrCodecs) {
      Node n;
      c.set_default(n);
      out.push_back(c.write(n));
    }
    return out;
  }();
  return defaults[&a - kOpAttrs];
}

// A node's name, op, inputs and attributes; absent optional attributes take their default.
Node read_node(const json& j, const std::string& path) {
  Reader r;
  r.expect_object(j, path);
  Node n;
  n.name = r.string(r.required(j, path, "name"), child(path, "name"));
  r.context = " (node '" + n.name + "')";
  const std::string op = r.string(r.required(j, path, "op"), child(path, "op"));
  const auto parsed = op_from_name(op);
  if (!parsed) {
    std::string known;
    for (std::string_view name : kOpNames) known += (known.empty() ? "" : ", ") + std::string(name);
    r.fail(child(path, "op"), "unknown op '" + op + "' (known: " + known + ")");
  }
  n.op = *parsed;
  n.inputs = r.strings(r.required(j, path, "inputs"), child(path, "inputs"));
  const OpInfo& info = op_info(n.op);
  for (const auto& [key, value] : j.items()) {
    if (key == "name" || key == "op" || key == "inputs") continue;
    const OpAttr* attr = op_attr(n.op, key);
    if (!attr) {
      std::string list;
      for (const OpAttr& a : info.attrs) list += (list.empty() ? "" : ", ") + std::string(a.key);
      r.fail(child(path, printable(key)), "op " + op + " has no attribute '" + printable(key) +
                                              "' (it takes: " +
                                              (list.empty() ? std::string("none") : list) + ")");
    }
    codec(*attr).read(r, n, value, child(path, key));
  }
  for (const OpAttr& a : info.attrs) {
    if (j.contains(std::string(a.key))) continue;
    if (a.presence == AttrPresence::required)
      r.fail(path, "op " + op + " needs attribute '" + std::string(a.key) + "'");
    codec(a).set_default(n);
  }
  return n;
}

// --- reading ---

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
      g.nodes.push_back(read_node(nodes[i], child("/nodes", i)));
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

// --- writing ---

json node_json(const Node& n) {
  json o = json::object();
  o["name"] = n.name;
  o["op"] = std::string(op_name(n.op));
  o["inputs"] = n.inputs;
  for (const OpAttr& a : op_info(n.op).attrs) {
    json v = codec(a).write(n);
    if (a.presence == AttrPresence::optional && v == default_json(a)) continue;
    o[std::string(a.key)] = std::move(v);
  }
  return o;
}

// The path of `file` (relative to `from_dir`) as seen from `to_dir`.
std::string rebase_path(const std::string& file, const std::string& from_dir,
                        const std::string& to_dir) {
  const fs::path f(file);
  if (f.is_absolute()) return f.lexically_normal().generic_string();
  const fs::path src = (fs::absolute(from_dir.empty() ? "." : from_dir) / f).lexically_normal();
  const fs::path dst = fs::absolute(to_dir.empty() ? "." : to_dir).lexically_normal();
  const fs::path rel = src.lexically_relative(dst);
  return rel.empty() ? src.generic_string() : rel.generic_string();
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

// Streams deferred param `p` from `file` into `out`: its stored values, centered over
// p.center_axes when set (stream_centered: only a chunk of the tensor is in memory at a
// time). `In` is the element type the chunks are read as: float for F32 data (read as
// stored, widened in the arithmetic), double for other dtypes (converted on read).
template <class In>
void stream_typed(const SafetensorsReader& file, const SafetensorsSpan& span, const Param& p,
                  SafetensorsDType out_dtype, SafetensorsWriter& out) {
  auto read = [&](uint64_t done, uint64_t n, In* dst) {
    if constexpr (std::is_same_v<In, float>)
      file.read_raw(span, done, n, reinterpret_cast<char*>(dst));
    else
      file.read_values(span, done, n, dst);
  };
  auto append = [&](const auto* values, uint64_t n) { out.append(values, n); };
  const std::string what = "param '" + p.name + "'";
  if (out_dtype == SafetensorsDType::f32)
    stream_centered<In, float>(p.shape, p.center_axes, span.count, read, append, what);
  else
    stream_centered<In, double>(p.shape, p.center_axes, span.count, read, append, what);
}

void stream_param(const SafetensorsReader& file, const Param& p, SafetensorsDType out_dtype,
                  SafetensorsWriter& out) {
  const SafetensorsSpan span = loaded_span(file, p);
  if (std::endian::native == std::endian::little && span.dtype == "F32")
    stream_typed<float>(file, span, p, out_dtype, out);
  else
    stream_typed<double>(file, span, p, out_dtype, out);
}

// Whether the files params came from still hold exactly their values. Each file's header
// is parsed once.
class FileCheck {
 public:
  explicit FileCheck(std::string base_dir) : base_dir_(std::move(base_dir)) {}

  bool matches(const Param& p) {
    try {
      const SafetensorsTensor t = reader(p).read(p.file.key);
      return t.shape == p.shape && t.values == p.values;
    } catch (const ModelError&) {
      return false;
    }
  }

  // The (cached) reader of the file a `file` param reads.
  const SafetensorsReader& reader(const Param& p) {
    const std::string path = (fs::path(base_dir_) / p.file.path).lexically_normal().string();
    auto it = readers_.find(path);
    if (it == readers_.end())
      it = readers_.emplace(path, std::make_unique<SafetensorsReader>(path)).first;
    return *it->second;
  }

 private:
  std::string base_dir_;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers_;
};

// A deferred param written into the weights file: read from its file while writing.
struct StreamedTensor {
  const SafetensorsReader* source = nullptr;
  const Param* param = nullptr;
};

// Where values that are written out (not init, not an unchanged file) go: inline `data`,
// or, for a save with a weights file, tensors of that file (materialized values, or
// deferred params streamed from their file).
struct WeightsSink {
  std::string path_in_json;   // as written in `file.path` (relative to the model's dir)
  std::string resolved;       // absolute, normalized
  int64_t min_numel = 0;
  SafetensorsDType dtype = SafetensorsDType::f64;
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, StreamedTensor> streamed;
};

// The path a `file` param reads, absolute and normalized.
std::string resolved_file(const std::string& file, const std::string& base_dir) {
  const fs::path f(file);
  if (f.is_absolute()) return f.lexically_normal().string();
  return (fs::absolute(base_dir.empty() ? "." : base_dir) / f).lexically_normal().string();
}

json param_json(const Graph& g, const Param& p, size_t index, const std::string& out_dir,
                FileCheck& files, WeightsSink* sink) {
  const bool raw = p.center_axes.empty() && p.scale.empty();
  if (p.values_deferred && (p.lazy || !p.scale.empty()) && !(raw && p.source == ParamSource::init)) {
    Param loaded = p;
    materialize_values(loaded, g.base_dir);
    return param_json(g, loaded, index, out_dir, files, sink);
  }
  json o = json::object();
  o["name"] = p.name;
  o["shape"] = p.shape;
  // A param read from the file being rewritten must be written into it again.
  const bool reads_sink = sink && p.source == ParamSource::file &&
                          resolved_file(p.file.path, g.base_dir) == sink->resolved;
  if (raw && p.source == ParamSource::init &&
      (p.values_deferred ||  // never drawn, so never changed
       init_values(p.init, numel(p.shape), g.seed, p.name) == p.values)) {
    json init = {{"dist", p.init.dist}};
    if (p.init.dist == "normal") {
      if (p.init.mean != 0.0) init["mean"] = p.init.mean;
      init["std"] = p.init.std;
    } else {
      init["low"] = p.init.low;
      init["high"] = p.init.high;
    }
    o["init"] = std::move(init);
  } else if (raw && p.source == ParamSource::file && !reads_sink &&
             (p.values_deferred ||  // never loaded, so never changed
              (p.file_fingerprint != 0 ? param_fingerprint(p) == p.file_fingerprint
                                       : files.matches(p)))) {
    o["file"] = {{"path", rebase_path(p.file.path, g.base_dir, out_dir)}, {"key", p.file.key}};
  } else if (p.values_deferred && sink && (numel(p.shape) >= sink->min_numel || reads_sink)) {
    LNV_INTERNAL_ASSERT(p.values.empty(), "deferred param '" + p.name + "' holds values");
    sink->streamed[p.name] = {&files.reader(p), &p};
    o["file"] = {{"path", sink->path_in_json}, {"key", p.name}};
  } else if (p.values_deferred) {
    Param loaded = p;
    materialize_from(files.reader(p), loaded);
    std::vector<double> values = effective_values(loaded);
    check_finite(values, "/params/" + std::to_string(index), p.name, "");
    o["data"] = std::move(values);
  } else {
    std::vector<double> values = effective_values(p);
    check_finite(values, "/params/" + std::to_string(index), p.name, "");
    if (sink && (numel(p.shape) >= sink->min_numel || reads_sink)) {
      sink->tensors[p.name] = {p.shape, std::move(values), sink->dtype};
      o["file"] = {{"path", sink->path_in_json}, {"key", p.name}};
    } else {
      o["data"] = std::move(values);
    }
  }
  return o;
}

json input_json(const Input& in) {
  json o = {{"name", in.name}, {"shape", in.shape}};
  o["dtype"] = in.dtype == DType::index ? "index" : "float";
  if (in.dtype == DType::index) o["range"] = in.range;
  return o;
}

// Key order of the written text: the format's order for known keys, then alphabetical.
int key_rank(const std::string& k) {
  static const char* order[] = {"format", "version", "name",  "op",    "seed", "meta",
                                "inputs", "params",  "nodes", "outputs", "shape", "dtype",
                                "range",  "data",    "init",  "file",  "dist", "mean",
                                "std",    "low",     "high",  "path",  "key",  "kind"};
  for (int i = 0; i < static_cast<int>(std::size(order)); ++i)
    if (k == order[i]) return i;
  return static_cast<int>(std::size(order));
}

std::vector<std::string> ordered_keys(const json& o) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : o.items()) keys.push_back(k);
  std::stable_sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
    return key_rank(a) < key_rank(b);
  });
  return keys;
}

std::string quoted(const std::string& s) { return json(s).dump(); }

// One-line JSON with a space after ':' and ','. Model objects use the format's key order.
void write_compact(std::string& out, const json& j) {
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (const std::string& k : ordered_keys(j)) {
      out += first ? "" : ", ";
      first = false;
      out += quoted(k) + ": ";
      write_compact(out, j[k]);
    }
    out += '}';
  } else if (j.is_array() && std::all_of(j.begin(), j.end(),
                                         [](const json& e) { return e.is_number(); })) {
    // Numbers hold no commas: dump the array at once (fast for large `data`).
    for (char c : j.dump()) {
      out += c;
      if (c == ',') out += ' ';
    }
  } else if (j.is_array()) {
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += ", ";
      write_compact(out, j[i]);
    }
    out += ']';
  } else {
    out += j.dump();
  }
}

}  // namespace

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

Node parse_node(const nlohmann::json& j, const std::string& path) { return read_node(j, path); }

nlohmann::json node_to_json(const Node& n) { return node_json(n); }

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

namespace {

json build_model_json(const Graph& g, const std::string& out_dir, WeightsSink* sink,
                      FileCheck& files, const ProgressFn& progress = {}) {
  json j = json::object();
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["name"] = g.name;
  j["seed"] = g.seed;
  if (!g.meta.empty()) j["meta"] = parse_meta(g);
  j["inputs"] = json::array();
  for (const Input& in : g.inputs) j["inputs"].push_back(input_json(in));
  j["params"] = json::array();
  for (size_t i = 0; i < g.params.size(); ++i) {
    report_progress(progress, "encode params", "params", i, g.params.size());
    j["params"].push_back(param_json(g, g.params[i], i, out_dir, files, sink));
  }
  report_progress(progress, "encode params", "params", g.params.size(), g.params.size());
  j["nodes"] = json::array();
  for (const Node& n : g.nodes) j["nodes"].push_back(node_json(n));
  j["outputs"] = g.outputs;
  return j;
}

std::string json_to_text(const json& j, const ProgressFn& progress = {}) {
  std::string out = "{\n";
  const std::vector<std::string> keys = ordered_keys(j);
  for (size_t k = 0; k < keys.size(); ++k) {
    const std::string& key = keys[k];
    const json& v = j[key];
    out += "  " + quoted(key) + ": ";
    if (key == "meta") {  // free-form: indented as nlohmann writes it
      std::string m = v.dump(2);
      for (size_t pos = m.find('\n'); pos != std::string::npos; pos = m.find('\n', pos + 3))
        m.replace(pos, 1, "\n  ");
      out += m;
    } else if ((key == "inputs" || key == "params" || key == "nodes") && !v.empty()) {
      out += "[\n";
      for (size_t i = 0; i < v.size(); ++i) {
        if (key == "params") report_progress(progress, "format params", "params", i, v.size());
        out += "    ";
        write_compact(out, v[i]);
        out += i + 1 < v.size() ? ",\n" : "\n";
      }
      if (key == "params") report_progress(progress, "format params", "params", v.size(), v.size());
      out += "  ]";
    } else {
      write_compact(out, v);
    }
    out += k + 1 < keys.size() ? ",\n" : "\n";
  }
  return out + "}\n";
}

}  // namespace

nlohmann::json parse_meta(const Graph& g) {
  return g.meta.empty() ? json() : json::parse(g.meta);
}

nlohmann::json model_to_json(const Graph& g, const std::string& out_dir) {
  FileCheck files(g.base_dir);
  return build_model_json(g, out_dir, nullptr, files);
}

std::string model_to_text(const Graph& g, const std::string& out_dir) {
  FileCheck files(g.base_dir);
  return json_to_text(build_model_json(g, out_dir, nullptr, files));
}

void save_model(const Graph& g, const std::string& path, const SaveOptions& options) {
  const std::string out_dir = fs::path(path).parent_path().string();
  FileCheck files(g.base_dir);
  std::optional<WeightsSink> sink;
  if (!options.weights_file.empty()) {
    sink.emplace();
    sink->path_in_json = fs::path(options.weights_file).generic_string();
    sink->resolved = resolved_file(options.weights_file, out_dir);
    sink->min_numel = options.min_file_numel;
    sink->dtype = options.weights_dtype;
  }
  const ProgressFn& progress = options.progress;
  const std::string text =
      json_to_text(build_model_json(g, out_dir, sink ? &*sink : nullptr, files, progress), progress);
  // Every file is written to a temporary file first and renamed into place only when all
  // are complete, the weights before the model (so that the model never points at
  // tensors that are not there yet): a failure leaves no file changed.
  std::vector<AtomicFileWriter*> commit_order;
  std::optional<SafetensorsWriter> weights;
  if (sink && (!sink->tensors.empty() || !sink->streamed.empty())) {
    std::vector<SafetensorsWriter::Tensor> layout;  // sorted by key (names are unique)
    for (const auto& [key, t] : sink->tensors) layout.push_back({key, t.shape, t.dtype});
    for (const auto& [key, t] : sink->streamed) layout.push_back({key, t.param->shape, sink->dtype});
    std::sort(layout.begin(), layout.end(),
              [](const auto& a, const auto& b) { return a.key < b.key; });
    weights.emplace(sink->resolved, layout, /*finite_only=*/true);
    uint64_t done = 0, total = 0;  // bytes of tensor data
    auto bytes_of = [](const SafetensorsWriter::Tensor& t, uint64_t count) {
      return count * (t.dtype == SafetensorsDType::f32 ? 4 : 8);
    };
    for (const SafetensorsWriter::Tensor& t : layout) total += bytes_of(t, uint64_t(numel(t.shape)));
    report_progress(progress, "write weights", "bytes", done, total);
    for (const SafetensorsWriter::Tensor& t : layout) {
      if (auto it = sink->tensors.find(t.key); it != sink->tensors.end()) {
        // In chunks, so that a large tensor shows its progress.
        constexpr size_t kChunk = size_t(1) << 20;
        const std::vector<double>& v = it->second.values;
        for (size_t at = 0; at < v.size(); at += kChunk) {
          const size_t n = std::min(kChunk, v.size() - at);
          weights->append(v.data() + at, n);
          done += bytes_of(t, n);
          report_progress(progress, "write weights", "bytes", done, total);
        }
      } else {
        const StreamedTensor& st = sink->streamed.at(t.key);
        stream_param(*st.source, *st.param, t.dtype, *weights);
        done += bytes_of(t, uint64_t(numel(t.shape)));
        report_progress(progress, "write weights", "bytes", done, total);
      }
    }
    commit_order.push_back(&weights->finish());
  }
  commit_order.insert(commit_order.end(), options.commit_with.begin(), options.commit_with.end());
  AtomicFileWriter model(path);
  constexpr size_t kChunk = size_t(1) << 24;  // a large inline model shows its progress
  for (size_t at = 0; at < text.size(); at += kChunk) {
    report_progress(progress, "write model", "bytes", at, text.size());
    model.write(std::string_view(text).substr(at, kChunk));
  }
  report_progress(progress, "write model", "bytes", text.size(), text.size());
  commit_order.push_back(&model);
  report_progress(progress, "commit files", "", 0, 0);
  commit_together(commit_order, options.sync);
}

}  // namespace lnv
