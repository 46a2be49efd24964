// Fuzz target (fuzz/targets.h): a safetensors file (header length, JSON header, data) through
// SafetensorsReader: every tensor's span, its values, a partial read, its raw bytes and
// the non-finite scan.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/targets.h"

namespace lnv::fuzz {

int safetensors(const uint8_t* data, size_t size) {
  const std::string path = lnv::fuzz::scratch_dir() + "/input.safetensors";
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::write(fd, data, size) != static_cast<ssize_t>(size)) __builtin_trap();
    ::close(fd);
  }
  try {
    const lnv::SafetensorsReader reader(path);
    for (const std::string& key : reader.keys()) {
      try {
        const lnv::SafetensorsSpan s = reader.span(key);
        if (reader.dtype(key) != s.dtype) __builtin_trap();
        // The data section is no longer than the input, so reading all of it is bounded.
        const lnv::SafetensorsTensor t = reader.read(key);
        if (t.values.size() != s.count) __builtin_trap();
        (void)reader.first_non_finite(s);
        if (s.count > 0) {
          const uint64_t first = s.count / 2, count = s.count - first;
          std::vector<double> part(count);
          reader.read_values(s, first, count, part.data());
          for (uint64_t i = 0; i < count; ++i)
            if (!(part[i] == t.values[first + i]) && part[i] == part[i]) __builtin_trap();
          std::vector<char> raw(count * static_cast<uint64_t>(s.element_size));
          reader.read_raw(s, first, count, raw.data());
        }
      } catch (const lnv::ModelError&) {
        // one bad tensor; the others are still read
      }
    }
  } catch (const lnv::ModelError&) {
  }
  return 0;
}

}  // namespace lnv::fuzz
