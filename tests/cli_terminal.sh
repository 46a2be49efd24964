#!/usr/bin/env bash
# The terminal: colour only on a TTY and never with NO_COLOR; a progress bar on stderr
# only when stderr is a TTY (never in a pipe or a log, never under --quiet); --quiet and
# --verbose. (Alignment by display width: tests/test_text_style.cpp.) A TTY comes from util-linux's
# `script`, which runs the command on a pseudo-terminal.
#   bash tests/cli_terminal.sh path/to/lnverify
source "$(dirname "$0")/cli_lib.sh"
M="$ROOT/examples/gpt2_tiny.json"
ESC=$'\033'
if ! command -v script > /dev/null; then echo "skip: util-linux's script is not installed"; exit 77; fi

# tty NAME EXPECTED_RC CMD: runs the shell command line CMD on a pseudo-terminal (stdout
# and stderr both the terminal), output in $T/out without the terminal's carriage returns
# at line ends.
tty() {
  local name="$1" want="$2"
  script -qec "$3" /dev/null < /dev/null > "$T/raw" 2>&1
  local rc=$?
  sed 's/\r$//' "$T/raw" > "$T/out"
  if [ "$rc" -eq "$want" ]; then ok "$name (exit $rc)"; else bad "$name: exit $rc, expected $want"; fi
}

# --- colour ----------------------------------------------------------------------------------
tty "audit on a TTY" 0 "unset NO_COLOR; '$LNV' audit '$M'"
has "TTY: verdicts coloured (yes green)" "${ESC}\[32myes${ESC}\[0m"
has "TTY: verdicts coloured (no red)" "${ESC}\[31mno${ESC}\[0m"
tty "audit on a TTY with NO_COLOR=1" 0 "NO_COLOR=1 '$LNV' audit '$M'"
lacks "NO_COLOR: no escape code" "$ESC"
tty "audit on a TTY with NO_COLOR empty" 0 "NO_COLOR= '$LNV' audit '$M'"
has "NO_COLOR empty: colour stays (no-color.org)" "${ESC}\[32m"
tty "audit piped" 0 "unset NO_COLOR; '$LNV' audit '$M' | cat"
lacks "pipe: no escape code" "$ESC"
cp "$T/out" "$T/piped"
"$LNV" audit "$M" > "$T/plain" 2>&1
if cmp -s "$T/plain" "$T/piped"; then ok "pipe: the same bytes as a plain run"; else bad "pipe output differs from plain"; fi
tty "check on a TTY" 0 "unset NO_COLOR; '$LNV' check '$M' --trials 1"
has "check TTY: outcome coloured" "${ESC}\[32mholds${ESC}\[0m"

# --- progress bar ----------------------------------------------------------------------------
has "check TTY: a progress bar with rate and ETA" "check \[[=> ]+\] [0-9]+/[0-9]+ checks +[0-9.]+/s +ETA"
has "check TTY: the bar is erased" "${ESC}\[K"
tty "check, stderr to a file" 0 "'$LNV' check '$M' --trials 1 2> '$T/err'"
if [ ! -s "$T/err" ]; then ok "check: stderr not a TTY, no bar"; else bad "check: bar in a non-TTY stderr"; cat "$T/err"; fi
tty "check --quiet on a TTY" 0 "'$LNV' check '$M' --trials 1 --quiet"
lacks "quiet: no bar" "checks +[0-9.]+/s"
"$LNV" check "$M" --trials 1 > "$T/out" 2>&1
lacks "check without a TTY: no bar" "ETA|$ESC"
tty "fuzz on a TTY" 0 "'$LNV' fuzz --cases 3 --max-nodes 6 --out '$T/fz'"
has "fuzz TTY: a progress bar" "fuzz \[[=> ]+\] [0-9]+/3 cases"
"$LNV" fuzz --cases 3 --max-nodes 6 --out "$T/fz" > "$T/out" 2>&1
lacks "fuzz without a TTY: no bar" "ETA"
if [ -x "$(dirname "$LNV")/lnverify-torch" ]; then  # built with LibTorch (its helper beside lnverify)
  tty "fidelity on a TTY" 0 "'$LNV' fidelity '$M' --trials 3"
  has "fidelity TTY: a progress bar" "fidelity \[[=> ]+\] [0-9]+/[0-9]+ trials"
  tty "bench on a TTY" 0 "'$LNV' bench --zoo gpt2 --layers 1 --hidden 16 --heads 2 --vocab 20 --seq 4 --repeats 3 --no-kernels"
  has "bench TTY: a progress bar" "model gpt2 \[[=> ]+\] [0-9]+/3 forward pairs"
else
  echo "skip  fidelity and bench progress (built without LibTorch)"
fi

# --- --quiet and --verbose -------------------------------------------------------------------
run "audit --quiet" 0 "$LNV" audit "$M" --quiet
if [ "$(wc -l < "$T/out")" = 1 ]; then ok "audit --quiet: one line"; else bad "audit --quiet: $(wc -l < "$T/out") lines"; fi
has "audit --quiet: the summary" "^5 of 5 LayerNorms foldable"
run "global -q before the model" 0 "$LNV" -q "$M"
has "-q MODEL: the summary only" "^5 of 5 LayerNorms foldable"
run "check --quiet" 0 "$LNV" --quiet check "$M" --trials 1
if [ "$(cat "$T/out")" = "result: holds (6 hold, 0 fail, 0 inconclusive)" ]; then ok "check --quiet: the result line only"
else bad "check --quiet: unexpected output"; fi
run "fold --quiet" 0 "$LNV" fold "$M" -o "$T/f.json" -q
has "fold --quiet: what was written" "^wrote .*f.json: 5 LayerNorms -> RMSNorm"
lacks "fold --quiet: no summary" "norm arithmetic"
run "audit --verbose" 0 "$LNV" audit "$M" --verbose
has "audit --verbose: the path of a no" "path \(training\): drop_emb -> h0.add_attn -> h0.ln_2$"
lacks "audit --verbose: no term list cut short" "more$"
run "audit (normal)" 0 "$LNV" audit "$M"
lacks "audit normal: no paths" "path \(training\)"
run "check --verbose" 0 "$LNV" check "$M" --trials 1 --verbose
has "check --verbose: centered terms of a holding check" "^      centered: "
run "--quiet with --verbose" 2 "$LNV" audit "$M" --quiet --verbose
has "both: refused" "exclude each other"

finish
