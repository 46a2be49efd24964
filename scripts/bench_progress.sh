#!/bin/bash
# What the progress bars of importing and folding cost: each command on a GPT-2-small-sized
# ONNX export with external data (build/large/external/gpt2_small.onnx, ~660 MB), run with
# stderr a file (no TTY: no bar) and with stderr a pseudo-terminal from util-linux's
# `script` (LNV_PROGRESS_DELAY=0: every step drawn), alternating, ROUNDS times each.
# Prints per command the median wall seconds and CPU seconds (user + system) of both, their
# ratios (bar / no bar) and how many times the bar was drawn. Not a test: nothing is
# asserted.
#
#   bash scripts/bench_progress.sh [ROUNDS]
#
# The export is written first when missing (scripts/make_gpt2_small_onnx.py, a few minutes,
# needs torch in /usr/bin/python3). Outputs go to a scratch folder in build/, removed at
# the end; --no-fsync keeps the disk's flushing out of the times.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LNV="$ROOT/build/cli/lnverify"
ROUNDS="${1:-5}"
M="$ROOT/build/large/external/gpt2_small.onnx"
[ -f "$M" ] || /usr/bin/python3 "$ROOT/scripts/make_gpt2_small_onnx.py" "$ROOT/build/large"
command -v script > /dev/null || { echo "needs util-linux's script" >&2; exit 1; }
S="$(mktemp -d "$ROOT/build/bench_progress.XXXXXX")"
trap 'rm -rf "$S"' EXIT
DIMS="--dim batch=1 --dim seq=8"
COMMANDS=(
  "audit $M $DIMS"
  "fold $M $DIMS -o $S/f.onnx --no-fsync"
  "fold $M $DIMS -o $S/f.json --no-fsync"
)

# measure tty|file ARGS: prints "wall cpu draws".
measure() {
  local how="$1"; shift
  if [ "$how" = file ]; then
    /usr/bin/time -f '%e %U %S' -o "$S/time" "$LNV" "$@" > /dev/null 2> "$S/err"
    echo "$(awk '{ print $1, $2 + $3 }' "$S/time") 0"
  else
    LNV_PROGRESS_DELAY=0 script -qec "/usr/bin/time -f '%e %U %S' -o '$S/time' '$LNV' $* > /dev/null" \
      /dev/null < /dev/null > "$S/raw"
    echo "$(awk '{ print $1, $2 + $3 }' "$S/time") $(tr -cd '\r' < "$S/raw" | wc -c)"
  fi
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-12s %10s %10s %10s %10s %8s %8s %6s\n' command "wall" "wall bar" "cpu" "cpu bar" "wall x" "cpu x" draws
for c in "${COMMANDS[@]}"; do
  : > "$S/file.txt"; : > "$S/tty.txt"
  for ((r = 0; r < ROUNDS; r++)); do
    # Alternate which goes first, so that neither always finds the page cache warmer.
    if ((r % 2)); then order="tty file"; else order="file tty"; fi
    for how in $order; do
      rm -f "$S"/f.*  # so that no run pays for removing the files the last one wrote
      # shellcheck disable=SC2086
      measure "$how" $c >> "$S/$how.txt"
    done
  done
  w0=$(cut -d' ' -f1 "$S/file.txt" | median); w1=$(cut -d' ' -f1 "$S/tty.txt" | median)
  c0=$(cut -d' ' -f2 "$S/file.txt" | median); c1=$(cut -d' ' -f2 "$S/tty.txt" | median)
  d=$(cut -d' ' -f3 "$S/tty.txt" | median)
  name="$(echo "$c" | awk '{ o = ""; for (i = 1; i <= NF; ++i) if ($i == "-o") o = $(i + 1); sub(/.*\./, ".", o); print $1 (o == "" ? "" : " " o) }')"
  awk -v n="$name" -v w0="$w0" -v w1="$w1" -v c0="$c0" -v c1="$c1" -v d="$d" \
    'BEGIN { printf "%-12s %10.2f %10.2f %10.2f %10.2f %8.3f %8.3f %6d\n", n, w0, w1, c0, c1, w1 / w0, c1 / c0, d }'
done
