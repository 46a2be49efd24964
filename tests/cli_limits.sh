#!/usr/bin/env bash
# Options refused before any work: non-positive bench sizes and counts, an output name too
# long for the file system (with both lengths), a `fuzz --out` that cannot be written.
# Usage: cli_limits.sh path/to/lnverify
source "$(dirname "$0")/cli_lib.sh"
EX="$ROOT/examples/gpt2_tiny.json"

for opt in --threads --layers --hidden --heads --vocab --batch --repeats --kernel-repeats --seq; do
  for v in 0 -3; do
    run "bench $opt $v" 2 "$LNV" bench --zoo gpt2 "$opt" "$v"
    has "bench $opt $v names the option" "$opt: expected a whole number of at least 1"
  done
done

long=$(printf 'a%.0s' $(seq 300))
run "fold -o with a 305-byte name" 2 "$LNV" fold "$EX" -o "$T/$long.json"
has "fold -o: the name's length and the limit" "file name is 305 bytes long, more than the 255"
run "zoo -o with a 305-byte name" 2 "$LNV" zoo gpt2 -o "$T/$long.json"
has "zoo -o: the name's length and the limit" "file name is 305 bytes long, more than the 255"
# A name that fits, whose temporary name alone would not.
fits=$(printf 'b%.0s' $(seq 245)).json
run "fold -o with a 250-byte name" 0 "$LNV" fold "$EX" -o "$T/$fits"
[ -f "$T/$fits" ] && ok "the 250-byte name was written" || bad "the 250-byte name was not written"

touch "$T/plain"
run "fuzz --out under a regular file" 2 "$LNV" fuzz --cases 1 --out "$T/plain/failures"
has "fuzz --out: refused before the campaign" "not a directory"
if grep -q "cases/s\|no failing case" "$T/out"; then bad "fuzz ran cases before refusing --out"; else ok "no case ran"; fi
run "fuzz --out naming a regular file" 2 "$LNV" fuzz --cases 1 --out "$T/plain"
run "fuzz --out in a new directory" 0 "$LNV" fuzz --cases 1 --out "$T/new/failures"

finish
