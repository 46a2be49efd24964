#!/usr/bin/env bash
# Runs the default test suite (bounded property cases; see README for the long campaign).
#   bash scripts/test.sh [ctest args...]              # the suite in build/
#   bash scripts/test.sh --sanitize [ctest args...]   # builds core, CLI and tests (no
#       LibTorch) with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan/ and runs
#       them there; any sanitizer report fails its test.
set -euo pipefail
cd "$(dirname "$0")/.."
# The property tests run with the fixed seed of tests/rc_default_seed.h unless RC_PARAMS
# is set (RC_PARAMS="max_success=100000" to explore, "seed=N" to replay a printed failure).
dir=build
if [ "${1:-}" = "--sanitize" ]; then
  shift
  if ! command -v clang++-14 >/dev/null; then
    echo "test: --sanitize needs clang++-14 and libFuzzer: bash scripts/setup.sh --tests installs them" >&2
    exit 2
  fi
  bash scripts/asan_build.sh
  dir=build-asan
  # The CLI scripts swap `ulimit -v` (no room for ASan's shadow memory) for ASan's own caps.
  export LNV_SANITIZE=1
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
fi
ctest --test-dir "$dir" --output-on-failure -j "${LNV_JOBS:-2}" --timeout 1200 "$@"
