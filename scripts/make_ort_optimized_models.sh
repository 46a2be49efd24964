#!/usr/bin/env bash
# Saves every committed export tests/data/onnx/<model>_opset<N>.onnx as ONNX Runtime's
# offline optimizer rewrites it, at levels basic and extended:
# tests/data/onnx/ort_optimized/<model>_opset<N>_<level>.onnx. Each is run once on the
# model's example input (tools/ort_run.js), so a file is written only when ONNX Runtime
# runs it. Level `all` is not saved: its com.microsoft.nchwc layout ops are specific to
# the CPU that saved the file.
#
#   bash scripts/make_ort_optimized_models.sh [OUT_DIR]
#
# Needs node and onnxruntime-node (bash scripts/setup.sh --tests). Prints the op types of each file.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-tests/data/onnx/ort_optimized}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for model in tests/data/onnx/*_opset*.onnx; do
  base=$(basename "$model" .onnx)
  data=tests/data/onnx/${base%_opset*}_data/test_data_set_0
  for level in basic extended; do
    node tools/ort_run.js "$model" "$tmp/out" --level "$level" \
      --optimized "$out/${base}_${level}.onnx" "$data/input_0.pb" >/dev/null
    printf '%s_%s: %s\n' "$base" "$level" "$(/usr/bin/python3 -I -c '
import collections, sys, onnx
m = onnx.load(sys.argv[1])
c = collections.Counter((n.domain + "." if n.domain else "") + n.op_type for n in m.graph.node)
print(" ".join(f"{k}:{v}" for k, v in sorted(c.items())))' "$out/${base}_${level}.onnx")"
  done
done
