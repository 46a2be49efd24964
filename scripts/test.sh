#!/usr/bin/env bash
# Runs the default test suite (bounded property cases; see README for the long campaign).
set -euo pipefail
cd "$(dirname "$0")/.."
ctest --test-dir build --output-on-failure -j "${LNV_JOBS:-2}" --timeout 1200 "$@"
