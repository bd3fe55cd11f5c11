#!/usr/bin/env bash
#===- bf16_check.sh - Build and run the bf16 kernel tests on a GPU host ---===#
#
# Run from the repository root on a GPU host prepared as gpu_check.sh says
# (.deps/ from scripts/device_deps.sh). Builds InferCudaTests through
# gpu_check.sh (BUILD_ONLY=1), then runs the tests of the bf16 / f16
# activation kernels and GEMMs (Bf16KernelsTest, Bf16GemmTest) and those of
# the fp32 entry points that share their kernels (CudaKernelsTest,
# CudaGemvTest, CudaFp8GemmTest, Fp8KVCacheTest: rope, cache writes, skinny
# kernels, fp8 quantization). Logs go to $OUT; failures (with the element
# they fail on), the GEMM paths taken and a count are printed last.
#
#===----------------------------------------------------------------------===#
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/bf16-check}
BUILD=${BUILD:-/tmp/infer-build}
mkdir -p "$OUT"
OUT=$OUT BUILD=$BUILD BUILD_ONLY=1 TARGETS=InferCudaTests \
  bash "$HERE/gpu_check.sh" || exit 1

FILTER='Bf16KernelsTest/*:Bf16GemmTest.*:Bf16GemmRoutingTest.*'
FILTER+=':CudaKernelsTest.*:CudaGemvTest.*:CudaFp8GemmTest.*'
FILTER+=':CudaFp8GemmRoutingTest.*:Fp8KVCacheTest.*'
"$BUILD/bin/InferCudaTests" --gtest_filter="$FILTER" >"$OUT/gtest.log" 2>&1
status=$?

echo "==== failures"
grep -E -A4 "Failure$|error:" "$OUT/gtest.log" | head -120
echo "==== GEMM paths"
grep -E "^\[ (bf16 gemm|gemm|fp8 cuBLASLt) " "$OUT/gtest.log" | sort | uniq |
  cut -c1-140
echo "==== summary"
grep -E "tests ran|PASSED|FAILED|SKIPPED" "$OUT/gtest.log" | tail -30
exit $status
