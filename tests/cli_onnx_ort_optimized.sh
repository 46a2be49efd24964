#!/usr/bin/env bash
# ONNX Runtime's optimized graphs read like their sources: every committed export saved by
# ONNX Runtime 1.30's offline optimizer at levels basic and extended
# (tests/data/onnx/ort_optimized/, scripts/make_ort_optimized_models.sh) has the same
# LayerNorms with the same verdicts as its source, computes the same function (`equiv`,
# float32 storage of the constants ORT pre-computed allowed), and its verdicts are proved
# by `check` (the extended ones).
#   bash tests/cli_onnx_ort_optimized.sh PATH/TO/lnverify
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh" "$1"
O="$ROOT/tests/data/onnx/ort_optimized"

dims() { case "$1" in bert*|prenorm*|gpt2*) echo "--dim batch=1 --dim seq=4" ;; *) echo "--dim batch=1" ;; esac; }
# Each LN's two verdicts, one line per LN in topological order.
verdicts() { awk '$2 ~ /^(yes|no)$/ && $3 ~ /^(yes|no)$/ { print $2, $3 }' "$T/out"; }

count=0
for f in "$O"/*_basic.onnx "$O"/*_extended.onnx; do
  b=$(basename "$f" .onnx)
  src="$ROOT/tests/data/onnx/${b%_*}.onnx"
  count=$((count + 1))
  # shellcheck disable=SC2046
  run "$b: audit of the source" 0 "$LNV" audit "$src" $(dims "$b") || continue
  want=$(verdicts)
  want_summary=$(grep -E "LayerNorms foldable" "$T/out" | cut -d';' -f1)  # the counts
  # shellcheck disable=SC2046
  run "$b: audit" 0 "$LNV" audit "$f" $(dims "$b") || continue
  if [ -n "$want" ] && [ "$(verdicts)" == "$want" ]; then ok "$b: the source's LNs and verdicts"
  else bad "$b: LNs or verdicts differ from the source's: $(verdicts | tr '\n' ';') vs $(echo "$want" | tr '\n' ';')"; fi
  if grep -Fq -- "$want_summary;" "$T/out"; then ok "$b: the source's summary"; else bad "$b: summary differs from the source's: $want_summary"; fi
  # shellcheck disable=SC2046
  run "$b: equiv SOURCE OPTIMIZED" 0 "$LNV" equiv "$src" "$f" $(dims "$b")
  has "$b: equal" "result: equal \(1 equal, 0 different, 0 inconclusive\)"
  [ "${b##*_}" == extended ] || continue  # check: the extended files (the basic ones hold no contrib op)
  # shellcheck disable=SC2046
  run "$b: check" 0 "$LNV" check "$f" $(dims "$b") --trials 1 --forced-folds 2
  has "$b: holds" "result: holds \([0-9]+ hold, 0 fail, 0 inconclusive\)"
done
if [ "$count" -eq 32 ]; then ok "32 optimized files (16 exports x 2 levels)"; else bad "$count optimized files, expected 32"; fi

# EmbedLayerNormalization (tests/data/onnx/contrib: BERT's embeddings fused as ONNX Runtime's
# transformer optimizer fuses them, and a lookup by position_ids) folds in both modes: the
# node stays, over its tables centered; the fold computes the source's function and
# gradients (its params paired by name), and its re-import has the norm over centered
# lookups, foldable again.
for c in embed_layer_norm_bert embed_layer_norm_position_ids; do
  E="$ROOT/tests/data/onnx/contrib/$c/model.onnx"
  for mode in inference training; do
    run "$c: $mode fold" 0 "$LNV" fold "$E" --mode "$mode" -o "$T/$c.$mode.onnx"
    has "$c: $mode fold rewrites the norm" "1 LayerNorm -> RMSNorm"
    if grep -aq EmbedLayerNormalization "$T/$c.$mode.onnx"; then ok "$c: $mode fold keeps EmbedLayerNormalization"
    else bad "$c: $mode fold has no EmbedLayerNormalization"; fi
    run "$c: $mode fold equiv the source" 0 "$LNV" equiv "$E" "$T/$c.$mode.onnx" --mode "$mode" --grad --grad-params
    has "$c: $mode: equal, gradients paired" "result: equal \([0-9]+ equal, 0 different, 0 inconclusive\)"
    has "$c: $mode: the word table's gradient compared" "gradient of param 'word_table|gradient of param 'word.weight'"
    run "$c: audit of the $mode fold" 0 "$LNV" audit "$T/$c.$mode.onnx"
    has "$c: the $mode fold's norm reads centered lookups" "^(emb|embeddings) +yes +yes"
  done
done

# EmbedLayerNormalization whose mask_index an Attention reads (as ONNX Runtime's transformer
# optimizer leaves BERT; written with onnx.helper): ONNX Runtime's CPU kernel counts the
# mask entries equal to 1 per row, and its Attention keeps keys t < count, whatever the
# padding. lnverify models the count (mask ids in {0, 1}): the norm folds in both modes,
# `check` holds, the folds are equal to the source with every gradient, and ONNX Runtime
# agrees with lnverify's double evaluation on the format's random masks (0/1 at every
# position: padded anywhere) of 4 seeds.
/usr/bin/python3 - "$T" <<'PY' || bad "building the EmbedLayerNormalization mask_index model"
import os, sys
import numpy as np
from onnx import helper as h, numpy_helper, TensorProto as TP
rng = np.random.default_rng(0)
t = lambda n, a: numpy_helper.from_array(np.asarray(a, np.float32), n)
MS = "com.microsoft"
inits = [t("word", rng.standard_normal((10, 8))), t("pos", rng.standard_normal((6, 8))),
         t("gamma", 1 + 0.1 * rng.standard_normal(8)), t("beta", 0.1 * rng.standard_normal(8)),
         t("w", rng.standard_normal((8, 24))), t("wb", rng.standard_normal(24))]
nodes = [h.make_node("Cast", ["ids"], ["ids32"], name="ids_cast", to=TP.INT32),
         h.make_node("Cast", ["mask"], ["mask32"], name="mask_cast", to=TP.INT32),
         h.make_node("EmbedLayerNormalization", ["ids32", "", "word", "pos", "", "gamma", "beta", "mask32"],
                     ["emb", "mask_index"], name="embed", domain=MS, epsilon=1e-12),
         h.make_node("Attention", ["emb", "w", "wb", "mask_index"], ["a"], name="attn", domain=MS,
                     num_heads=2, mask_filter_value=-50.0),
         h.make_node("Add", ["a", "emb"], ["y"], name="y")]
g = h.make_graph(nodes, "g", [h.make_tensor_value_info("ids", TP.INT64, [4, 5]),
                              h.make_tensor_value_info("mask", TP.INT64, [4, 5])],
                 [h.make_tensor_value_info("y", TP.FLOAT, [4, 5, 8])], inits)
m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(MS, 1)])
m.ir_version = 8
with open(os.path.join(sys.argv[1], "embed_mask_index.onnx"), "wb") as f:
    f.write(m.SerializeToString())
PY
M="$T/embed_mask_index.onnx"
run "EmbedLayerNormalization mask_index: audit" 0 "$LNV" audit "$M"
has "mask_index: the norm folds in both modes" "^embed +yes +yes"
run "mask_index: import" 0 "$LNV" import "$M" -o "$T/embed_mask_index.json"
if grep -Eq '"op": *"opaque"' "$T/embed_mask_index.json"; then bad "mask_index: an opaque op in the import"
else ok "mask_index: no opaque op"; fi
run "mask_index: check holds" 0 "$LNV" check "$M"
has "mask_index: holds" "result: holds"
for mode in inference training; do
  run "mask_index: $mode fold" 0 "$LNV" fold "$M" --mode "$mode" -o "$T/embed_mask_index.$mode.onnx"
  run "mask_index: $mode fold equiv the source" 0 "$LNV" equiv "$M" "$T/embed_mask_index.$mode.onnx" --mode "$mode" --grad --grad-params
  has "mask_index: $mode: equal" "result: equal \([0-9]+ equal, 0 different, 0 inconclusive\)"
done
ORT_NODE="${LNV_ORT_DIR:-$HOME/.cache/lnverify/onnxruntime}/node_modules/onnxruntime-node"
if command -v node > /dev/null && [ -d "$ORT_NODE" ]; then
  for seed in 1 2 3 4; do
    run "mask_index: eval, seed $seed" 0 "$LNV" eval "$M" --bits 53 --seed "$seed" --json "$T/embed_mask_index.$seed.json"
    run "mask_index: ONNX Runtime agrees, seed $seed" 0 node "$ROOT/tests/onnx_runtime_check.js" "$ORT_NODE" 2e-6 "$seed" \
      "$M" "$T/embed_mask_index.json" "$T/embed_mask_index.$seed.json"
  done
else
  echo "skip  mask_index in ONNX Runtime: node or onnxruntime-node missing (bash scripts/setup.sh)"
fi

# The fused ops these files hold (so the checks above cover them).
for op in FusedMatMul BiasGelu FusedGemm SkipLayerNormalization SimplifiedLayerNormalization; do
  if grep -aqc "$op" "$O"/*_extended.onnx; then ok "extended files use $op"; else bad "no extended file uses $op"; fi
done
finish
