#!/usr/bin/env bash
#===- unpacked_check.sh - The streamed unpacked load on a GPU host -------===#
#
# Two halves, like gpu_check.sh:
#
#   unpacked_check.sh prepare   where the compiler is built (no GPU), from
#                   the repository root: .deps/ (scripts/device_deps.sh),
#                   .gpu/fixtures/rand/llama-gqa, a bf16 copy of it and
#                   these llama-gqa artifacts (infer compile --target cuda
#                   --dtype bfloat16) in .gpu/unpacked/:
#                     f32-bf16       f32 checkpoint, bf16 params (a cast)
#                     bf16           bf16 checkpoint (gathered as is)
#                     bf16-fp8       --quant fp8 (per-tensor scales, parts)
#                     bf16-fp8-ch    --quant fp8 --quant-granularity per-channel
#                   and bench/coldstart.sh prepare's Llama-3-8B artifacts;
#                   all of it (with .deps) in .carry/deps.tar.xz.
#   unpacked_check.sh           on the GPU host, from the repository root
#                   (unpacks .carry/deps.tar.xz when .gpu/unpacked is
#                   missing): builds InferCudaTests and infer (gpu_check.sh
#                   BUILD_ONLY=1), runs the StreamedParams GPU tests (every
#                   streamed param == the packed file's bytes, fp8 included;
#                   a NaN weight named; the logits of a backend from streamed
#                   params == from packed ones), then for each artifact above
#                   `infer logits --backend cuda` unpacked (streamed from the
#                   checkpoint) and packed (`infer pack`, the host loader):
#                   the two logits files must be identical. Meanwhile it
#                   draws bench/coldstart.sh's random Llama-3-8B checkpoint
#                   (/tmp/l8b), so that `bash bench/coldstart.sh` runs next
#                   without waiting for it. Logs go to $OUT; a summary last.
#
#===----------------------------------------------------------------------===#
set -uo pipefail
ROOT=$PWD
SRC=${SRC:-$ROOT}
G=$ROOT/.gpu
OUT=${OUT:-/tmp/unpacked-check}
BUILD=${BUILD:-/tmp/infer-build}
ARTIFACTS=(f32-bf16 bf16 bf16-fp8 bf16-fp8-ch)

if [ "${1:-}" = prepare ]; then
  SHARED=${SHARED:-$ROOT/../shared/fixtures}
  INFER=${BUILD_DIR:-build}/bin/infer
  GQA=$G/fixtures/rand/llama-gqa
  bash "$SRC/scripts/device_deps.sh" "$ROOT/.deps" >/dev/null || exit 1
  rm -rf "$G/unpacked" "$GQA" && mkdir -p "$G/unpacked" "$(dirname "$GQA")"
  cp -r "$SHARED/rand/llama-gqa" "$GQA" && chmod -R u+w "$GQA"
  mkdir -p "$G/unpacked/bf16-model"
  cp "$GQA"/*.json "$G/unpacked/bf16-model/"
  # The checkpoint's f32 tensors rounded to bf16 (nearest even).
  python3 - "$GQA/model.safetensors" "$G/unpacked/bf16-model/model.safetensors" <<'PY' || exit 1
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
body, out, offset = data[8 + n:], {}, 0
chunks = []
for name, info in sorted((k, v) for k, v in header.items() if k != "__metadata__"):
    begin, end = info["data_offsets"]
    raw = body[begin:end]
    if info["dtype"] == "F32":
        words = struct.unpack(f"<{len(raw) // 4}I", raw)
        raw = struct.pack(f"<{len(words)}H",
                          *(((w + 0x7FFF + ((w >> 16) & 1)) >> 16) & 0xFFFF for w in words))
        info = dict(info, dtype="BF16")
    out[name] = dict(info, data_offsets=[offset, offset + len(raw)])
    offset += len(raw)
    chunks.append(raw)
if "__metadata__" in header:
    out["__metadata__"] = header["__metadata__"]
text = json.dumps(out).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
PY
  compile() { "$INFER" compile "$1" --target cuda --dtype bfloat16 -o "$G/unpacked/$2" "${@:3}" >/dev/null ||
    { echo "prepare: infer compile $*"; exit 1; }; }
  compile "$GQA" f32-bf16
  compile "$G/unpacked/bf16-model" bf16
  compile "$G/unpacked/bf16-model" bf16-fp8 --quant fp8
  compile "$G/unpacked/bf16-model" bf16-fp8-ch --quant fp8 --quant-granularity per-channel
  bash "$SRC/bench/coldstart.sh" prepare >/dev/null || exit 1
  mkdir -p "$ROOT/.carry"
  tar -C "$ROOT" -cJf "$ROOT/.carry/deps.tar.xz" .deps .gpu/fixtures/rand/llama-gqa \
    .gpu/unpacked .gpu/coldstart || exit 1
  du -sh "$ROOT/.carry/deps.tar.xz"
  exit 0
fi

[ -d "$G/unpacked" ] || tar -C "$ROOT" -xJf "$ROOT/.carry/deps.tar.xz" || exit 1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if [ ! -f /tmp/l8b/.complete ]; then
  (python3 "$SRC/bench/random_checkpoint.py" llama3-8b /tmp/l8b >"$OUT/ckpt.log" 2>&1 &&
    touch /tmp/l8b/.complete) &
  CKPT=$!
fi
BUILD_ONLY=1 TARGETS="InferCudaTests infer" OUT=$OUT BUILD=$BUILD \
  bash "$SRC/tests/runtime/cuda/gpu_check.sh" || exit 1
INFER=$BUILD/bin/infer

"$BUILD/bin/InferCudaTests" --gtest_filter='*StreamedParams*' 2>&1 |
  tee "$OUT/gtest-streamed.log" | grep -E "FAILED|Failure|error|tests ran|PASSED|SKIPPED" | head -40

GQA=$G/fixtures/rand/llama-gqa
for name in "${ARTIFACTS[@]}"; do
  art=$G/unpacked/$name
  weights=$GQA
  [ "$name" = f32-bf16 ] || weights=$G/unpacked/bf16-model
  rm -rf "$art-packed" && cp -r "$art" "$art-packed"
  "$INFER" pack "$art-packed" --weights "$weights" >"$OUT/pack-$name.log" 2>&1 ||
    { echo "$name: infer pack failed"; tail -3 "$OUT/pack-$name.log"; continue; }
  for kind in unpacked packed; do
    from=$art
    extra=(--weights "$weights")
    [ $kind = packed ] && from=$art-packed && extra=()
    "$INFER" logits "$from" "${extra[@]}" --backend cuda --token-ids 1,348,185,398,23,72 \
      -o "$OUT/logits-$name-$kind.safetensors" >"$OUT/logits-$name-$kind.log" 2>&1 ||
      { echo "$name $kind: infer logits failed"; tail -3 "$OUT/logits-$name-$kind.log"; }
  done
  if cmp -s "$OUT/logits-$name-unpacked.safetensors" "$OUT/logits-$name-packed.safetensors"; then
    echo "cli logits $name: streamed == packed"
  else
    echo "cli logits $name: DIFFER (streamed vs packed)"
  fi
  grep -h "streaming weights" "$OUT/logits-$name-unpacked.log" | tail -1
done

if [ -n "${CKPT:-}" ]; then
  wait "$CKPT" && echo "random Llama-3-8B checkpoint: /tmp/l8b" ||
    { echo "random checkpoint failed:"; tail -3 "$OUT/ckpt.log"; }
fi
echo "==== summary"
grep -hE "tests ran|PASSED|FAILED" "$OUT/gtest-streamed.log" | tail -6
