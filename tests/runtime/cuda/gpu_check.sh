#!/usr/bin/env bash
#===- gpu_check.sh - Build, test and time the CUDA backend on a GPU host --===#
#
# Run from the repository root on a machine with a GPU, the CUDA toolkit,
# cmake and ninja. Headers and static libraries the machine lacks (PCRE2,
# ICU headers, GoogleTest, nlohmann_json) come from .deps/, fixtures from
# .gpu/fixtures, compiled artifacts from .gpu/artifacts/NAME (one per fixture
# model, made where the compiler is built with the default pipeline, i.e.
# fused, and generated kernels: `infer compile MODEL_DIR -o
# .gpu/artifacts/NAME --target cuda`, plus llama-gqa-gelu, llama-gqa with
# "hidden_act": "gelu_pytorch_tanh", whose fused regions run generated
# kernels; the fixture and generated-kernel tests run them through
# INFER_CUDA_ARTIFACTS, the CLI runs llama-gqa), and .gpu/fp8kv/NAME, the
# tiny-pycode-target compiled with --target cuda --kv-cache-dtype fp8_e4m3 or
# fp8_e5m2 (INFER_CUDA_FP8KV_ARTIFACTS, Fp8KVCacheTest.cpp); SRC names
# another source tree than the current directory. Logs go to $OUT; a short
# table is printed last.
#
#===----------------------------------------------------------------------===#
set -uo pipefail
ROOT=$PWD
SRC=${SRC:-$ROOT}
D=$ROOT/.deps
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
  infer infer-cuda-bench} \
  >"$OUT/build.log" 2>&1 || { grep -B2 -A12 -m3 "error" "$OUT/build.log"; exit 1; }
# BUILD_ONLY=1: configure and build TARGETS, run nothing (bench/ scripts).
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0

INFER_CUDA_ARTIFACTS=$ROOT/.gpu/artifacts INFER_CUDA_FP8KV_ARTIFACTS=$ROOT/.gpu/fp8kv \
  "$BUILD/bin/InferCudaTests" 2>&1 | tee "$OUT/gtest.log" |
  grep -E "FAILED|Failure|error|PASSED|SKIPPED" | head -40
INFER_CUDA_ARTIFACTS=$ROOT/.gpu/artifacts "$BUILD/bin/InferCudaGeneratedKernelsTests" 2>&1 |
  tee "$OUT/gtest-generated.log" | grep -E "FAILED|Failure|error|PASSED|SKIPPED" | head -20

ART=$ROOT/.gpu/artifacts/llama-gqa
W=$ROOT/.gpu/fixtures/rand/llama-gqa
for b in cpu cuda; do
  "$BUILD/bin/infer" generate "$ART" --weights "$W" --backend $b --json \
    --token-ids 348,185,398,23,72 --token-ids 175 --max-new-tokens 24 \
    >"$OUT/cli-$b.json" 2>&1
  echo "cli generate --backend $b: rc=$?"
done
cmp -s "$OUT/cli-cpu.json" "$OUT/cli-cuda.json" && echo "cli: cuda tokens == cpu tokens" ||
  { echo "cli: outputs differ"; cat "$OUT/cli-cpu.json" "$OUT/cli-cuda.json"; }
"$BUILD/bin/infer" logits "$ART" --weights "$W" --backend cuda \
  --token-ids 348,185,398 -o "$OUT/logits.safetensors" && echo "cli logits: ok"

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
grep -hE "^\[ (kernel|fixture|greedy) " "$OUT/gtest.log" "$OUT/gtest-generated.log" | sort | uniq |
  awk '{ $1=$1; print }' | cut -c1-110
grep -hE "tests ran|PASSED|FAILED" "$OUT/gtest.log" "$OUT/gtest-generated.log" | tail -8
