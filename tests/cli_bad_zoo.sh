#!/usr/bin/env bash
# `lnverify zoo` on bad options: sizes beyond the limits, bad depths, non-finite values;
# a clear error naming the option, a non-zero exit, and no file written.
#   bash tests/cli_bad_zoo.sh PATH/TO/lnverify
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh" "$1"
TINY=(--layers 1 --hidden 16 --heads 2 --seq 4 --vocab 32)

# --- sizes past the limits (architectures.h): refused before any weight is drawn ---------
run "a size past 2^31 on its own" 2 "$LNV" zoo gpt2 --batch 99999999999 -o "$T/b.json"
has "a size past 2^31: names --batch and the limit" "zoo/--batch: expected a positive integer up to 2\^31, got 99999999999"
absent "a size past 2^31: no model written" "$T/b.json"

run "an input past 2^31 elements" 2 "$LNV" zoo gpt2 --batch 3000000 -o "$T/b.json"
has "the input: names --batch, the input and the limit" "zoo/--batch 3000000: input 'tok', of shape \[3000000, 1024\], would hold more than 2\^31 elements"
absent "the input: no model written" "$T/b.json"

run "a param past 2^31 elements" 2 "$LNV" zoo gpt2 --hidden 1000000 --heads 1 -o "$T/h.json"
has "the param: names --hidden and the param" "zoo/--hidden 1000000 --heads 1: param 'wte', .*2\^31"
absent "the param: no model written" "$T/h.json"

run "params past 2^31 values in all" 2 "$LNV" zoo gpt2 --layers 400 -o "$T/l.json"
has "the params: names --layers and the limit per model" "zoo/--layers 400: the params hold more than 2\^31 values"
absent "the params: no model written" "$T/l.json"

# The limits are checked on the layout before any weight is drawn: a model whose params
# pass 2^31 values only at its second block fails within 1 GB, though its token table
# alone would take 3.3 GB.
# Under AddressSanitizer (scripts/test.sh --sanitize sets LNV_SANITIZE) `ulimit -v` leaves
# no room for its shadow memory; ASan's own cap on one allocation stands in (a drawn token
# table would pass it and abort, which fails the exit-code check just the same).
if [ -n "${LNV_SANITIZE:-}" ]; then
  within_1gb=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:max_allocation_size_mb=1000:allocator_may_return_null=1")
else
  within_1gb=(bash -c 'ulimit -v 1000000; exec "$@"' -)
fi
run "params past the limit fail before any weight is drawn" 2 \
  "${within_1gb[@]}" "$LNV" zoo gpt2 --layers 3 --hidden 8192 --heads 1 -o "$T/m.json"
has "before any weight is drawn: the limit, not bad_alloc" "zoo/--layers 3 --hidden 8192 --heads 1: the params hold more than 2\^31 values"
absent "before any weight is drawn: no model written" "$T/m.json"

run "a node output past 2^31 elements" 2 "$LNV" zoo gpt2 --layers 1 --hidden 2 --heads 1 --seq 4096 --vocab 1048576 -o "$T/n.json"
has "the node output: names --vocab and the node" "zoo/.*--vocab 1048576: .*lm_head.*2\^31"
absent "the node output: no model written" "$T/n.json"

run "attention probabilities past 2^31 elements" 2 "$LNV" zoo gpt2 --layers 1 --hidden 2 --heads 2 --seq 65536 --vocab 4 -o "$T/a.json"
has "the attention: names --seq and the node" "zoo/.*--seq 65536.*: the attention probabilities of node 'h.0.attn'"
absent "the attention: no model written" "$T/a.json"

# A billion blocks must be refused before any work; `timeout` turns a hang into a failure.
run "a billion layers" 2 timeout 60 "$LNV" zoo gpt2 --layers 1000000000 -o "$T/deep.json"
has "a billion layers: names --layers and the limit" "zoo/--layers: expected from 1 to [0-9]+ blocks"
absent "a billion layers: no model written" "$T/deep.json"

# 65 stages halve the patch grid 64 times; the shift by 64 that computed it crashed (SIGFPE).
depths65="$(printf '1,%.0s' $(seq 64))1"
run "swin with 65 stages" 2 "$LNV" zoo swin --depths "$depths65" -o "$T/s.json"
has "65 stages: names --depths" "zoo/--depths: the 56x56 patch grid .* cannot be halved 64 times"
absent "65 stages: no model written" "$T/s.json"

# CLI11's list option quoted the wrong tokens for an empty entry ("--depths = -o,m.json").
for v in , 2,,2 2,x; do
  run "--depths $v" 2 "$LNV" zoo convnext --depths "$v" -o "$T/d.json"
  has "--depths $v: names the option and the value" "zoo/--depths: expected blocks per stage separated by commas .*got '$v'"
done
absent "--depths: no model written" "$T/d.json"
run "--depths 1,1 at a test size" 0 "$LNV" zoo convnext --depths 1,1 --hidden 8 --image 16 --classes 3 -o "$T/d.json"
run "the model has the two stages" 0 "$LNV" "$T/d.json"
has "two stages: stem, one downsample, two blocks and the head's LN" "of 5 LayerNorms"

# --- floating options: NaN, infinities and negative values are the option's error ----------
for v in inf -inf nan -1; do
  run "--init-std $v" 2 "$LNV" zoo gpt2 "${TINY[@]}" --init-std "$v" -o "$T/std.json"
  has "--init-std $v: names the option, not a param of a model never written" "zoo/--init-std: expected a finite"
done
absent "--init-std: no model written" "$T/std.json"
run "--init-std whose draws overflow a double" 2 "$LNV" zoo gpt2 "${TINY[@]}" --init-std 1e308 -o "$T/std.json"
has "draws past the double range: names --init-std" "zoo/--init-std: .*beyond the double range"
run "--init-std whose draws overflow float32 (--safetensors)" 2 "$LNV" zoo gpt2 "${TINY[@]}" --init-std 1e300 --safetensors -o "$T/std.json"
has "draws past float32: names --init-std" "zoo/--init-std: .*float32"
absent "past float32: no model written" "$T/std.json"
absent "past float32: no side file written" "$T/std.safetensors"
for v in inf -inf nan; do
  run "--dropout $v" 2 "$LNV" zoo gpt2 "${TINY[@]}" --dropout "$v" -o "$T/p.json"
  has "--dropout $v: names the option" "zoo/--dropout: expected 0 <= p < 1"
done
absent "--dropout: no model written" "$T/p.json"

# --- --seed: 0 to 2^64 - 1; CLI11 wrapped -1 and saturated larger values --------------------
for v in -1 18446744073709551616 1e3; do
  run "--seed $v" 2 "$LNV" zoo gpt2 "${TINY[@]}" --seed "$v" -o "$T/seed.json"
  has "--seed $v: names the option" "--seed: expected an integer from 0 to 2\^64 - 1, got '$v'"
done
absent "--seed: no model written" "$T/seed.json"
run "--seed 2^64 - 1" 0 "$LNV" zoo gpt2 "${TINY[@]}" --seed 18446744073709551615 -o "$T/seed.json"
grep -q '"seed": 18446744073709551615,' "$T/seed.json" && ok "the largest seed is written as given" \
  || bad "the largest seed is not in the model"

# --- --safetensors: the model and its side file are written both or neither ----------------
mkdir "$T/zd"
run "-o a directory, with --safetensors" 2 "$LNV" zoo gpt2 "${TINY[@]}" --safetensors -o "$T/zd"
has "-o a directory: names -o" "zoo/-o: .*zd is a directory"
absent "-o a directory: no side file" "$T/zd.safetensors"

mkdir "$T/sd.safetensors"
run "the side file's path is a directory" 2 "$LNV" zoo gpt2 "${TINY[@]}" --safetensors -o "$T/sd.json"
has "side file a directory: names it" "sd.safetensors"
absent "side file a directory: the model written first is removed again" "$T/sd.json"

run "-o the side file's own name" 2 "$LNV" zoo gpt2 "${TINY[@]}" --safetensors -o "$T/self.safetensors"
has "-o the side file: names -o" "zoo/-o: .*the model file itself"
absent "-o the side file: nothing written" "$T/self.safetensors"

# A side file that was there before stays as it was when the run fails.
printf 'old weights' > "$T/keep.safetensors"
mkdir "$T/keep"
run "failing run beside an existing side file (-o a directory)" 2 "$LNV" zoo gpt2 "${TINY[@]}" --safetensors -o "$T/keep"
run "failing run beside an existing side file (bad size)" 2 "$LNV" zoo gpt2 "${TINY[@]}" --batch 3000000000 --safetensors -o "$T/keep.json"
[ "$(cat "$T/keep.safetensors")" = "old weights" ] && ok "the existing side file is unchanged" \
  || bad "the existing side file was changed"
absent "failing run: no model written" "$T/keep.json"

run "--safetensors at a test size" 0 "$LNV" zoo gpt2 "${TINY[@]}" --safetensors -o "$T/ok.json"
run "its model audits" 0 "$LNV" "$T/ok.json"

finish
