#!/usr/bin/env bash
# Times two lnverify binaries side by side on this machine and prints the ratios:
#
#   bench/compare.sh OLD_BINARY NEW_BINARY
#
# Rows: `check` of every committed real export (tests/baselines/models.txt, ONNX lines, at
# their --dim bindings) in inference and training mode, then `fuzz` cases per minute (the
# default size, --keep-going; a binary that has --jobs runs with its default, the cores).
# The two binaries run interleaved (old, new; next row new, old), so load from elsewhere
# falls on both alike; wall and CPU (user + system, children included) seconds come from
# /usr/bin/time. A check row also says whether the two JSON reports are byte-identical.
#
# Environment: ROUNDS (default 1) repeats of each row, the medians printed; FUZZ_CASES
# (default 2000); ANALYSIS_OLD / ANALYSIS_NEW: two bench_analysis_scale binaries, to add
# their 10^6-node rows (with peak memory); ONLY: a regular expression on the row names.
# Run from the repository root.
set -euo pipefail

if [ $# -ne 2 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
  echo "usage: bench/compare.sh OLD_BINARY NEW_BINARY (both executable)" >&2
  exit 2
fi
OLD=$(realpath "$1")
NEW=$(realpath "$2")
ROUNDS=${ROUNDS:-1}
FUZZ_CASES=${FUZZ_CASES:-2000}
ONLY=${ONLY:-.}
[ -f tests/baselines/models.txt ] || { echo "bench/compare.sh: run from the repository root" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run TAG BINARY ARGS...: one timed run; appends "wall cpu maxrss_kb" to $TMP/TAG.times.
run() {
  local tag=$1 bin=$2
  shift 2
  /usr/bin/time -f "%e %U %S %M" -o "$TMP/time" "$bin" "$@" > "$TMP/$tag.out" 2>&1 || true
  awk '{ printf "%s %.2f %s\n", $1, $2 + $3, $4 }' "$TMP/time" >> "$TMP/$tag.times"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
column_median() { awk -v c="$2" '{ print $c }' "$1" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

printf '%-48s %9s %9s %7s %9s %9s %7s %s\n' "row" "old_wall" "new_wall" "ratio" "old_cpu" "new_cpu" "ratio" "reports"
row=0
# pair NAME ARGS...: both binaries on the same arguments, interleaved, ROUNDS times.
pair() {
  local name=$1
  shift
  [[ $name =~ $ONLY ]] || return 0
  rm -f "$TMP"/old.times "$TMP"/new.times
  local same=identical
  for ((r = 0; r < ROUNDS; ++r)); do
    if (( (row + r) % 2 == 0 )); then order="old new"; else order="new old"; fi
    for who in $order; do
      local bin=$OLD
      [ "$who" = new ] && bin=$NEW
      run "$who" "$bin" "$@" --json "$TMP/$who.json"
    done
    cmp -s "$TMP/old.json" "$TMP/new.json" || same=DIFFERENT
  done
  row=$((row + 1))
  local ow nw oc nc
  ow=$(column_median "$TMP/old.times" 1); nw=$(column_median "$TMP/new.times" 1)
  oc=$(column_median "$TMP/old.times" 2); nc=$(column_median "$TMP/new.times" 2)
  printf '%-48s %9s %9s %7s %9s %9s %7s %s\n' "$name" "$ow" "$nw" "$(ratio "$ow" "$nw")" "$oc" "$nc" "$(ratio "$oc" "$nc")" "$same"
}

while read -r model dims; do
  case $model in ''|'#'*|*.json) continue ;; esac
  for mode in inference training; do
    # shellcheck disable=SC2086 # the --dim bindings are separate words
    pair "check $(basename "$model" .onnx) $mode" check "$model" $dims --mode "$mode"
  done
done < tests/baselines/models.txt

# Fuzz: cases per minute from each binary's wall time.
fuzz_row() {
  [[ "fuzz" =~ $ONLY ]] || return 0
  rm -f "$TMP"/old.times "$TMP"/new.times
  for ((r = 0; r < ROUNDS; ++r)); do
    for who in old new; do
      local bin=$OLD
      [ "$who" = new ] && bin=$NEW
      run "$who" "$bin" fuzz --cases "$FUZZ_CASES" --keep-going --out "$TMP/fuzz-$who" \
        --json "$TMP/fuzz-$who.json"
    done
  done
  local ow nw oc nc
  ow=$(column_median "$TMP/old.times" 1); nw=$(column_median "$TMP/new.times" 1)
  oc=$(column_median "$TMP/old.times" 2); nc=$(column_median "$TMP/new.times" 2)
  # The campaign reports without their timing and output path.
  local same=identical
  for who in old new; do
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1])); d.pop("seconds"); d["settings"].pop("out")
print(json.dumps(d, sort_keys=True))' "$TMP/fuzz-$who.json" > "$TMP/fuzz-$who.norm"
  done
  cmp -s "$TMP/fuzz-old.norm" "$TMP/fuzz-new.norm" || same=DIFFERENT
  printf '%-48s %9s %9s %7s %9s %9s %7s %s\n' "fuzz $FUZZ_CASES cases (wall s)" "$ow" "$nw" \
    "$(ratio "$ow" "$nw")" "$oc" "$nc" "$(ratio "$oc" "$nc")" "$same"
  printf '%-48s %9.0f %9.0f %7s\n' "fuzz cases per minute (wall)" \
    "$(awk -v n="$FUZZ_CASES" -v s="$ow" 'BEGIN { print 60 * n / s }')" \
    "$(awk -v n="$FUZZ_CASES" -v s="$nw" 'BEGIN { print 60 * n / s }')" "$(ratio "$ow" "$nw")"
}
fuzz_row

if [ -n "${ANALYSIS_OLD:-}" ] && [ -n "${ANALYSIS_NEW:-}" ] && [[ "analysis" =~ $ONLY ]]; then
  for who in old new; do
    bin=$ANALYSIS_OLD
    [ "$who" = new ] && bin=$ANALYSIS_NEW
    /usr/bin/time -f "%M" -o "$TMP/time" "$bin" 1000000 > "$TMP/analysis-$who.out"
    echo "analysis 10^6 nodes ($who): $(tail -1 "$TMP/analysis-$who.out" | awk '{ print $3 " s wall, " $4 " s CPU, " $5 " us/node" }'), peak $(cat "$TMP/time") KB"
  done
fi
