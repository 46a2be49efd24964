#!/usr/bin/env bash
# A campaign run as shards and merged equals the campaign run on one machine, byte for
# byte in the verdicts (docs/fuzzing.md, docs/ci.md): `fuzz --shard K/N` for several N
# (more shards than cases too), with --keep-going and with a failing case that stops the
# campaign; `check --models LIST --shard K/N`. Only the measured times may differ: the
# JSON's "seconds" line and the JUnit time attributes are dropped before comparing (and
# for a stopped campaign the means per case, which the merge takes over every case the
# shards checked: reports/shard_merge.h).
# Usage: cli_shards.sh path/to/lnverify
source "$(dirname "$0")/cli_lib.sh"
cd "$ROOT" || exit 1

# same NAME A B: A and B are equal but for their measured times.
strip_times() {
  case "$1" in
    *.json) grep -Ev "^  \"(seconds${MEANS:+|nodes_per_case|layer_norms_per_case})\": " "$1" ;;
    *.xml)  sed -E 's/ time="[0-9.]+"//' "$1" ;;
  esac
}
same() {
  if diff <(strip_times "$2") <(strip_times "$3") > "$T/diff"; then ok "$1"
  else bad "$1: $2 and $3 differ"; head -20 "$T/diff"; fi
}

# fuzz_shards TAG N ARGS...: the campaign ARGS on one machine and as N shards merged
# (the shards given to merge in reverse order); each shard exits as its own cases say,
# the merge as the single run.
fuzz_shards() {
  local tag="$1" n="$2"; shift 2
  mkdir -p "$T/$tag"
  "$LNV" -q fuzz "$@" --out "$T/$tag/out" --json "$T/$tag/one.json" --junit "$T/$tag/one.xml" > "$T/out" 2>&1
  local want=$?
  local inputs=()
  for ((k = n - 1; k >= 0; k--)); do
    "$LNV" -q fuzz "$@" --shard "$k/$n" --out "$T/$tag/out" --json "$T/$tag/s$k.json" \
      --junit "$T/$tag/s$k.xml" > "$T/out" 2>&1
    echo $? > "$T/$tag/rc$k"
    inputs+=("$T/$tag/s$k.json" "$T/$tag/s$k.xml")
  done
  run "$tag: merge of $n shards exits as the single run ($want)" "$want" \
    "$LNV" merge "${inputs[@]}" -o "$T/$tag/merged.json" --junit "$T/$tag/merged.xml"
  same "$tag: merged JSON equals the single run's" "$T/$tag/one.json" "$T/$tag/merged.json"
  same "$tag: merged JUnit equals the single run's" "$T/$tag/one.xml" "$T/$tag/merged.xml"
}

fuzz_shards k1 1 --cases 24 --seed 7 --max-nodes 12 --keep-going
fuzz_shards k3 3 --cases 24 --seed 7 --max-nodes 12 --keep-going
fuzz_shards k5 5 --cases 24 --seed 7 --max-nodes 12
fuzz_shards k30 30 --cases 24 --seed 7 --max-nodes 12
grep -q '"shard"' "$T/k5/s0.json" && ! grep -q '"shard"' "$T/k5/merged.json" \
  && ok "a shard's report names its shard, the merged one does not" \
  || bad "settings.shard: in the shards' reports only"
grep -q '"checked": 0,' "$T/k30/s29.json" && ok "a shard past the last case checks none" \
  || bad "shard 29/30 of 24 cases should check none"

# A campaign that a failing case stops: case 6 of seeds 4240.. (seed 4246, an over-cautious
# "no") is shard 0's of 3; shards 1 and 2 run past it, and the merge keeps the cases up to it.
"$LNV" -q fuzz --seed 4246 --cases 1 --shrink-attempts 0 --out "$T/probe" > "$T/out" 2>&1
if [ $? -eq 1 ]; then
  MEANS=1 fuzz_shards stop3 3 --cases 12 --seed 4240 --shrink-attempts 0
  [ "$(cat "$T/stop3/rc0" "$T/stop3/rc1" "$T/stop3/rc2" | tr -d '\n')" = 100 ] \
    && ok "stop3: shard 0 fails (case 6), shards 1 and 2 hold" || bad "stop3: shards' exit codes"  grep -q '"checked": 7,' "$T/stop3/merged.json" && grep -q '"checked": 4,' "$T/stop3/s1.json" \
    && ok "merge drops the cases past the first failing case" \
    || bad "stop3: expected 7 cases checked when merged, 4 by shard 1"
else
  bad "seed 4246 no longer fails: choose another failing seed for the stopped campaign"
fi

# check over a list of models: one run and 2 shards merged.
cat > "$T/models.txt" <<LIST
# golden models, one a line
tests/golden/add_own_mean.json
tests/golden/center_absorbs.json

tests/golden/cbwc_already.json
tests/golden/concat_feature_axis.json
tests/golden/cls_token_concat.json
LIST
run "check --models: one run" 0 "$LNV" check --models "$T/models.txt" --trials 1 \
  --json "$T/list-one.json" --junit "$T/list-one.xml"
has "check --models: a line per model and a summary" "5 model\(s\): 5 hold, 0 fail, 0 inconclusive"
for k in 1 0; do
  run "check --models --shard $k/2" 0 "$LNV" check --models "$T/models.txt" --trials 1 --shard "$k/2" \
    --json "$T/list-$k.json" --junit "$T/list-$k.xml"
done
has "check --models --shard 0/2: its 3 models" "3 model\(s\) of shard 0/2"
run "merge of the check shards" 0 "$LNV" merge "$T/list-1.json" "$T/list-0.xml" "$T/list-0.json" \
  "$T/list-1.xml" -o "$T/list-merged.json" --junit "$T/list-merged.xml"
same "check list: merged JSON equals the single run's" "$T/list-one.json" "$T/list-merged.json"
same "check list: merged JUnit equals the single run's" "$T/list-one.xml" "$T/list-merged.xml"

# The shards' and the merged reports follow their schemas.
S="$ROOT/docs/spec/schemas"
run "fuzz reports of shards and merge follow fuzz.schema.json" 0 python3 "$ROOT/scripts/validate_json.py" \
  "$S/fuzz.schema.json" "$T/k5/s0.json" "$T/k5/merged.json" "$T/stop3/s0.json" "$T/stop3/merged.json"
run "check lists follow check_list.schema.json" 0 python3 "$ROOT/scripts/validate_json.py" \
  "$S/check_list.schema.json" "$T/list-0.json" "$T/list-merged.json"
run "a check list's reports follow check.schema.json" 0 python3 "$ROOT/scripts/validate_json.py" \
  "$S/check.schema.json" "$T/list-merged.json" --at /reports/4/report

# Bad input: exit 2, naming the file, nothing written.
M="$T/k3"
run "merge: a shard missing" 2 "$LNV" merge "$M/s0.json" "$M/s1.json" -o "$T/bad.json"
has "merge: names the missing shard" "shard 2/3 is missing"
run "merge: a shard twice" 2 "$LNV" merge "$M/s0.json" "$M/s1.json" "$M/s1.json" -o "$T/bad.json"
has "merge: names the shard given twice" "shard 1/3 is also"
run "merge: shards of other campaigns" 2 "$LNV" merge "$M/s0.json" "$T/k5/s1.json" -o "$T/bad.json"
has "merge: names the setting that differs" "settings\.(keep_going|shard\.count)"
run "merge: a JUnit file short" 2 "$LNV" merge "$M/s0.json" "$M/s1.json" "$M/s2.json" "$M/s0.xml" \
  -o "$T/bad.json" --junit "$T/bad.xml"
run "merge: a fuzz report and a check list" 2 "$LNV" merge "$M/s0.json" "$T/list-0.json" -o "$T/bad.json"
echo '<testsuites><testcase/>' > "$T/junk.xml"
run "merge: JUnit not written by lnverify" 2 "$LNV" merge "$T/k1/s0.json" "$T/junk.xml" -o "$T/bad.json" \
  --junit "$T/bad.xml"
has "merge: names the JUnit file" "junk.xml"
absent "merge: nothing written on bad input" "$T/bad.json"
absent "merge: no JUnit written on bad input" "$T/bad.xml"
run "fuzz --shard 3/3 is refused" 2 "$LNV" fuzz --cases 3 --shard 3/3
run "check --shard without --models is refused" 2 "$LNV" check tests/golden/add_own_mean.json --shard 0/2
printf 'tests/golden/add_own_mean.json --batch 2\n' > "$T/bad-list.txt"
run "check --models: a bad line" 2 "$LNV" check --models "$T/bad-list.txt"
has "check --models: names the line" "bad-list.txt:1"
# The shipped GitHub Actions workflow and Kubernetes Indexed Job parse as YAML and run
# every shard 0..N-1 of their N (python3-yaml, Debian's python).
/usr/bin/python3 - "$ROOT" > "$T/out" 2>&1 <<'PY'
import sys, yaml
root = sys.argv[1]
w = yaml.safe_load(open(root + "/.github/workflows/fuzz-shards.yml"))
n = int(w["env"]["SHARDS"])
assert w["jobs"]["shard"]["strategy"]["matrix"]["shard"] == list(range(n)), "matrix is not 0..SHARDS-1"
assert "shard" in w["jobs"]["merge"]["needs"], "merge does not wait for the shards"
run = w["jobs"]["shard"]["steps"][-2]["run"]
assert '--shard "${{ matrix.shard }}/$SHARDS"' in run, "the shard step does not pass its index"
j = yaml.safe_load(open(root + "/deploy/k8s/fuzz-shards.yaml"))
assert j["kind"] == "Job" and j["spec"]["completionMode"] == "Indexed"
c = j["spec"]["template"]["spec"]["containers"][0]
env = {e["name"]: e["value"] for e in c["env"]}
assert int(env["SHARDS"]) == j["spec"]["completions"], "SHARDS is not the completions"
assert '--shard "$JOB_COMPLETION_INDEX/$SHARDS"' in c["args"][0]
print("yaml ok")
PY
[ $? -eq 0 ] && ok "the workflow and the Indexed Job parse and cover every shard" \
  || bad "fuzz-shards.yml / deploy/k8s/fuzz-shards.yaml (needs python3-yaml)"

finish
