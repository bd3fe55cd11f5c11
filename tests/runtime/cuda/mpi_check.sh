#!/usr/bin/env bash
#===- mpi_check.sh - Tensor parallelism over processes on 2 GPUs ---------===#
#
# Run from the repository root on a machine with 2 GPUs, the CUDA toolkit,
# cmake, ninja and PyTorch (NCCL and the random checkpoint), e.g.
#   run(kind=nvidia-h200-x2, carry=[.deps, .carry/mpi],
#       command="bash tests/runtime/cuda/mpi_check.sh")
# .deps/ is scripts/device_deps.sh's; .carry/mpi/ is made where the
# compiler is built:
#   .carry/mpi/fixtures/rand/llama-gqa   the shared fixture model
#   .carry/mpi/nccl/include/nccl.h       for hosts whose NCCL has no header
#   .carry/mpi/art/NAME, NAME-tp2        `infer compile --target cuda [--tp 2]`
#                                        of llama-gqa and of llama3-8b
#                                        (header-only random checkpoint:
#                                        bench/random_checkpoint.py)
# Steps:
#  1. Is there an MPI (mpirun, OpenMPI's libraries)? Without one the
#     `mpirun -np 2 infer` run cannot happen on this host, and the script
#     says so (BLOCKED).
#  2. Builds the runtime (compiler off; MPI on when found) with
#     infer-nccl-process-check.
#  3. Tokens: the one-process tp=2 run (`infer generate --backend cuda`, one
#     thread per GPU) against two processes, one GPU each, joined by
#     ncclCommInitRank on an id rank 0 made: through MPI (`mpirun -np 2
#     infer generate`) when there is one, and always through a file
#     (infer-nccl-process-check, no MPI).
#  4. Llama-3-8B (random bf16 weights) decode at batch 1 and 32, context
#     128: one process (thread per GPU) beside two processes, same engine
#     loop (not with SKIP_BENCH=1).
# Logs go to $OUT; a summary is printed last.
#
#===----------------------------------------------------------------------===#
set -uo pipefail
ROOT=$PWD
SRC=${SRC:-$ROOT}
D=$ROOT/.deps
C=$ROOT/.carry/mpi
OUT=${OUT:-/tmp/mpi-check}
BUILD=${BUILD:-/tmp/infer-mpi-build}
# NVLink multicast can take the host's GPUs out of service (KINDS.md).
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT" "$D/pkgconfig" "$D/icu"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader

# 1. MPI on this host?
MPIRUN=$(command -v mpirun || true)
echo "which mpirun: ${MPIRUN:-none}"
ls -d /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/libmpi.so* \
  /usr/include/*/mpi.h /usr/include/mpi.h 2>&1 | sed 's/^/mpi files: /'
if [ -z "$MPIRUN" ]; then
  say "BLOCKED: no mpirun and no OpenMPI on this host (and no package installs):" \
    "the mpirun -np 2 GPU run cannot happen here; the NCCL rendezvous of two" \
    "processes is checked with a file-exchanged id instead"
fi

# The full random Llama-3-8B checkpoint, drawn while the build runs.
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 "$SRC/bench/random_checkpoint.py" llama3-8b /tmp/l8b >"$OUT/ckpt.log" 2>&1 &
  CKPT=$!
fi

# 2. Build. NCCL: the toolkit's, else PyTorch's pip package.
NCCL_LIB=$(ls /usr/local/cuda/lib64/libnccl.so.2 2>/dev/null ||
  find "$(python3 -c 'import site; print(site.getsitepackages()[0])')" \
    -name 'libnccl.so.2*' 2>/dev/null | head -1)
NCCL_INC=$(dirname "$(ls /usr/local/cuda/include/nccl.h \
  "$(dirname "$NCCL_LIB")/../include/nccl.h" 2>/dev/null | head -1)" 2>/dev/null)
[ -f "$NCCL_INC/nccl.h" ] || NCCL_INC=$C/nccl/include
echo "NCCL: $NCCL_LIB, header $NCCL_INC"
ln -sf /lib/x86_64-linux-gnu/libicuuc.so.74 "$D/icu/libicuuc.so"
printf 'Name: libpcre2-8\nDescription: PCRE2\nVersion: 10.42\nLibs: -L%s/lib -lpcre2-8\nCflags: -I%s/include\n' "$D" "$D" >"$D/pkgconfig/libpcre2-8.pc"
printf 'Name: icu-uc\nDescription: ICU\nVersion: 74.2\nLibs: -L%s/icu -licuuc\nCflags: -I%s/include\n' "$D" "$D" >"$D/pkgconfig/icu-uc.pc"
export PKG_CONFIG_PATH=$D/pkgconfig
PKG=$(command -v pkg-config || echo "$D/bin/pkg-config")
cmake -G Ninja -S "$SRC" -B "$BUILD" -DINFER_ENABLE_COMPILER=OFF \
  -DINFER_ENABLE_MPI=ON -DINFER_FIXTURES_DIR="$C/fixtures" \
  -Dnlohmann_json_DIR="$D/cmake" -DGTEST_ROOT="$D" \
  -DPKG_CONFIG_EXECUTABLE="$PKG" \
  -DNCCL_INCLUDE_DIR="$NCCL_INC" -DNCCL_LIBRARY="$NCCL_LIB" \
  >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
grep -E "NCCL|MPI" "$OUT/cmake.log"
ninja -C "$BUILD" -j16 infer infer-nccl-process-check \
  >"$OUT/build.log" 2>&1 || { grep -B2 -A12 -m3 "error" "$OUT/build.log"; exit 1; }
echo "built at ${SECONDS} s"

# 3. Tokens of llama-gqa tp=2: one process, then two.
W=$C/fixtures/rand/llama-gqa
PROMPTS=(--token-ids 348,185,398,23,72 --token-ids 175 --token-ids 7,8,9)
ids() { python3 -c 'import json,sys
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"): print(json.loads(line)["output_token_ids"])'; }
"$BUILD/bin/infer" generate "$C/art/llama-gqa-tp2" --weights "$W" \
  --backend cuda --json "${PROMPTS[@]}" --max-new-tokens 24 --ignore-eos \
  >"$OUT/one-process.json" 2>"$OUT/one-process.err"
echo "one process, tp=2 (thread per GPU): rc=$?"
ids <"$OUT/one-process.json" >"$OUT/one-process.ids"

rm -f "$OUT/nccl-id"
CHECK=("$BUILD/bin/infer-nccl-process-check" "$C/art/llama-gqa-tp2" --weights "$W"
  "${PROMPTS[@]}" --max-new-tokens 24 --size 2 --id-file "$OUT/nccl-id")
timeout 120 "${CHECK[@]}" --rank 1 >"$OUT/file-rank1.log" 2>&1 &
R1=$!
timeout 120 "${CHECK[@]}" --rank 0 >"$OUT/file-rank0.json" 2>"$OUT/file-rank0.err"
RC0=$?
wait $R1
RC1=$?
echo "two processes, NCCL id through a file: rc=$RC0,$RC1"
cat "$OUT/file-rank0.err" "$OUT/file-rank1.log" | head -5
ids <"$OUT/file-rank0.json" >"$OUT/file.ids"
if [ -s "$OUT/file.ids" ] && cmp -s "$OUT/one-process.ids" "$OUT/file.ids"; then
  say "tokens: two processes (NCCL id via file, GPU 0 and 1) == one process tp=2" \
    "($(wc -l <"$OUT/file.ids") prompts x 24 tokens)"
else
  say "tokens: two processes (file) DIFFER from one process tp=2"
  paste "$OUT/one-process.ids" "$OUT/file.ids" | head
fi

if [ -n "$MPIRUN" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  timeout 120 mpirun -np 2 -x NCCL_NVLS_ENABLE "$BUILD/bin/infer" generate \
    "$C/art/llama-gqa-tp2" --weights "$W" --backend cuda --json \
    "${PROMPTS[@]}" --max-new-tokens 24 --ignore-eos \
    >"$OUT/mpi.json" 2>"$OUT/mpi.err"
  echo "mpirun -np 2: rc=$?"
  tail -5 "$OUT/mpi.err"
  ids <"$OUT/mpi.json" >"$OUT/mpi.ids"
  if [ -s "$OUT/mpi.ids" ] && cmp -s "$OUT/one-process.ids" "$OUT/mpi.ids"; then
    say "tokens: mpirun -np 2 (NCCL id via MPI) == one process tp=2"
  else
    say "tokens: mpirun -np 2 DIFFER from one process tp=2 (or failed)"
  fi
fi

# 4. Decode timing, Llama-3-8B tp=2.
[ "${SKIP_BENCH:-0}" = 1 ] && { cat "$SUMMARY"; exit 0; }
wait $CKPT || { tail -5 "$OUT/ckpt.log"; cat "$SUMMARY"; exit 1; }
echo "checkpoint at ${SECONDS} s"
BENCH=(--weights /tmp/l8b --batches 1,32 --context 128 --max-new-tokens 64)
say "| mode | batch | context | ms/step | tokens/s | decode steps |"
say "|---|---|---|---|---|---|"
timeout 150 "$BUILD/bin/infer-nccl-process-check" "$C/art/llama3-8b-tp2" \
  --mode threads "${BENCH[@]}" >"$OUT/bench-threads.md" 2>&1
echo "bench one process: rc=$?"
grep '^| threads' "$OUT/bench-threads.md" | tee -a "$SUMMARY"
rm -f "$OUT/nccl-id8"
timeout 150 "$BUILD/bin/infer-nccl-process-check" "$C/art/llama3-8b-tp2" \
  "${BENCH[@]}" --size 2 --rank 1 --id-file "$OUT/nccl-id8" \
  >"$OUT/bench-rank1.log" 2>&1 &
R1=$!
timeout 150 "$BUILD/bin/infer-nccl-process-check" "$C/art/llama3-8b-tp2" \
  "${BENCH[@]}" --size 2 --rank 0 --id-file "$OUT/nccl-id8" \
  >"$OUT/bench-process.md" 2>&1
echo "bench two processes: rc=$?,$(wait $R1; echo $?)"
grep '^| process' "$OUT/bench-process.md" | tee -a "$SUMMARY"
grep -h error "$OUT"/bench-*.md "$OUT/bench-rank1.log" | head -3
echo "==== summary (${SECONDS} s)"
cat "$SUMMARY"
