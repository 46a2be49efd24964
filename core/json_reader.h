// Typed reading of a parsed JSON document, for the model.json reader (core/model_read.cpp,
// core/node_json.cpp): each value is checked for its JSON type and range, and every error
// is a ModelError whose `where` is the value's JSON pointer. Private to lnv_core.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/shape.h"

namespace lnv::model_format {

using nlohmann::json;

// A JSON pointer one level down (RFC 6901 escaping).
inline std::string child(const std::string& path, const std::string& key) {
  return path + "/" + pointer_token(key);
}
inline std::string child(const std::string& path, size_t index) {
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

}  // namespace lnv::model_format
