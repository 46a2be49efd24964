#!/usr/bin/env bash
# Builds one libFuzzer target (ASan + UBSan, in build-asan/) and runs it for SECONDS on its
# corpus (docs/fuzzing.md).
#   bash scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]
#   TARGET: model_json | safetensors | pipeline | onnx
# The corpus grows in build-asan/fuzz/TARGET/corpus, seeded from examples/, tests/golden/,
# tests/regressions/ (model targets), fuzz/seeds/safetensors/ or tests/data/onnx/ (the real
# exports), and from the kept inputs in
# tests/regressions/fuzz/TARGET/. A crash, leak, timeout or sanitizer report is written to
# build-asan/fuzz/TARGET/ (crash-*, leak-*, timeout-*, oom-*) and the script exits non-zero.
# Exits 0 when the run ends without a finding; its last line gives executions and coverage.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:?usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]}"
seconds="${2:?usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]}"
shift 2
case "$target" in
  model_json|pipeline) seeds=(examples tests/golden tests/regressions) dict=model_json max_len=65536 ;;
  safetensors) seeds=(fuzz/seeds/safetensors) dict=safetensors max_len=65536 ;;
  onnx) seeds=(tests/data/onnx) dict=onnx max_len=524288 ;;
  *) echo "fuzz.sh: unknown target '$target' (model_json, safetensors, pipeline, onnx)" >&2; exit 2 ;;
esac
bash scripts/asan_build.sh "fuzz_$target" >/dev/null

work="build-asan/fuzz/$target"
mkdir -p "$work/corpus"
# Seeds: only the files of each format (a folder may hold READMEs and other formats).
for d in "${seeds[@]}"; do
  find "$d" -maxdepth 1 -type f \( -name '*.json' -o -name '*.safetensors' -o -name '*.onnx' \) \
    -exec cp -n -t "$work/corpus" {} +
done
kept="tests/regressions/fuzz/$target"
mkdir -p "$kept"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# One process, one job (a shared machine); a single input may take 10 s and 2 GiB at most;
# inputs up to 64 KiB (512 KiB for ONNX: the exports are up to 370 KB).
set +e
"build-asan/fuzz/fuzz_$target" "$work/corpus" "$kept" \
  -dict="fuzz/dict/$dict.dict" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -malloc_limit_mb=2048 -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$work/" \
  "$@" 2>&1 | tee "$work/last.log" | grep -E --line-buffered "DONE|ERROR|SUMMARY|crash-|leak-|timeout-|oom-|Test unit written|==[0-9]+==" 
rc=${PIPESTATUS[0]}
set -e
execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$work/last.log" | grep -Eo '[0-9]+$' || echo "?")
cov=$(grep -E '#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$work/last.log" | tail -1 | grep -Eo 'cov: [0-9]+ ft: [0-9]+' || echo "cov: ?")
echo "fuzz $target: exit $rc, $execs executions in ${seconds} s, $cov, corpus $(ls "$work/corpus" | wc -l) files (log: $work/last.log)"
exit "$rc"
