#!/bin/bash
# lnverify without LibTorch in its process (cli/torch_helper.h): it does not link it, runs
# lnverify-torch beside it for fidelity, bench and check --engine torch, and, when that
# helper is missing, says so (exit 2) while every other command still works.
#   bash tests/cli_torch_helper.sh path/to/lnverify
source "$(dirname "$0")/cli_lib.sh"
EX="$ROOT/examples/gpt2_tiny.json"

if ldd "$LNV" | grep -q libtorch; then bad "lnverify links LibTorch"; else ok "lnverify does not link LibTorch"; fi
run "fidelity through lnverify-torch" 0 "$LNV" fidelity "$EX" --trials 2
has "fidelity: the report" "5 of 5 LayerNorms folded"
run "check --engine torch through lnverify-torch" 0 "$LNV" check "$EX" --engine torch --torch-trials 2
has "check --engine torch: the report" "top-1 agreement: 32 / 32"
run "bench through lnverify-torch" 0 "$LNV" bench --zoo gpt2 --layers 1 --hidden 16 --heads 2 \
  --vocab 20 --seq 4 --repeats 2 --no-kernels
has "bench: BLAS and threads" "threads: [0-9]+"

# lnverify alone in a folder: no helper beside it.
mkdir "$T/alone" && cp "$LNV" "$T/alone/lnverify"
ALONE="$T/alone/lnverify"
run "alone: audit" 0 "$ALONE" audit "$EX"
run "alone: check (exact engine)" 0 "$ALONE" check "$EX" --trials 1
run "alone: fidelity" 2 "$ALONE" fidelity "$EX"
has "alone: fidelity names the missing helper" "^lnverify: error: fidelity: needs LibTorch, which runs in .*/alone/lnverify-torch"
run "alone: check --engine torch" 2 "$ALONE" check "$EX" --engine torch
has "alone: --engine names the missing helper" "error: --engine: needs LibTorch.*lnverify-torch"
run "alone: bench" 2 "$ALONE" bench --zoo gpt2 --no-kernels
has "alone: bench names the missing helper" "error: bench: needs LibTorch"
# Options are read by lnverify itself, before any helper is looked for.
run "alone: fidelity --trials 0 is refused while parsing" 2 "$ALONE" fidelity "$EX" --trials 0
has "alone: the option's message" "--trials: Value 0 not in range"
finish
