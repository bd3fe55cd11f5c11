#!/usr/bin/env bash
#===- fuzz/ci.sh - Fuzz smoke and sanitizer tests ---------------------------===#
#
# Usage: fuzz/ci.sh [BUILD_DIR]   (default build-fuzz)
# A second, runtime-only build with clang-19, ASan + UBSan and libFuzzer
# coverage (INFER_ENABLE_FUZZ; no MLIR, no CUDA: the compiler's harnesses
# run locally, see docs/Fuzzing.md). Then every runtime harness runs for
# INFER_FUZZ_SECONDS (default 30) and the GoogleTest suites of the parsers,
# the plan verifier, the CPU backend's steps and the engine run under the
# sanitizers. A crash, leak or sanitizer report fails it.
#
#===------------------------------------------------------------------------===#
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
start=$(date +%s)

# The sanitizer suites: the input readers, the verifier and the code that
# runs what they accept; the CLI and GPU suites need the uninstrumented
# tools or a GPU and add little under ASan.
suites=(TokenizerTest InferPlanTests InferSafetensorsTests InferSamplerTests
        InferEngineTests InferSpecTests)
fuzzers=(infer-fuzz-safetensors infer-fuzz-tokenizer infer-fuzz-plan
         infer-fuzz-cpu-plan)

CC=clang-19 CXX=clang++-19 cmake -G Ninja -S . -B "$build" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DINFER_ENABLE_COMPILER=OFF \
  -DINFER_ENABLE_CUDA=OFF -DINFER_ENABLE_FUZZ=ON \
  -DINFER_FUZZ_SECONDS="${INFER_FUZZ_SECONDS:-30}" "${@:2}"
cmake --build "$build" -j "$(nproc)" --target "${fuzzers[@]}" "${suites[@]}"
echo "fuzz: build finished in $(( $(date +%s) - start ))s"

ctest --test-dir "$build" -L fuzz --output-on-failure -j "$(nproc)"
echo "fuzz: harnesses finished at $(( $(date +%s) - start ))s"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for suite in "${suites[@]}"; do
  "$build/bin/$suite" --gtest_brief=1
done
echo "fuzz: sanitizer suites finished at $(( $(date +%s) - start ))s"
