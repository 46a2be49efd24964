// `--shard K/N`: a command that runs a list of independent items (fuzz cases, models)
// runs only its share: item i belongs to shard i mod N (round robin, so that every shard
// gets early and late items alike). Item i is the same item, with the same seed and
// verdict, whatever N is; `lnverify merge` puts the shards' reports back together
// (docs/fuzzing.md, docs/ci.md).
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace lnv::cli {

struct Shard {
  int64_t index = 0, count = 1;
  bool given = false;  // --shard was on the command line
  bool owns(int64_t item) const { return item % count == index; }
  // Items of 0..total-1 that are this shard's.
  int64_t share(int64_t total) const { return total > index ? (total - index + count - 1) / count : 0; }
  std::string text() const { return std::to_string(index) + "/" + std::to_string(count); }
};

inline nlohmann::json shard_json(const Shard& s) { return {{"index", s.index}, {"count", s.count}}; }

// "K/N" with 0 <= K < N, or nullopt.
inline std::optional<Shard> parse_shard(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return std::nullopt;
  Shard s;
  s.given = true;
  const char* mid = text.data() + slash;
  const char* end = text.data() + text.size();
  const auto [p, e1] = std::from_chars(text.data(), mid, s.index);
  const auto [q, e2] = std::from_chars(mid + 1, end, s.count);
  if (e1 != std::errc() || p != mid || e2 != std::errc() || q != end || s.count < 1 ||
      s.count > (int64_t{1} << 40) || s.index < 0 || s.index >= s.count)
    return std::nullopt;
  return s;
}

// Adds --shard K/N to `sub`; `items` names what is shared out ("cases").
inline void add_shard_option(CLI::App& sub, Shard& shard, const std::string& items) {
  sub.add_option_function<std::string>(
         "--shard", [&shard](const std::string& text) { shard = *parse_shard(text); },
         "run only shard K of N (0 <= K < N): the " + items +
             " whose index i has i mod N = K; `lnverify merge` combines the shards' reports")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (parse_shard(text)) return "";
            return "expected K/N with 0 <= K < N (shard K of N), got '" + text + "'";
          },
          "K/N", "shard"));
}

}  // namespace lnv::cli
