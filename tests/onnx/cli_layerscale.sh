#!/usr/bin/env bash
# LayerScale in real exports (docs/spec/semantics.md, "LayerScale"): a DINOv2-style ViT
# whose pre-norm blocks scale each branch by a gamma (scripts/make_onnx_test_models.py,
# layerscale_vit_tiny) has all 5 LayerNorms foldable at opsets 17 and 14, proved by `check`;
# its inference fold moves each gamma into the last Linear of its branch (the Mul becomes an
# Identity, gamma's initializer goes), its training fold computes Mul(W, gamma) and the
# centering in the graph (gamma kept); both are `equiv` to the source and run in ONNX
# Runtime within float32 noise of PyTorch's output with the same argmax. The training
# fold reads back with W and gamma as params: `equiv --grad --grad-params` is equal
# outright and compares their gradients (also for a Conv and for model.json goldens
# exported to ONNX). A gamma times a Conv folds into the Conv. torchvision's ConvNeXt keeps its "no" for the LNs after its
# depthwise convs, LayerScale or not.
#   bash tests/onnx/cli_layerscale.sh PATH/TO/lnverify
set -uo pipefail
source "$(dirname "$0")/../cli_lib.sh" "$1"
D="$ROOT/tests/data/onnx"

# The training fold's LayerScale weights read back as the params W and gamma: `equiv
# --mode training --grad --grad-params` of SOURCE and FOLD is equal outright (no weight
# storage allowance: the two files store the same weights) and compares the gradient of
# every W and gamma the fold's `<W>/layer_scale/Mul` and `Reshape` nodes read (the JSON
# report lists each as an equal quantity).
#   grad_params_equal LABEL SOURCE FOLD N_SCALED N_GAMMAS [options...]
grad_params_equal() {
  local label="$1" src="$2" fold="$3" n_scaled="$4" n_gammas="$5"
  shift 5
  run "$label: equiv --grad --grad-params of the training fold" 0 "$LNV" equiv "$src" "$fold" \
    --mode training --grad --grad-params --json "$T/grad.json" "$@"
  has "$label: equal" "^result: equal"
  has "$label: equal outright (the same stored weights)" "weight storage allowance: none"
  if /usr/bin/python3 - "$fold" "$T/grad.json" "$n_scaled" "$n_gammas" > "$T/grad_check" 2>&1 <<'PY'
import json, sys
import onnx
g = onnx.load(sys.argv[1]).graph
muls = [n for n in g.node if n.op_type == "Mul" and n.name.endswith("/layer_scale/Mul")]
shapes = [n for n in g.node if n.op_type == "Reshape" and n.name.endswith("/layer_scale/Reshape")]
scaled = {n.input[0] for n in muls}
gammas = {n.input[0] for n in shapes}
assert len(scaled) == int(sys.argv[3]) and len(gammas) == int(sys.argv[4]), (scaled, gammas)
q = {x["quantity"]: x for x in json.load(open(sys.argv[2]))["quantities"]}
for name in sorted(scaled | gammas):
    x = q.get(f"gradient of param '{name}'")
    assert x is not None, f"the gradient of '{name}' is not compared"
    assert x["outcome"] == "equal" and not x["up_to_weight_storage"], x
print(f"{len(scaled)} scaled weights and biases and {len(gammas)} gammas: gradients compared, equal")
PY
  then ok "$label: the gradients of W and gamma are compared"; else bad "$label: the gradients of W and gamma: $(tail -1 "$T/grad_check")"; fi
}

for o in 17 14; do
  M="$D/layerscale_vit_tiny_opset$o.onnx"
  run "opset $o: audit" 0 "$LNV" audit "$M" --dim batch=2
  has "opset $o: every LN foldable in both modes" "5 of 5 LayerNorms foldable \(inference\), 5 \(training\)"
  has "opset $o: the LayerScale Mul is a centered term" "/blocks.0/norm2/LayerNormalization +yes +yes .*/blocks.0/Mul"
  run "opset $o: check holds" 0 "$LNV" check "$M" --dim batch=2
  for mode in inference training; do
    F="$T/ls${o}_$mode.onnx"
    run "opset $o: $mode fold" 0 "$LNV" fold "$M" --dim batch=2 --mode "$mode" -o "$F"
    run "opset $o: the $mode fold is equal to the source" 0 "$LNV" equiv "$M" "$F" --dim batch=2 --mode "$mode"
    has "opset $o, $mode: equal" "result: equal"
    run "opset $o: the $mode fold has no LayerNorm left" 0 "$LNV" audit "$F" --dim batch=2
    has "opset $o, $mode fold: no LN" "0 of 0 LayerNorms"
  done
  run "opset $o: check of the training fold" 0 "$LNV" check "$T/ls${o}_training.onnx" --dim batch=2 --mode training
  grad_params_equal "opset $o" "$M" "$T/ls${o}_training.onnx" 8 4 --dim batch=2
  /usr/bin/python3 - "$T/ls${o}_inference.onnx" "$T/ls${o}_training.onnx" > "$T/out" 2>&1 <<'PY'
import sys
import onnx
for path, kept in ((sys.argv[1], False), (sys.argv[2], True)):
    g = onnx.load(path).graph
    gammas = sorted(i.name for i in g.initializer if "gamma" in i.name)
    ops = {n.name: n.op_type for n in g.node}
    assert all(ops[f"/blocks.{b}/{m}"] == "Identity" for b in (0, 1) for m in ("Mul", "Mul_1")), ops
    assert (len(gammas) == 4) == kept, (path, gammas)
    if kept:  # the training fold reads each gamma into a product with a weight
        assert sum(1 for n in g.node if n.op_type == "Mul" and n.name.endswith("/layer_scale/Mul")) == 8
print("gamma moved: Mul -> Identity, gamma initializers dropped (inference) or read into the weights (training)")
PY
  has "opset $o: the folds' LayerScale nodes" "^gamma moved"
done

# ONNX Runtime runs the source and both folds on PyTorch's reference input: each within the
# source's float32 noise of PyTorch's output (4 times it, or 1e-5 of the largest output),
# the argmax of every row the same.
ORT_NODE="${LNV_ORT_DIR:-$HOME/.cache/lnverify/onnxruntime}/node_modules/onnxruntime-node"
if command -v node > /dev/null && [ -d "$ORT_NODE" ]; then
  REF="$D/layerscale_vit_tiny_data/test_data_set_0"
  run "ONNX Runtime runs the source" 0 node "$ROOT/tools/ort_run.js" "$D/layerscale_vit_tiny_opset17.onnx" "$T/ort_src" "$REF/input_0.pb"
  for mode in inference training; do
    run "ONNX Runtime runs the $mode fold" 0 node "$ROOT/tools/ort_run.js" "$T/ls17_$mode.onnx" "$T/ort_$mode" "$REF/input_0.pb"
  done
  /usr/bin/python3 - "$T" "$REF" > "$T/out" 2>&1 <<'PY'
import sys
import numpy as np
import onnx
from onnx import numpy_helper
d, ref_dir = sys.argv[1], sys.argv[2]
load = lambda p: numpy_helper.to_array(onnx.load_tensor(p)).astype(np.float64)
ref = load(f"{ref_dir}/output_0.pb")
src = load(f"{d}/ort_src/output_0.pb")
noise = max(np.abs(src - ref).max(), np.abs(ref).max() * 1e-5)
for mode in ("inference", "training"):
    out = load(f"{d}/ort_{mode}/output_0.pb")
    diff = np.abs(out - ref).max()
    print(f"{mode}: max |ORT - PyTorch| {diff:.3g}, source's {noise:.3g}")
    assert diff <= 4 * noise, mode
    assert (out.argmax(-1) == ref.argmax(-1)).all(), mode
print("LayerScale folds in ORT: within the source's float32 noise, same argmax")
PY
  has "both folds in ONNX Runtime within float32 noise" "^LayerScale folds in ORT: within"
else
  echo "skip  LayerScale folds in ONNX Runtime: node or onnxruntime-node missing (bash scripts/setup.sh)"
fi

# gamma [C, 1, 1] times a Conv, then channels-last and a LayerNormalization (written with
# onnx.helper): the inference fold stores C·diag(gamma)·W in the Conv's weight and bias,
# the training fold computes them in the graph (which the importer reads back as the Conv
# of the stored W and B, times gamma, centered over the channels); both are equal to the
# source.
/usr/bin/python3 - "$T" <<'PY'
import os, sys
import numpy as np
import onnx
from onnx import TensorProto as TP, helper as h, numpy_helper
rng = np.random.default_rng(7)
t = lambda name, a: numpy_helper.from_array(a.astype(np.float32), name)
inits = [t("W", rng.standard_normal((6, 3, 3, 3))), t("B", rng.standard_normal(6)),
         t("gamma", 1 + 0.5 * rng.standard_normal((6, 1, 1))),
         t("ln.w", 1 + 0.2 * rng.standard_normal(6)), t("ln.b", 0.3 * rng.standard_normal(6))]
nodes = [h.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         h.make_node("Mul", ["gamma", "c"], ["s"], name="layer_scale"),
         h.make_node("Transpose", ["s"], ["cl"], name="to_channels_last", perm=[0, 2, 3, 1]),
         h.make_node("LayerNormalization", ["cl", "ln.w", "ln.b"], ["y"], name="ln", axis=-1, epsilon=1e-5)]
g = h.make_graph(nodes, "conv_layer_scale", [h.make_tensor_value_info("x", TP.FLOAT, [2, 3, 4, 4])],
                 [h.make_tensor_value_info("y", TP.FLOAT, [2, 4, 4, 6])], inits)
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), os.path.join(sys.argv[1], "conv_ls.onnx"))
PY
run "Conv LayerScale: audit" 0 "$LNV" audit "$T/conv_ls.onnx"
has "Conv LayerScale: the LN folds through the Mul" "1 of 1 LayerNorms foldable \(inference\), 1 \(training\)"
run "Conv LayerScale: check holds" 0 "$LNV" check "$T/conv_ls.onnx"
for mode in inference training; do
  run "Conv LayerScale: $mode fold" 0 "$LNV" fold "$T/conv_ls.onnx" --mode "$mode" -o "$T/conv_ls_$mode.onnx"
  run "Conv LayerScale: the $mode fold is equal" 0 "$LNV" equiv "$T/conv_ls.onnx" "$T/conv_ls_$mode.onnx" --mode "$mode"
  has "Conv LayerScale, $mode: equal" "result: equal"
done
grad_params_equal "Conv LayerScale" "$T/conv_ls.onnx" "$T/conv_ls_training.onnx" 2 1
if /usr/bin/python3 -c "
import onnx, sys
g = onnx.load(sys.argv[1]).graph
assert 'gamma' not in {i.name for i in g.initializer}
assert {n.name: n.op_type for n in g.node}['layer_scale'] == 'Identity'" "$T/conv_ls_inference.onnx"; then
  ok "Conv LayerScale: gamma moved into the Conv (Mul -> Identity, gamma dropped)"
else bad "Conv LayerScale: gamma still read"; fi

# model.json LayerScale goldens (tests/golden) exported with `lnverify export`, folded in
# training: a linear's weight and bias, a conv1d's, a matmul and bias add followed by
# transposes and a reshape.
for g in layer_scale_linear layer_scale_conv layer_scale_chain; do
  run "$g: export" 0 "$LNV" export "$ROOT/tests/golden/$g.json" -o "$T/$g.onnx"
  run "$g: training fold" 0 "$LNV" fold "$T/$g.onnx" --mode training -o "$T/${g}_training.onnx"
done
grad_params_equal "layer_scale_linear" "$T/layer_scale_linear.onnx" "$T/layer_scale_linear_training.onnx" 2 1
grad_params_equal "layer_scale_conv" "$T/layer_scale_conv.onnx" "$T/layer_scale_conv_training.onnx" 2 1
grad_params_equal "layer_scale_chain" "$T/layer_scale_chain.onnx" "$T/layer_scale_chain_training.onnx" 2 1

# A factor that is not a constant (a gate computed from the input) is no LayerScale: a sound
# "no" whose reason names the Mul and does not claim that no centering exists.
/usr/bin/python3 - "$T" <<'PY'
import os, sys
import numpy as np
import onnx
from onnx import TensorProto as TP, helper as h, numpy_helper
rng = np.random.default_rng(8)
t = lambda name, a: numpy_helper.from_array(a.astype(np.float32), name)
inits = [t("W", rng.standard_normal((5, 6))), t("B", rng.standard_normal(6)),
         t("ln.w", 1 + 0.2 * rng.standard_normal(6)), t("ln.b", 0.3 * rng.standard_normal(6))]
nodes = [h.make_node("MatMul", ["x", "W"], ["m"], name="proj"),
         h.make_node("Add", ["m", "B"], ["p"], name="proj_bias"),
         h.make_node("MatMul", ["x", "W"], ["gm"], name="gate_proj"),
         h.make_node("Sigmoid", ["gm"], ["g"], name="gate"),
         h.make_node("Mul", ["p", "g"], ["s"], name="gated"),
         h.make_node("LayerNormalization", ["s", "ln.w", "ln.b"], ["y"], name="ln", axis=-1, epsilon=1e-5)]
g = h.make_graph(nodes, "gated", [h.make_tensor_value_info("x", TP.FLOAT, [2, 3, 5])],
                 [h.make_tensor_value_info("y", TP.FLOAT, [2, 3, 6])], inits)
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), os.path.join(sys.argv[1], "gated.onnx"))
PY
run "a gate, not a LayerScale: audit" 0 "$LNV" audit "$T/gated.onnx"
has "gate: the LN does not fold" "0 of 1 LayerNorms foldable"
has "gate: the reason names the Mul and what it is" "\`gated\` \(mul\) multiplies by a factor .* computed from the input"
lacks "gate: no claim that no centering exists" "no centering makes"
run "gate: check holds (the no is tight)" 0 "$LNV" check "$T/gated.onnx"

# torchvision's ConvNeXt: its layer_scale [C, 1, 1] follows a permute of the block's last
# Linear (a LayerScale), but every block LN reads a depthwise conv: still "no", naming it.
run "ConvNeXt: audit" 0 "$LNV" audit "$D/convnext_tiny_opset17.onnx" --dim batch=2
has "ConvNeXt: the block LNs keep their no (grouped conv)" "grouped convolution"
has "ConvNeXt: one LN foldable, as without the LayerScale rule" "1 of 7 LayerNorms foldable \(inference\), 1 \(training\)"

finish
