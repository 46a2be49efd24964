// What the fuzz targets share: a private scratch directory, and the rule for which
// exceptions are findings.
//
// An input the tool rejects must surface as lnv::ModelError (docs/spec: "thrown, never
// aborted"). Anything else escaping a target is a finding: InternalError (our bug), a JSON
// library exception the readers failed to translate, std::bad_alloc (a size that was not
// bounded up front) and every other exception reach libFuzzer uncaught and are reported
// as a crash with the input.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include "core/model_json.h"

namespace lnv::fuzz {

// A directory of this process for files a target writes (safetensors bytes, weights
// referenced by a model). In /dev/shm when it exists, so a run does not wear a disk.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string tmpl = (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    tmpl += "/lnv-fuzz-XXXXXX";
    if (!mkdtemp(tmpl.data())) std::abort();
    return tmpl;
  }();
  return dir;
}

// The load options of every target: init params together capped far below libFuzzer's
// memory limit (an input asking for more is refused with a ModelError, like one asking
// for more than the machine has).
inline LoadOptions fuzz_load_options() {
  LoadOptions o;
  o.max_init_bytes = uint64_t{64} << 20;
  return o;
}

}  // namespace lnv::fuzz
