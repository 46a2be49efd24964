#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for lnverify and builds it.
#   bash scripts/setup.sh            # install packages (if missing) and build into build/
#   LNV_WITH_TORCH=OFF bash scripts/setup.sh   # core only (no LibTorch engine)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libeigen3-dev libboost-dev libmpfr-dev libgmp-dev
  librapidcheck-dev libgtest-dev nlohmann-json3-dev libcli11-dev
  libtorch-dev libopenblas0-openmp
  libonnx-dev libprotobuf-dev libonnx-testdata
  python3-torch python3-torchvision python3-onnx
  clang libfuzzer-14-dev libclang-rt-14-dev
  python3-jsonschema libxml2-utils graphviz chromium
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm run ONNX Runtime in the tests; any node >= 18 will do (Debian's or the machine's).
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

# LibTorch calls BLAS through libblas.so.3; make sure that is OpenBLAS, not the
# reference BLAS (~55x slower for a GPT-2 forward).
if command -v update-alternatives >/dev/null; then
  openblas=$(update-alternatives --list libblas.so.3-x86_64-linux-gnu 2>/dev/null | grep -m1 openblas || true)
  if [ -n "$openblas" ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO update-alternatives --set libblas.so.3-x86_64-linux-gnu "$openblas" >/dev/null
    lapack=$(update-alternatives --list liblapack.so.3-x86_64-linux-gnu 2>/dev/null | grep -m1 openblas || true)
    [ -z "$lapack" ] || $SUDO update-alternatives --set liblapack.so.3-x86_64-linux-gnu "$lapack" >/dev/null
  fi
fi

# ONNX Runtime's CPU build from npm, in a cache outside the checkout (tests/ort/, docs/onnx.md).
# --ignore-scripts: the package's install script fetches optional GPU parts from outside the
# registry; the CPU library is in the package itself.
ORT_DIR="${LNV_ORT_DIR:-$HOME/.cache/lnverify/onnxruntime}"
if [ ! -f "$ORT_DIR/node_modules/onnxruntime-node/package.json" ]; then
  mkdir -p "$ORT_DIR"
  npm install --prefix "$ORT_DIR" --ignore-scripts --no-audit --no-fund --silent \
    onnxruntime-node@1.30.0
fi

# ccache: paths relative to the checkout and no cwd in the hash, so a fresh clone in
# another folder (CI) reuses the objects of an earlier build on the same machine.
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLNV_WITH_TORCH="${LNV_WITH_TORCH:-ON}"
cmake --build build -j "${LNV_JOBS:-2}"
