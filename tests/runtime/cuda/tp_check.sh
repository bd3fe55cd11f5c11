#!/usr/bin/env bash
#===- tp_check.sh - Build, test and time tensor parallelism on 2 GPUs ------===#
#
# Run from the repository root on a machine with 2 GPUs, the CUDA toolkit,
# cmake, ninja and PyTorch (for its NCCL and the random checkpoint).
# .deps/ holds what gpu_check.sh describes; .gpu-tp/ holds what is made
# where the compiler is built:
#   .gpu-tp/fixtures/rand/llama-gqa      the shared fixture model
#   .gpu-tp/nccl/include/nccl.h          when the machine has no NCCL header
#   .gpu-tp/art/NAME, NAME-tp2           `infer compile --target cuda
#                                        [--tp 2]` of the fixtures llama-gqa,
#                                        qwen2-bias-tied, llama-row-bias,
#                                        of families/phi3-longrope,
#                                        phi3-partial-rotary, qwen3, gemma3,
#                                        llama-dynamic-ntk (each skipped
#                                        without its artifacts)
#                                        and of llama3-8b (header-only:
#                                        python3 bench/random_checkpoint.py
#                                        llama3-8b DIR --header-only)
#   .gpu-tp/art/llama-row-bias-model     tests/fixtures/make_llama_row_bias.py
#                                        (every bias: the tp=2 plan's
#                                        bias_add steps run on the GPU)
# It builds with NCCL, runs the CUDA tests (the tensor-parallel ones
# included), checks the CLI on a tp=2 artifact, then times Llama-3-8B decode
# (random weights, greedy sampling on the device: rank 0 samples) at tp=1
# and tp=2 with infer-cuda-bench (not with SKIP_BENCH=1). SRC names another
# source tree than the current directory (e.g. `git archive HEAD`). Logs go
# to $OUT; a short table is printed last.
#
#===----------------------------------------------------------------------===#
set -uo pipefail
ROOT=$PWD
SRC=${SRC:-$ROOT}
D=$ROOT/.deps
TP=$ROOT/.gpu-tp
OUT=${OUT:-/tmp/tp-check}
BUILD=${BUILD:-/tmp/infer-tp-build}
# NVLink multicast can take the host's GPUs out of service (KINDS.md).
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT" "$D/pkgconfig" "$D/icu"

nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -4
# The full random Llama-3-8B checkpoint, drawn while the build runs.
python3 "$SRC/bench/random_checkpoint.py" llama3-8b /tmp/l8b >"$OUT/ckpt.log" 2>&1 &
CKPT=$!

# NCCL: the toolkit's, else PyTorch's pip package (header from .gpu-tp).
NCCL_LIB=$(ls /usr/local/cuda/lib64/libnccl.so.2 2>/dev/null ||
  find "$(python3 -c 'import site; print(site.getsitepackages()[0])')" \
    -name 'libnccl.so.2*' 2>/dev/null | head -1)
NCCL_INC=$(dirname "$(ls /usr/local/cuda/include/nccl.h \
  "$(dirname "$NCCL_LIB")/../include/nccl.h" 2>/dev/null | head -1)" 2>/dev/null)
[ -f "$NCCL_INC/nccl.h" ] || NCCL_INC=$TP/nccl/include
echo "NCCL: $NCCL_LIB, header $NCCL_INC"

ln -sf /lib/x86_64-linux-gnu/libicuuc.so.74 "$D/icu/libicuuc.so"
printf 'Name: libpcre2-8\nDescription: PCRE2\nVersion: 10.42\nLibs: -L%s/lib -lpcre2-8\nCflags: -I%s/include\n' "$D" "$D" >"$D/pkgconfig/libpcre2-8.pc"
printf 'Name: icu-uc\nDescription: ICU\nVersion: 74.2\nLibs: -L%s/icu -licuuc\nCflags: -I%s/include\n' "$D" "$D" >"$D/pkgconfig/icu-uc.pc"
export PKG_CONFIG_PATH=$D/pkgconfig
PKG=$(command -v pkg-config || echo "$D/bin/pkg-config")
cmake -G Ninja -S "$SRC" -B "$BUILD" -DINFER_ENABLE_COMPILER=OFF \
  -DINFER_FIXTURES_DIR="$TP/fixtures" -Dnlohmann_json_DIR="$D/cmake" \
  -DGTEST_ROOT="$D" -DPKG_CONFIG_EXECUTABLE="$PKG" \
  -DNCCL_INCLUDE_DIR="$NCCL_INC" -DNCCL_LIBRARY="$NCCL_LIB" \
  >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
grep NCCL "$OUT/cmake.log"
ninja -C "$BUILD" -j16 InferCudaTests infer infer-cuda-bench \
  >"$OUT/build.log" 2>&1 || { grep -B2 -A12 -m3 "error" "$OUT/build.log"; exit 1; }

INFER_CUDA_ARTIFACTS=$TP/art timeout 240 "$BUILD/bin/InferCudaTests" \
  >"$OUT/gtest.log" 2>&1
echo "InferCudaTests: rc=$?"
grep -E "^\[ tp|FAILED|Failure|tensor-parallel GPU tests need" -A2 "$OUT/gtest.log" | head -40

W=$TP/fixtures/rand/llama-gqa
for art in llama-gqa llama-gqa-tp2; do
  "$BUILD/bin/infer" generate "$TP/art/$art" --weights "$W" --backend cuda \
    --json --token-ids 348,185,398,23,72 --token-ids 175 --max-new-tokens 24 \
    >"$OUT/cli-$art.json" 2>&1
  echo "cli generate $art --backend cuda: rc=$?"
done
cmp -s "$OUT/cli-llama-gqa.json" "$OUT/cli-llama-gqa-tp2.json" &&
  echo "cli: tp=2 tokens == tp=1 tokens" ||
  { echo "cli: outputs differ"; cat "$OUT"/cli-llama-gqa*.json; }
"$BUILD/bin/infer" logits "$TP/art/llama-gqa-tp2" --weights "$W" \
  --backend cuda --token-ids 348,185,398 -o "$OUT/logits.safetensors" &&
  echo "cli logits tp=2: ok"
CUDA_VISIBLE_DEVICES=0 "$BUILD/bin/infer" generate "$TP/art/llama-gqa-tp2" \
  --weights "$W" --backend cuda --token-ids 1,2 --max-new-tokens 2 2>&1 |
  sed 's/^/one GPU visible: /'

# SKIP_BENCH=1: the tests and the CLI checks only.
[ "${SKIP_BENCH:-0}" = 1 ] && exit 0
wait $CKPT || { tail -5 "$OUT/ckpt.log"; exit 1; }
for art in llama3-8b llama3-8b-tp2; do
  timeout 150 "$BUILD/bin/infer-cuda-bench" "$TP/art/$art" --weights /tmp/l8b \
    --decode-batches 1,8,32 --context 128 --steps 32 --repeats 3 --sample greedy \
    >"$OUT/bench-$art.md" 2>&1
  echo "bench $art: rc=$?"
done

echo "==== tensor parallel, Llama-3-8B random weights, decode (median of 3 runs)"
echo "| tp | batch | ms/step | tokens/s | roofline ms (per rank) | runs |"
for art in llama3-8b llama3-8b-tp2; do
  tp=1; [[ $art == *-tp2 ]] && tp=2
  grep -E "^\| (1|8|32) \| 128 \|" "$OUT/bench-$art.md" |
    awk -F'|' -v tp=$tp '{ printf "| %s |%s|%s|%s|%s|%s|\n", tp, $2, $4, $5, $6, $8 }'
done
grep -h "load\|copy bandwidth" "$OUT"/bench-*.md
