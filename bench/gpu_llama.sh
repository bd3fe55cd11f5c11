#!/usr/bin/env bash
#===- gpu_llama.sh - Llama-3-8B / TinyLlama sweeps and peers on one GPU ---===#
#
# Run from the repository root on the GPU machine (see gpu_check.sh for what
# .deps/ holds). Artifacts come compiled (the compiler is not built there)
# from header-only checkpoints of the same configs:
#   python3 bench/random_checkpoint.py llama3-8b /tmp/l8b --header-only
#   infer compile /tmp/l8b -o .gpu/llama3-8b        (same for tinyllama)
# Here the same script writes the full random checkpoints (identical
# headers, so `--weights` matches the artifact's fingerprints), then
#   PART=tests  the GPU test suite (InferCudaTests, artifacts in .gpu/)
#   PART=ours   infer-cuda-bench decode (device-sampled greedy) and prefill
#               sweeps and the decode GEMMs (both models; Llama-3-8B bf16
#               and, PART=fp8, with fp8 weights: .gpu/llama3-8b-fp8)
#   PART=kv8    the same sweeps with an fp8 E4M3 KV cache (.gpu/llama3-8b-kv8:
#               infer compile --kv-cache-dtype fp8_e4m3)
#   PART=serve  `infer bench` offline throughput through the engine (SERVE:
#               in:out:prompts items, default 128:128:2000 2048:128:1000;
#               SERVE_ARTS: the artifacts, default llama3-8b, add
#               llama3-8b-fp8 llama3-8b-kv8 for the fp8 variants)
#   PART=profile infer-cuda-bench --profile: time per step and op of decode
#               (batch 1, 256) and prefill (2048, 8192), bf16
#   PART=hf     the HF transformers peer on the same Llama-3-8B checkpoint
#   PART=torch  the PyTorch CUDA-graph decode peer (.gpu/peer_pytorch_decode.py,
#               from ../shared/tools); PART=compile the torch.compile peer
#               (bench/peers/torch_compile_decode.py)
# PART may list several ("ours hf"). Tables go to stdout and $OUT.
#
#===----------------------------------------------------------------------===#
set -uo pipefail
ROOT=$PWD
OUT=${OUT:-/tmp/gpu-bench}
BUILD=${BUILD:-/tmp/infer-build}
PART=${PART:-tests ours serve hf torch}
mkdir -p "$OUT"
has() { [[ " $PART " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader

NEED_CKPT=0
for p in ours fp8 kv8 serve hf profile; do has $p && NEED_CKPT=1; done
# A checkpoint this machine already drew (an earlier run) is reused.
if [ $NEED_CKPT = 1 ] && [ ! -f /tmp/l8b/.complete ]; then
  (python3 bench/random_checkpoint.py llama3-8b /tmp/l8b && touch /tmp/l8b/.complete) \
    >"$OUT/ckpt.log" 2>&1 &
  CKPT=$!
else
  NEED_CKPT=0
fi
if has ours || has tests || has serve || has fp8 || has kv8 || has profile; then
  TESTS=""; has tests && TESTS=InferCudaTests
  BUILD_ONLY=1 TARGETS="infer infer-cuda-bench $TESTS" OUT=$OUT \
    BUILD=$BUILD SRC=${SRC:-$ROOT} bash tests/runtime/cuda/gpu_check.sh || exit 1
fi
if has tests; then
  INFER_CUDA_ARTIFACTS=$ROOT/.gpu/artifacts INFER_CUDA_FP8_ARTIFACTS=$ROOT/.gpu/fp8 \
    "$BUILD/bin/InferCudaTests" >"$OUT/gtest.log" 2>&1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$OUT/gtest.log" | head -20
fi
if has ours && [ "${TL:-1}" = 1 ]; then
  python3 bench/random_checkpoint.py tinyllama-1.1b /tmp/tl >>"$OUT/ckpt.log" 2>&1
  "$BUILD/bin/infer-cuda-bench" .gpu/tinyllama --weights /tmp/tl \
    --decode-batches ${TL_BATCHES:-1,8,32,128} --prefill 128,512,2048 \
    --sample greedy \
    2>&1 | tee "$OUT/ours-tinyllama.md"
fi
if [ $NEED_CKPT = 1 ]; then
  wait $CKPT || { cat "$OUT/ckpt.log"; exit 1; }
fi
if has ours; then
  "$BUILD/bin/infer-cuda-bench" .gpu/llama3-8b --weights /tmp/l8b --sample greedy \
    --decode-batches ${BATCHES:-1,2,4,8,16,32,64,128,256,512} --gemms 1 \
    --long-context ${LONG:-1:8192,1:32768,32:2048} \
    --prefill ${PREFILL:-128,512,1024,2048,4096,8192} 2>&1 |
    tee "$OUT/ours-llama3-8b.md"
fi
if has fp8; then
  "$BUILD/bin/infer-cuda-bench" .gpu/llama3-8b-fp8 --weights /tmp/l8b --sample greedy \
    --decode-batches ${FP8_BATCHES:-1,8,32,128} --prefill ${FP8_PREFILL:-512,2048} \
    2>&1 | tee "$OUT/ours-llama3-8b-fp8.md"
fi
if has kv8; then
  "$BUILD/bin/infer-cuda-bench" .gpu/llama3-8b-kv8 --weights /tmp/l8b --sample greedy \
    --decode-batches ${KV8_BATCHES:-1,32,128,256} --long-context ${LONG:-1:8192,1:32768,32:2048} \
    --prefill ${KV8_PREFILL:-2048,8192} 2>&1 | tee "$OUT/ours-llama3-8b-kv8.md"
fi
if has profile; then
  "$BUILD/bin/infer-cuda-bench" .gpu/llama3-8b --weights /tmp/l8b --profile --sample greedy \
    --decode-batches ${PROFILE_BATCHES:-1,256} --prefill ${PROFILE_PREFILL:-2048,8192} --steps 8 --repeats 1 2>&1 |
    tee "$OUT/profile-llama3-8b.md"
fi
if has serve; then
  for art in ${SERVE_ARTS:-llama3-8b}; do
    for len in ${SERVE:-128:128:2000 2048:128:1000}; do
      IFS=: read -r in out n <<<"$len"
      echo "== $art $len" | tee -a "$OUT/serve.log"
      timeout 300 "$BUILD/bin/infer" bench ".gpu/$art" --weights /tmp/l8b --backend cuda \
        --input-len $in --output-len $out --num-prompts $n \
        --gpu-memory-utilization 0.9 --seed 0 2>&1 | tail -9 | tee -a "$OUT/serve.log"
    done
  done
fi
if has hf; then
  PYTHONUNBUFFERED=1 python3 bench/peers/hf_generate.py /tmp/l8b \
    --decode-batches ${HF_BATCHES:-1,8,32} --prefill ${HF_PREFILL:-128,2048,8192} \
    --new-tokens 64 2>&1 | grep -v Warning | tee "$OUT/hf-llama3-8b.md"
fi
if has torch; then
  PYTHONUNBUFFERED=1 OUT=$OUT python3 .gpu/peer_pytorch_decode.py llama3-8b \
    ${TORCH_BATCHES:-1 8 32 128} 2>&1 | tee "$OUT/torch-graphs.md"
fi
if has compile; then
  PYTHONUNBUFFERED=1 python3 bench/peers/torch_compile_decode.py llama3-8b \
    --batches ${COMPILE_BATCHES:-1,8} 2>&1 | grep -v Warn | tail -6 | tee "$OUT/torch-compile.md"
fi
