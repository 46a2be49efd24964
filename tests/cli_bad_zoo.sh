#!/usr/bin/env bash
# `lnverify zoo` on bad options: sizes beyond the limits, bad depths, non-finite values;
# a clear error naming the option, a non-zero exit, and no file written.
#   bash tests/cli_bad_zoo.sh PATH/TO/lnverify
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh" "$1"
EX="$ROOT/examples/gpt2_tiny.json"

finish
