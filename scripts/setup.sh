#!/usr/bin/env bash
# Sets up a Debian 12 machine for lnverify and builds it. Every step says what it does in
# one line; a step that fails prints the command, its own error output and what to try,
# and the script exits non-zero.
#   bash scripts/setup.sh                 # what building and the main job need; builds build/
#   bash scripts/setup.sh --tests         # also what only the tests need: ONNX Runtime from
#                                         # npm, Chromium, clang and libFuzzer, PyTorch, ...
#   bash scripts/setup.sh --check [--tests]   # lists what is missing, changes nothing;
#                                         # exit 0 only when everything is there
#   bash scripts/setup.sh --only STEP     # one step: packages, blas, ort, build
#   LNV_WITH_TORCH=OFF bash scripts/setup.sh  # core only (no LibTorch engine)
#   LNV_ORT_DIR=DIR                       # where ONNX Runtime is (or goes): an existing
#                                         # install there is used as it is
set -uo pipefail
cd "$(dirname "$0")/.."

ORT_VERSION=1.30.0
ORT_DIR="${LNV_ORT_DIR:-$HOME/.cache/lnverify/onnxruntime}"
WITH_TORCH="${LNV_WITH_TORCH:-ON}"

# What building lnverify (CLI, tests' executables, LibTorch engine, ONNX reader, the Python
# package's module) and running the main job need.
BUILD_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libeigen3-dev libboost-dev libmpfr-dev libgmp-dev
  librapidcheck-dev libgtest-dev nlohmann-json3-dev libcli11-dev
  libonnx-dev libprotobuf-dev pybind11-dev python3-dev
)
[ "$WITH_TORCH" = OFF ] || BUILD_PACKAGES+=(libtorch-dev libopenblas0-openmp)
# What only the tests need: ONNX's backend test data, PyTorch to export real models and
# run the Python package's tests (pytest), clang and libFuzzer for the sanitizer suite and the fuzz
# targets, schema and XML validators, graphviz and Chromium for the HTML report, and node
# and npm for ONNX Runtime.
TEST_PACKAGES=(
  libonnx-testdata python3-torch python3-torchvision python3-onnx python3-pytest
  clang libfuzzer-14-dev libclang-rt-14-dev
  python3-jsonschema python3-yaml libxml2-utils graphviz chromium
)

mode=setup
tests=0
only=""
while (($#)); do
  case "$1" in
    --check) mode=check ;;
    --tests) tests=1 ;;
    --only)
      only="${2:-}"
      case "$only" in packages|blas|ort|build) ;; *)
        echo "setup: --only takes one of: packages, blas, ort, build (got '${only}')" >&2; exit 2 ;;
      esac
      shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown option '$1' (see: bash scripts/setup.sh --help)" >&2; exit 2 ;;
  esac
  shift
done

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
LOG_DIR="${TMPDIR:-/tmp}/lnverify-setup.$$"
mkdir -p "$LOG_DIR"
trap 'rm -rf "$LOG_DIR"' EXIT

say() { echo "setup: $*"; }

# fail WHAT LOG HINT CMD...: the step WHAT failed running CMD; shows the end of its output
# (LOG) and what to try (HINT), then exits 1.
fail() {
  local what="$1" log="$2" hint="$3"
  shift 3
  {
    echo "setup: FAILED: $what"
    echo "setup: the command was: $*"
    echo "setup: its output (last 25 lines):"
    tail -n 25 "$log" | sed 's/^/  | /'
    echo "setup: what to try: $hint"
  } >&2
  exit 1
}

# run WHAT HINT CMD...: runs CMD with its output kept in a log; on failure, fail.
run() {
  local what="$1" hint="$2" log
  shift 2
  log="$LOG_DIR/step.log"
  "$@" >"$log" 2>&1 || fail "$what" "$log" "$hint" "$@"
}

wanted_packages() {
  printf '%s\n' "${BUILD_PACKAGES[@]}"
  ((tests)) && printf '%s\n' "${TEST_PACKAGES[@]}"
  # node and npm run ONNX Runtime in the tests; any node >= 18 will do (Debian's or the
  # machine's own).
  if ((tests)); then
    command -v node >/dev/null || echo nodejs
    command -v npm >/dev/null || echo npm
  fi
}

missing_packages() {
  local p
  for p in $(wanted_packages); do
    case "$p" in nodejs|npm) echo "$p"; continue ;; esac
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

ort_present() { [ -f "$ORT_DIR/node_modules/onnxruntime-node/package.json" ]; }

# The build is configured with the wanted options and no source is newer than the last
# build this script finished (build/.setup-built). Reads only: --check changes nothing.
build_current() {
  [ -f build/build.ninja ] && [ -f build/.setup-built ] && [ -x build/cli/lnverify ] || return 1
  grep -qx "LNV_WITH_TORCH:BOOL=$WITH_TORCH" build/CMakeCache.txt 2>/dev/null || return 1
  [ -z "$(find . \( -name .git -o -name 'build*' -o -name docs -o -name node_modules \) -prune -o \
          -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.def' -o -name '*.py' -o -name '*.cmake' \
          -o -name CMakeLists.txt \) -newer build/.setup-built -print -quit)" ]
}

step_packages() {
  local missing
  mapfile -t missing < <(missing_packages)
  ((${#missing[@]})) || return 0
  local note="" hint
  [ "$SUDO" = sudo ] && note=" (with sudo)"
  hint="check that this machine reaches its Debian mirror (/etc/apt/sources.list*, an http_proxy
  for apt in /etc/apt/apt.conf.d/), that you are root or may sudo, and install the packages
  listed above with apt-get yourself if you prefer; then run this script again."
  say "updating Debian's package lists$note"
  run "apt-get update" "$hint" $SUDO apt-get update
  say "installing ${#missing[@]} Debian packages: ${missing[*]}"
  run "installing Debian packages" "$hint" \
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

# LibTorch calls BLAS through libblas.so.3; make sure that is OpenBLAS, not the reference
# BLAS (~55x slower for a GPT-2 forward).
step_blas() {
  command -v update-alternatives >/dev/null || return 0
  local link alt current
  for link in libblas.so.3-x86_64-linux-gnu liblapack.so.3-x86_64-linux-gnu; do
    alt=$(update-alternatives --list "$link" 2>/dev/null | grep -m1 openblas || true)
    [ -n "$alt" ] || continue
    current=$(update-alternatives --query "$link" 2>/dev/null | sed -n 's/^Value: //p')
    [ "$current" = "$alt" ] && continue
    say "pointing ${link%%-*} at OpenBLAS ($alt)"
    run "choosing OpenBLAS for ${link%%-*}" \
      "run it as root, or leave it: LibTorch then runs on the reference BLAS, much slower" \
      $SUDO update-alternatives --set "$link" "$alt"
  done
}

# ONNX Runtime's CPU build from npm, in a cache outside the checkout (tests/onnx/, docs/onnx.md).
# --ignore-scripts: the package's install script fetches optional GPU parts from outside the
# registry; the CPU library is in the package itself.
step_ort() {
  ort_present && return 0
  local registry proxy hint
  registry=$(npm config get registry 2>/dev/null || echo "?")
  proxy=$(npm config get https-proxy 2>/dev/null || true)
  [ -n "$proxy" ] && [ "$proxy" != null ] || proxy=$(npm config get proxy 2>/dev/null || true)
  [ -n "$proxy" ] && [ "$proxy" != null ] || proxy="none"
  hint="npm could not install ONNX Runtime (onnxruntime-node@$ORT_VERSION). npm used the
  registry $registry and the proxy $proxy (npm config get registry / https-proxy; set them
  with npm_config_registry=URL or npm_config_https_proxy=URL). If ONNX Runtime is installed
  elsewhere, point LNV_ORT_DIR at the folder that holds its node_modules/onnxruntime-node.
  Only the tests need ONNX Runtime: 'bash scripts/setup.sh' without --tests does not."
  say "ONNX Runtime $ORT_VERSION from npm into $ORT_DIR (npm retries about a minute if its registry is unreachable)"
  mkdir -p "$ORT_DIR"
  local log="$LOG_DIR/step.log" cmd=(npm install --prefix "$ORT_DIR" --ignore-scripts --no-audit
    --no-fund --no-progress "onnxruntime-node@$ORT_VERSION")
  if ! "${cmd[@]}" >"$log" 2>&1; then
    # npm's own words for a registry or proxy whose TLS certificate it does not trust.
    grep -q -i -E 'certificate|CERT_|SSL|TLS' "$log" && hint="$hint
  npm does not trust the TLS certificate of the registry or of a proxy in between: give it
  the certificate authority with NODE_EXTRA_CA_CERTS=FILE or npm_config_cafile=FILE."
    fail "ONNX Runtime $ORT_VERSION from npm" "$log" "$hint" "${cmd[@]}"
  fi
  ort_present || fail "ONNX Runtime $ORT_VERSION from npm" "$LOG_DIR/step.log" "$hint" \
    "npm install (no $ORT_DIR/node_modules/onnxruntime-node/package.json afterwards)"
}

# ccache: paths relative to the checkout and no cwd in the hash, so a fresh clone in another
# folder (CI) reuses the objects of an earlier build on the same machine.
step_build() {
  build_current && return 0
  export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  local hint="the output above names the file and the error; 'bash scripts/setup.sh --check'
  lists missing packages. The whole log: cmake --build build -j ${LNV_JOBS:-2}"
  say "configuring build/ (LNV_WITH_TORCH=$WITH_TORCH)"
  run "configuring build/" "$hint" cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLNV_WITH_TORCH="$WITH_TORCH"
  say "building build/ with ${LNV_JOBS:-2} jobs"
  run "building build/" "$hint" cmake --build build -j "${LNV_JOBS:-2}"
  touch build/.setup-built
}

if [ "$mode" = check ]; then
  status=0
  mapfile -t missing < <(missing_packages)
  if ((${#missing[@]})); then
    say "missing ${#missing[@]} Debian packages: ${missing[*]}"; status=1
  fi
  if ((tests)) && ! ort_present; then
    say "missing ONNX Runtime $ORT_VERSION in $ORT_DIR"; status=1
  fi
  if ! build_current; then
    say "build/ is missing or not up to date (LNV_WITH_TORCH=$WITH_TORCH)"; status=1
  fi
  ((status)) || say "everything is in place$( ((tests)) && echo ' for the tests')"
  exit $status
fi

if [ -n "$only" ]; then
  "step_$only"
  exit 0
fi

if [ -z "$(missing_packages)" ] && { ((tests == 0)) || ort_present; } && build_current; then
  step_blas
  say "everything is in place$( ((tests)) && echo ' for the tests'): packages, $( ((tests)) && echo "ONNX Runtime $ORT_VERSION, ")build/ up to date"
  exit 0
fi
step_packages
step_blas
((tests)) && step_ort
step_build
say "done: build/cli/lnverify$( ((tests)) && echo ', and what the tests need')"
