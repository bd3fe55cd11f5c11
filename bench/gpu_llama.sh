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
#   PART=ours   infer-cuda-bench decode and prefill sweeps (both models)
#   PART=hf     the HF transformers peer on the same Llama-3-8B checkpoint
#   PART=torch  the PyTorch CUDA-graph and torch.compile decode peers
#               (.gpu/peer_pytorch_decode.py, from ../shared/tools)
# PART may list several ("ours hf"). Tables go to stdout and $OUT.
#
#===----------------------------------------------------------------------===#
set -uo pipefail
ROOT=$PWD
OUT=${OUT:-/tmp/gpu-bench}
BUILD=${BUILD:-/tmp/infer-build}
PART=${PART:-ours hf torch}
mkdir -p "$OUT"
has() { [[ " $PART " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader

if has ours || has hf; then
  python3 bench/random_checkpoint.py llama3-8b /tmp/l8b >"$OUT/ckpt.log" 2>&1 &
  CKPT=$!
fi
if has ours; then
  BUILD_ONLY=1 TARGETS="infer infer-cuda-bench" OUT=$OUT BUILD=$BUILD \
    bash tests/runtime/cuda/gpu_check.sh || exit 1
  python3 bench/random_checkpoint.py tinyllama-1.1b /tmp/tl >>"$OUT/ckpt.log" 2>&1
  "$BUILD/bin/infer-cuda-bench" .gpu/tinyllama --weights /tmp/tl \
    --decode-batches ${TL_BATCHES:-1,8,32,128} --prefill 128,512,2048 \
    2>&1 | tee "$OUT/ours-tinyllama.md"
fi
if has ours || has hf; then
  wait $CKPT || { cat "$OUT/ckpt.log"; exit 1; }
fi
if has ours; then
  "$BUILD/bin/infer-cuda-bench" .gpu/llama3-8b --weights /tmp/l8b \
    --decode-batches ${BATCHES:-1,2,4,8,16,32,64,128,256} \
    --prefill ${PREFILL:-128,512,1024,2048,4096,8192} 2>&1 |
    tee "$OUT/ours-llama3-8b.md"
fi
if has hf; then
  PYTHONUNBUFFERED=1 python3 bench/peers/hf_generate.py /tmp/l8b \
    --decode-batches ${HF_BATCHES:-1,8,32} --prefill ${HF_PREFILL:-128,2048,8192} \
    --new-tokens 64 2>&1 | grep -v Warning | tee "$OUT/hf-llama3-8b.md"
fi
if has torch; then
  PYTHONUNBUFFERED=1 python3 .gpu/peer_pytorch_decode.py llama3-8b \
    ${TORCH_BATCHES:-1 8 32 128} 2>&1 | tee "$OUT/torch-graphs.md"
  PEER_MODE=compile PYTHONUNBUFFERED=1 python3 .gpu/peer_pytorch_decode.py \
    llama3-8b ${COMPILE_BATCHES:-1} 2>&1 | tail -5 | tee "$OUT/torch-compile.md"
fi
