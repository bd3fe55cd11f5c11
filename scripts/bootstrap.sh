#!/usr/bin/env bash
#===- bootstrap.sh - Install dependencies, configure and build infer -------===#
#
# Usage: scripts/bootstrap.sh [BUILD_DIR] [extra cmake args...]
# On Debian bookworm it installs the packages the build needs (apt-get, as root
# or through sudo); elsewhere (the GPU machine) it skips installation and
# expects them present. INFER_SKIP_APT=1 skips installation.
#
#===------------------------------------------------------------------------===#
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true

packages=(
  build-essential cmake ninja-build pkg-config python3 git
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools
  libpcre2-dev libicu-dev nlohmann-json3-dev libgtest-dev libboost-graph-dev
  libopenmpi-dev openmpi-bin
  libxxhash-dev # xxhash.h: content hashes of packed weight files
  libboost-dev python3-jinja2
)
# The serving tests' OpenAI Node SDK client (skipped without them); a node
# install of another origin (nodesource ships its own npm) is kept.
command -v npm >/dev/null || packages+=(nodejs npm)
# The chat page test's headless browser (skipped without it; about 30 s of
# apt-get and 350 MB). A chromium installed another way is kept.
command -v chromium >/dev/null || packages+=(chromium)

if [ "${INFER_SKIP_APT:-0}" != 1 ] && command -v apt-get >/dev/null &&
   grep -q bookworm /etc/os-release 2>/dev/null; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    echo "bootstrap: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

compiler_args=()
if [ -d /usr/lib/llvm-19/lib/cmake/mlir ]; then
  compiler_args=(-DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir)
else
  echo "bootstrap: MLIR 19 not found; building the runtime only (INFER_ENABLE_COMPILER=OFF)"
  compiler_args=(-DINFER_ENABLE_COMPILER=OFF)
fi

cmake -G Ninja -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "${compiler_args[@]}" "$@"
cmake --build "$build_dir" -j "$(nproc)"
