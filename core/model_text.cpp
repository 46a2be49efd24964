// The text layout of model.json as save_model writes it (json_to_text of
// core/model_json_internal.h): the format's key order, one line per input, param and node.
#include <algorithm>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/model_json_internal.h"

namespace lnv::model_format {
namespace {

using nlohmann::json;

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

std::string json_to_text(const json& j, const ProgressFn& progress) {
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

}  // namespace lnv::model_format
