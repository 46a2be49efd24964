#!/usr/bin/env bash
# `lnverify equiv A B`: the real exports against themselves and against their other opset
# spellings and their inference and training folds to ONNX, a model.json against its fold
# (and a deliberately wrong fold), a dropout model's training fold to ONNX, model.json
# against ONNX, training mode with gradients, and the mismatches that exit 2.
#   bash tests/cli_equiv.sh PATH/TO/lnverify
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh" "$1"
D="$ROOT/tests/data/onnx"
G="$ROOT/examples/gpt2_tiny.json"

dims_of() {  # the --dim bindings of an export: batch=2 and any other symbol (seq) 8
  local syms s
  syms="$("$LNV" audit "$1" --dim lnv_no_such_dim=1 2>&1 | sed -n 's/.*its symbolic dims: \(.*\))$/\1/p')"
  for s in ${syms//,/ }; do
    if [ "$s" = batch ]; then printf -- "--dim batch=2 "; else printf -- "--dim %s=8 " "$s"; fi
  done
}
# Exports whose evaluation would need an op model.json lacks are inconclusive, naming the
# op (none of the committed exports today: each must be equal like the others).
opaque_op_of() {
  case "$1" in *) echo "" ;; esac
}
# equal_or_opaque NAME A B DIMS: A and B equal, or inconclusive naming the opaque op.
equal_or_opaque() {
  local name="$1" a="$2" b="$3" op
  op="$(opaque_op_of "$(basename "$a")")"
  # shellcheck disable=SC2086
  if [ -z "$op" ]; then
    run "$name" 0 "$LNV" equiv "$a" "$b" $4 --trials 1 && has "$name: equal" "^result: equal"
  else
    run "$name (op $op not evaluable yet)" 3 "$LNV" equiv "$a" "$b" $4 --trials 1 &&
      has "$name: names the op" "cannot evaluate op '$op'"
  fi
}

# --- every real export with itself, and its opset spellings with each other --------------
for f in "$D"/*.onnx; do
  m="$(basename "$f" .onnx)"
  equal_or_opaque "equiv $m with itself" "$f" "$f" "$(dims_of "$f")"
done
for pair in mlp_tiny_opset14:mlp_tiny_opset17 gpt2_tiny_opset14:gpt2_tiny_opset17 \
            gpt2_tiny_opset11:gpt2_tiny_opset17 bert_tiny_opset14:bert_tiny_opset17 \
            bert_tiny_opset9:bert_tiny_opset17 vit_tiny_opset14:vit_tiny_opset17 \
            prenorm_lm_tiny_opset14:prenorm_lm_tiny_opset17; do
  a="${pair%%:*}" b="${pair##*:}"
  equal_or_opaque "equiv $a $b" "$D/$a.onnx" "$D/$b.onnx" "$(dims_of "$D/$a.onnx")"
done
# Every export and its fold to ONNX (`fold -o F.onnx`, each --rms-op spelling the file's
# opset allows): equal up to the float32 storage of the centered weights and of the biases
# the moved norm biases joined, and different under --strict only where some weight was
# rounded.
for f in "$D"/*.onnx; do
  m="$(basename "$f" .onnx)"
  for op in decomposed ort ort-skip onnx23; do
    case "$m:$op" in bert_tiny_opset9:onnx23|gpt2_tiny_opset11:onnx23) continue ;; esac  # refused below opset 13
    # shellcheck disable=SC2046
    run "fold $m --rms-op $op" 0 "$LNV" fold "$f" $(dims_of "$f") --rms-op "$op" -o "$T/$m.$op.onnx"
    # shellcheck disable=SC2046
    run "equiv $m and its $op fold" 0 "$LNV" equiv "$f" "$T/$m.$op.onnx" $(dims_of "$f") --trials 1
    has "$m, $op fold: equal" "^result: equal"
    has "$m, $op fold: allowed what float32 storage of the centered weights can cause" \
      "^  weight storage allowance: 24 bits \(the float32 storage of the weights that differ\); measured: 16 × the largest change of 2 random 2\^-24 perturbations"
  done
done
# Every export's training fold (`fold --mode training -o F.onnx`, each --rms-op the opset
# allows): it passes ONNX's full checker (Python's, for the standard-op spelling; every
# spelling in test_onnx_fold_writer), keeps every initializer byte for byte, and is the
# same function of the same parameters: outputs, input gradients and the gradient of every
# parameter both files hold exactly equal (the centering is computed in the graph).
for f in "$D"/*.onnx; do
  m="$(basename "$f" .onnx)"
  for op in decomposed ort ort-skip onnx23; do
    case "$m:$op" in bert_tiny_opset9:onnx23|gpt2_tiny_opset11:onnx23) continue ;; esac  # refused below opset 13
    # shellcheck disable=SC2046
    run "fold $m --mode training --rms-op $op" 0 "$LNV" fold "$f" $(dims_of "$f") --mode training \
      --rms-op "$op" -o "$T/$m.train.$op.onnx"
    has "$m training fold: every initializer kept" "every initializer kept \(training\)"
    # shellcheck disable=SC2046
    run "equiv $m and its $op training fold, all gradients" 0 "$LNV" equiv "$f" "$T/$m.train.$op.onnx" \
      $(dims_of "$f") --mode training --grad --grad-params --trials 1
    has "$m, $op training fold: equal" "^result: equal"
    has "$m, $op training fold: parameter gradients compared" "^  equal  gradient of param '"
    if grep -q "different\|inconclusive  " "$T/out" && ! grep -q "0 different, 0 inconclusive" "$T/out"; then
      bad "$m, $op training fold: not every quantity equal"; fi
  done
done
/usr/bin/python3 - "$D" "$T" > "$T/out" 2>&1 <<'PY'
import glob, os, sys
import onnx
from onnx import checker, numpy_helper
src, tmp = sys.argv[1], sys.argv[2]
for folded in sorted(glob.glob(os.path.join(tmp, "*.train.*.onnx"))):
    name = os.path.basename(folded).split(".train.")[0]
    if ".train.decomposed." in folded:  # ONNX 1.12's Python checker knows opsets <= 17 only
        checker.check_model(folded, full_check=True)
    a = {t.name: t.SerializeToString() for t in onnx.load(os.path.join(src, name + ".onnx")).graph.initializer}
    b = {t.name: t for t in onnx.load(folded).graph.initializer}
    for n, t in b.items():
        assert n not in a or a[n] == t.SerializeToString(), (folded, n, "changed")
        assert n in a or len(t.dims) <= 1 and (not t.dims or t.dims[0] <= 8), (folded, n, "new tensor")
    tensors = {n: onnx.load_tensor_from_string(t) for n, t in a.items()}
    params = [n for n, t in tensors.items() if t.data_type == onnx.TensorProto.FLOAT and
              numpy_helper.to_array(t).size > 1]
    missing = [n for n in params if n not in b]
    assert not missing, (folded, "parameters dropped", missing)
print("training folds: checked, initializers byte-identical, every parameter kept")
PY
has "training folds: ONNX full checker, initializers byte-identical" "^training folds: checked"

# --- wrong folds between float32 files: the measured allowance is small enough to see them -
# GPT-2's decomposed fold with the embedding table uncentered again (one centered producer
# left out), with one element of a centered MLP weight scaled by 1 + 1e-3, and with one
# element of a centered bias shifted by 1e-4: each is different.
GF="$T/gpt2_tiny_opset17.decomposed.onnx"
/usr/bin/python3 - "$D/gpt2_tiny_opset17.onnx" "$GF" "$T" > "$T/out" 2>&1 <<'PY'
import sys
import numpy as np
import onnx
from onnx import numpy_helper
orig = {t.name: numpy_helper.to_array(t) for t in onnx.load(sys.argv[1]).graph.initializer}
def variant(out, name, change):
    m = onnx.load(sys.argv[2])
    t = next(t for t in m.graph.initializer if t.name == name)
    assert not np.array_equal(numpy_helper.to_array(t), orig[name]), name + " is not centered"
    t.CopyFrom(numpy_helper.from_array(change(numpy_helper.to_array(t).copy()).astype(np.float32), name))
    onnx.save(m, f"{sys.argv[3]}/{out}.onnx")
def scale(v): v.flat[3] *= np.float32(1 + 1e-3); return v
def shift(v): v.flat[3] += np.float32(1e-4); return v
variant("gpt2_left_out", "wte.weight", lambda v: orig["wte.weight"])
variant("gpt2_rel1e-3", "onnx::MatMul_409", scale)
variant("gpt2_bias1e-4", "h.0.mlp.2.bias", shift)
print("variants written")
PY
has "wrong float32 folds of GPT-2 written" "^variants written$"
for v in left_out rel1e-3 bias1e-4; do
  run "GPT-2 and its ONNX fold with $v: different" 1 "$LNV" equiv "$D/gpt2_tiny_opset17.onnx" \
    "$T/gpt2_$v.onnx" --dim batch=2 --dim seq=8 --trials 1
  has "$v: above the measured allowance" "and above the bound for rounded weights \([0-9.e+-]+ = 16 × the measured [0-9.e+-]+ \+ the rounding bound\)"
done

# --- the allowance by the files' float type: exports of a one-linear model -----------------
# (no norm, so the 24-bit allowance stays below the outputs' size): float32 files whose W
# is one float32 step apart are equal up to weight storage, W negated is different; float64
# files one double step apart are allowed it at 53 bits.
python3 - "$T" <<'EOF'
import json, sys
d = sys.argv[1]
w = [0.75, -1.5, 0.5, 1.25, -0.25, 1.0, -1.75, 0.5, 1.5, 0.25, -0.5, -1.0, -1.25, 0.75, 1.0, 0.25]
for name, v in {"lin": w, "lin_step32": [w[0] + 2.0**-24] + w[1:],
                "lin_step64": [w[0] + 2.0**-53] + w[1:], "lin_neg": [-x for x in w]}.items():
    json.dump({"format": "lnverify.model", "version": 1, "name": "one_linear", "seed": 1,
               "inputs": [{"name": "x", "shape": [2, 4]}],
               "params": [{"name": "W", "shape": [4, 4], "data": v}],
               "nodes": [{"name": "fc", "op": "linear", "inputs": ["x"], "weight": "W"}],
               "outputs": ["fc"]}, open(f"{d}/{name}.json", "w"))
EOF
for m in lin lin_step32 lin_neg; do run "export $m float32" 0 "$LNV" export "$T/$m.json" -o "$T/$m.f32.onnx"; done
for m in lin lin_step64; do run "export $m float64" 0 "$LNV" export "$T/$m.json" --dtype float64 -o "$T/$m.f64.onnx"; done
run "float32 files one float32 step apart: equal up to weight storage" 0 "$LNV" equiv \
  "$T/lin.f32.onnx" "$T/lin_step32.f32.onnx" --json "$T/lin32.json"
has "float32 pair: the 24-bit allowance" "^  weight storage allowance: 24 bits \(the float32 storage"
has "float32 pair: up to weight storage" "equal up to weight storage"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['weight_bits']==24, r['weight_bits']; print('ok')" "$T/lin32.json" > "$T/out" 2>&1
has "float32 pair: weight_bits 24 in the JSON report" "^ok$"
run "the same pair held to double storage (--weight-bits 53): different" 1 "$LNV" equiv \
  "$T/lin.f32.onnx" "$T/lin_step32.f32.onnx" --weight-bits 53
has "--weight-bits 53: said" "^  weight storage allowance: 53 bits \(--weight-bits\)"
run "float32 files with W negated: different" 1 "$LNV" equiv "$T/lin.f32.onnx" "$T/lin_neg.f32.onnx"
has "genuine difference: above the 24-bit allowance" "and above the bound for rounded weights"
run "float64 files one double step apart: equal up to weight storage at 53 bits" 0 "$LNV" equiv \
  "$T/lin.f64.onnx" "$T/lin_step64.f64.onnx"
has "float64 pair: the 53-bit allowance" "^  weight storage allowance: 53 bits \(the double storage"
run "opset spellings: exactly equal, with JSON" 0 "$LNV" equiv "$D/vit_tiny_opset14.onnx" \
  "$D/vit_tiny_opset17.onnx" --dim batch=2 --trials 1 --json "$T/vit.json"
has "ViT spellings: the output, differences 0" "^  equal  output '/heads/head/Gemm'  max abs 0 rel 0"
python3 - "$T/vit.json" > "$T/out" 2>&1 <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
q = r["quantities"][0]
assert r["format"] == "lnverify.equiv" and r["outcome"] == "equal", r
assert q["outcome"] == "equal" and q["stats"]["abs"]["max"] == 0 and q["stats"]["bound"] > 0, q
assert q["stats"]["elements"] == 2 * 10 and q["worst"] is None, q
print("report fine")
PY
has "equiv --json: format, outcome, ErrorStats per quantity" "report fine"

# --- a model and its fold ----------------------------------------------------------------
run "fold gpt2_tiny" 0 "$LNV" fold "$G" -o "$T/g.rms.json"
run "equiv of a model.json and its fold" 0 "$LNV" equiv "$G" "$T/g.rms.json" --json "$T/fold.json"
has "fold: equal" "^result: equal \(1 equal"
has "fold: up to the double rounding of the saved centered weights" "equal up to weight storage"
run "--strict: the saved fold is not bit-exact" 1 "$LNV" equiv "$G" "$T/g.rms.json" --strict
has "--strict: the size of the difference (double rounding)" "differs by up to [0-9.]+e-1[5-8]"
run "inference fold in training mode: dropout precedes the LNs" 1 "$LNV" equiv "$G" "$T/g.rms.json" --mode training
has "training: names the output" "output 'logits' differs by up to"
run "fold --mode training" 0 "$LNV" fold "$G" --mode training -o "$T/g.train.json"
run "training fold, training mode, gradients: equal" 0 "$LNV" equiv "$G" "$T/g.train.json" \
  --mode training --grad --trials 2 --json "$T/train.json"
has "training: the output equal (tok is an index input: no gradient)" "^result: equal \(1 equal"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['grad'] and r['mode']=='training'; print(r['dropouts'])" "$T/train.json" > "$T/out" 2>&1
has "training report: the dropouts whose masks are shared by name" "'drop_emb', 'h0.drop_attn'"

# A wrong fold: the embedding reads its uncentered table again (one centered producer left
# out), so ln_1 of block 0 no longer sees a zero-mean input.
python3 - "$T/g.rms.json" "$T/wrong.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
emb = next(n for n in m["nodes"] if n["name"] == "emb")
assert emb["weight"] == "wte.centered"
emb["weight"] = "wte"
json.dump(m, open(sys.argv[2], "w"))
PY
run "equiv of a wrong fold" 1 "$LNV" equiv "$G" "$T/wrong.json" --json "$T/wrong.report.json"
has "wrong fold: different, naming the output and the size" "output 'logits' differs by up to 0\.[0-9]+ \(relative"
has "wrong fold: the trial and worst element" "worst on trial [0-9] \(run seed [0-9]\): element \[[0-9, ]+\]"
has "wrong fold: result" "^result: different \(0 equal, 1 different"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); q=r['quantities'][0]; assert r['outcome']=='different' and q['worst']['seed']==q['worst']['trial'] and q['stats']['abs']['max']>1e-3; print('ok')" "$T/wrong.report.json" > "$T/out" 2>&1
has "wrong fold report: worst element and max abs" "^ok$"

# A model with an active dropout whose training plan folds fewer norms than inference
# (tests/golden/dropout_one_of_two.json: ln2 reads fc2 through drop_1), exported to ONNX.
# Its training fold to ONNX is equal in training mode, gradients of every parameter
# included; the inference plan's ONNX fold is equal in inference but differs in training
# mode (fc2 centered under a dropout mask), as do its parameter gradients in any mode.
DM="$ROOT/tests/golden/dropout_one_of_two.json"
run "export the dropout model" 0 "$LNV" export "$DM" -o "$T/drop.onnx"
run "dropout model: training fold to ONNX" 0 "$LNV" fold "$T/drop.onnx" --mode training -o "$T/drop.train.onnx"
has "dropout model: the training plan folds one norm" "wrote .*drop.train.onnx: 1 LayerNorm -> RMSNorm"
run "dropout model: inference fold to ONNX" 0 "$LNV" fold "$T/drop.onnx" -o "$T/drop.inf.onnx"
has "dropout model: the inference plan folds two" "wrote .*drop.inf.onnx: 2 LayerNorms -> RMSNorm"
run "dropout model: training fold equal in training mode, all gradients" 0 "$LNV" equiv "$T/drop.onnx" \
  "$T/drop.train.onnx" --mode training --grad --grad-params --trials 3 --json "$T/drop.json"
has "dropout model, training fold: equal" "^result: equal \(10 equal, 0 different"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['dropouts']==['drop_1'], r['dropouts']; print('masks shared')" "$T/drop.json" > "$T/out" 2>&1
has "dropout model: the dropout's masks are shared" "masks shared"
/usr/bin/python3 -c "
import json, sys, jsonschema
r = json.load(open(sys.argv[1]))
jsonschema.validate(r, json.load(open(sys.argv[2])))
print('params', sum(q['quantity'].startswith('gradient of param') for q in r['quantities']))" \
  "$T/drop.json" "$ROOT/docs/spec/schemas/equiv.schema.json" > "$T/out" 2>&1
has "dropout model: the --grad-params report meets the schema" "^params 8$"
run "dropout model: inference fold in training mode differs" 1 "$LNV" equiv "$T/drop.onnx" \
  "$T/drop.inf.onnx" --mode training --trials 3
has "dropout model, inference fold in training: names the output" "output 'ln2' differs by up to"
run "dropout model: inference fold equal in inference mode" 0 "$LNV" equiv "$T/drop.onnx" "$T/drop.inf.onnx"
run "dropout model: inference fold's parameter gradients differ" 1 "$LNV" equiv "$T/drop.onnx" \
  "$T/drop.inf.onnx" --grad --grad-params
has "dropout model, inference fold: a stored param's gradient differs" "gradient of param '[a-z0-9.]+' differs by up to"
run "--grad-params without --grad" 2 "$LNV" equiv "$T/drop.onnx" "$T/drop.train.onnx" --grad-params

# --- model.json against ONNX -------------------------------------------------------------
run "import mlp_tiny" 0 "$LNV" import "$D/mlp_tiny_opset14.onnx" --dim batch=2 -o "$T/mlp.json"
run "equiv model.json vs ONNX (--dim binds the ONNX one)" 0 "$LNV" equiv "$T/mlp.json" \
  "$D/mlp_tiny_opset17.onnx" --dim batch=2 --grad
has "json vs onnx: output and input gradient equal" "equal  gradient of input 'x'"
run "fold of an ONNX file" 0 "$LNV" fold "$D/vit_tiny_opset17.onnx" --dim batch=2 -o "$T/vit.rms.json"
run "equiv ONNX vs its fold" 0 "$LNV" equiv "$D/vit_tiny_opset17.onnx" "$T/vit.rms.json" --dim batch=2 --trials 1
has "ONNX vs fold: exactly equal (float32 weights centered over 2^k columns are exact in double)" "^  equal  output '/heads/head/Gemm'  max abs [0-9.]+e-[7-9][0-9] "
# The ONNX writer (`fold X.onnx -o Y.onnx --rms-op ...`): each spelling equal to the input.
if "$LNV" fold --help 2>&1 | grep -q -- "--rms-op"; then
  for op in decomposed ort onnx23; do
    if "$LNV" fold "$D/vit_tiny_opset17.onnx" --dim batch=2 -o "$T/vit.$op.onnx" --rms-op "$op" > "$T/out" 2>&1; then
      run "equiv ONNX vs its ONNX fold ($op)" 0 "$LNV" equiv "$D/vit_tiny_opset17.onnx" "$T/vit.$op.onnx" --dim batch=2 --trials 1
    else bad "fold -o .onnx --rms-op $op"; fi
  done
fi

# --- mismatches: exit 2 naming the input, output or dropout; nothing written -------------
mutate() {  # mutate OUT PYTHON-STATEMENT: gpt2_tiny.json with `m` changed
  python3 -c "import json,sys; m=json.load(open(sys.argv[1])); $2; json.dump(m, open(sys.argv[3],'w'))" "$G" - "$1"
}
mutate "$T/renamed.json" "m['inputs'][0]['name']='ids'; m['nodes'][0]['inputs']=['ids']"
run "different input names" 2 "$LNV" equiv "$G" "$T/renamed.json" --json "$T/no.json"
has "names the input" "input 'tok': .*gpt2_tiny.json has this input, .*renamed.json does not"
absent "mismatch: no report written" "$T/no.json"
mutate "$T/shape.json" "m['inputs'][0]['shape'][0]=1"
run "different input shapes" 2 "$LNV" equiv "$G" "$T/shape.json"
has "names the input and both shapes" "input 'tok': .* has shape \[2, 8\], .* \[1, 8\]"
mutate "$T/range.json" "m['inputs'][0]['range']=32"
run "different index ranges" 2 "$LNV" equiv "$G" "$T/range.json"
has "names the input and both dtypes" "input 'tok': .* has dtype index \(range 64\), .* index \(range 32\)"
mutate "$T/out2.json" "m['outputs']=['ln_f']"
run "different output names" 2 "$LNV" equiv "$G" "$T/out2.json"
has "names the output" "output 'logits': .* has this output, .* does not"
mutate "$T/nodrop.json" "[n.update(op='scale', factor=1.0) or n.pop('p') for n in m['nodes'] if n['name']=='drop_emb']"
run "training: a dropout without a same-named one" 2 "$LNV" equiv "$G" "$T/nodrop.json" --mode training
has "names the dropout" "dropout 'drop_emb': .* has this dropout, .* has no dropout of that name"
run "inference: dropouts need no partner" 0 "$LNV" equiv "$G" "$T/nodrop.json" --trials 1
run "--dim with two model.json" 2 "$LNV" equiv "$G" "$T/g.rms.json" --dim batch=2
has "--dim: says why" "--dim: binds the symbolic dims of an ONNX model"
run "ONNX against model.json with other output names" 2 "$LNV" equiv "$D/mlp_tiny_opset17.onnx" "$G" --dim batch=2
has "ONNX vs json: names the input" "input '(x|tok)'"
run "missing model" 2 "$LNV" equiv "$G" "$T/none.json"
run "--json over an input model" 2 "$LNV" equiv "$G" "$T/g.rms.json" --json "$T/g.rms.json"
has "--json over the input: refused" "--json"
finish
