#!/usr/bin/env bash
#===- gpu_check.sh - Build, test and time the CUDA backend on a GPU host --===#
#
# Two halves, one list (tests/runtime/cuda/artifacts.txt):
#
#   gpu_check.sh prepare   where the compiler is built (no GPU needed), from
#                          the repository root: .deps/ (scripts/device_deps.sh:
#                          the headers and libraries the GPU host lacks) and
#                          .gpu/gpu.tar.xz, the fixtures the GPU tests read
#                          (../shared/fixtures: rand/, golden/, the
#                          tiny-pycode pair) and every artifact of the list,
#                          compiled with `infer compile` (BUILD_DIR=build).
#                          Carry .deps and .gpu to the GPU host.
#   gpu_check.sh           on the GPU host (the CUDA toolkit, cmake, ninja),
#                          from the repository root: unpacks .gpu/gpu.tar.xz,
#                          builds the runtime (-DINFER_ENABLE_COMPILER=OFF),
#                          runs every one-GPU test (InferCudaTests with the
#                          artifacts of each group in INFER_CUDA_ARTIFACTS,
#                          INFER_CUDA_FP8_ARTIFACTS, INFER_CUDA_FP8KV_ARTIFACTS;
#                          the generated-kernel and typed-kernel tests), the
#                          CLI on both backends, and (not with SKIP_BENCH=1)
#                          a TinyLlama decode timing. Logs go to $OUT; a short
#                          table is printed last. BUILD_ONLY=1 builds TARGETS
#                          and stops (bench/ scripts); SRC names another
#                          source tree than the current directory.
#
#===----------------------------------------------------------------------===#
set -uo pipefail
ROOT=$PWD
SRC=${SRC:-$ROOT}
D=$ROOT/.deps
LIST=$SRC/tests/runtime/cuda/artifacts.txt

if [ "${1:-}" = prepare ]; then
  SHARED=${SHARED:-$ROOT/../shared/fixtures}
  INFER=${BUILD_DIR:-build}/bin/infer
  STAGE=$(mktemp -d)
  trap 'rm -rf "$STAGE"' EXIT
  bash "$SRC/scripts/device_deps.sh" "$D" >/dev/null || exit 1
  mkdir -p "$STAGE/fixtures/models" "$STAGE/models"
  cp -r "$SHARED/rand" "$SHARED/golden" "$STAGE/fixtures/"
  cp -r "$SHARED/models/tiny-pycode-target" "$SHARED/models/tiny-pycode-draft" \
    "$STAGE/fixtures/models/"
  grep -v '^#' "$LIST" | while read -r group name model flags; do
    [ -n "$group" ] || continue
    dir=${model%%:*}
    src=$SHARED/$dir
    [ -d "$src" ] || src=$SRC/tests/fixtures/$dir
    if [ "$model" != "$dir" ]; then # config.json edits after the colon
      edited=$STAGE/models/$name
      mkdir -p "$edited" && cp -r "$src"/. "$edited"/
      python3 - "$edited/config.json" "${model#*:}" <<'PY' || exit 1
import json, sys
path, edits = sys.argv[1], sys.argv[2]
config = json.load(open(path))
for edit in edits.split(","):
    key, value = edit.split("=", 1)
    config[key] = json.loads(value)
json.dump(config, open(path, "w"), indent=2)
PY
      src=$edited
    fi
    # shellcheck disable=SC2086
    "$INFER" compile "$src" -o "$STAGE/$group/$name" $flags >/dev/null ||
      { echo "prepare: infer compile $src $flags failed"; exit 1; }
  done || exit 1
  rm -rf "$STAGE/models"
  mkdir -p "$ROOT/.gpu"
  tar -C "$STAGE" -cJf "$ROOT/.gpu/gpu.tar.xz" . || exit 1
  du -sh "$ROOT/.gpu/gpu.tar.xz" "$D"
  exit 0
fi

# Unpacked again whenever the tarball is newer than the last unpacking: a
# stale .gpu/fixtures (from an older tarball, or carried without the
# artifacts) would otherwise leave every artifact test skipping.
STAMP=$ROOT/.gpu/.unpacked
if [ -f "$ROOT/.gpu/gpu.tar.xz" ] &&
  { [ ! -f "$STAMP" ] || [ "$ROOT/.gpu/gpu.tar.xz" -nt "$STAMP" ]; }; then
  rm -rf "$ROOT/.gpu/fixtures" "$ROOT/.gpu/artifacts" "$ROOT/.gpu/fp8" \
    "$ROOT/.gpu/fp8kv"
  tar -C "$ROOT/.gpu" -xJf "$ROOT/.gpu/gpu.tar.xz" || exit 1
  touch "$STAMP"
fi
OUT=${OUT:-/tmp/gpu-check}
BUILD=${BUILD:-/tmp/infer-build}
mkdir -p "$OUT" "$D/pkgconfig" "$D/icu"
ln -sf /lib/x86_64-linux-gnu/libicuuc.so.74 "$D/icu/libicuuc.so"
printf 'Name: libpcre2-8\nDescription: PCRE2\nVersion: 10.42\nLibs: -L%s/lib -lpcre2-8\nCflags: -I%s/include\n' "$D" "$D" >"$D/pkgconfig/libpcre2-8.pc"
printf 'Name: icu-uc\nDescription: ICU\nVersion: 74.2\nLibs: -L%s/icu -licuuc\nCflags: -I%s/include\n' "$D" "$D" >"$D/pkgconfig/icu-uc.pc"
export PKG_CONFIG_PATH=$D/pkgconfig
PKG=$(command -v pkg-config || echo "$D/bin/pkg-config")

cmake -G Ninja -S "$SRC" -B "$BUILD" -DINFER_ENABLE_COMPILER=OFF \
  -DINFER_FIXTURES_DIR="$ROOT/.gpu/fixtures" -Dnlohmann_json_DIR="$D/cmake" \
  -DGTEST_ROOT="$D" -DPKG_CONFIG_EXECUTABLE="$PKG" >"$OUT/cmake.log" 2>&1 ||
  { tail -30 "$OUT/cmake.log"; exit 1; }
ninja -C "$BUILD" -j16 ${TARGETS:-InferCudaTests InferCudaGeneratedKernelsTests \
  InferCudaTypedKernelsTests infer infer-cuda-bench} \
  >"$OUT/build.log" 2>&1 || { grep -B2 -A12 -m3 "error" "$OUT/build.log"; exit 1; }
# BUILD_ONLY=1: configure and build TARGETS, run nothing (bench/ scripts).
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0

export INFER_CUDA_ARTIFACTS=$ROOT/.gpu/artifacts
export INFER_CUDA_FP8_ARTIFACTS=$ROOT/.gpu/fp8
export INFER_CUDA_FP8KV_ARTIFACTS=$ROOT/.gpu/fp8kv
"$BUILD/bin/InferCudaTests" 2>&1 | tee "$OUT/gtest.log" |
  grep -E "FAILED|Failure|error|PASSED|SKIPPED" | head -40
for t in InferCudaGeneratedKernelsTests InferCudaTypedKernelsTests; do
  [ -x "$BUILD/bin/$t" ] || continue
  "$BUILD/bin/$t" 2>&1 | tee "$OUT/gtest-$t.log" |
    grep -E "FAILED|Failure|error|PASSED|SKIPPED" | head -20
done

ART=$ROOT/.gpu/artifacts/llama-gqa
W=$ROOT/.gpu/fixtures/rand/llama-gqa
for b in cpu cuda; do
  "$BUILD/bin/infer" generate "$ART" --weights "$W" --backend $b --json \
    --token-ids 348,185,398,23,72 --token-ids 175 --max-new-tokens 24 \
    >"$OUT/cli-$b.json" 2>"$OUT/cli-$b.log"
  echo "cli generate --backend $b: rc=$?"
done
cmp -s "$OUT/cli-cpu.json" "$OUT/cli-cuda.json" && echo "cli: cuda tokens == cpu tokens" ||
  { echo "cli: outputs differ"; cat "$OUT"/cli-cpu.* "$OUT"/cli-cuda.*; }
"$BUILD/bin/infer" logits "$ART" --weights "$W" --backend cuda \
  --token-ids 348,185,398 -o "$OUT/logits.safetensors" && echo "cli logits: ok"
# infer serve on cuda and cpu: concurrent completions, a client that hangs
# up mid-stream, /metrics (asynchronous scheduling through the server).
python3 "$SRC/tests/runtime/cuda/serve_check.py" "$BUILD/bin/infer" \
  "$ROOT/.gpu/artifacts/tiny-pycode-target" \
  "$ROOT/.gpu/fixtures/models/tiny-pycode-target" "$OUT" ||
  echo "serve: check failed (logs: $OUT/serve-*.log)"

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 "$SRC/bench/random_checkpoint.py" tinyllama-1.1b /tmp/tinyllama \
    >"$OUT/make_model.log" 2>&1 || tail -5 "$OUT/make_model.log"
  # Batch-1 decode with CUDA graphs, then eagerly (--graph-tokens 0).
  for graphs in 256 0; do
    "$BUILD/bin/infer-cuda-bench" /tmp/tinyllama --decode-batches 1 \
      --context 16 --steps 256 --repeats 1 --graph-tokens $graphs 2>&1 |
      tee -a "$OUT/bench.log"
  done
fi

echo "==== summary"
grep -hE "^\[ (kernel|fixture|greedy) " "$OUT"/gtest*.log | sort | uniq |
  awk '{ $1=$1; print }' | cut -c1-150
grep -hE "tests ran|PASSED|FAILED" "$OUT"/gtest*.log | tail -12
