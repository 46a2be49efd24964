#!/usr/bin/env bash
# `lnverify fold MODEL.onnx -o FOLDED.onnx`: the folded ONNX file for each --rms-op, and the
# bad inputs (an output over the input or its external data, onnx23 with --keep-opset on an
# older opset, an unknown --rms-op) exit 2 naming the problem, with nothing written; the
# training fold (--mode training) is written too.
#   bash tests/cli_onnx_fold.sh PATH/TO/lnverify
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh" "$1"
M="$ROOT/tests/data/onnx/mlp_tiny_opset14.onnx"   # LayerNorms decomposed (opset 14)
M17="$ROOT/tests/data/onnx/mlp_tiny_opset17.onnx" # LayerNormalization nodes (opset 17)

# --- each spelling, and the folded file read back ----------------------------------------
for op in decomposed ort onnx23; do
  run "fold --rms-op $op" 0 "$LNV" fold "$M17" --dim batch=2 -o "$T/f_$op.onnx" --rms-op "$op"
  has "fold --rms-op $op: what it wrote" "wrote .*f_$op.onnx: 2 LayerNorms -> RMSNorm \($op\), 4 initializers centered in place"
  run "audit of the $op file" 0 "$LNV" audit "$T/f_$op.onnx" --dim batch=2
  has "$op file: no LayerNorm left" "0 of 0 LayerNorms"
  run "check of the $op file" 0 "$LNV" check "$T/f_$op.onnx" --dim batch=2
done
run "fold without --rms-op is decomposed" 0 "$LNV" fold "$M" --dim batch=2 -o "$T/plain.onnx"
has "default: decomposed" "RMSNorm \(decomposed\)"
if grep -aq "SimplifiedLayerNormalization" "$T/f_ort.onnx"; then
  ok "ort: the fused op"; else bad "ort: no SimplifiedLayerNormalization"; fi
if grep -aq "RMSNormalization" "$T/f_onnx23.onnx"; then ok "onnx23: RMSNormalization"; else bad "onnx23: missing"; fi
run "fold --json writes the report with the model" 0 "$LNV" fold "$M" --dim batch=2 -o "$T/j.onnx" --json "$T/j.json"
if grep -q '"name": "/ln_1/LayerNormalization"' "$T/j.json"; then ok "fold --json: the report"; else bad "fold --json: no report"; fi

# --- bad input: exit 2, nothing written --------------------------------------------------
cp "$M" "$T/in.onnx"
run "fold over its input" 2 "$LNV" fold "$T/in.onnx" --dim batch=2 -o "$T/in.onnx"
has "over its input: says why" "refusing to overwrite the input model"
if cmp -s "$T/in.onnx" "$M"; then ok "over its input: input untouched"; else bad "input changed"; fi

mkdir -p "$T/ext"
/usr/bin/python3 -c '
import onnx, sys
m = onnx.load(sys.argv[1])
onnx.save_model(m, sys.argv[2], save_as_external_data=True, all_tensors_to_one_file=True,
                location="weights.bin", size_threshold=0)' "$M17" "$T/ext/m.onnx"
cp "$T/ext/weights.bin" "$T/weights.orig"
run "fold of an external-data model" 0 "$LNV" fold "$T/ext/m.onnx" --dim batch=2 -o "$T/ext/out.onnx"
has "external data: the side file" "data: .*out.onnx.data"
run "the folded external-data model checks" 0 "$LNV" check "$T/ext/out.onnx" --dim batch=2
run "fold over the input's external data" 2 "$LNV" fold "$T/ext/m.onnx" --dim batch=2 -o "$T/ext/weights.bin"
has "over the external data: says why" "external data file"
if cmp -s "$T/ext/weights.bin" "$T/weights.orig"; then ok "external data untouched"; else bad "external data changed"; fi
cp "$T/ext/m.onnx" "$T/ext/n.onnx"
/usr/bin/python3 -c '
import onnx, sys
m = onnx.load(sys.argv[1], load_external_data=False)
for t in m.graph.initializer:
    for kv in t.external_data:
        if kv.key == "location": kv.value = "x.onnx.data"
onnx.save_model(m, sys.argv[1])' "$T/ext/n.onnx"
cp "$T/ext/weights.bin" "$T/ext/x.onnx.data"
run "fold whose side file would be the input's external data" 2 "$LNV" fold "$T/ext/n.onnx" --dim batch=2 -o "$T/ext/x.onnx"
has "side file over external data: says why" "data file would overwrite"
absent "side file over external data: no model written" "$T/ext/x.onnx"
if cmp -s "$T/ext/x.onnx.data" "$T/weights.orig"; then ok "its external data untouched"; else bad "external data changed"; fi

run "onnx23 --keep-opset on opset 17" 2 "$LNV" fold "$M17" --dim batch=2 -o "$T/k.onnx" --rms-op onnx23 --keep-opset
has "--keep-opset: says why" "needs opset 23.*--keep-opset"
absent "--keep-opset: nothing written" "$T/k.onnx"
absent "--keep-opset: no side file" "$T/k.onnx.data"
run "unknown --rms-op" 2 "$LNV" fold "$M17" --dim batch=2 -o "$T/u.onnx" --rms-op fused
has "unknown --rms-op: names the option" "rms-op"
absent "unknown --rms-op: nothing written" "$T/u.onnx"
run "--rms-op with a model.json output" 2 "$LNV" fold "$M17" --dim batch=2 -o "$T/u.json" --rms-op ort
has "--rms-op with .json: says why" "applies to an ONNX output"
absent "--rms-op with .json: nothing written" "$T/u.json"
run "--mode training to ONNX" 0 "$LNV" fold "$M17" --dim batch=2 -o "$T/t.onnx" --mode training
has "--mode training: centered in the graph" "wrote .*t.onnx: 2 LayerNorms -> RMSNorm \(decomposed\), 4 values centered in the graph, every initializer kept \(training\)"
run "check of the training fold" 0 "$LNV" check "$T/t.onnx" --dim batch=2 --mode training
run "onnx23 on opset 11 (Softmax changes meaning)" 2 "$LNV" fold "$ROOT/tests/data/onnx/gpt2_tiny_opset11.onnx" --dim batch=2 --dim seq=8 -o "$T/g.onnx" --rms-op onnx23
has "opset 11: names the ops" "defined differently: Softmax"
absent "opset 11: nothing written" "$T/g.onnx"
run "fold of model.json to .onnx" 2 "$LNV" fold "$ROOT/examples/gpt2_tiny.json" -o "$T/e.onnx"
has "model.json to .onnx: says why" "needs an ONNX model"
# An initializer the LayerNorm reads as its weight (or bias) that is also the bias of the
# producer the fold centers: the producer's bias is centered in a copy, the norm keeps the
# stored values, and each fold (inference, training) is equal to its source.
/usr/bin/python3 - "$T" <<'PY'
import os, sys
import numpy as np
import onnx
from onnx import helper as h, numpy_helper, TensorProto as TP
rng = np.random.default_rng(0)
t = lambda n, a: numpy_helper.from_array(a, n)
inits = [t("w", rng.standard_normal((8, 16)).astype(np.float32)),
         t("g", (1 + 0.1 * rng.standard_normal(16)).astype(np.float32)),
         t("b", (0.1 * rng.standard_normal(16)).astype(np.float32))]
for shared in ("g", "b"):
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"], name="proj"),
             h.make_node("Add", ["m", shared], ["a"], name="proj_bias"),
             h.make_node("LayerNormalization", ["a", "g", "b"], ["y"], name="ln", axis=-1, epsilon=1e-5)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [2, 8])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2, 16])], inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]),
              os.path.join(sys.argv[1], f"shared_{shared}.onnx"))
# A float16 model: LayerNormalization's epsilon is a float attribute (1e-5f), which float16
# cannot hold (it would store 1.0014e-5).
nodes = [h.make_node("MatMul", ["x", "w"], ["a"], name="proj"),
         h.make_node("LayerNormalization", ["a", "g", "b"], ["y"], name="ln", axis=-1, epsilon=1e-5)]
g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT16, [2, 8])],
                 [h.make_tensor_value_info("y", TP.FLOAT16, [2, 16])],
                 [t(i.name, numpy_helper.to_array(i).astype(np.float16)) for i in inits])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), os.path.join(sys.argv[1], "half.onnx"))
PY
for shared in g b; do
  for mode in inference training; do
    run "norm's $shared shared with the producer's bias: $mode fold" 0 \
      "$LNV" fold "$T/shared_$shared.onnx" -o "$T/shared_${shared}_$mode.onnx" --mode "$mode"
    run "norm's $shared shared with the producer's bias: the $mode fold is equal" 0 \
      "$LNV" equiv "$T/shared_$shared.onnx" "$T/shared_${shared}_$mode.onnx" --mode "$mode"
    has "norm's $shared shared, $mode: equal" "result: equal"
  done
done
# The training fold of a float16 model stores the same weights, so it gets no allowance:
# the decomposed RMSNorm must keep epsilon 1e-5f (computed in float32, cast back).
run "float16 model: training fold" 0 "$LNV" fold "$T/half.onnx" -o "$T/half_t.onnx" --mode training
run "float16 model: the training fold is equal, gradients too" 0 \
  "$LNV" equiv "$T/half.onnx" "$T/half_t.onnx" --mode training --grad --grad-params
has "float16 model: no allowance" "none \(A and B store the same weights\)"
run "float16 model: the inference fold checks" 0 "$LNV" fold "$T/half.onnx" -o "$T/half_i.onnx"
run "float16 model: the inference fold is equal" 0 "$LNV" equiv "$T/half.onnx" "$T/half_i.onnx"
# ONNX Runtime runs the float16 model and both folds on one float16 input; each output is
# held to a float64 evaluation of the original (numpy, from the stored float16 weights):
# a fold within 4 times the original's own float16 noise (or 4 float16 units of the
# largest output), every row's argmax the same.
ORT_NODE="${LNV_ORT_DIR:-$HOME/.cache/lnverify/onnxruntime}/node_modules/onnxruntime-node"
if command -v node > /dev/null && [ -d "$ORT_NODE" ]; then
  /usr/bin/python3 -c "
import numpy as np, onnx
from onnx import numpy_helper
x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float16)
open('$T/half_x.pb', 'wb').write(numpy_helper.from_array(x, 'x').SerializeToString())"
  for f in half half_i half_t; do
    run "float16 model: ONNX Runtime runs $f.onnx" 0 node "$ROOT/tools/ort_run.js" "$T/$f.onnx" "$T/ort_$f" "$T/half_x.pb"
  done
  /usr/bin/python3 - "$T" > "$T/out" 2>&1 <<'PY'
import sys
import numpy as np
import onnx
from onnx import numpy_helper
d = sys.argv[1]
m = onnx.load(f"{d}/half.onnx")
w = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in m.graph.initializer}
x = numpy_helper.to_array(onnx.load_tensor(f"{d}/half_x.pb")).astype(np.float64)
a = x @ w["w"]
n = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + np.float64(np.float32(1e-5)))
ref = n * w["g"] + w["b"]
out = {f: numpy_helper.to_array(onnx.load_tensor(f"{d}/ort_{f}/output_0.pb")) for f in ("half", "half_i", "half_t")}
assert all(o.dtype == np.float16 for o in out.values()), {f: o.dtype for f, o in out.items()}
noise = max(np.abs(out["half"].astype(np.float64) - ref).max(), np.abs(ref).max() * 2.0**-10)
for f in ("half_i", "half_t"):
    diff = np.abs(out[f].astype(np.float64) - ref).max()
    print(f"{f}: max |ORT - f64| {diff:.3g}, original's {noise:.3g}")
    assert diff <= 4 * noise, f
    assert (out[f].argmax(-1) == ref.argmax(-1)).all(), f
print("float16 folds in ORT: within the original's float16 noise")
PY
  has "float16 model: both folds in ONNX Runtime within the original's float16 noise" "^float16 folds in ORT: within"
else
  echo "skip  float16 folds in ONNX Runtime: node or onnxruntime-node missing (bash scripts/setup.sh --tests)"
fi

finish
