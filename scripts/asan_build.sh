#!/usr/bin/env bash
# Configures build-asan/ (clang-14, AddressSanitizer + UndefinedBehaviorSanitizer, libFuzzer
# coverage instrumentation, no LibTorch) and builds the given targets in it. Shared by
# scripts/test.sh --sanitize and scripts/fuzz.sh, so the instrumented core is compiled once.
#   bash scripts/asan_build.sh [TARGET...]     # no target: everything (CLI, tests, fuzzers)
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
# Any UBSan report is an error (aborts, so a test or a fuzz run fails on it).
# -fsanitize=fuzzer-no-link adds libFuzzer's coverage hooks without its main(); in the test
# executables the sanitizer runtime provides no-op hooks.
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fsanitize=fuzzer-no-link"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Sanitize \
  -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -gline-tables-only -fno-omit-frame-pointer $san" \
  -DCMAKE_EXE_LINKER_FLAGS_SANITIZE="-fsanitize=address,undefined" \
  -DLNV_WITH_TORCH=OFF -DLNV_FUZZ=ON >/dev/null
cmake --build build-asan -j "${LNV_JOBS:-2}" ${1:+--target "$@"}
