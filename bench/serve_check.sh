#!/usr/bin/env bash
#===- serve_check.sh - infer serve against the offline engine on one GPU -===#
#
# The acceptance row of issue 13: `infer bench --base-url` against `infer
# serve` must reach >= 90% of offline `infer bench` output throughput at the
# same concurrency. Run from the repository root on the GPU machine, prepared
# as for bench/gpu_llama.sh (.deps/ from scripts/device_deps.sh and the
# compiled artifact .gpu/llama3-8b; the compiler is not built there):
#
#   bash bench/serve_check.sh
#
# It builds `infer` (-DINFER_ENABLE_COMPILER=OFF, through gpu_check.sh
# BUILD_ONLY=1), draws the random Llama-3-8B checkpoint (/tmp/l8b, reused),
# then for each workload IN:OUT:PROMPTS:CONCURRENCY of $WORKLOADS (default
# 128:128:1000:256 2048:128:500:64) runs
#   offline  infer bench ART --max-num-seqs C (all requests at once)
#   served   infer serve ART --max-num-seqs C, then
#            infer bench ART --base-url ... --max-concurrency C
# with the same prompts (same seed) and prints both, and the ratio of output
# throughputs. Logs and JSON lines go to $OUT (default /tmp/serve-check).
#
#===----------------------------------------------------------------------===#
set -uo pipefail
ROOT=$PWD
OUT=${OUT:-/tmp/serve-check}
BUILD=${BUILD:-/tmp/infer-build}
ART=${ART:-.gpu/llama3-8b}
PORT=${PORT:-8321}
MEM=${MEM:-0.9}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
[ -f "$ART/manifest.json" ] || { echo "serve_check: $ART is missing (see bench/gpu_llama.sh)"; exit 1; }

if [ ! -f /tmp/l8b/.complete ]; then
  (python3 bench/random_checkpoint.py llama3-8b /tmp/l8b && touch /tmp/l8b/.complete) \
    >"$OUT/ckpt.log" 2>&1 &
  CKPT=$!
fi
BUILD_ONLY=1 TARGETS="infer" OUT=$OUT BUILD=$BUILD SRC=${SRC:-$ROOT} \
  bash tests/runtime/cuda/gpu_check.sh || exit 1
if [ -n "${CKPT:-}" ]; then
  wait $CKPT || { cat "$OUT/ckpt.log"; exit 1; }
fi
INFER=$BUILD/bin/infer

field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])$2)" "$1"; }

printf '| in | out | prompts | concurrency | offline tok/s | served tok/s | ratio | served TTFT p50 / p99 ms |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for w in ${WORKLOADS:-128:128:1000:256 2048:128:500:64}; do
  IFS=: read -r in out n c <<<"$w"
  common=(--input-len "$in" --output-len "$out" --num-prompts "$n" --seed 0 --json)
  offline=$(timeout 900 "$INFER" bench "$ART" --weights /tmp/l8b --backend cuda \
    --max-num-seqs "$c" --gpu-memory-utilization "$MEM" "${common[@]}" \
    2>>"$OUT/offline.log" | tail -1)
  echo "$offline" >>"$OUT/offline.jsonl"

  "$INFER" serve "$ART" --weights /tmp/l8b --backend cuda --port "$PORT" \
    --max-num-seqs "$c" --gpu-memory-utilization "$MEM" \
    --max-queued-requests 100000 >"$OUT/serve-$w.log" 2>&1 &
  server=$!
  for _ in $(seq 600); do
    grep -q "listening on" "$OUT/serve-$w.log" && break
    kill -0 $server 2>/dev/null || break
    sleep 1
  done
  served=$(timeout 900 "$INFER" bench "$ART" --base-url "http://127.0.0.1:$PORT" \
    --max-concurrency "$c" "${common[@]}" 2>>"$OUT/served.log" | tail -1)
  echo "$served" >>"$OUT/served.jsonl"
  kill -TERM $server
  wait $server

  if [ -z "$offline" ] || [ -z "$served" ]; then
    echo "| $in | $out | $n | $c | failed: see $OUT |"
    continue
  fi
  off_tps=$(field "$offline" "['output_throughput']")
  srv_tps=$(field "$served" "['output_throughput']")
  ratio=$(python3 -c "print(f'{$srv_tps / $off_tps:.3f}')")
  printf '| %s | %s | %s | %s | %.0f | %.0f | %s | %.0f / %.0f |\n' "$in" "$out" "$n" "$c" \
    "$off_tps" "$srv_tps" "$ratio" "$(field "$served" "['ttft_ms']['p50']")" \
    "$(field "$served" "['ttft_ms']['p99']")"
done
