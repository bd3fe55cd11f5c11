#!/usr/bin/env bash
#===- fuzz/ci.sh - Fuzz smoke and sanitizer tests ---------------------------===#
#
# Usage: fuzz/ci.sh [BUILD_DIR [extra cmake args...]]   (default build-fuzz)
# Phase 1: a runtime-only build with clang-19, ASan + UBSan and libFuzzer
# coverage (INFER_ENABLE_FUZZ, INFER_ENABLE_COMPILER=OFF, no CUDA) in
# BUILD_DIR. Every runtime harness runs for INFER_FUZZ_SECONDS (default 30)
# and the GoogleTest suites of the parsers, the plan verifier, the sampler,
# the engine, speculation, OpenAI request bodies and chat templates run
# under the sanitizers, as many at a time as there are cores. Phase 2: a
# compiler-enabled build of the same kind in BUILD_DIR-cc, only the HF
# config and infer-opt harnesses and what they link, each run for
# INFER_FUZZ_SECONDS. A crash, leak or sanitizer report
# fails it; every run replays fuzz/regressions/ first. On Debian it installs
# clang-19 and its libFuzzer runtime when they are missing (INFER_SKIP_APT=1
# skips that); phase 2 uses the MLIR 19 that scripts/bootstrap.sh installs.
#
#===------------------------------------------------------------------------===#
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
start=$(date +%s)

# The sanitizer suites, each with a gtest filter: the input readers, the
# verifier and the code that runs what they accept. Left out are the tests
# that run whole models for many tokens (HfParityTest on every fixture, the
# fp8 numerics, the longer TinyPycode batches and asynchronous-scheduling
# comparisons, speculative decoding against the draft model): under ASan + UBSan + coverage they run 20-40x slower and
# would take most of the CI budget, while the kept engine and speculation
# tests (fault injection, abort, fork, stop strings, invalid requests,
# sampled speculation through the engine; abort, fork and failed launches
# with a step in flight) take the same code paths with fewer tokens. Of
# serving, the request reader, chat template and Jinja limit tests run
# (InferServingInputTests, built without HTTP); InferServingTests, which
# runs the model through the AsyncEngine, does not.
suites=(
  "TokenizerTest:*"
  "InferPlanTests:*"
  "InferSafetensorsTests:*"
  "InferSamplerTests:*"
  "InferEngineTests:-Fp8/QuantizeFp8Numerics.*:Fixtures/HfParityTest.*:QuantizeFp8Threads.*:TinyPycode.MixedBatch*:TinyPycode.RepeatedPrompt*:TinyPycode.TooSmallAPool*:TinyPycode.CompletionsOfOne*:TinyPycode.SpeculativeVerification*:AsyncScheduling.MixedArrivals*:AsyncScheduling.PreemptionKeeps*:AsyncScheduling.LogprobsAndCompletions*"
  "InferSpecTests:-SpecDecodingTest.*:SpecEngineTest.*:Transforms/SpecDistributionTest.SampledSpeculationFollowsTheTarget/*"
  "InferServingInputTests:*"
)
fuzzers=(infer-fuzz-safetensors infer-fuzz-tokenizer infer-fuzz-plan
         infer-fuzz-cpu-plan infer-fuzz-openai-request
         infer-fuzz-chat-template)

if [ "${INFER_SKIP_APT:-0}" != 1 ] && command -v apt-get >/dev/null &&
   ! { command -v clang++-19 >/dev/null &&
       [ -e /usr/lib/llvm-19/lib/clang/19/lib/linux/libclang_rt.fuzzer-x86_64.a ]; }; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  echo "fuzz: installing clang-19 libclang-rt-19-dev"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
    --no-install-recommends clang-19 libclang-rt-19-dev
fi

CC=clang-19 CXX=clang++-19 cmake -G Ninja -S . -B "$build" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DINFER_ENABLE_COMPILER=OFF \
  -DINFER_ENABLE_CUDA=OFF -DINFER_ENABLE_FUZZ=ON \
  -DINFER_FUZZ_SECONDS="${INFER_FUZZ_SECONDS:-30}" "${@:2}"
cmake --build "$build" -j "$(nproc)" --target "${fuzzers[@]}" \
  "${suites[@]%%:*}"
echo "fuzz: build finished in $(( $(date +%s) - start ))s"

ctest --test-dir "$build" -L fuzz --output-on-failure -j "$(nproc)"
echo "fuzz: harnesses finished at $(( $(date +%s) - start ))s"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
# The engine stress test draws 216 scenarios in ~19 s of a Release build;
# under ASan + UBSan + coverage that would be most of CI's budget, so the
# sanitizer run takes 2 scenarios of each of its two tests.
export INFER_STRESS_SEEDS=${INFER_STRESS_SEEDS:-1:2}
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export build
# One suite: its output goes to BUILD/SUITE.log, printed when it fails.
run_suite() {
  local name=${1%%:*} filter=${1#*:} s
  s=$(date +%s)
  if "$build/bin/$name" --gtest_brief=1 --gtest_filter="$filter" \
      >"$build/$name.log" 2>&1; then
    echo "fuzz: $name passed in $(( $(date +%s) - s ))s"
  else
    cat "$build/$name.log"
    echo "fuzz: $name FAILED under the sanitizers"
    return 1
  fi
}
export -f run_suite
printf '%s\n' "${suites[@]}" |
  xargs -d '\n' -P "$(nproc)" -I{} bash -c 'run_suite "$1"' _ {}
echo "fuzz: sanitizer suites finished at $(( $(date +%s) - start ))s"

# Phase 2, the compiler's harnesses: a compiler-enabled clang-19 build in
# BUILD_DIR-cc with the same instrumentation, building only those two
# harnesses (the infer dialect, its passes, the HF importer; Debian's MLIR and
# LLVM 19, the version of clang-19, linked uninstrumented), then each runs
# for INFER_FUZZ_SECONDS on its seeds and replays its regressions. Where
# MLIR 19 is missing it is skipped, except in CI, where bootstrap installs it.
cc_build=${build}-cc
cc_fuzzers=(infer-fuzz-hf-config infer-fuzz-infer-opt)
mlir_dir=/usr/lib/llvm-19/lib/cmake/mlir
if [ ! -d "$mlir_dir" ]; then
  if [ -n "${CI:-}" ]; then
    echo "fuzz: MLIR 19 not found ($mlir_dir); the compiler's harnesses need it"
    exit 1
  fi
  echo "fuzz: MLIR 19 not found; skipping the compiler's harnesses"
  exit 0
fi
CC=clang-19 CXX=clang++-19 cmake -G Ninja -S . -B "$cc_build" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLIR_DIR="$mlir_dir" \
  -DINFER_ENABLE_CUDA=OFF -DINFER_ENABLE_FUZZ=ON \
  -DINFER_FUZZ_SECONDS="${INFER_FUZZ_SECONDS:-30}" "${@:2}"
cmake --build "$cc_build" -j "$(nproc)" --target "${cc_fuzzers[@]}"
echo "fuzz: compiler harnesses built at $(( $(date +%s) - start ))s"
ctest --test-dir "$cc_build" --no-tests=error --output-on-failure \
  -R "^fuzz\.($(IFS='|'; echo "${cc_fuzzers[*]}"))\$" -j "$(nproc)"
echo "fuzz: compiler harnesses finished at $(( $(date +%s) - start ))s"
