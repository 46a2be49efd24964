#!/usr/bin/env bash
# The reports people read and CI consumes (docs/spec/reports.md, docs/ci.md): every JSON
# report of every command validated against its schema in docs/spec/schemas, reports that
# break a schema rejected; the regression gate (audit --baseline, diff) on real changes of
# a model; JUnit XML validated against docs/spec/schemas/junit.xsd; Markdown tables that
# parse and hold the JSON's verdicts; the committed baselines of tests/baselines.
#   bash tests/cli_reports.sh PATH/TO/lnverify [torch] [onnx]
set -uo pipefail
source "$(dirname "$0")/cli_lib.sh" "$1"
TORCH="${2:-}"
ONNX="${3:-}"
S="$ROOT/docs/spec/schemas"
VALIDATE=(python3 "$ROOT/scripts/validate_json.py")
G="$ROOT/examples/gpt2_tiny.json"
B="$ROOT/examples/bert_tiny.json"

# valid NAME SCHEMA FILE [--at POINTER]: FILE is valid against docs/spec/schemas/SCHEMA.
valid() {
  local name="$1" schema="$2"; shift 2
  run "$name: valid against $schema" 0 "${VALIDATE[@]}" "$S/$schema.schema.json" "$@"
}
# invalid NAME SCHEMA FILE PATTERN: the validator rejects FILE, saying PATTERN.
invalid() {
  run "$1: rejected by $2" 1 "${VALIDATE[@]}" "$S/$2.schema.json" "$3"
  has "$1: the validator says why" "$4"
}
# edit IN OUT PYTHON: OUT is IN's JSON after the Python statement PYTHON on it (`d`).
edit() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); $3; json.dump(d, open(sys.argv[2], 'w'))" "$1" "$2"; }

# --- every JSON report against its schema -------------------------------------------------
run "audit --json" 0 "$LNV" audit "$G" --json "$T/audit_gpt2.json"
valid "audit gpt2_tiny" audit "$T/audit_gpt2.json"
run "fold --json (the audit report)" 0 "$LNV" fold "$B" -o "$T/bert.rms.json" --json "$T/audit_bert.json"
valid "fold --json bert_tiny" audit "$T/audit_bert.json"
run "check --json (inference)" 0 "$LNV" check "$G" --json "$T/check_gpt2.json"
valid "check gpt2_tiny inference" check "$T/check_gpt2.json"
run "check --json (training: gradients and drift)" 0 "$LNV" check "$G" --mode training --trials 1 --json "$T/check_train.json"
valid "check gpt2_tiny training" check "$T/check_train.json"
python3 - "$T/check_train.json" > "$T/out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
plan = [c for c in d["checks"] if c["kind"] == "plan_exact"][0]
q = [e["quantity"] for e in plan["error_stats"]]
print("outputs", sum(x.startswith("output") for x in q), "param gradients", sum(x.startswith("gradient of param") for x in q))
print("stats max equals check max:", max(e["abs"]["max"] for e in plan["error_stats"]) == plan["max_abs"])
print("drift entries", len(d["training_drift"]))
PY
has "check training: error statistics per output and per param gradient" "outputs [1-9][0-9]* param gradients [1-9][0-9]*"
has "check: the statistics' max is the check's max" "stats max equals check max: True"
has "check training: the drift of inference-only folds" "drift entries [1-9]"
run "eval --json" 0 "$LNV" eval "$G" --json "$T/eval.json"
valid "eval" eval "$T/eval.json"
run "eval --grad --bits 53 --json" 0 "$LNV" eval "$B" --grad --bits 53 --mode training --json "$T/eval_grad.json"
valid "eval --grad" eval "$T/eval_grad.json"

# --- reports breaking a schema are rejected -------------------------------------------------
edit "$T/check_gpt2.json" "$T/no_stats.json" 'del d["checks"][-1]["error_stats"]'
invalid "check without error_stats" check "$T/no_stats.json" "/checks/[0-9]+: 'error_stats' is a required property"
edit "$T/check_gpt2.json" "$T/bad_type.json" 'd["checks"][0]["max_abs"] = "tiny"'
invalid "check with a string max_abs" check "$T/bad_type.json" "/checks/0/max_abs: 'tiny' is not of type"
edit "$T/audit_gpt2.json" "$T/extra.json" 'd["layer_norms"][0]["verdict"] = "yes"'
invalid "audit with an unknown field" audit "$T/extra.json" "Additional properties are not allowed \('verdict'"
edit "$T/audit_gpt2.json" "$T/no_reason.json" 'del d["layer_norms"][1]["reasons"]'
invalid "audit without reasons" audit "$T/no_reason.json" "/layer_norms/1: 'reasons' is a required property"
edit "$T/audit_gpt2.json" "$T/wrong_format.json" 'd["format"] = "lnverify.check"'
invalid "audit with another format" audit "$T/wrong_format.json" "/format: 'lnverify.report' was expected"
edit "$T/eval.json" "$T/eval_bad.json" 'd["outputs"]["logits"]["shape"] = [-1]'
invalid "eval with a negative dim" eval "$T/eval_bad.json" "less than the minimum of 0"

# --- the regression gate ----------------------------------------------------------------------
# A real regression: a relu after the first MLP's projection puts a non-zero-mean term on
# the residual stream, so every LN after it stops folding.
edit "$G" "$T/gpt2_relu.json" '
i = [n["name"] for n in d["nodes"]].index("h0.drop_mlp")
d["nodes"].insert(i, {"name": "h0.mlp.relu", "op": "relu", "inputs": ["h0.mlp.proj"]})
d["nodes"][i + 1]["inputs"] = ["h0.mlp.relu"]'
run "audit --baseline itself: no change" 0 "$LNV" audit "$G" --baseline "$T/audit_gpt2.json"
has "no change: the summary" "0 regression\(s\) .* 0 improvement\(s\), 5 unchanged"
run "audit --baseline: a fold lost is a regression" 1 "$LNV" audit "$T/gpt2_relu.json" --baseline "$T/audit_gpt2.json" --json "$T/audit_relu.json" --junit "$T/relu.xml"
has "regression: one line per LN that no longer folds" "^REGRESSION  h1.ln_1: inference yes -> no \(.*h0.mlp.relu"
has "regression: ln_f too" "^REGRESSION  ln_f: inference yes -> no"
lacks "regression: h0.ln_1, before the relu, still folds" "h0.ln_1:"
has "regression: the summary counts them" "[1-9] regression\(s\) \([1-9] no longer fold"
valid "audit of the regressed model" audit "$T/audit_relu.json"
run "diff OLD NEW: the same regression" 1 "$LNV" diff "$T/audit_gpt2.json" "$T/audit_relu.json"
has "diff: the lines" "^REGRESSION  h1.ln_2: inference yes -> no"
run "diff NEW OLD: improvements only, exit 0" 0 "$LNV" diff "$T/audit_relu.json" "$T/audit_gpt2.json" --junit "$T/improved.xml"
has "improvement: one line per new fold" "^improvement ln_f: inference no -> yes"
has "improvement: counted" "0 regression\(s\) .* [1-9] improvement\(s\)"
edit "$T/audit_gpt2.json" "$T/reason.json" 'd["layer_norms"][0]["reasons"]["training"] = "an older reason"'
run "a \"no\" whose reason changed is a regression" 1 "$LNV" diff "$T/reason.json" "$T/audit_gpt2.json"
has "reason changed: both reasons shown" "^REGRESSION  h0.ln_1: training still no, reason was \"an older reason\", is \"\`drop_emb\`"
edit "$T/audit_gpt2.json" "$T/fewer.json" 'del d["layer_norms"][2]'
run "an LN not in the baseline is a regression" 1 "$LNV" audit "$G" --baseline "$T/fewer.json"
has "appeared: named" "^REGRESSION  h1.ln_1: not in the baseline \(inference yes, training no\)"
edit "$T/audit_gpt2.json" "$T/more.json" 'd["layer_norms"].append(dict(d["layer_norms"][0], name="h2.ln_1"))'
run "an LN of the baseline gone is a regression" 1 "$LNV" audit "$G" --baseline "$T/more.json"
has "disappeared: named" "^REGRESSION  h2.ln_1: in the baseline \(inference yes, training no\), not in this model"
# Baselines that are not one: exit 2, naming the file and what is wrong.
run "a check report as baseline" 2 "$LNV" audit "$G" --baseline "$T/check_gpt2.json"
has "check as baseline: says so" "check_gpt2.json: /format: not an lnverify audit report .*\"lnverify.check\""
run "another model's baseline" 2 "$LNV" audit "$G" --baseline "$T/audit_bert.json"
has "other model: names both" "audit_bert.json: /model: the baseline audits model 'bert_tiny', not 'gpt2_tiny'"
echo '{"format": "lnverify.report", "version": 1, "model": "gpt2_tiny", "layer_norms": [{"name": 1}]}' > "$T/broken.json"
run "a malformed audit report" 2 "$LNV" diff "$T/broken.json" "$T/audit_gpt2.json"
has "malformed: the JSON path" "broken.json: /layer_norms/0/foldable: missing"
echo 'not json' > "$T/text.json"
run "a baseline that is not JSON" 2 "$LNV" audit "$G" --baseline "$T/text.json"
has "not JSON: says so" "text.json: not a JSON report"
run "a missing baseline" 2 "$LNV" diff "$T/absent.json" "$T/audit_gpt2.json"
run "diff with one report" 2 "$LNV" diff "$T/audit_gpt2.json"
run "--baseline that is also the --json output" 2 "$LNV" audit "$G" --baseline "$T/audit_gpt2.json" --json "$T/audit_gpt2.json"
has "baseline as output: refused" "--baseline: .* is also an output"

# --- JUnit XML --------------------------------------------------------------------------------
XSD="$S/junit.xsd"
junit_valid() { run "$1: valid JUnit XML" 0 xmllint --noout --schema "$XSD" "$2"; }
# count FILE XPATH: the number of nodes XPATH selects.
count() { xmllint --xpath "count($2)" "$1"; }
run "audit --junit" 0 "$LNV" audit "$G" --junit "$T/audit.xml"
junit_valid "audit" "$T/audit.xml"
[ "$(count "$T/audit.xml" //testcase)" = 10 ] && ok "audit junit: one case per LN and mode (5 x 2)" || bad "audit junit: $(count "$T/audit.xml" //testcase) cases"
[ "$(count "$T/audit.xml" //testcase/skipped)" = 5 ] && ok "audit junit: each \"no\" (training) is skipped, not failed" || bad "audit junit skipped"
[ "$(count "$T/audit.xml" //failure)" = 0 ] && ok "audit junit: no failure without a baseline" || bad "audit junit failures"
junit_valid "audit --baseline with regressions" "$T/relu.xml"
n_reg=$(grep -c '^REGRESSION' <("$LNV" diff "$T/audit_gpt2.json" "$T/audit_relu.json"))
[ "$(count "$T/relu.xml" //testcase/failure)" = "$n_reg" ] && ok "gated junit: one failure per regressed LN ($n_reg)" || bad "gated junit: $(count "$T/relu.xml" //failure) failures, $n_reg regressions"
[ "$(count "$T/relu.xml" "//testcase[@name='ln_f [inference]']/failure")" = 1 ] && ok "gated junit: the failure is ln_f's inference case" || bad "gated junit ln_f"
junit_valid "diff improvements" "$T/improved.xml"
[ "$(count "$T/improved.xml" //failure)" = 0 ] && ok "improvements: no failure" || bad "improvements failed"
run "check --junit" 0 "$LNV" check "$G" --junit "$T/check.xml"
junit_valid "check" "$T/check.xml"
[ "$(count "$T/check.xml" //testcase)" = 6 ] && ok "check junit: one case per check" || bad "check junit cases"
[ "$(count "$T/check.xml" "//testcase[@name='plan_exact plan']")" = 1 ] && ok "check junit: the plan's case" || bad "check junit plan"
run "fuzz --junit" 0 "$LNV" fuzz --cases 3 --max-nodes 8 --out "$T/fz" --junit "$T/fuzz.xml"
junit_valid "fuzz" "$T/fuzz.xml"
[ "$(count "$T/fuzz.xml" //testcase)" = 3 ] && ok "fuzz junit: one case per case" || bad "fuzz junit cases"
# Failing cases: seed 314870 is an over-cautious "no" of the analysis (cli_end_to_end.sh):
# a JUnit failure in fuzz, and its shrunk model's check fails (exit 1) with a valid report.
run "fuzz --junit over a failing case" 1 "$LNV" fuzz --cases 1 --seed 314870 --shrink-attempts 100 --out "$T/fz1" --junit "$T/fuzz1.xml"
junit_valid "fuzz with a failing case" "$T/fuzz1.xml"
[ "$(count "$T/fuzz1.xml" "//testcase[@name='case 314870']/failure")" = 1 ] && ok "fuzz junit: the failing case is a failure" || bad "fuzz junit failure"
run "check of the shrunk case fails" 1 "$LNV" check "$T/fz1/case-314870.model.json" --seed 314870 --trials 2 --json "$T/check_fails.json" --junit "$T/check_fails.xml"
valid "a failing check's report" check "$T/check_fails.json"
junit_valid "a failing check" "$T/check_fails.xml"
[ "$(count "$T/check_fails.xml" "//testcase/failure[starts-with(@message, 'fails: judged not foldable')]")" -ge 1 ] && ok "check junit: the failing ln_tight is a failure with its reason" || bad "check junit failure"
sed 's/failures="[0-9]*"//' "$T/audit.xml" | sed '0,/<testsuite /s//<testsuite /' > "$T/broken.xml"
run "JUnit without a required attribute is rejected" 3 xmllint --noout --schema "$XSD" "$T/broken.xml"
has "broken junit: names the attribute" "attribute 'failures' is required"

# --- Markdown -------------------------------------------------------------------------------------
run "audit --format markdown" 0 "$LNV" audit "$G" --format markdown --json "$T/md_audit.json"
cp "$T/out" "$T/audit.md"
python3 - "$T/audit.md" "$T/md_audit.json" > "$T/out" <<'PY'
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()
report = json.load(open(sys.argv[2]))
rows = [l for l in lines if l.startswith("|")]
cells = lambda l: [c.strip() for c in re.split(r"(?<!\\)\|", l)[1:-1]]
assert cells(rows[0]) == ["LayerNorm", "inference", "training", "centered", "why not"], rows[0]
assert all(set(c) <= set("-") for c in cells(rows[1])), rows[1]
body = [cells(r) for r in rows[2:]]
assert all(len(r) == 5 for r in body), body
want = [[l["name"], "yes" if l["foldable"]["inference"] else "no", "yes" if l["foldable"]["training"] else "no"]
        for l in report["layer_norms"]]
assert [r[:3] for r in body] == want, (body, want)
print("markdown audit: %d rows match the JSON" % len(body))
PY
has "audit markdown: a row per LN, 5 columns, the JSON's verdicts" "markdown audit: 5 rows match the JSON"
run "check --format markdown" 0 "$LNV" check "$G" --format markdown --json "$T/md_check.json"
cp "$T/out" "$T/check.md"
python3 - "$T/check.md" "$T/md_check.json" > "$T/out" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
report = json.load(open(sys.argv[2]))
cells = lambda l: [c.strip() for c in re.split(r"(?<!\\)\|", l)[1:-1]]
tables, cur = [], []
for l in text.splitlines():
    if l.startswith("|"): cur.append(cells(l))
    elif cur: tables.append(cur); cur = []
if cur: tables.append(cur)
checks, stats = tables
assert checks[0] == ["check", "subject", "outcome", "max abs", "max rel", "bound", "bits"]
assert [r[:3] for r in checks[2:]] == [[c["kind"], c["subject"], c["outcome"]] for c in report["checks"]]
assert all(len(r) == 7 for r in checks) and all(len(r) == 12 for r in stats)
want = [[c["kind"], c["subject"], e["quantity"], str(e["elements"])] for c in report["checks"] for e in c["error_stats"]]
assert [r[:4] for r in stats[2:]] == want, (stats, want)
assert "**Result: %s**" % report["outcome"] in text
print("markdown check: %d checks, %d statistics rows match the JSON" % (len(checks) - 2, len(stats) - 2))
PY
has "check markdown: the tables parse and hold the JSON's outcomes" "markdown check: 6 checks, 6 statistics rows match"
run "--format markdown with --json -" 2 "$LNV" audit "$G" --format markdown --json -
run "--format html is not a format" 2 "$LNV" audit "$G" --format html

# --- equiv: JSON, JUnit, Markdown on real comparisons ------------------------------------------
# A tiny ViT (float image input: --grad compares its gradient) against its fold: equal (up to
# the double rounding of the centered weights); --strict: different; --bits 24: inconclusive.
run "zoo vit (float input)" 0 "$LNV" zoo vit --layers 1 --hidden 8 --heads 2 --image 8 --patch 4 --classes 3 --dropout 0 -o "$T/vit.json"
run "fold vit" 0 "$LNV" fold "$T/vit.json" -o "$T/vit.rms.json"
run "equiv --grad: equal" 0 "$LNV" equiv "$T/vit.json" "$T/vit.rms.json" --grad --trials 2 \
  --json "$T/eq_equal.json" --junit "$T/eq_equal.xml"
valid "equiv equal, with --grad" equiv "$T/eq_equal.json"
run "equiv --grad --strict: different" 1 "$LNV" equiv "$T/vit.json" "$T/vit.rms.json" --grad --trials 2 --strict \
  --json "$T/eq_diff.json" --junit "$T/eq_diff.xml" --format markdown
cp "$T/out" "$T/eq_diff.md"
valid "equiv different, with --grad" equiv "$T/eq_diff.json"
run "equiv --bits 24: inconclusive" 3 "$LNV" equiv "$G" "$G" --bits 24 --trials 1 --json "$T/eq_inc.json" --junit "$T/eq_inc.xml"
valid "equiv inconclusive" equiv "$T/eq_inc.json"
run "fold gpt2_tiny --mode training" 0 "$LNV" fold "$G" --mode training -o "$T/g.train.json"
run "equiv training mode (shared dropouts)" 0 "$LNV" equiv "$G" "$T/g.train.json" --mode training --grad --trials 1 --json "$T/eq_train.json"
valid "equiv training" equiv "$T/eq_train.json"
python3 - "$T/eq_equal.json" "$T/eq_diff.json" "$T/eq_inc.json" > "$T/out" <<'PY'
import json, sys
eq, diff, inc = (json.load(open(f)) for f in sys.argv[1:])
print("quantities", [q["quantity"] for q in eq["quantities"]])
print("outcomes", eq["outcome"], diff["outcome"], inc["outcome"])
print("different has worst:", all(q["worst"] is not None for q in diff["quantities"]))
PY
has "equiv reports: the output and the input gradient" "quantities \[\"output 'head'\", \"gradient of input 'image'\"\]"
has "equiv reports: the three outcomes" "outcomes equal different inconclusive"
has "equiv different: each quantity names its worst element" "different has worst: True"
edit "$T/eq_diff.json" "$T/eq_noworst.json" 'd["quantities"][0]["worst"] = None'
invalid "equiv: a different quantity without its worst element" equiv "$T/eq_noworst.json" "/quantities/0/worst: None is not of type 'object'"
edit "$T/eq_equal.json" "$T/eq_bad.json" 'd["quantities"][1]["stats"]["abs"]["p99"] = -1; d["counts"]["same"] = 2'
invalid "equiv: a negative p99 and an unknown count" equiv "$T/eq_bad.json" "/quantities/1/stats/abs/p99: -1 is less than the minimum of 0"
has "equiv: the unknown count named" "/counts: Additional properties are not allowed \('same'"
edit "$T/eq_equal.json" "$T/eq_outcome.json" 'd["outcome"] = "holds"'
invalid "equiv: check's outcome word" equiv "$T/eq_outcome.json" "/outcome: 'holds' is not one of"
# JUnit: one case per quantity; equal passes, different fails with the size, inconclusive errs.
for x in equal diff inc; do junit_valid "equiv $x" "$T/eq_$x.xml"; done
run "equiv --junit over model B" 2 "$LNV" equiv "$T/vit.json" "$T/vit.rms.json" --junit "$T/vit.rms.json"
has "equiv --junit over an input: refused, naming the option" "--junit"
run "equiv --format html is not a format" 2 "$LNV" equiv "$T/vit.json" "$T/vit.rms.json" --format html
[ "$(count "$T/eq_equal.xml" //testcase)" = 2 ] && [ "$(count "$T/eq_equal.xml" "//testcase[failure or error or skipped]")" = 0 ] \
  && ok "equiv junit equal: 2 passing cases (output, gradient)" || bad "equiv junit equal"
[ "$(count "$T/eq_diff.xml" "//testcase[@name=\"gradient of input 'image'\"]/failure[starts-with(@message, 'different: max abs ')]")" = 1 ] \
  && ok "equiv junit different: the gradient's case fails with the size" || bad "equiv junit different"
[ "$(count "$T/eq_diff.xml" //failure)" = 2 ] && ok "equiv junit different: both quantities fail" || bad "equiv junit failures"
[ "$(count "$T/eq_inc.xml" "//testcase[@name=\"output 'logits'\"]/error[starts-with(@message, 'inconclusive: at 25 bits')]")" = 1 ] \
  && ok "equiv junit inconclusive: an error saying why" || bad "equiv junit inconclusive"
# Markdown: the quantity table parses and holds the JSON's outcomes and statistics.
python3 - "$T/eq_diff.md" "$T/eq_diff.json" > "$T/out" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
report = json.load(open(sys.argv[2]))
cells = lambda l: [c.strip() for c in re.split(r"(?<!\\)\|", l)[1:-1]]
rows = [cells(l) for l in text.splitlines() if l.startswith("|")]
assert rows[0] == ["quantity", "outcome", "elements", "abs max", "abs mean", "abs median", "abs p99",
                   "rel max", "rel mean", "rel median", "rel p99", "bound", "bits"], rows[0]
body = rows[2:]
assert len(body) == len(report["quantities"]) and all(len(r) == 13 for r in body), body
for r, q in zip(body, report["quantities"]):
    s = q["stats"]
    assert r[:3] == [q["quantity"], q["outcome"], str(s["elements"])], (r, q)
    for cell, v in zip(r[3:11], [s["abs"][k] for k in ("max", "mean", "median", "p99")] + [s["rel"][k] for k in ("max", "mean", "median", "p99")]):
        assert abs(float(cell) - v) <= 5e-3 * v, (cell, v)
    assert r[12] == str(s["bits"])
assert "**Result: %s**" % report["outcome"] in text
print("markdown equiv: %d quantities match the JSON" % len(body))
PY
has "equiv markdown: a row per quantity with the JSON's outcome and statistics" "markdown equiv: 2 quantities match the JSON"

# --- fuzz --json -------------------------------------------------------------------------------------
run "fuzz --json" 0 "$LNV" fuzz --cases 3 --max-nodes 8 --out "$T/fzj" --json "$T/fuzz.json"
valid "fuzz without a failing case" fuzz "$T/fuzz.json"
run "fuzz --json over a failing case" 1 "$LNV" fuzz --cases 1 --seed 314870 --shrink-attempts 100 --out "$T/fzj1" --json "$T/fuzz1.json"
valid "fuzz with a failing case" fuzz "$T/fuzz1.json"
run "fuzz --json --keep-going over a failing case" 1 "$LNV" fuzz --cases 2 --seed 314869 --keep-going --mode inference --trials 1 --out "$T/fzj2" --json "$T/fuzz2.json"
valid "fuzz --keep-going" fuzz "$T/fuzz2.json"
python3 - "$T/fuzz.json" "$T/fuzz1.json" "$T/fuzz2.json" > "$T/out" <<'PY'
import json, os, sys
ok, one, kg = (json.load(open(f)) for f in sys.argv[1:])
print("clean:", ok["outcome"], ok["checked"], sum(ok["counts"][k] for k in ("holds", "fails", "inconclusive")), len(ok["failures"]))
f = one["failures"][0]
print("failing:", one["outcome"], f["seed"], f["kind"], f["replay"])
print("written:", os.path.isfile(f["shrunk"]["model"]), os.path.isfile(f["shrunk"]["text"]), f["shrunk"]["check_commands"][0])
g = kg["failures"][0]
print("keep-going:", kg["checked"], kg["counts"]["over_cautious_no"], g["seed"], g["shrunk"], g["replay"])
PY
has "fuzz json: 3 cases, counts add up, no failure" "^clean: holds 3 3 0$"
has "fuzz json: the failing case, its kind and replay" "^failing: fails 314870 over_cautious_no lnverify fuzz --seed 314870 --cases 1 --max-nodes 24$"
has "fuzz json: the shrunk model and text exist, with the check replay" "^written: True True lnverify check .*fzj1/case-314870.model.json --mode inference --seed 314870"
has "fuzz json --keep-going: over-cautious, not shrunk, replay with the campaign's options" "^keep-going: 2 1 314870 None lnverify fuzz --seed 314870 --cases 1 --max-nodes 24 --mode inference --trials 1$"
edit "$T/fuzz1.json" "$T/fuzz_bad.json" 'd["failures"][0]["kind"] = "wrong"; del d["counts"]["wrong_yes"]'
invalid "fuzz: an unknown kind" fuzz "$T/fuzz_bad.json" "/failures/0/kind: 'wrong' is not one of"
has "fuzz: the missing count named" "/counts: 'wrong_yes' is a required property"
run "fuzz --json and --junit one file" 2 "$LNV" fuzz --cases 1 --out "$T/fzj3" --json "$T/same.out" --junit "$T/same.out"
has "fuzz: --json over --junit refused" "--json: .* is also the --junit output"
run "fuzz --json into a missing directory, before the campaign" 2 "$LNV" fuzz --cases 1 --out "$T/fzj4" --json "$T/nodir/f.json"
has "fuzz --json: names the directory" "--json: .*nodir.* is not a directory"
absent "fuzz --json refused: no campaign ran" "$T/fzj4"

# --- the committed baselines (docs/ci.md; .ci/run runs the same) -----------------------------------
while read -r model dims; do
  case "$model" in ''|\#*) continue ;; esac
  case "$model" in *.onnx) [ -z "$ONNX" ] && continue ;; esac
  base="$ROOT/tests/baselines/$(basename "${model%.*}").json"
  # shellcheck disable=SC2086
  run "gate: $model against its baseline" 0 "$LNV" audit "$ROOT/$model" $dims --baseline "$base" --junit "$T/gate.xml" --json "$T/gate.json"
  junit_valid "gate $model" "$T/gate.xml"
  valid "baseline $model" audit "$base"
done < "$ROOT/tests/baselines/models.txt"

# --- the ONNX import summary and the LibTorch reports --------------------------------------------
if [ -n "$ONNX" ]; then
  run "import" 0 "$LNV" import "$ROOT/tests/data/onnx/gpt2_tiny_opset17.onnx" --dim batch=2 --dim seq=8 -o "$T/imported.json"
  valid "import summary (meta.onnx)" import "$T/imported.json" --at /meta/onnx
  run "audit of a real export --json" 0 "$LNV" audit "$ROOT/tests/data/onnx/swin_tiny_opset17.onnx" --dim batch=1 --json "$T/swin.json"
  valid "audit swin_tiny (torchvision export)" audit "$T/swin.json"
  run "check of a real export --json" 0 "$LNV" check "$ROOT/tests/data/onnx/vit_tiny_opset17.onnx" --dim batch=2 --json "$T/vit.json"
  valid "check vit_tiny (torchvision export)" check "$T/vit.json"
fi
if [ -n "$TORCH" ]; then
  run "fidelity --json" 0 "$LNV" fidelity "$G" --trials 2 --json "$T/fid.json"
  valid "fidelity" fidelity "$T/fid.json"
  run "check --engine torch --json (training)" 0 "$LNV" check "$B" --engine torch --mode training --torch-trials 2 --json "$T/fid_t.json"
  valid "check --engine torch" fidelity "$T/fid_t.json"
  run "bench --json" 0 "$LNV" bench "$G" --threads 1 --repeats 2 --kernel-repeats 2 --json "$T/bench.json"
  valid "bench" bench "$T/bench.json"
  run "--junit with --engine torch" 2 "$LNV" check "$G" --engine torch --junit "$T/x.xml"
fi
finish
