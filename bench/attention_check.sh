#!/usr/bin/env bash
#===- attention_check.sh - Build, test and time the attention kernels ----===#
#
# Run from the repository root on a GPU host (what gpu_check.sh needs:
# the CUDA toolkit, cmake, ninja, .deps/; python3 with torch for the peer).
# SRC names another source tree than the current directory, BUILD the build
# folder, OUT where the logs go. It builds InferCudaTests and
# infer-attention-bench, counts the Hopper kernel's HGMMA and local-memory
# instructions, runs every attention test (the Hopper kernel, the mma.sync
# fallback, split-KV decode, key rope, fp8 pools, graph capture;
# ATTENTION_TESTS overrides the filter) on the fallback kernels and then on
# the Hopper one, then infer-attention-bench and
# bench/peers/attention_sdpa.py on the same shapes (BENCH_ARGS for both),
# the Hopper prefill again with its persistent and ping-pong schedules off
# (INFER_SM90_PERSISTENT=0, INFER_SM90_PINGPONG=0; SCHEDULES=0 skips), and
# prints a short table last.
#
#===----------------------------------------------------------------------===#
set -uo pipefail
ROOT=$PWD
SRC=${SRC:-$ROOT}
OUT=${OUT:-/tmp/attention-check}
BUILD=${BUILD:-/tmp/infer-build}
mkdir -p "$OUT"
FILTER=${ATTENTION_TESTS:-'PrefillAttentionSm90Test.*:PrefillAttentionTest.*:SplitKVDecodeTest.*:KeyRopeAttentionTest.*:Fp8KVCacheTest.*:CudaKernelsTest.KVCacheWriteAndPagedAttention'}
BENCH_ARGS=${BENCH_ARGS:-}

start=$(date +%s)
SRC=$SRC BUILD=$BUILD OUT=$OUT BUILD_ONLY=1 \
  TARGETS="InferCudaTests infer-attention-bench" \
  bash "$SRC/tests/runtime/cuda/gpu_check.sh" || { echo "build failed"; exit 1; }
echo "built in $(($(date +%s) - start)) s"

# The Hopper kernel's machine code: its tensor-core instructions and any
# local-memory traffic, per kernel.
OBJ=$(find "$BUILD" -name 'PrefillAttentionSm90.cu.o' | head -1)
if command -v cuobjdump >/dev/null && [ -n "$OBJ" ]; then
  cuobjdump -sass "$OBJ" >"$OUT/sm90.sass" 2>&1
  awk '/Function :/ { name = $3 } /HGMMA/ { h[name]++ } /LDL|STL/ { l[name]++ }
       END { for (n in h) printf "sass %s: %d HGMMA, %d LDL/STL\n", substr(n, 1, 90), h[n], l[n] }' \
    "$OUT/sm90.sass"
fi

# Three test runs, so a fault of one kernel leaves the others' results:
# every test on the fallback kernels (INFER_ATTENTION_KERNEL=fallback), the
# Hopper kernel's own tests, then the routed tests on the Hopper kernel.
run_tests() { # name, filter, environment...
  local name=$1 filter=$2
  shift 2
  env "$@" timeout "${TEST_TIMEOUT:-200}" "$BUILD/bin/InferCudaTests" \
    --gtest_filter="$filter" >"$OUT/tests-$name.log" 2>&1
  local rc=$?
  echo "tests $name: rc=$rc ($(($(date +%s) - start)) s)"
  grep -E "^\[ +(FAILED|SKIPPED) +\]|Failure|bad row|^\[  PASSED" \
    "$OUT/tests-$name.log" | head -40
  return $rc
}
run_tests fallback "$FILTER:-PrefillAttentionSm90Test.*" \
  INFER_ATTENTION_KERNEL=fallback
run_tests sm90 'PrefillAttentionSm90Test.*' INFER_ATTENTION_KERNEL=sm90
SM90_RC=$?
if [ $SM90_RC = 124 ]; then
  echo "the Hopper kernel's tests timed out: benchmarks on the fallback"
  export INFER_ATTENTION_KERNEL=fallback
else
  run_tests routed 'PrefillAttentionTest.*:KeyRopeAttentionTest.*:Fp8KVCacheTest.*'
fi

# Decode and prefill in two processes, so a fault of one keeps the other.
for part in '--prefill ""' '--decode ""'; do
  # shellcheck disable=SC2086
  eval timeout 150 "$BUILD/bin/infer-attention-bench" "$part" $BENCH_ARGS \
    >>"$OUT/bench.log" 2>&1
  echo "infer-attention-bench $part: rc=$? ($(($(date +%s) - start)) s)"
done
# shellcheck disable=SC2086
timeout 150 python3 "$SRC/bench/peers/attention_sdpa.py" $BENCH_ARGS \
  >"$OUT/peer.log" 2>&1
echo "attention_sdpa.py: rc=$? ($(($(date +%s) - start)) s)"
# The Hopper prefill with its schedules off (SCHEDULES=0 skips): rows
# "sm90-no-persistent", "sm90-no-pingpong" and both.
if [ "${SCHEDULES:-1}" = 1 ] && [ "${INFER_ATTENTION_KERNEL:-}" != fallback ]; then
  for off in PERSISTENT PINGPONG "PERSISTENT PINGPONG"; do
    vars=$(for v in $off; do printf 'INFER_SM90_%s=0 ' "$v"; done)
    tag=$(echo "$off" | tr 'A-Z ' 'a-z+')
    # shellcheck disable=SC2086
    env $vars timeout 150 "$BUILD/bin/infer-attention-bench" $BENCH_ARGS \
      --decode "" --pools bf16 2>&1 | grep "^result prefill kernel=sm90" |
      sed "s/kernel=sm90/kernel=sm90-no-$tag/" >>"$OUT/bench.log"
  done
  echo "schedules off: ($(($(date +%s) - start)) s)"
fi
grep -hv "^result" "$OUT/bench.log" "$OUT/peer.log" | head -20

python3 - "$OUT/bench.log" "$OUT/peer.log" <<'EOF'
import sys
rows = []
for path in sys.argv[1:]:
    for line in open(path):
        if line.startswith("result "):
            kind, *fields = line.split()[1:]
            rows.append((kind, dict(f.split("=", 1) for f in fields), path))
ceilings = [(r, p) for k, r, p in rows if k == "ceiling"]
for r, p in ceilings:
    who = "ours" if p == sys.argv[1] else "peer"
    print(f"ceilings ({who}): copy {r['copy_gbps']} GB/s, bf16 GEMM {r['gemm_tflops']} TFLOP/s")
print("\nprefill (causal, one sequence)     TFLOP/s (ms)")
prefill = [r for k, r, _ in rows if k == "prefill"]
for tokens in sorted({int(r["tokens"]) for r in prefill}):
    cells = []
    for r in prefill:
        if int(r["tokens"]) == tokens:
            cells.append(f"{r['kernel']}/{r['pool']} {r['tflops']} ({r['ms']})")
    print(f"  {tokens:6d}: " + ", ".join(cells))
print("\ndecode (one token per sequence)    GB/s of KV (% of copy)")
decode = [r for k, r, _ in rows if k == "decode"]
for key in sorted({(int(r["batch"]), int(r["context"])) for r in decode}):
    cells = []
    for r in decode:
        if (int(r["batch"]), int(r["context"])) == key:
            name = r.get("kernel", "infer") + "/" + r["pool"]
            cells.append(f"{name} {r['gbps']} ({r['pct_copy']}%, {r['us']} us)")
    print(f"  {key[0]:4d} x {key[1]:5d}: " + ", ".join(cells))
EOF
