#!/usr/bin/env bash
# End-to-end tests of the `lnverify` executable: the commands a user runs, their exit
# codes, their files, and their errors on bad input (clear message naming the place,
# non-zero exit, no partial output file).
#   bash tests/cli_end_to_end.sh PATH/TO/lnverify
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh" "$1"

EX="$ROOT/examples/gpt2_tiny.json"

# --- help ------------------------------------------------------------------------------
run "--help" 0 "$LNV" --help
has "--help names the program" "^Usage: lnverify \[OPTIONS\] SUBCOMMAND"

# --- audit: the main answer -------------------------------------------------------------
run "audit of the shipped GPT-2 example" 0 "$LNV" "$EX"
has "audit table lists ln_f" "^ln_f +yes"
has "audit summary line" "of 5 LayerNorms foldable"
has "audit names the training-mode dropout" "drop_emb"
run "audit --json" 0 "$LNV" audit "$EX" --json "$T/report.json"
[ -s "$T/report.json" ] && ok "json written" || bad "json written: $T/report.json missing or empty"
grep -q '"format": *"lnverify.report"' "$T/report.json" && grep -q '"layer_norms"' "$T/report.json" \
  && ok "report has format and layer_norms" || bad "report.json lacks format/layer_norms"

# --- fold: writes a valid model, never its input, never a partial file -------------------
run "fold inference" 0 "$LNV" fold "$EX" -o "$T/folded.json"
run "folded model audits (its LNs became rms_norm)" 0 "$LNV" "$T/folded.json"
has "folded model has no LayerNorm left" "0 of 0 LayerNorms|no LayerNorm"
grep -q '"rms_norm"' "$T/folded.json" && ok "folded model uses rms_norm" || bad "no rms_norm in fold"
run "fold training" 0 "$LNV" fold "$ROOT/tests/golden/linear_ln.json" -o "$T/folded_train.json" --mode training
grep -q '"cbwc": *true' "$T/folded_train.json" && ok "training fold marks cbwc" || bad "no cbwc in training fold"
cp "$EX" "$T/self.json"
run "fold refuses to overwrite its input" 2 "$LNV" fold "$T/self.json" -o "$T/self.json"
cmp -s "$EX" "$T/self.json" && ok "input untouched" || bad "input was modified"

# --- eval -------------------------------------------------------------------------------
run "eval 256-bit with gradients" 0 "$LNV" eval "$EX" --grad --json "$T/eval.json"
grep -q '"outputs"' "$T/eval.json" && ok "eval json has outputs" || bad "eval json"
run "eval double, training" 0 "$LNV" eval "$EX" --bits 53 --mode training --seed 7

# --- check: proof by exact evaluation -----------------------------------------------------
run "check inference proves the fold" 0 "$LNV" check "$ROOT/tests/golden/linear_ln.json"
run "check training" 0 "$LNV" check "$EX" --mode training --trials 1 --json "$T/check.json"
[ -s "$T/check.json" ] && ok "check json written" || bad "check json missing"

# --- zoo + fuzz -------------------------------------------------------------------------
run "zoo gpt2 small" 0 "$LNV" zoo gpt2 --layers 1 --hidden 8 --heads 2 --seq 4 --vocab 16 -o "$T/zoo.json"
run "zoo model audits" 0 "$LNV" "$T/zoo.json"

# --- fold of a model with safetensors weights (deferred load, streamed side file) -------
run "zoo gpt2 with safetensors" 0 "$LNV" zoo gpt2 --layers 1 --hidden 32 --heads 2 --seq 4 --vocab 64 --safetensors -o "$T/st.json"
run "fold of a safetensors model" 0 "$LNV" fold "$T/st.json" -o "$T/st.rms.json" --timings
has "fold writes a side file" "weights: st.rms.safetensors \(F32\)"
has "fold prints its timings" "timings: load .* save "
run "fold --no-fsync" 0 "$LNV" fold "$T/st.json" -o "$T/st.nosync.json" --no-fsync
cmp -s "$T/st.rms.safetensors" "$T/st.nosync.safetensors" && ok "--no-fsync writes the same weights" || bad "--no-fsync weights differ"
run "folded safetensors model audits" 0 "$LNV" "$T/st.rms.json"
has "folded safetensors model has no LayerNorm left" "0 of 0 LayerNorms|no LayerNorm"
run "fold refuses to overwrite the weights it reads" 2 "$LNV" fold "$T/st.json" -o "$T/st2.json" --weights "$T/st.safetensors"
run "short fuzz campaign" 0 "$LNV" fuzz --cases 5 --seed 3 --max-nodes 10 --out "$T/fuzz"
run "fuzz --keep-going, nothing failing" 0 "$LNV" fuzz --cases 5 --seed 3 --max-nodes 10 --keep-going --out "$T/fuzzk0"
has "fuzz --keep-going: summary without failures" "no failing case in 5"
# Seed 314870 is an over-cautious "no" of today's analysis (a grouped convolution whose
# weight centering is not exact, though the LN it feeds is; README "What is not done").
# If the analysis learns it, this check fails: take another seed from a `lnverify fuzz
# --keep-going` campaign. (Seed 170122 served until the softmax-column rule learned it.)
run "fuzz --keep-going over an over-cautious case" 1 "$LNV" fuzz --cases 1 --seed 314870 --keep-going --out "$T/fuzzk1"
has "fuzz --keep-going: the case is counted as over-cautious, not as a wrong yes" \
  '0 wrong "yes" .*; 1 over-cautious "no": 314870'
absent "fuzz --keep-going: an over-cautious case is not written" "$T/fuzzk1/case-314870.model.json"
# --jobs: worker processes; the reports (less timings and --out) do not depend on it, an
# over-cautious case among the cases included.
for j in 1 3; do
  run "fuzz --jobs $j" 1 "$LNV" fuzz --cases 6 --seed 314867 --keep-going --jobs "$j" \
    --out "$T/fuzzj$j" --json "$T/fuzzj$j.json" --junit "$T/fuzzj$j.xml"
done
has "fuzz --jobs: the over-cautious case is found" '1 over-cautious "no": 314870'
norm_fuzz() { sed -E -e '/"(seconds|out)":/d' -e 's/time="[^"]*"//g' "$1"; }
if [ -s "$T/fuzzj1.json" ] && cmp -s <(norm_fuzz "$T/fuzzj1.json") <(norm_fuzz "$T/fuzzj3.json") &&
   cmp -s <(norm_fuzz "$T/fuzzj1.xml") <(norm_fuzz "$T/fuzzj3.xml"); then
  ok "fuzz --jobs 3 writes the reports --jobs 1 writes"
else
  bad "fuzz --jobs 3 writes the reports --jobs 1 writes"
fi

# --- bad input: clear error naming the place, exit 2, no output file ----------------------
printf '{"format": "lnverify.model", "version": 1, ' > "$T/truncated.json"
run "truncated JSON" 2 "$LNV" fold "$T/truncated.json" -o "$T/never1.json"
has "truncated JSON: names the file and says JSON" "truncated.json.*(JSON|json)"
absent "truncated JSON: no output file" "$T/never1.json"

run "missing file" 2 "$LNV" audit "$T/does_not_exist.json"
has "missing file is named" "does_not_exist.json"

sed 's/"op": "layer_norm"/"op": "layer_norm_v2"/' "$ROOT/tests/golden/linear_ln.json" > "$T/unknown_op.json"
run "unknown op" 2 "$LNV" fold "$T/unknown_op.json" -o "$T/never2.json"
has "unknown op: names the node path and the op" "/nodes/[0-9]+.*layer_norm_v2"
absent "unknown op: no output file" "$T/never2.json"

cat > "$T/nan.json" <<'JSON'
{"format": "lnverify.model", "version": 1, "name": "nan",
 "inputs": [{"name": "x", "shape": [2, 3], "dtype": "float"}],
 "params": [{"name": "W", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 1e999]}],
 "nodes": [{"name": "h", "op": "linear", "inputs": ["x"], "weight": "W"}],
 "outputs": ["h"]}
JSON
run "infinite weight" 2 "$LNV" check "$T/nan.json"
has "infinite weight: names the file and the number" "nan.json.*1e999"

# A NaN weight in a safetensors file: 8-byte little-endian header length, header, data.
hdr='{"W":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}'
{ printf "$(printf '\\%03o' ${#hdr})"; printf '\000\000\000\000\000\000\000'; printf '%s' "$hdr";
  printf '\000\000\200\077%.0s' 1 2 3 4 5; printf '\000\000\300\177'; } > "$T/w.safetensors"
sed 's/"data": \[1, 2, 3, 4, 5, 1e999\]/"file": {"path": "w.safetensors", "key": "W"}/' "$T/nan.json" > "$T/nan_file.json"
run "NaN weight in safetensors" 2 "$LNV" fold "$T/nan_file.json" -o "$T/never4.json"
has "NaN weight: names the param and the flat index" "'W'.*non-finite.*index 5|index 5.*'W'"
absent "NaN weight: no output file" "$T/never4.json"

cat > "$T/cycle.json" <<'JSON'
{"format": "lnverify.model", "version": 1, "name": "cycle",
 "inputs": [{"name": "x", "shape": [2, 3], "dtype": "float"}],
 "params": [],
 "nodes": [{"name": "a", "op": "add", "inputs": ["x", "b"]},
           {"name": "b", "op": "relu", "inputs": ["a"]}],
 "outputs": ["b"]}
JSON
run "cycle" 2 "$LNV" eval "$T/cycle.json"
has "cycle: names a node on it" "cycle.*'(a|b)'"
has "cycle: names the file" "cycle\.json: .*cycle"

cat > "$T/shape.json" <<'JSON'
{"format": "lnverify.model", "version": 1, "name": "shape",
 "inputs": [{"name": "x", "shape": [2, 3], "dtype": "float"}],
 "params": [{"name": "W", "shape": [4, 5], "init": {"dist": "normal", "std": 1}}],
 "nodes": [{"name": "h", "op": "linear", "inputs": ["x"], "weight": "W"}],
 "outputs": ["h"]}
JSON
run "wrong shape" 2 "$LNV" audit "$T/shape.json"
has "wrong shape: names node h and the weight" "node 'h'.*weight|weight.*'W'"

run "unknown option" 2 "$LNV" audit "$EX" --frobnicate
run "unknown mode" 2 "$LNV" fold "$EX" -o "$T/never3.json" --mode sideways
absent "unknown mode: no output file" "$T/never3.json"

# --- option values: checked, not wrapped or let through -----------------------------------
for v in -1 18446744073709551616 12x; do
  run "check --seed $v" 2 "$LNV" check "$EX" --seed "$v"
  has "check --seed $v: names the option" "--seed: expected an integer from 0 to 2\^64 - 1"
done
run "eval --seed -1" 2 "$LNV" eval "$EX" --seed -1
run "fuzz --seed -1" 2 "$LNV" fuzz --cases 1 --seed -1
for v in 0 -5; do
  run "check --torch-trials $v" 2 "$LNV" check "$EX" --engine torch --torch-trials "$v"
done
for v in nan inf -1 0; do
  run "check --torch-tol $v" 2 "$LNV" check "$EX" --engine torch --torch-tol "$v"
  has "check --torch-tol $v: names the option" "--torch-tol: expected a finite number above 0"
done

# --- a model whose values do not fit: an error that says so, not a bare bad_alloc ---------
cat > "$T/huge.json" <<'JSON'
{"format": "lnverify.model", "version": 1,
 "inputs": [{"name": "x", "shape": [2]}],
 "params": [{"name": "W", "shape": [32768, 65536], "init": {"dist": "normal", "std": 0.02}}],
 "nodes": [{"name": "y", "op": "add", "inputs": ["x", "x"]}],
 "outputs": ["y"]}
JSON
# Refused up front with the total: the limit counts ulimit -v. AddressSanitizer cannot run
# under ulimit -v (its shadow memory), nor turn a failed new into bad_alloc, so under
# scripts/test.sh --sanitize this case is left to test_limits.
if [ -n "${LNV_SANITIZE:-}" ]; then
  echo "skip  huge init under ulimit -v (AddressSanitizer)"
else
  (ulimit -v 8000000; "$LNV" check "$T/huge.json") > "$T/out" 2>&1
  rc=$?
  [ "$rc" -eq 2 ] && ok "2^31 init values under an 8 GB limit: exit 2" || bad "huge init: exit $rc, expected 2"
  has "huge init: says memory ran out" "2147483648 values \(16 GiB as doubles\), more than three quarters of the memory|out of memory in \`lnverify check\`"
  # audit draws no value (it reads structure only), so the same model audits.
  (ulimit -v 8000000; "$LNV" audit "$T/huge.json") > "$T/out" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] && ok "huge init: audit draws nothing (exit 0)" || bad "huge init: audit exit $rc, expected 0"
fi

finish
