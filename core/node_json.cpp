// The nodes of model.json, read and written as core/ops.def declares each op's
// attributes: parse_node and node_to_json of core/model_json.h.
#include <iterator>
#include <optional>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/json_reader.h"
#include "core/model_json.h"

namespace lnv {
namespace {

using model_format::child;
using model_format::Reader;
using nlohmann::json;

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

}  // namespace

Node parse_node(const nlohmann::json& j, const std::string& path) { return read_node(j, path); }

nlohmann::json node_to_json(const Node& n) { return node_json(n); }

}  // namespace lnv
