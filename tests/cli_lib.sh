# Shared by the CLI test scripts (sourced, with the lnverify path as $1): a scratch folder
# $T removed on exit, pass/fail counters, and the checks below. `finish` prints the counts
# and sets the exit status.
LNV="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
pass=0
fail=0

ok()   { pass=$((pass + 1)); echo "ok    $1"; }
bad()  { fail=$((fail + 1)); echo "FAIL  $1"; [ -f "$T/out" ] && sed 's/^/      | /' "$T/out" | head -20; }

# run NAME EXPECTED_RC CMD...: runs CMD, output in $T/out, checks the exit code.
run() {
  local name="$1" want="$2"; shift 2
  "$@" > "$T/out" 2>&1
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok "$name (exit $rc)"; return 0; fi
  bad "$name: exit $rc, expected $want"; return 1
}
# has NAME PATTERN: the last output matches PATTERN (extended regex). An empty pattern
# matches any output, so it is refused (a check that cannot fail).
has() {
  if [ -z "$2" ]; then bad "$1: has needs a non-empty pattern"; return; fi
  if grep -Eq -- "$2" "$T/out"; then ok "$1"; else bad "$1: output lacks /$2/"; fi
}
# lacks NAME PATTERN: the last output does not match PATTERN (non-empty, extended regex).
lacks() {
  if [ -z "$2" ]; then bad "$1: lacks needs a non-empty pattern"; return; fi
  if grep -Eq -- "$2" "$T/out"; then bad "$1: output matches /$2/"; else ok "$1"; fi
}
# absent NAME FILE: FILE must not exist (no partial output).
absent() { if [ ! -e "$2" ]; then ok "$1"; else bad "$1: $2 exists"; fi; }

finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
