// How long work reports how far it has got, for a caller that shows it (the CLI draws a
// bar on a terminal): no terminal code below the CLI, only this callback.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace lnv {

// Called as work advances: `phase` names the step ("read weights"), `done` of `total`
// counts `unit`s ("bytes", "values", "nodes"); `total` is 0 when the step has no count
// (done is then 0 too). A step is announced with done = 0 before its work starts and
// ends with done = total. Callers may call it often (per chunk); the receiver throttles.
using ProgressFn = std::function<void(std::string_view phase, std::string_view unit,
                                      uint64_t done, uint64_t total)>;

// Calls `fn` when it is set.
inline void report_progress(const ProgressFn& fn, std::string_view phase, std::string_view unit,
                            uint64_t done, uint64_t total) {
  if (fn) fn(phase, unit, done, total);
}

}  // namespace lnv
