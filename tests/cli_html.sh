#!/usr/bin/env bash
# The HTML and DOT reports (`--html`, `--dot`) of real ONNX exports, opened in Debian's
# headless chromium: the page loads without a console error and names no outside
# resource, its verdict table has one row per LayerNorm of the audit JSON, each row links
# to the graph element drawn in its verdict's colour, and a screenshot is not blank.
# The browser parts are skipped (exit 77) when chromium is missing.
#   bash tests/cli_html.sh path/to/lnverify
source "$(dirname "$0")/cli_lib.sh"
CHECK="python3 $ROOT/tests/html_page_check.py"
SWIN="$ROOT/tests/data/onnx/swin_tiny_opset17.onnx"
GPT2="$ROOT/tests/data/onnx/gpt2_tiny_opset17.onnx"

# console NAME PAGE: loads PAGE in headless chromium, its DOM in $T/NAME.dom; fails when
# the browser logged a console message (a script error, a refused resource).
console() {
  local name="$1" page="$2"
  chromium --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 \
    --dump-dom "file://$page" > "$T/$name.dom" 2> "$T/$name.log"
  if grep -q 'CONSOLE' "$T/$name.log"; then
    grep 'CONSOLE' "$T/$name.log" > "$T/out"; return 1
  fi
  [ -s "$T/$name.dom" ]
}
# self_contained NAME PAGE: no script, and no src/href that leaves the file.
self_contained() {
  if grep -Eo '<script|(src|href)="[^"#d][^"]*"|url\(' "$2" > "$T/out"; then bad "$1: not self-contained"
  else ok "$1: self-contained (no script, no outside reference)"; fi
}

if ! command -v dot > /dev/null; then echo "skip: Graphviz's dot is not installed"; exit 77; fi

# --- audit of a real Swin export: DOT and HTML ----------------------------------------------
run "swin: audit --json --html --dot" 0 "$LNV" audit "$SWIN" --dim batch=1 \
  --json "$T/swin.json" --html "$T/swin.html" --dot "$T/swin.dot"
if dot -Tsvg "$T/swin.dot" > "$T/swin.svg" 2> "$T/out"; then ok "swin: the DOT file renders"; else bad "swin: dot rejects the DOT"; fi
n_ln=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['layer_norms']))" "$T/swin.json")
n_dot=$(grep -c 'layer_norm\\ninference' "$T/swin.dot")
if [ "$n_ln" -gt 0 ] && [ "$n_ln" = "$n_dot" ]; then ok "swin: DOT draws all $n_ln LayerNorms with their verdicts"
else bad "swin: DOT has $n_dot LayerNorm nodes, the audit $n_ln"; fi
grep -c 'shape=octagon' "$T/swin.dot" > "$T/out"
if [ "$(cat "$T/out")" -gt 0 ]; then ok "swin: breaking nodes drawn as octagons"; else bad "swin: no breaking node marked"; fi
self_contained "swin" "$T/swin.html"

# --- a deep model: blocks collapse into one box each that lists its LayerNorms -----------
run "deep gpt2: zoo" 0 "$LNV" zoo gpt2 --layers 30 --hidden 16 --heads 2 --vocab 50 --seq 4 -o "$T/deep.json"
run "deep gpt2: audit --html --dot" 0 "$LNV" audit "$T/deep.json" --json "$T/deep.audit.json" \
  --html "$T/deep.html" --dot "$T/deep.dot"
has_block=$(grep -c '^  b[0-9]* \[id="b' "$T/deep.dot")
if [ "$has_block" = 30 ]; then ok "deep gpt2: 30 collapsed blocks"; else bad "deep gpt2: $has_block collapsed blocks, expected 30"; fi

# --- check --html: the checks table -------------------------------------------------------
run "check --html" 0 "$LNV" check "$ROOT/examples/gpt2_tiny.json" --json "$T/check.json" --html "$T/check.html"
n_checks=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['checks']))" "$T/check.json")
n_rows=$(grep -o '<tr class="check">' "$T/check.html" | wc -l)
if [ "$n_checks" -gt 0 ] && [ "$n_checks" = "$n_rows" ]; then ok "check: one table row per check ($n_rows)"
else bad "check: $n_rows rows, $n_checks checks"; fi

# --- errors: no dot, bad path; nothing written ----------------------------------------------
run "no dot on PATH" 2 env PATH=/nonexistent "$LNV" audit "$ROOT/examples/gpt2_tiny.json" --html "$T/nodot.html"
has "no dot: says what is missing and how to get it" "--html: Graphviz's .dot. program is not on PATH.*apt-get install graphviz"
absent "no dot: no page" "$T/nodot.html"
run "no dot, --dot alone still works" 0 env PATH=/nonexistent "$LNV" audit "$ROOT/examples/gpt2_tiny.json" --dot "$T/nodot.dot"
run "--html over the model" 2 "$LNV" audit "$T/deep.json" --html "$T/deep.json"
has "--html over the model: refused" "^lnverify: error: --html"

# --- in the browser -------------------------------------------------------------------------
if ! command -v chromium > /dev/null; then
  echo "skip: chromium is not installed (the browser checks need it)"
  finish; exit 77
fi
# The detector itself: a page with a script error must be caught.
printf '<!DOCTYPE html><html><body><p>x</p><script>throw new Error("planted")</script></body></html>' > "$T/bad.html"
if console bad "$T/bad.html"; then bad "console detector misses a planted script error"
else ok "console detector catches a planted script error"; fi

run "gpt2 export: audit --json --html" 0 "$LNV" audit "$GPT2" --dim batch=2 --dim seq=8 \
  --json "$T/gpt2.json" --html "$T/gpt2.html"
self_contained "gpt2" "$T/gpt2.html"
for m in swin gpt2 deep; do
  audit="$T/$m.json"; [ "$m" = deep ] && audit="$T/deep.audit.json"
  if console "$m" "$T/$m.html"; then ok "$m: loads with no console message"; else bad "$m: console messages"; fi
  if $CHECK dom "$T/$m.dom" "$audit" > "$T/out" 2>&1; then ok "$m: $(cat "$T/out")"; else bad "$m: DOM"; fi
done
if console check "$T/check.html"; then ok "check page: loads with no console message"; else bad "check page: console messages"; fi

# equiv --html: a tiny ViT against its fold, with the input gradient, and a wrong fold.
run "equiv: zoo vit" 0 "$LNV" zoo vit --layers 1 --hidden 8 --heads 2 --image 8 --patch 4 --classes 3 --dropout 0 -o "$T/evit.json"
run "equiv: fold vit" 0 "$LNV" fold "$T/evit.json" -o "$T/evit.rms.json"
run "equiv --html: equal" 0 "$LNV" equiv "$T/evit.json" "$T/evit.rms.json" --grad --trials 2 --json "$T/equiv.json" --html "$T/equiv.html"
run "equiv --html: different (--strict)" 1 env PATH=/nonexistent "$LNV" equiv "$T/evit.json" "$T/evit.rms.json" --grad --trials 2 --strict --html "$T/equiv_diff.html"
for p in equiv equiv_diff; do
  self_contained "$p page" "$T/$p.html"
  if console "$p" "$T/$p.html"; then ok "$p page: loads with no console message"; else bad "$p page: console messages"; fi
done
n_q=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['quantities']))" "$T/equiv.json")
n_rows=$(grep -o '<tr class="quantity"><td class="yes">equal</td>' "$T/equiv.dom" | wc -l)
if [ "$n_q" = 2 ] && [ "$n_rows" = 2 ]; then ok "equiv page: one equal row per quantity (output, gradient)"
else bad "equiv page: $n_rows equal rows, $n_q quantities"; fi
grep -c "<td><code>gradient of input 'image'</code></td>" "$T/equiv.dom" > "$T/out"
if [ "$(cat "$T/out")" = 1 ]; then ok "equiv page: the gradient's row"; else bad "equiv page: no gradient row"; fi
n_diff=$(grep -o '<tr class="quantity"><td class="no">different</td>' "$T/equiv_diff.dom" | wc -l)
if [ "$n_diff" = 2 ] && grep -q 'worst on trial' "$T/equiv_diff.dom" && grep -q 'evit.rms.json' "$T/equiv_diff.dom"
then ok "equiv page (different, no dot needed): 2 different rows, the worst element, the models' names"
else bad "equiv page different: $n_diff rows"; fi

if [ -x "$(dirname "$LNV")/lnverify-torch" ]; then  # built with LibTorch (its helper beside lnverify)
  run "bench --html" 0 "$LNV" bench --zoo gpt2 --layers 1 --hidden 16 --heads 2 --vocab 20 \
    --seq 4,8 --repeats 2 --no-kernels --json "$T/bench.json" --html "$T/bench.html"
  self_contained "bench" "$T/bench.html"
  if console bench "$T/bench.html"; then ok "bench page: loads with no console message"; else bad "bench page: console messages"; fi
  n_models=$(grep -o '<tr class="model">' "$T/bench.dom" | wc -l)
  n_bars=$(grep -o '<rect [^>]*fill="#43a047"><title>' "$T/bench.dom" | wc -l)
  if [ "$n_models" = 2 ] && [ "$n_bars" = 2 ]; then ok "bench page: 2 model rows, 2 folded bars in the plot"
  else bad "bench page: $n_models model rows, $n_bars folded bars"; fi
else
  echo "skip  bench --html (built without LibTorch)"
fi

chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,900 \
  --screenshot="$T/swin.png" "file://$T/swin.html" > /dev/null 2>&1
if $CHECK png "$T/swin.png" 50 > "$T/out" 2>&1; then ok "swin: screenshot $(cat "$T/out")"; else bad "swin: screenshot"; fi
# The checker's teeth: an empty page's screenshot is blank.
printf '<!DOCTYPE html><html><body></body></html>' > "$T/empty.html"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,900 \
  --screenshot="$T/empty.png" "file://$T/empty.html" > /dev/null 2>&1
if $CHECK png "$T/empty.png" 50 > "$T/out" 2>&1; then bad "blank check passes an empty page"; else ok "blank check refuses an empty page's screenshot"; fi

finish
