#!/usr/bin/env bash
# Times the two spellings of a folded EmbedLayerNormalization in ONNX Runtime
# (docs/benchmarks.md, "EmbedLayerNormalization's fold"): `fused`, what `lnverify fold`
# writes (the node kept over its centered tables), and `unfused` (its lookups, their Add
# and SimplifiedLayerNormalization: bench/embed_norm_unfused.py), beside the original.
# Two graphs: the tiny BERT with ONNX Runtime's fused embeddings
# (tests/data/onnx/contrib/embed_layer_norm_bert, sequence 16), and BERT-base-sized
# embeddings alone (vocabulary 30522, 512 positions, width 768, no segment table; random tables,
# written here) at sequence 128 and 512. Each configuration runs bench/ort_bench.js
# (interleaved runs, medians) ROUNDS times.
#
#   bash bench/embed_norm_bench.sh PATH/TO/lnverify [OUT_DIR]
#
# Needs node, onnxruntime-node (bash scripts/setup.sh --tests) and /usr/bin/python3 with onnx.
set -euo pipefail
LNV=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${2:-$ROOT/build/embed_bench}
ROUNDS=${ROUNDS:-3}
REPEATS=${REPEATS:-300}
mkdir -p "$OUT"

/usr/bin/python3 - "$OUT/embed_base.onnx" <<'PY'
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
rng = np.random.default_rng(0)
t = lambda name, a: numpy_helper.from_array(a.astype(np.float32), name)
d = 768
inits = [t("word", 0.02 * rng.standard_normal((30522, d)) + 0.01), t("position", 0.02 * rng.standard_normal((512, d))),
         t("gamma", 1 + 0.1 * rng.standard_normal(d)), t("beta", 0.1 * rng.standard_normal(d))]
nodes = [helper.make_node("Cast", ["input_ids"], ["ids32"], name="cast", to=TensorProto.INT32),
         helper.make_node("EmbedLayerNormalization", ["ids32", "", "word", "position", "", "gamma", "beta"],
                          ["y", "mask_index"], name="embeddings", domain="com.microsoft", epsilon=1e-12)]
g = helper.make_graph(nodes, "embeddings", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
onnx.save(m, sys.argv[1])
PY

fold() {  # SOURCE STEM [--dim ...]: the fold and its unfused spelling
  local src=$1 stem=$2
  shift 2
  "$LNV" fold "$src" "$@" -o "$OUT/$stem.fused.onnx" > /dev/null
  /usr/bin/python3 "$ROOT/bench/embed_norm_unfused.py" "$OUT/$stem.fused.onnx" "$OUT/$stem.unfused.onnx"
}
fold "$ROOT/tests/data/onnx/contrib/embed_layer_norm_bert/model.onnx" bert_tiny
for s in 128 512; do
  fold "$OUT/embed_base.onnx" "embed_base_$s" --dim batch=1 --dim "seq=$s"
done

bench() {  # LABEL SEQ VOCAB ORIGINAL STEM
  for r in $(seq "$ROUNDS"); do
    echo "# $1 seq $2 round $r"
    node "$ROOT/bench/ort_bench.js" --seq "$2" --vocab "$3" --threads 1 --repeats "$REPEATS" --profile-runs 0 \
      "orig=$4" "fused=$OUT/$5.fused.onnx" "unfused=$OUT/$5.unfused.onnx"
  done
}
bench bert_tiny 16 64 "$ROOT/tests/data/onnx/contrib/embed_layer_norm_bert/model.onnx" bert_tiny
for s in 128 512; do bench embed_base "$s" 30522 "$OUT/embed_base.onnx" "embed_base_$s"; done
