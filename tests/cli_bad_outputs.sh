#!/usr/bin/env bash
# Output files on error and on clashing paths (`fold -o/--weights/--json`), and inputs
# nested or sized beyond the limits: a clear error, a non-zero exit, no partial output.
#   bash tests/cli_bad_outputs.sh PATH/TO/lnverify
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh" "$1"
LNV="$(cd "$(dirname "$LNV")" && pwd)/$(basename "$LNV")"  # some runs below change directory
EX="$ROOT/examples/gpt2_tiny.json"

# same NAME FILE COPY: FILE still holds the bytes of COPY.
same() { if cmp -s "$2" "$3"; then ok "$1"; else bad "$1: $2 changed"; fi; }

# --- fold: a failing --json leaves no model and no weights ---------------------------------
run "fold --json in a missing directory" 2 "$LNV" fold "$EX" -o "$T/f1.json" --weights "$T/f1.safetensors" --json "$T/nonexistent/r.json"
has "--json in a missing directory: names it" "nonexistent"
absent "--json in a missing directory: no model" "$T/f1.json"
absent "--json in a missing directory: no weights" "$T/f1.safetensors"
mkdir "$T/rdir"
run "fold --json naming a directory" 2 "$LNV" fold "$EX" -o "$T/f2.json" --weights "$T/f2.safetensors" --json "$T/rdir"
absent "--json naming a directory: no model" "$T/f2.json"
absent "--json naming a directory: no weights" "$T/f2.safetensors"

# --- fold: --json never overwrites the input, the output or the weights ------------------
cp "$EX" "$T/in.json"
run "fold --json naming the input" 2 "$LNV" fold "$T/in.json" -o "$T/f3.json" --json "$T/in.json"
has "--json naming the input: says why" "report would overwrite a model file"
same "--json naming the input: input untouched" "$T/in.json" "$EX"
absent "--json naming the input: no model" "$T/f3.json"
run "fold --json naming -o" 2 "$LNV" fold "$EX" -o "$T/f4.json" --json "$T/f4.json"
absent "--json naming -o: no model" "$T/f4.json"
run "fold --json naming --weights" 2 "$LNV" fold "$EX" -o "$T/f5.json" --weights "$T/f5.safetensors" --json "$T/f5.safetensors"
has "--json naming --weights: says why" "report would overwrite the weights file"
absent "--json naming --weights: no model" "$T/f5.json"
run "zoo model with safetensors weights" 0 "$LNV" zoo gpt2 --layers 1 --hidden 16 --heads 2 --seq 4 --vocab 32 --safetensors -o "$T/st.json"
cp "$T/st.safetensors" "$T/st.copy"
run "fold --json naming the weights the input reads" 2 "$LNV" fold "$T/st.json" -o "$T/f6.json" --json "$T/st.safetensors"
same "--json naming the input's weights: weights untouched" "$T/st.safetensors" "$T/st.copy"
absent "--json naming the input's weights: no model" "$T/f6.json"

# --- fold: --weights equal to -o, given as the same relative path of a new file -----------
mkdir "$T/empty"
cd "$T/empty"
run "fold --weights naming -o (relative, new)" 2 "$LNV" fold "$EX" -o f7.json --weights f7.json
absent "--weights naming -o: no file" "$T/empty/f7.json"
run "fold --weights naming -o through ./" 2 "$LNV" fold "$EX" -o f7.json --weights ./sub/../f7.json
absent "--weights naming -o through ./: no file" "$T/empty/f7.json"
cd - > /dev/null

# --- fold: the model cannot be written: the weights are not left behind -------------------
mkdir "$T/mdir"
run "fold -o naming a directory" 2 "$LNV" fold "$EX" -o "$T/mdir" --weights "$T/w8.safetensors"
absent "-o naming a directory: no weights" "$T/w8.safetensors"
printf 'old weights' > "$T/w9.safetensors"; cp "$T/w9.safetensors" "$T/w9.copy"
printf 'old report' > "$T/r9.json"; cp "$T/r9.json" "$T/r9.copy"
run "fold -o naming a directory, over existing files" 2 "$LNV" fold "$EX" -o "$T/mdir" --weights "$T/w9.safetensors" --json "$T/r9.json"
same "-o naming a directory: existing weights untouched" "$T/w9.safetensors" "$T/w9.copy"
same "-o naming a directory: existing report untouched" "$T/r9.json" "$T/r9.copy"
left="$(find "$T" -name '*.tmp-*')"
[ -z "$left" ] && ok "no temporary files left" || bad "temporary files left: $left"

# --- a path the user gave that cannot be created: bad input, not an internal error -------
printf 'a file' > "$T/plain"
run "fuzz --out under a regular file" 2 "$LNV" fuzz --cases 1 --seed 314870 --shrink-attempts 1 --out "$T/plain/sub"
has "fuzz --out under a regular file: names the path" "plain/sub"
lacks "fuzz --out under a regular file: not called a bug" "internal error"

# --- deep nesting: an error naming the file and the path, never a crash -------------------
deep() { head -c "$1" /dev/zero | tr '\0' '['; head -c "$1" /dev/zero | tr '\0' ']'; }
deep 100000 > "$T/deep_top.json"
run "100000 nested arrays" 2 "$LNV" audit "$T/deep_top.json"
has "nested arrays: names the file and the limit" "deep_top.json: invalid JSON: arrays and objects nested deeper than 128 levels"
{ printf '{"format": "lnverify.model", "version": 1, "meta": {"x": '; deep 100000; printf '}, "nodes": [], "outputs": []}'; } > "$T/deep_meta.json"
run "nested arrays in meta" 2 "$LNV" fold "$T/deep_meta.json" -o "$T/f10.json"
has "nested arrays in meta: names the path" "at /meta/x/0/0/0/0/0/0/\.\.\."
absent "nested arrays in meta: no model" "$T/f10.json"
hdr="{\"w\": $(deep 100000)}"
{ perl -e 'print pack("Q<", $ARGV[0])' "${#hdr}"; printf '%s' "$hdr"; } > "$T/deep.safetensors"
sed 's/"init": {"dist": "normal", "std": 0.5}/"file": {"path": "deep.safetensors", "key": "w"}/' "$ROOT/tests/golden/linear_ln.json" > "$T/deep_st.json"
run "nested arrays in a safetensors header" 2 "$LNV" fold "$T/deep_st.json" -o "$T/f11.json"
has "safetensors header: names the file" "deep.safetensors: header is not valid JSON: .*nested deeper than 128"
absent "safetensors header: no model" "$T/f11.json"

# --- messages that name the place ---------------------------------------------------------
printf '{"version": 1, "nodes": [], "outputs": []}' > "$T/noformat.json"
run "missing format" 2 "$LNV" audit "$T/noformat.json"
has "missing format: names the file and the root" "noformat.json: /: missing required field 'format'"
sed 's/"name": "x"/"name": "x\\u0000y"/' "$ROOT/tests/golden/linear_ln.json" > "$T/nul.json"
run "a name holding NUL" 2 "$LNV" audit "$T/nul.json"
has "a name holding NUL: escaped, whole" "/inputs/0/name: expected a string without control characters, got \"x\\\\u0000y\""
sed 's/"shape": \[/"shape": [18446744073709551616, /' "$ROOT/tests/golden/linear_ln.json" > "$T/big.json"
run "a dimension of 2^64" 2 "$LNV" audit "$T/big.json"
has "a dimension of 2^64: too large" "shape/0: integer 1.8446744073709552e\+19 is too large"

# --- every command's --json refuses its input model (it replaced it, exit 0) -------------
for c in audit check eval; do
  cp "$EX" "$T/in.json"
  run "$c --json IN" 2 "$LNV" $c "$T/in.json" --json "$T/in.json"
  has "$c --json IN: says so" "--json: '.*in.json' is the model being read"
  cmp -s "$EX" "$T/in.json" && ok "$c --json IN: the input is unchanged" || bad "$c --json IN: the input changed"
done

# --- special files: a device is not read forever, a FIFO or device is not replaced -------
run "audit /dev/zero" 2 "$LNV" audit /dev/zero
has "audit /dev/zero: not a regular file" "/dev/zero: cannot read: not a regular file"
run "audit of a FIFO holding the model" 0 "$LNV" audit <(cat "$EX")
mkfifo "$T/fifo"
run "eval --json FIFO" 2 "$LNV" eval "$EX" --json "$T/fifo"
has "eval --json FIFO: names it" "fifo: cannot write: not a regular file"
[ -p "$T/fifo" ] && ok "eval --json FIFO: the FIFO is still a FIFO" || bad "eval --json FIFO: replaced"

# --- exact evaluation beyond memory is refused before GMP aborts the process --------------
"$LNV" zoo gpt2 --layers 2 --hidden 64 --heads 4 --seq 16 --vocab 100 -o "$T/g2.json" > /dev/null
run "eval --bits 2^20 --grad" 2 "$LNV" eval "$T/g2.json" --bits 1048576 --grad
has "eval --bits 2^20: says how much memory" "exact evaluation at 1048576 bits needs about [0-9]+ GiB"
run "eval at 256 bits still runs" 0 "$LNV" eval "$T/g2.json" --grad

finish
