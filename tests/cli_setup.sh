#!/usr/bin/env bash
# scripts/setup.sh says what it does and why it stopped: its ONNX Runtime step with npm
# pointed at an unreachable registry fails naming npm, ONNX Runtime, the registry and
# LNV_ORT_DIR, and installs nothing; --check changes nothing and exits 0 only when all is
# there; a re-run on a machine that has everything prints one line.
#   bash tests/cli_setup.sh LNVERIFY   (LNVERIFY is unused: the shared checks take it)
source "$(dirname "$0")/cli_lib.sh"
SETUP="$ROOT/scripts/setup.sh"

# The ONNX Runtime step alone, npm pointed at a port nothing listens on (no retries, so the
# refusal is immediate), into an empty folder.
ort="$T/ort"
mkdir -p "$ort"
run "ort step fails when npm cannot reach its registry" 1 \
  env LNV_ORT_DIR="$ort" npm_config_registry=http://127.0.0.1:9/ npm_config_fetch_retries=0 \
  bash "$SETUP" --only ort
has "  announces the step" '^setup: ONNX Runtime 1\.30\.0 from npm into '"$ort"
has "  says which step failed" '^setup: FAILED: ONNX Runtime 1\.30\.0 from npm'
has "  prints the command that failed" '^setup: the command was: npm install --prefix '"$ort"
has "  shows npm's own error" 'ECONNREFUSED'
has "  names the registry npm used" 'registry http://127\.0\.0\.1:9/'
has "  says LNV_ORT_DIR can point to an existing install" 'LNV_ORT_DIR'
lacks "  and no certificate advice for a refused connection" 'TLS certificate'
absent "  installs nothing" "$ort/node_modules/onnxruntime-node/package.json"

# --check changes nothing: with ONNX Runtime absent it says so and exits 1.
run "--check --tests without ONNX Runtime exits 1" 1 \
  env LNV_ORT_DIR="$ort" bash "$SETUP" --check --tests
has "  names ONNX Runtime and where it looked" "^setup: missing ONNX Runtime 1\.30\.0 in $ort"
absent "  and installs nothing" "$ort/node_modules"

run "a step that does not exist is a usage error" 2 bash "$SETUP" --only nothing
has "  naming the steps" 'packages, blas, ort, build'
run "an unknown option is a usage error" 2 bash "$SETUP" --fast
has "  naming the option" "unknown option '--fast'"

# On a machine that has everything (the usual case after `setup.sh --tests` and a build),
# --check exits 0 and a re-run prints exactly one line. Elsewhere (a build not up to date,
# as under the sanitizer suite), say so and skip.
if bash "$SETUP" --check --tests > "$T/out" 2>&1; then
  ok "--check --tests exits 0 where everything is there"
  run "a re-run where everything is there" 0 bash "$SETUP" --tests
  if [ "$(wc -l < "$T/out")" -eq 1 ]; then ok "  prints one line"; else bad "  prints $(wc -l < "$T/out") lines"; fi
  has "  that says so" '^setup: everything is in place for the tests'
else
  echo "skip  re-run on a complete machine: $(tr '\n' ' ' < "$T/out")"
fi
finish
