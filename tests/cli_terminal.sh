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

# --- progress of importing ONNX and writing folds ---------------------------------------------
# Steps shown through StepProgress, after LNV_PROGRESS_DELAY seconds (0 here, so that these
# small models show them). A zoo GPT-2 exported with external data has initializers over
# 4096 values, which the importer reads lazily ("read weights", not for audit or an ONNX
# fold, which read the file as they write) and the fold copies.
# strip_bars FILE: FILE's terminal stream without the bar draws and erasures ("\r...ESC[K")
# and the terminal's carriage returns at line ends: what stdout wrote, when the bars were
# erased before each line.
strip_bars() { perl -pe 's/\r[^\r\n]*?\e\[K//g; s/\r$//' "$1"; }
E="$T/e/gpt2.onnx"
mkdir -p "$T/e" "$T/o"
if "$LNV" zoo gpt2 --layers 1 --hidden 64 --heads 2 --vocab 100 --seq 4 -o "$T/z.json" > /dev/null &&
   "$LNV" export "$T/z.json" -o "$E" --external-data > /dev/null 2>&1; then
  P="LNV_PROGRESS_DELAY=0"
  tty "fold to ONNX on a TTY" 0 "$P '$LNV' fold '$E' -o '$T/o/f.onnx'"
  has "fold TTY: import steps without a count" "parse model \.\.\..*infer shapes \.\.\..*fold constants \.\.\."
  has "fold TTY: a bar over the imported nodes" "import nodes \[[=> ]+\] [0-9]+/[0-9]+ nodes +[0-9.kMG]+/s +ETA"
  lacks "fold TTY: no weights read at load (the writer streams what it centers)" "read weights"
  has "fold TTY: a bar over the centered initializers" "center weights \[=+\] 6/6 initializers"
  has "fold TTY: a bar over the external data copied" "copy external data \[=+\] 247.8k/247.8k bytes"
  has "fold TTY: a bar over the model written" "write model \[=+\] [0-9]+/[0-9]+ bytes"
  has "fold TTY: the bar is erased before the summary" $'\r\e\\[K3 of 3 LayerNorms foldable'
  strip_bars "$T/raw" > "$T/tty_text"
  "$LNV" fold "$E" -o "$T/o/f.onnx" > "$T/plain" 2> "$T/err"
  if cmp -s "$T/plain" "$T/tty_text"; then ok "fold TTY: without its bars, the bytes of a plain run"
  else bad "fold TTY: the terminal text differs from a plain run"; diff "$T/plain" "$T/tty_text" | head; fi
  if [ ! -s "$T/err" ]; then ok "fold: stderr not a TTY, no bar"; else bad "fold: bar in a non-TTY stderr"; fi
  tty "fold, stdout to a file, stderr a TTY" 0 "$P '$LNV' fold '$E' -o '$T/o/f.onnx' > '$T/stdout'"
  has "fold stderr TTY: the bars on stderr" "write model \[=+\]"
  if cmp -s "$T/plain" "$T/stdout"; then ok "fold stderr TTY: stdout byte-identical to a plain run"
  else bad "fold stderr TTY: stdout differs from a plain run"; fi
  tty "fold --quiet on a TTY" 0 "$P '$LNV' fold '$E' -o '$T/o/f.onnx' -q"
  lacks "fold --quiet: no bar" "\.\.\.|ETA"
  tty "fold on a TTY within the delay" 0 "LNV_PROGRESS_DELAY=60 '$LNV' fold '$E' -o '$T/o/f.onnx'"
  lacks "fold within LNV_PROGRESS_DELAY: no bar" "\.\.\.|ETA"
  tty "fold to model.json with a side file on a TTY" 0 "$P '$LNV' fold '$E' -o '$T/o/f.json' --weights '$T/o/w.safetensors'"
  has "fold json TTY: a bar over the params encoded" "encode params \[=+\] [0-9]+/[0-9]+ params"
  has "fold json TTY: a bar over the weights written" "write weights \[=+\] [0-9.k]+/[0-9.k]+ bytes"
  has "fold json TTY: the files committed" "commit files \.\.\."
  strip_bars "$T/raw" > "$T/tty_text"
  "$LNV" fold "$E" -o "$T/o/f.json" --weights "$T/o/w.safetensors" > "$T/plain" 2>&1
  if cmp -s "$T/plain" "$T/tty_text"; then ok "fold json TTY: without its bars, the bytes of a plain run"
  else bad "fold json TTY: the terminal text differs from a plain run"; fi
  tty "import on a TTY" 0 "$P '$LNV' import '$E' -o '$T/o/i.json'"
  has "import TTY: the import steps" "import nodes \[=+\].*read weights \[=+\]"
  has "import TTY: the model written" "format params \[=+\].*write model \[=+\]"
  tty "audit on a TTY (values not read)" 0 "$P '$LNV' audit '$E'"
  has "audit TTY: the import steps" "import nodes \[=+\]"
  lacks "audit TTY: no weights read" "read weights"
  # 17 tokens: one more than GPT-2's position table holds.
  tty "an error on a TTY" 2 "$P '$LNV' fold '$ROOT/tests/data/onnx/gpt2_tiny_opset17.onnx' --dim batch=1 --dim seq=17 -o '$T/o/g.onnx'"
  has "error TTY: the bar erased before the message" $'\r\e\\[Klnverify: error: .*Gather index 16 is out of range'
else
  echo "skip  import and fold progress (built without ONNX)"
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
