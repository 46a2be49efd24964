#!/usr/bin/env bash
# ONNX Runtime on the original and each `fold --rms-op` spelling of a GPT-2-small-sized and
# a BERT-base-sized export, batch 1, sequence 128 and 1024, 1 and 2 intra-op threads
# (bench/ort_bench.js: interleaved runs, medians with min/max, fold/original ratios, and
# the norm nodes' kernel time from ORT's profiler, alone and with the residual Adds that
# feed them). Prints one markdown row per model.
#
#   bash bench/ort_fold_bench.sh [LARGE_DIR]     # default build/large
#
# LARGE_DIR holds gpt2_small.onnx and bert_base.onnx (scripts/make_gpt2_small_onnx.py,
# scripts/make_bert_base_onnx.py); the folds are written beside them when missing.
# REPEATS (default 9) timed runs per model at sequence 128, REPEATS_LONG (default 3) at
# 1024; PROFILE_RUNS (default 3) / PROFILE_RUNS_LONG (default 1) profiled runs; OPS
# (default "decomposed ort onnx23") the --rms-op spellings.
set -euo pipefail
cd "$(dirname "$0")/.."
large=${1:-build/large}
lnverify=${LNVERIFY:-build/cli/lnverify}
repeats=${REPEATS:-9} repeats_long=${REPEATS_LONG:-3}
profile=${PROFILE_RUNS:-3} profile_long=${PROFILE_RUNS_LONG:-1}
read -r -a ops <<< "${OPS:-decomposed ort onnx23}"

for model in gpt2_small bert_base; do
  [[ -f $large/$model.onnx ]] || { echo "ort_fold_bench: $large/$model.onnx missing (scripts/make_${model}_onnx.py)" >&2; exit 2; }
  for op in "${ops[@]}"; do
    out=$large/$model.fold_$op.onnx
    [[ -f $out ]] || "$lnverify" fold "$large/$model.onnx" -o "$out" --rms-op "$op" --dim batch=1 --dim seq=128 >&2
  done
done

results=$(mktemp)
trap 'rm -f "$results"' EXIT
echo "uptime at start: $(uptime)" >&2
for seq in 128 1024; do
  for model in gpt2_small bert_base; do
    vocab=30522; [[ $model == gpt2_small ]] && vocab=50257
    for threads in 1 2; do
      r=$repeats p=$profile
      [[ $seq == 1024 ]] && r=$repeats_long p=$profile_long
      args=("orig=$large/$model.onnx")
      for op in "${ops[@]}"; do args+=("$op=$large/$model.fold_$op.onnx"); done
      node bench/ort_bench.js --seq "$seq" --threads "$threads" --repeats "$r" --profile-runs "$p" \
        --vocab "$vocab" "${args[@]}" | sed "s/^{/{\"net\":\"$model\",/" | tee -a "$results" >&2
    done
  done
done
echo "uptime at end: $(uptime)" >&2

python3 - "$results" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| model | seq | threads | graph | ms median (min–max) | ÷ original | replaced norms' kernels µs/run, median (min) | ÷ original, median (min) | with their residual Adds µs/run, median (min) | ÷ original, median (min) | norm ops ORT ran per run |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
ref = {}
for r in rows:
    key = (r["net"], r["seq"], r["threads"])
    if r["model"] == "orig":
        ref[key] = r
    t, n, on = r["ms"], r["replaced_us"], ref[key]["replaced_us"]
    a, oa = r["residual_us"], ref[key]["residual_us"]
    ops = ", ".join(f"{k} {v}" for k, v in sorted(r["norm_ops"].items(), key=lambda kv: -kv[1]))
    print(f'| {r["net"]} | {r["seq"]} | {r["threads"]} | {r["model"]} | {t["median"]:.0f} ({t["min"]:.0f}–{t["max"]:.0f}) '
          f'| {r["ratio"]:.3f} | {n["median"]:.0f} ({n["min"]:.0f}) | {n["median"] / on["median"]:.2f} ({n["min"] / on["min"]:.2f}) '
          f'| {a["median"]:.0f} ({a["min"]:.0f}) | {a["median"] / oa["median"]:.2f} ({a["min"] / oa["min"]:.2f}) | {ops} |')
EOF
