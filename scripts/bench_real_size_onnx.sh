#!/bin/bash
# Time and peak RSS of the process itself (a tiny model's audit) and of the commands that
# read a GPT-2-small-sized model, side by side for
# two lnverify binaries (a baseline, say one built from an older commit, and this one),
# alternating runs. Prints one row per command: wall s, user s and peak RSS of each
# binary, and the ratios. Not a test: nothing is asserted.
#
#   bash scripts/bench_real_size_onnx.sh [BASELINE_LNVERIFY] [ROUNDS]
#
# Without a baseline only build/cli/lnverify is measured. The models are written to
# build/large/ first when missing (scripts/make_large_onnx.py, ~1.3 GB; the zoo's GPT-2
# as a 34 kB model.json). Set LNV_BENCH_HEAVY=1 to add `check --engine torch` and
# `fidelity` on the ONNX export (minutes each, several GB).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
AFTER="$ROOT/build/cli/lnverify"
BEFORE="${1:-}"
ROUNDS="${2:-3}"
L="$ROOT/build/large"
[ -f "$L/gpt2_small.onnx" ] && [ -f "$L/external/gpt2_small.onnx" ] ||
  /usr/bin/python3 "$ROOT/scripts/make_large_onnx.py" "$L"
[ -f "$L/zoo_gpt2.json" ] || "$AFTER" zoo gpt2 -o "$L/zoo_gpt2.json" > /dev/null
DIMS=(--dim batch=1 --dim seq=128)
COMMANDS=(
  "audit $ROOT/examples/gpt2_tiny.json"
  "audit $L/gpt2_small.onnx ${DIMS[*]}"
  "audit $L/external/gpt2_small.onnx ${DIMS[*]}"
  "audit $L/zoo_gpt2.json"
)
if [ "${LNV_BENCH_HEAVY:-0}" = 1 ]; then
  COMMANDS+=("check --engine torch --torch-trials 1 $L/external/gpt2_small.onnx ${DIMS[*]}"
             "fidelity --trials 1 --trials64 1 $L/external/gpt2_small.onnx ${DIMS[*]}")
fi

# measure BINARY ARGS...: prints "wall user rss_mb exit".
measure() {
  local t
  t="$(mktemp)"
  /usr/bin/time -f '%e %U %M %x' -o "$t" "$@" > /dev/null 2>&1 || true
  tail -1 "$t" | awk '{ printf "%s %s %.0f %s\n", $1, $2, $3 / 1024, $4 }'
  rm -f "$t"
}

echo "load average: $(cut -d' ' -f1 /proc/loadavg); $ROUNDS rounds, alternating"
printf '%-70s | %-22s | %-22s | %s\n' "command" "baseline: wall user RSS" "this: wall user RSS" "ratio wall, RSS"
for cmd in "${COMMANDS[@]}"; do
  read -ra args <<< "$cmd"
  b_wall=(); b_rss=(); a_wall=(); a_rss=(); b_user=(); a_user=()
  for ((r = 0; r < ROUNDS; ++r)); do
    if [ -n "$BEFORE" ]; then
      read -r w u m x < <(measure "$BEFORE" "${args[@]}")
      b_wall+=("$w"); b_user+=("$u"); b_rss+=("$m")
    fi
    read -r w u m x < <(measure "$AFTER" "${args[@]}")
    a_wall+=("$w"); a_user+=("$u"); a_rss+=("$m")
    [ "$x" = 0 ] || echo "  (exit $x: $cmd)"
  done
  median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
  aw=$(median "${a_wall[@]}"); au=$(median "${a_user[@]}"); am=$(median "${a_rss[@]}")
  if [ -n "$BEFORE" ]; then
    bw=$(median "${b_wall[@]}"); bu=$(median "${b_user[@]}"); bm=$(median "${b_rss[@]}")
    ratio=$(awk -v bw="$bw" -v aw="$aw" -v bm="$bm" -v am="$am" \
      'BEGIN { printf "%.1fx faster, %.1fx less memory", bw / aw, bm / am }')
    printf '%-70s | %6ss %6ss %5s MB | %6ss %6ss %5s MB | %s\n' "${cmd//$L\//}" "$bw" "$bu" "$bm" "$aw" "$au" "$am" "$ratio"
  else
    printf '%-70s | %-22s | %6ss %6ss %5s MB |\n' "${cmd//$L\//}" "-" "$aw" "$au" "$am"
  fi
done
