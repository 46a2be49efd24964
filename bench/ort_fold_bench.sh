#!/usr/bin/env bash
# ONNX Runtime on the original and each `fold --rms-op` spelling of a GPT-2-small-sized, a
# BERT-base-sized and a ViT-B/16 export, batch 1, sequence 128 and 1024 (ViT: its 197
# tokens), 1 and 2 intra-op threads (bench/ort_bench.js: interleaved runs, medians with
# min/max, fold/original ratios, and the norm nodes' kernel time from ORT's profiler, alone
# and with the residual Adds that feed them). Also, in the same interleaved runs, the
# original as ONNX Runtime's offline optimizer saves it (level extended: its fused contrib
# ops; `ortopt`) and `fold --rms-op decomposed` of that file (`ortopt_decomposed`), the
# fold a user of the deployed graph gets; its ratios are to `ortopt`. Prints one markdown
# row per graph.
#
#   bash bench/ort_fold_bench.sh [LARGE_DIR]     # default build/large
#
# LARGE_DIR holds gpt2_small.onnx, bert_base.onnx and vit_b16.onnx
# (scripts/make_gpt2_small_onnx.py, scripts/make_bert_base_onnx.py,
# scripts/make_vit_b16_onnx.py); the folds and ORT's optimized originals are written beside
# them when missing. MODELS (default "gpt2_small bert_base vit_b16") the models; SEQS
# (default "128 1024") the sequences; REPEATS (default 9) timed runs per model at sequence
# 128 (and ViT), REPEATS_LONG (default 3) at 1024; PROFILE_RUNS (default 3) /
# PROFILE_RUNS_LONG (default 1) profiled runs; OPS (default "decomposed ort onnx23") the
# --rms-op spellings; ORT_BASELINE=0 leaves out the ORT-optimized original and its fold.
set -euo pipefail
cd "$(dirname "$0")/.."
large=${1:-build/large}
lnverify=${LNVERIFY:-build/cli/lnverify}
repeats=${REPEATS:-9} repeats_long=${REPEATS_LONG:-3}
profile=${PROFILE_RUNS:-3} profile_long=${PROFILE_RUNS_LONG:-1}
read -r -a ops <<< "${OPS:-decomposed ort onnx23}"
read -r -a models <<< "${MODELS:-gpt2_small bert_base vit_b16}"
read -r -a seqs <<< "${SEQS:-128 1024}"
baseline=${ORT_BASELINE:-1}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The dims a model is folded at.
dims() { if [[ $1 == vit_b16 ]]; then echo "--dim batch=1"; else echo "--dim batch=1 --dim seq=128"; fi; }

for model in "${models[@]}"; do
  [[ -f $large/$model.onnx ]] || { echo "ort_fold_bench: $large/$model.onnx missing (scripts/make_${model}_onnx.py)" >&2; exit 2; }
  for op in "${ops[@]}"; do
    out=$large/$model.fold_$op.onnx
    # shellcheck disable=SC2046
    [[ -f $out ]] || "$lnverify" fold "$large/$model.onnx" -o "$out" --rms-op "$op" $(dims "$model") >&2
  done
  if [[ $baseline == 1 && ! -f $large/$model.ortopt_decomposed.onnx ]]; then
    # ORT's offline optimizer saves the graph after one run: an example input as a TensorProto.
    /usr/bin/python3 -I -c '
import sys
import numpy as np
from onnx import numpy_helper
model, path = sys.argv[1], sys.argv[2]
x = (np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32) if model == "vit_b16"
     else np.arange(128, dtype=np.int64).reshape(1, 128))
open(path, "wb").write(numpy_helper.from_array(x).SerializeToString())' "$model" "$scratch/input_0.pb"
    node tools/ort_run.js "$large/$model.onnx" "$scratch/out" --level extended \
      --optimized "$large/$model.ortopt.onnx" "$scratch/input_0.pb" >/dev/null
    # shellcheck disable=SC2046
    "$lnverify" fold "$large/$model.ortopt.onnx" -o "$large/$model.ortopt_decomposed.onnx" \
      --rms-op decomposed $(dims "$model") >&2
  fi
done

results=$scratch/results
echo "uptime at start: $(uptime)" >&2
for seq in "${seqs[@]}"; do
  for model in "${models[@]}"; do
    input=(--vocab 30522) tokens=$seq
    case $model in
      gpt2_small) input=(--vocab 50257) ;;
      vit_b16) [[ $seq == "${seqs[0]}" ]] || continue; input=(--image 224) tokens=197 ;;
    esac
    for threads in 1 2; do
      r=$repeats p=$profile
      [[ $seq == 1024 && $model != vit_b16 ]] && r=$repeats_long p=$profile_long
      args=("orig=$large/$model.onnx")
      for op in "${ops[@]}"; do args+=("$op=$large/$model.fold_$op.onnx"); done
      [[ $baseline == 1 ]] && args+=("ortopt=$large/$model.ortopt.onnx" "ortopt_decomposed=$large/$model.ortopt_decomposed.onnx")
      node bench/ort_bench.js --seq "$tokens" --threads "$threads" --repeats "$r" --profile-runs "$p" \
        "${input[@]}" "${args[@]}" | sed "s/^{/{\"net\":\"$model\",/" | tee -a "$results" >&2
    done
  done
done
echo "uptime at end: $(uptime)" >&2

python3 - "$results" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| model | seq | threads | graph | ms median (min–max) | ÷ original (ortopt_*: ÷ ortopt) | replaced norms' kernels µs/run, median (min) | ÷ original, median (min) | with their residual Adds µs/run, median (min) | ÷ original, median (min) | norm ops ORT ran per run |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
ref = {}
for r in rows:
    # a fold of ORT's optimized original is compared with that file, the rest with the export
    base = "ortopt" if r["model"].startswith("ortopt") else "orig"
    key = (r["net"], r["seq"], r["threads"], base)
    if r["model"] == base:
        ref[key] = r
    o = ref[key]
    r["ratio"] = r["ms"]["median"] / o["ms"]["median"]
    t, n, on = r["ms"], r["replaced_us"], o["replaced_us"]
    a, oa = r["residual_us"], o["residual_us"]
    ops = ", ".join(f"{k} {v}" for k, v in sorted(r["norm_ops"].items(), key=lambda kv: -kv[1]))
    print(f'| {r["net"]} | {r["seq"]} | {r["threads"]} | {r["model"]} | {t["median"]:.0f} ({t["min"]:.0f}–{t["max"]:.0f}) '
          f'| {r["ratio"]:.3f} | {n["median"]:.0f} ({n["min"]:.0f}) | {n["median"] / on["median"]:.2f} ({n["min"] / on["min"]:.2f}) '
          f'| {a["median"]:.0f} ({a["min"]:.0f}) | {a["median"] / oa["median"]:.2f} ({a["min"] / oa["min"]:.2f}) | {ops} |')
EOF
