#!/usr/bin/env bash
# Output files on error and on clashing paths (`fold -o/--weights/--json`), and inputs
# nested or sized beyond the limits: a clear error, a non-zero exit, no partial output.
#   bash tests/cli_bad_outputs.sh PATH/TO/lnverify
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh" "$1"
EX="$ROOT/examples/gpt2_tiny.json"

finish
