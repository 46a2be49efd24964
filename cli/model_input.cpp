#include "cli/model_input.h"

#include <algorithm>
#include <charconv>
#include <iostream>
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

std::string joined(const std::vector<std::string>& names, const std::string& sep = ", ") {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : sep) + n;
  return out;
}

void warn(const std::string& line) { std::cerr << "lnverify: warning: " << line << "\n"; }

#ifdef LNV_HAVE_ONNX
using onnx_import::DimBindings;

// The value a free dim is tried with when 1 does not fit (a multiple of 2, 4 and 8).
constexpr int64_t kTriedDim = 8;

// The --dim names no graph input of the models has (each model's symbols in `symbols`).
std::vector<std::string> unknown_dims(const std::map<std::string, int64_t>& dims,
                                      const std::vector<std::vector<std::string>>& symbols) {
  std::vector<std::string> unknown;
  for (const auto& [name, value] : dims) {
    bool known = false;
    for (const auto& list : symbols) known = known || std::count(list.begin(), list.end(), name);
    if (!known) unknown.push_back(name);
  }
  return unknown;
}

void warn_unknown(const std::vector<std::string>& paths, const std::vector<std::string>& unknown,
                  const std::vector<std::string>& symbols) {
  if (unknown.empty()) return;
  warn(joined(paths, " and ") + ": ignoring --dim " + joined(unknown, ", --dim ") + ": no input of " +
       (paths.size() == 1 ? "this model" : "these models") + " has " +
       (unknown.size() == 1 ? "that dim" : "those dims") +
       (symbols.empty() ? std::string(paths.size() == 1 ? " (its" : " (their") + " inputs have no symbolic dims)"
                        : std::string(paths.size() == 1 ? " (its" : " (their") + " symbolic dims: " + joined(symbols) + ")"));
}

// The import failed with the free dims bound to 1: the free dims whose value 1 it failed
// on, found by importing again (values deferred) with one of them bound to 8 instead, the
// others as before, then with all of them bound to 8; empty when no such import succeeds
// (the failure is not about the free dims' values).
std::vector<std::string> free_dims_that_do_not_fit(const std::string& path, const DimBindings& bound,
                                                   const std::vector<std::string>& free) {
  auto imports = [&](const std::vector<std::string>& changed) {
    DimBindings other = bound;
    for (const std::string& d : changed) other[d] = kTriedDim;
    try {
      onnx_import::import_onnx(path, other, /*defer_values=*/true);
      return true;
    } catch (const ModelError&) {
      return false;
    }
  };
  std::vector<std::string> culprits;
  for (const std::string& d : free)
    if (imports({d})) culprits.push_back(d);
  if (culprits.empty() && free.size() > 1 && imports(free)) culprits = free;
  return culprits;
}
#endif

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
                 "ONNX models: bind a symbolic input dim, NAME=VALUE (repeatable; a dim left free is bound to 1)")
      ->take_all()
      ->allow_extra_args(false);
}

Graph load_input(const std::string& path, const std::vector<std::string>& dim_args,
                 const LoadOptions& options, bool warn_unknown_dims) {
  const auto dims = parse_dims(dim_args);
  if (!is_onnx_input(path)) {
    if (!dims.empty())
      throw ModelError(path, "--dim binds the symbolic dims of an ONNX model; this is a model.json");
    return load_model(path, options);
  }
#ifdef LNV_HAVE_ONNX
  const auto symbols = onnx_import::input_dim_symbols(path);
  DimBindings bound;
  std::vector<std::string> free;
  if (symbols) {
    if (warn_unknown_dims) warn_unknown({path}, unknown_dims(dims, {*symbols}), *symbols);
    for (const std::string& s : *symbols) {
      auto it = dims.find(s);
      bound[s] = it == dims.end() ? 1 : it->second;
      if (it == dims.end()) free.push_back(s);
    }
    if (!free.empty())
      warn(path + ": binding the free input " + (free.size() == 1 ? "dim " : "dims ") + joined(free) +
           " to 1; choose other values with --dim NAME=VALUE");
  } else {
    bound = dims;  // the file does not parse: the reader says why
  }
  try {
    StepProgress progress;  // erased on return, before the command prints anything
    return onnx_import::import_onnx(path, bound, options.defer_values, progress.callback());
  } catch (const ModelError& e) {
    if (free.empty()) throw;
    const auto culprits = free_dims_that_do_not_fit(path, bound, free);
    if (culprits.empty()) throw;
    std::string pass, tried;
    for (const std::string& d : culprits) {
      pass += (pass.empty() ? "" : " ") + ("--dim " + d + "=VALUE");
      tried += (tried.empty() ? "" : " ") + ("--dim " + d + "=" + std::to_string(kTriedDim));
    }
    const bool one = culprits.size() == 1;
    throw ModelError("", std::string(e.what()) + "; the free " + (one ? "dim " : "dims ") + joined(culprits) +
                             ", bound to 1, " + (one ? "does" : "do") + " not fit the graph's shapes (it imports with " +
                             tried + "): pass " + pass);
  }
#else
  (void)warn_unknown_dims;
  throw ModelError(path, "this lnverify was built without ONNX support (LNV_WITH_ONNX=OFF)");
#endif
}

void warn_unknown_dims(const std::vector<std::string>& paths, const std::vector<std::string>& dim_args) {
#ifdef LNV_HAVE_ONNX
  const auto dims = parse_dims(dim_args);
  std::vector<std::vector<std::string>> symbols;
  std::vector<std::string> onnx_paths;
  for (const std::string& p : paths) {
    if (!is_onnx_input(p)) continue;
    const auto s = onnx_import::input_dim_symbols(p);
    if (!s) return;  // the reader will say what is wrong with the file
    symbols.push_back(*s);
    onnx_paths.push_back(p);
  }
  std::vector<std::string> all;
  for (const auto& list : symbols)
    for (const std::string& s : list)
      if (!std::count(all.begin(), all.end(), s)) all.push_back(s);
  warn_unknown(onnx_paths, unknown_dims(dims, symbols), all);
#else
  (void)paths, (void)dim_args;
#endif
}

}  // namespace lnv::cli
