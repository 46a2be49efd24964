#!/usr/bin/env bash
# ONNX models on the command line: every command takes MODEL.onnx with --dim NAME=VALUE,
# `import` writes model.json, and bad ONNX input or dims exit 2 naming what is wrong.
#   bash tests/cli_onnx.sh PATH/TO/lnverify
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh" "$1"
M="$ROOT/tests/data/onnx/mlp_tiny_opset14.onnx"   # the LayerNorms decomposed (opset 14)
M17="$ROOT/tests/data/onnx/mlp_tiny_opset17.onnx" # LayerNormalization nodes

# --- every command on an .onnx file ------------------------------------------------------
run "audit x.onnx" 0 "$LNV" audit "$M" --dim batch=2
has "audit: both LayerNorms fold, named by their ONNX path" "^/ln_2/LayerNormalization +yes +yes"
has "audit: the count" "2 of 2 LayerNorms foldable"
run "plain lnverify x.onnx is an audit" 0 "$LNV" "$M17" --dim batch=2
has "plain: the LayerNormalization node's name" "^/ln_1/LayerNormalization +yes"
run "audit --json -" 0 "$LNV" audit "$M" --dim batch=2 --json -
has "audit --json: the norm" '"name": "/ln_1/LayerNormalization"'
run "check x.onnx proves the folds" 0 "$LNV" check "$M" --dim batch=2
has "check: holds" "result: holds \(3 hold, 0 fail, 0 inconclusive\)"
run "eval x.onnx" 0 "$LNV" eval "$M17" --dim batch=1
has "eval: the output, with the batch bound" "output /ln_2/LayerNormalization \[1, 3, 8\]"
run "fold x.onnx -o y.json" 0 "$LNV" fold "$M" --dim batch=2 -o "$T/folded.json"
has "fold: both folded" "2 LayerNorms -> RMSNorm"
run "audit of the folded model.json" 0 "$LNV" audit "$T/folded.json"
has "folded: no LayerNorm left" "0 of 0 LayerNorms"

V="$ROOT/tests/data/onnx/vit_tiny_opset17.onnx"
run "check of torchvision's ViT export proves its folds" 0 "$LNV" check "$V" --dim batch=2
has "ViT: every fold and the plan hold at 257 bits" "result: holds \(6 hold, 0 fail, 0 inconclusive\)"
# torchvision's ConvNeXt: the stem's LN folds (exact), the 6 others are "no" and tight
# (4 forced folds each, one trial, to keep the test short).
C="$ROOT/tests/data/onnx/convnext_tiny_opset14.onnx"
run "check of torchvision's ConvNeXt export" 0 "$LNV" check "$C" --dim batch=2 --trials 1 --forced-folds 4
has "ConvNeXt: the stem's LayerNorm2d fold is exact" "holds +ln_exact +/features/features.0/features.0.1/LayerNormalization"
has "ConvNeXt: the classifier's LN is a tight no" "holds +ln_tight +/classifier/classifier.0/LayerNormalization"
has "ConvNeXt: 1 fold, 6 tight, the plan" "result: holds \(8 hold, 0 fail, 0 inconclusive\)"
# A post-norm nn.TransformerEncoder (BERT-shaped): the embedding LN folds, the 4 encoder
# norms are tight "no"s.
B="$ROOT/tests/data/onnx/bert_tiny_opset14.onnx"
run "check of the post-norm nn.TransformerEncoder export" 0 "$LNV" check "$B" --dim batch=2 --dim seq=8 --trials 1 --forced-folds 4
has "post-norm: the embedding LN fold is exact" "holds +ln_exact +/emb_norm/LayerNormalization"
has "post-norm: 1 fold, 4 tight, the plan" "result: holds \(6 hold, 0 fail, 0 inconclusive\)"
# A BERT layer as ONNX Runtime fuses it: Attention reading the int64 attention mask cast to
# int32 (random 0/1 masks for the check): the embedding LN folds, the two others are tight.
A="$ROOT/tests/data/onnx/contrib/bert_mask_audit/model.onnx"
for mode in inference training; do
  run "check of an Attention with a mask ($mode)" 0 "$LNV" check "$A" --mode $mode
  has "Attention with a mask ($mode): the embedding LN fold is exact" "holds +ln_exact +ln_emb"
  has "Attention with a mask ($mode): 1 fold, 2 tight, the plan" "result: holds \(4 hold, 0 fail, 0 inconclusive\)"
done

# A pre-norm block as ONNX Runtime's transformer optimizer leaves it: the LN read by an
# Attention alone. Its Q, K and V projections live in the Attention's packed weights, with
# no Gemm or MatMul of their own, so the fold keeps the norm's bias (and says why) instead
# of moving it into them.
/usr/bin/python3 - "$T/attn_only.onnx" <<'PY' || bad "building the Attention-only model"
import sys
import numpy as np
import onnx
from onnx import helper as h, numpy_helper, TensorProto as TP
rng = np.random.default_rng(0)
t = lambda n, a: numpy_helper.from_array(np.asarray(a, np.float32), n)
d = 8
inits = [t("gamma", 1 + 0.1 * rng.standard_normal(d)), t("beta", 0.1 * rng.standard_normal(d)),
         t("w", rng.standard_normal((d, 3 * d))), t("wb", rng.standard_normal(3 * d)), t("w0", rng.standard_normal((d, d)))]
nodes = [h.make_node("MatMul", ["x", "w0"], ["hh"], name="fc"),
         h.make_node("LayerNormalization", ["hh", "gamma", "beta"], ["n"], name="ln", axis=-1),
         h.make_node("Attention", ["n", "w", "wb"], ["y"], name="attn", domain="com.microsoft", num_heads=2)]
g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [2, 3, d])],
                 [h.make_tensor_value_info("y", TP.FLOAT, [2, 3, d])], inits)
m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
m.ir_version = 8
onnx.save(m, sys.argv[1])
PY
run "audit of an LN read by an Attention alone" 0 "$LNV" audit "$T/attn_only.onnx" --json "$T/attn_only.json"
if grep -q '"fate": "kept"' "$T/attn_only.json" && grep -q 'computed inside a fused op of the source file' "$T/attn_only.json"; then
  ok "LN read by an Attention: its bias is kept, the reason names the fused projection"
else
  bad "LN read by an Attention: bias fate $(grep -o '"fate": "[a-z]*"' "$T/attn_only.json")"
fi
for mode in inference training; do
  run "fold of an LN read by an Attention alone ($mode)" 0 "$LNV" fold "$T/attn_only.onnx" --mode $mode -o "$T/attn_only.$mode.onnx"
  has "LN read by an Attention ($mode): folded" "1 LayerNorm -> RMSNorm"
  run "equiv of that fold ($mode)" 0 "$LNV" equiv "$T/attn_only.onnx" "$T/attn_only.$mode.onnx" --mode $mode
  has "LN read by an Attention ($mode): equal" "result: equal"
done

# --- import ------------------------------------------------------------------------------
run "import x.onnx -o y.json" 0 "$LNV" import "$M" --dim batch=2 -o "$T/m.json"
has "import: what it wrote" "wrote .*m.json: 1 input, 10 params, 10 nodes \(2 norms\)"
if grep -q '"/ln_1/Sqrt"' "$T/m.json"; then ok "import: meta.onnx.norms lists the ONNX nodes"; else bad "import: meta.onnx.norms"; fi
run "audit of the imported model.json" 0 "$LNV" audit "$T/m.json"
has "imported: the same verdicts" "2 of 2 LayerNorms foldable"
cp "$M" "$T/in.onnx"
run "import refuses to overwrite its input" 2 "$LNV" import "$T/in.onnx" --dim batch=2 -o "$T/in.onnx"
has "import over its input: says why" "refusing to overwrite the input model"
if cmp -s "$T/in.onnx" "$M"; then ok "import over its input: input untouched"; else bad "input changed"; fi
run "import of a model.json" 2 "$LNV" import "$T/m.json" -o "$T/m2.json"
has "import of a model.json: says why" "import reads an ONNX model"
cp "$M" "$T/noext"
run "ONNX bytes under another name (magic)" 0 "$LNV" audit "$T/noext" --dim batch=2

# --- GPT-2's causal mask (Where), Swin's window padding (Pad): modelled, proved -----------
G="$ROOT/tests/data/onnx/gpt2_tiny_opset17.onnx"
run "audit of GPT-2's export" 0 "$LNV" audit "$G" --dim batch=2 --dim seq=8
has "audit: GPT-2's pre-norm LayerNorms all fold" "5 of 5 LayerNorms foldable"
lacks "audit: no opaque op left in GPT-2" "opaque ops"
run "check of GPT-2's export proves its folds" 0 "$LNV" check "$G" --dim batch=2 --dim seq=8
has "GPT-2: every fold and the plan hold" "result: holds \(6 hold, 0 fail, 0 inconclusive\)"
S="$ROOT/tests/data/onnx/swin_tiny_opset17.onnx"
run "eval of torchvision's Swin export (its zero Pads modelled)" 0 "$LNV" eval "$S" --dim batch=2 --bits 64
has "Swin: the logits" "output /head/Gemm \\[2, 4\\]"

# nn.TransformerEncoder's causal mask (generate_square_subsequent_mask: 0 and -inf added
# before the Softmax) is imported as a masked softmax: nothing opaque, every LN folds, and
# check proves the folds exactly.
P="$ROOT/tests/data/onnx/prenorm_lm_tiny_opset17.onnx"
run "audit of a causal LM with a -inf mask" 0 "$LNV" audit "$P" --dim batch=2 --dim seq=8
lacks "audit: the mask's Add is not opaque" "opaque ops"
has "audit: the pre-norm LNs all fold" "5 of 5 LayerNorms foldable"
run "import of a causal LM with a -inf mask" 0 "$LNV" import "$P" --dim batch=2 --dim seq=8 -o "$T/lm.json"
python3 - "$T/lm.json" > "$T/out" 2>&1 <<'PY'
import json, sys
nodes = json.load(open(sys.argv[1]))["nodes"]
masked = [n for n in nodes if n["op"] == "softmax" and "condition" in n]
assert len(masked) == 2, masked
for n in masked:  # causal: row i keeps keys 0..i
    s = n["condition_shape"][-1]
    assert n["condition"] == [1 if j <= i else 0 for i in range(s) for j in range(s)], n
assert not [n for n in nodes if n["op"] == "opaque"]
PY
if [ $? -eq 0 ]; then ok "import: two causal masked softmaxes, no opaque node"; else bad "import: masked softmax"; fi
run "check of a causal LM with a -inf mask" 0 "$LNV" check "$P" --dim batch=2 --dim seq=8 --bits 256
has "check: the 5 folds and the plan hold" "result: holds \(6 hold, 0 fail, 0 inconclusive\)"
# The same LM exported at a fixed 128 tokens: its mask is one initializer of 64 KiB, which
# the reader leaves in the file until it is read (docs/onnx.md, "Reading lazily").
L="$ROOT/tests/data/onnx/causal_lm_seq128_opset17.onnx"
run "eval of a causal LM of 128 tokens" 0 "$LNV" eval "$L" --bits 64
has "eval: the logits of 128 tokens" "output /MatMul \[1, 128, 16\]"
run "check of a causal LM of 128 tokens" 0 "$LNV" check "$L" --trials 1
has "check: its 3 folds and the plan hold" "result: holds \(4 hold, 0 fail, 0 inconclusive\)"
run "fold of a causal LM of 128 tokens" 0 "$LNV" fold "$L" -o "$T/lm128.onnx"
run "equiv of a causal LM of 128 tokens and its fold" 0 "$LNV" equiv "$L" "$T/lm128.onnx" --trials 1
has "equiv: equal" "result: equal \(1 equal, 0 different, 0 inconclusive\)"

# --- ops lnverify does not model: opaque, named ------------------------------------------
O=/usr/share/libonnx-testdata/data/node/test_floor/model.onnx  # Floor: not a model.json op
run "audit of a model with an opaque op" 0 "$LNV" audit "$O"
has "audit: lists the opaque op as the file names it" "opaque ops .*\(Floor\)"
run "eval needing an opaque op" 2 "$LNV" eval "$O"
has "eval: names the op" "cannot evaluate op 'Floor'"
run "check needing an opaque op is inconclusive" 3 "$LNV" check "$O"
has "check: names the op" "inconclusive: node .*: cannot evaluate op 'Floor'"

# --- dims ----------------------------------------------------------------------------------
# A free dim (symbolic, no --dim) is bound to 1, with one warning line naming them all;
# a --dim no input has is a warning too (one command line serves several models).
warnings() { grep -c "^lnverify: warning: " "$T/out"; }
one_warning() { if [ "$(warnings)" = 1 ]; then ok "$1: one warning line"; else bad "$1: $(warnings) warning lines"; fi; }
run "free dim: audit" 0 "$LNV" audit "$M"
has "free dim: the warning names it and says how to choose" \
  "^lnverify: warning: .*mlp_tiny_opset14\.onnx: binding the free input dim batch to 1; choose other values with --dim NAME=VALUE"
one_warning "free dim"
has "free dim: the verdicts" "2 of 2 LayerNorms foldable"
run "free dims: audit of GPT-2" 0 "$LNV" audit "$G"
has "free dims: one line names both" "warning: .*gpt2_tiny_opset17\.onnx: binding the free input dims batch, seq to 1"
one_warning "free dims"
has "free dims: GPT-2's verdicts at batch 1, seq 1" "5 of 5 LayerNorms foldable"
run "free dim: eval" 0 "$LNV" eval "$M17"
has "free dim: eval at batch 1" "output /ln_2/LayerNormalization \[1, 3, 8\]"
run "free dim: check" 0 "$LNV" check "$M"
has "free dim: check holds" "result: holds \(3 hold, 0 fail, 0 inconclusive\)"
run "free dim: equiv" 0 "$LNV" equiv "$M" "$M17" --trials 1
has "free dim: equiv equal" "result: equal"
has "free dim: equiv warns for each model" "warning: .*mlp_tiny_opset17\.onnx: binding the free input dim batch"
run "free dims: fold to ONNX" 0 "$LNV" fold "$G" -o "$T/g_free.onnx"
/usr/bin/python3 - "$T/g_free.onnx" > "$T/out" 2>&1 <<'PY'
import sys, onnx
dims = [d.dim_param or d.dim_value for d in onnx.load(sys.argv[1]).graph.input[0].type.tensor_type.shape.dim]
assert dims == ["batch", "seq"], dims
PY
if [ $? -eq 0 ]; then ok "free dims: the fold keeps the symbolic dims"; else bad "free dims: fold's input dims"; fi
run "free dims: the fold audits at other dims" 0 "$LNV" audit "$T/g_free.onnx" --dim batch=2 --dim seq=8
has "free dims: the fold's norms are gone" "0 of 0 LayerNorms"
run "unknown --dim name" 0 "$LNV" audit "$M" --dim batch=2 --dim seq=4
has "unknown: a warning naming it and the model's dims" \
  "^lnverify: warning: .*mlp_tiny_opset14\.onnx: ignoring --dim seq: no input of this model has that dim \(its symbolic dims: batch\)"
one_warning "unknown"
has "unknown: the audit runs" "2 of 2 LayerNorms foldable"
run "unknown --dim names, a model without symbolic dims" 0 "$LNV" audit "$L" --dim batch=2 --dim seq=128
has "unknown: both in one line" "ignoring --dim batch, --dim seq: no input of this model has those dims \(its inputs have no symbolic dims\)"
one_warning "unknown, no symbolic dims"
# equiv reads two models with one --dim list: a name either model has is no warning.
/usr/bin/python3 - "$M17" "$T/mlp_n.onnx" <<'PY'
import sys, onnx
m = onnx.load(sys.argv[1])
for v in list(m.graph.input) + list(m.graph.output):
    for d in v.type.tensor_type.shape.dim:
        if d.dim_param == "batch":
            d.dim_param = "n"
onnx.save(m, sys.argv[2])
PY
run "equiv: each --dim binds the model that has it" 0 "$LNV" equiv "$M" "$T/mlp_n.onnx" --dim batch=2 --dim n=2 --dim heads=2 --trials 1
has "equiv: equal" "result: equal"
has "equiv: one warning, for the name neither has" "warning: .*mlp_tiny_opset14\.onnx and .*mlp_n\.onnx: ignoring --dim heads: no input of these models has that dim \(their symbolic dims: batch, n\)"
one_warning "equiv"
run "malformed --dim" 2 "$LNV" audit "$M" --dim batch=two
has "malformed: says what is expected" "expected NAME=VALUE"
run "--dim 0" 2 "$LNV" audit "$M" --dim batch=0
run "--dim twice" 2 "$LNV" audit "$M" --dim batch=2 --dim batch=3
has "twice: says so" "bound twice"
run "--dim on a model.json" 2 "$LNV" audit "$T/m.json" --dim batch=2
has "--dim on model.json: says why" "this is a model.json"

# --- bad ONNX files ----------------------------------------------------------------------
head -c 1000 "$M" > "$T/trunc.onnx"
run "truncated .onnx" 2 "$LNV" audit "$T/trunc.onnx" --dim batch=2
has "truncated: says so" "not an ONNX model"
run "import of a truncated file writes nothing" 2 "$LNV" import "$T/trunc.onnx" --dim batch=2 -o "$T/t.json"
absent "truncated import: no output" "$T/t.json"
printf 'not onnx at all' > "$T/junk.onnx"
run "non-ONNX bytes" 2 "$LNV" check "$T/junk.onnx"
run "missing file" 2 "$LNV" audit "$T/nonexistent.onnx"

finish
