//===- Sm90.cuh - Hopper PTX: mbarriers, TMA and wgmma ---------*- CUDA -*-===//
//
// Thin wrappers of the sm_90a instructions the Hopper attention kernel
// (PrefillAttentionSm90.cuh) and skinny GEMM (SkinnyGemmSm90.cu) are built
// from, and the shared-memory matrix descriptors of wgmma. Only code compiled
// for sm_90a may call them
// (__CUDA_ARCH_FEAT_SM90_ALL); the launchers check the device.
//
// Shared-memory tiles are rows of 128 bytes (64 bf16) in the 128-byte swizzle
// that both the TMA unit (CU_TENSOR_MAP_SWIZZLE_128B) and wgmma (layout type
// 1) apply to addresses: 16-byte chunk c of row r lives at chunk c ^ (r % 8),
// the pattern repeating every 8 rows (1024 bytes), so every tile starts on a
// 1024-byte boundary. A head_dim of 128 is two such column halves, one after
// the other:
//
//   tile [half][row][64 elements]     row r, element e of the head vector:
//                                     half e / 64, byte 2 (e % 64), chunk
//                                     swizzled within the row
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_KERNELS_SM90_CUH
#define INFER_RUNTIME_CUDA_KERNELS_SM90_CUH

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace infer::cuda::sm90 {

/// The driver's cuTensorMapEncodeTiled (through the runtime's entry-point
/// query, so nothing links libcuda), or null where the driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 tensorMapEncoder();

/// Whether the current device (compute capability 9.0) runs `kernel` and
/// this build holds its sm_90a code (binary version 90).
bool deviceRunsSm90a(const void *kernel);

/// The tensor map of a row-major [rows, cols] 2-byte matrix (bf16) in boxes
/// of `boxRows` rows x 64 elements (one 128-byte row), 128-byte swizzled:
/// rows past the end read as zeros and are not written.
/// cudaErrorInvalidValue where the driver refuses it.
cudaError_t encodeRowsMap(CUtensorMap *map, const void *data, int64_t rows,
                          int64_t cols, int boxRows);

__device__ __forceinline__ uint32_t smemAddress(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 8 bytes of shared memory at `address` (a shared-window address,
/// smemAddress). volatile: the loads keep their place among the barrier
/// waits, which the compiler does not see them depend on.
__device__ __forceinline__ uint2 loadShared8(uint32_t address) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n"
               : "=r"(v.x), "=r"(v.y)
               : "r"(address));
  return v;
}

/// Stores 16 bytes at shared-window `address`.
__device__ __forceinline__ void storeShared16(uint32_t address, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(address),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

/// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a 128-byte
/// swizzled tile.
__device__ __forceinline__ uint32_t swizzle128(int row, int chunk) {
  return uint32_t(row) * 128 + uint32_t((chunk ^ (row & 7)) * 16);
}

//===----------------------------------------------------------------------===//
// mbarriers
//===----------------------------------------------------------------------===//

__device__ __forceinline__ void mbarrierInit(uint64_t *bar, uint32_t count) {
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smemAddress(bar)),
      "r"(count)
      : "memory");
}

/// Makes the initialized barriers visible to the TMA unit (async proxy).
__device__ __forceinline__ void fenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbarrierArrive(uint64_t *bar) {
  asm volatile(
      "mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smemAddress(bar))
      : "memory");
}

/// One arrival that also announces `bytes` of TMA transactions to wait for.
__device__ __forceinline__ void mbarrierArriveExpectTx(uint64_t *bar,
                                                       uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   smemAddress(bar)),
               "r"(bytes)
               : "memory");
}

/// Waits until the phase of parity `parity` has completed (a fresh barrier
/// is in phase 0, so waiting on parity 1 returns at once).
__device__ __forceinline__ void mbarrierWait(uint64_t *bar, uint32_t parity) {
  asm volatile("{\n"
               ".reg .pred done;\n"
               "WAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra WAIT;\n"
               "}\n" ::"r"(smemAddress(bar)),
               "r"(parity)
               : "memory");
}

//===----------------------------------------------------------------------===//
// TMA, proxies, named barriers, registers
//===----------------------------------------------------------------------===//

/// A 4-d box of `map` at coordinates (c0 innermost .. c3) into shared memory
/// at `dst`, completing its bytes on `bar`.
__device__ __forceinline__ void tmaLoad4d(void *dst, const CUtensorMap *map,
                                          uint64_t *bar, int c0, int c1, int c2,
                                          int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::"
      "bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(smemAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smemAddress(bar)), "r"(c0),
      "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

/// A 2-d box of `map` at coordinates (c0 innermost, c1) into shared memory
/// at `dst`, completing its bytes on `bar`.
__device__ __forceinline__ void tmaLoad2d(void *dst, const CUtensorMap *map,
                                          uint64_t *bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::"
      "bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(smemAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smemAddress(bar)), "r"(c0),
      "r"(c1)
      : "memory");
}

/// tmaLoad2d into the same shared-memory offset of every CTA of the
/// cluster in `ctaMask`, completing its bytes on the barrier at `bar`'s
/// offset in each.
__device__ __forceinline__ void tmaLoad2dMulticast(void *dst,
                                                   const CUtensorMap *map,
                                                   uint64_t *bar, int c0,
                                                   int c1, uint16_t ctaMask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::"
      "bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(
          smemAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smemAddress(bar)), "r"(c0),
      "r"(c1), "h"(ctaMask)
      : "memory");
}

/// Stores the box of `map` at coordinates (c0 innermost, c1) from shared
/// memory at `src` (in the map's swizzle) as one bulk-async group member;
/// rows and columns past the tensor's end are not written.
__device__ __forceinline__ void tmaStore2d(const CUtensorMap *map,
                                           const void *src, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], "
      "[%1];\n" ::"l"(reinterpret_cast<uint64_t>(map)),
      "r"(smemAddress(src)), "r"(c0), "r"(c1)
      : "memory");
}

__device__ __forceinline__ void bulkCommit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

/// Waits until at most `pending` of this thread's bulk groups still read
/// their shared memory (their buffers may be written again).
template <int pending> __device__ __forceinline__ void bulkWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(pending) : "memory");
}

/// Waits until at most `pending` of this thread's bulk groups are not
/// complete.
template <int pending> __device__ __forceinline__ void bulkWait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(pending) : "memory");
}

/// Stores 4 bytes at shared-window `address`.
__device__ __forceinline__ void storeShared4(uint32_t address, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(v) : "memory");
}

/// This CTA's rank in its cluster.
__device__ __forceinline__ uint32_t clusterRank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

/// A barrier of every thread of every CTA of the cluster (all threads of
/// each CTA execute it): shared-memory writes before it (barrier
/// initialization) are visible to the cluster after it.
__device__ __forceinline__ void clusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}

/// One arrival on the barrier at `bar`'s offset in cluster CTA `rank`.
__device__ __forceinline__ void mbarrierArriveCluster(uint64_t *bar,
                                                      uint32_t rank) {
  asm volatile("{\n"
               ".reg .b32 remote;\n"
               "mapa.shared::cluster.u32 remote, %0, %1;\n"
               "mbarrier.arrive.release.cluster.shared::cluster.b64 _, "
               "[remote];\n"
               "}\n" ::"r"(smemAddress(bar)),
               "r"(rank)
               : "memory");
}

__device__ __forceinline__ void prefetchTensorMap(const CUtensorMap *map) {
  asm volatile(
      "prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map))
      : "memory");
}

/// Orders this thread's ordinary shared-memory stores before later reads of
/// the async proxy (wgmma, TMA).
__device__ __forceinline__ void fenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/// Copies 16 bytes from global `src` to shared address `dst` asynchronously
/// (cp.async); zeros instead when !valid (src is then not read).
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void *src,
                                          bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

/// Waits for this thread's cp.async copies.
__device__ __forceinline__ void cpAsyncWaitAll() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/// A barrier of `threads` threads (whole warps) under hardware id `id`.
__device__ __forceinline__ void namedBarrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// Arrives at barrier `id` of `threads` threads without waiting (the other
/// side waits with namedBarrier).
__device__ __forceinline__ void namedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <int kRegs> __device__ __forceinline__ void raiseRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

template <int kRegs> __device__ __forceinline__ void lowerRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

//===----------------------------------------------------------------------===//
// wgmma
//===----------------------------------------------------------------------===//

/// The descriptor of a 128-byte swizzled operand at shared address `addr`
/// (1024-byte aligned pattern): `leading` and `stride` byte offsets as the
/// PTX ISA's matrix-descriptor section defines them per major-ness:
/// - K-major (rows of the M/N dimension, K contiguous): stride = 1024 bytes
///   between groups of 8 rows; leading unused (16).
/// - MN-major (rows of the K dimension, M/N contiguous): stride = 1024 bytes
///   between groups of 8 K rows; leading = bytes between 64-element column
///   halves of the M/N dimension.
__device__ __forceinline__ uint64_t matrixDescriptor(uint32_t addr,
                                                     uint32_t leading,
                                                     uint32_t stride) {
  return uint64_t((addr & 0x3FFFF) >> 4) |
         uint64_t((leading & 0x3FFFF) >> 4) << 16 |
         uint64_t((stride & 0x3FFFF) >> 4) << 32 | uint64_t(1) << 62;
}

/// `desc` with its start address moved by `bytes` (a multiple of 16 that
/// stays below the 256 KiB the address field spans). The address is the low
/// word's low 14 bits, so a 32-bit add of the low word does it without a
/// carry: the 64-bit add took three instructions and a register copy before
/// every wgmma (ncu: 15% of the prefill's instructions).
__device__ __forceinline__ uint64_t advance(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

__device__ __forceinline__ void wgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/// Waits until at most `pending` committed groups of this warpgroup are in
/// flight.
template <int pending> __device__ __forceinline__ void wgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}

/// Marks the registers of `d` as written here, so the compiler moves no
/// read of an accumulator above the wgmmaWait that completes it.
template <int N> __device__ __forceinline__ void fenceRegisters(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("" : "+f"(d[i])::"memory");
}

#define INFER_ACC8(d, i)                                                       \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]),  \
      "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define INFER_ACC32(d)                                                         \
  INFER_ACC8(d, 0), INFER_ACC8(d, 8), INFER_ACC8(d, 16), INFER_ACC8(d, 24)
#define INFER_ACC64(d)                                                         \
  INFER_ACC8(d, 0), INFER_ACC8(d, 8), INFER_ACC8(d, 16), INFER_ACC8(d, 24),    \
      INFER_ACC8(d, 32), INFER_ACC8(d, 40), INFER_ACC8(d, 48),                 \
      INFER_ACC8(d, 56)
#define INFER_ACC64_AT(d, i)                                                   \
  INFER_ACC8(d, i), INFER_ACC8(d, i + 8), INFER_ACC8(d, i + 16),               \
      INFER_ACC8(d, i + 24), INFER_ACC8(d, i + 32), INFER_ACC8(d, i + 40),     \
      INFER_ACC8(d, i + 48), INFER_ACC8(d, i + 56)

/// d[64 x 128] (+)= A[64 x 16] * B[16 x 128], bf16 operands in shared memory,
/// both K-major; d is the accumulator fragment (PTX "wgmma .m64nNk16 D"):
/// thread l of warp w holds d[4c + e] = row 16w + l/4 + 8 (e/2), column
/// 8c + 2 (l%4) + e%2. `accumulate` 0 overwrites d.
__device__ __forceinline__ void wgmmaSS128(float (&d)[64], uint64_t a,
                                           uint64_t b, int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
      "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
      "%58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      : INFER_ACC64(d)
      : "l"(a), "l"(b), "r"(accumulate));
}

/// wgmmaSS128 with a 256-column B: d[64 x 256], 128 registers a thread in
/// the same layout (column 8c + 2 (l%4) + e%2 for c < 32).
__device__ __forceinline__ void wgmmaSS256(float (&d)[128], uint64_t a,
                                           uint64_t b, int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, "
      "%28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "
      "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, "
      "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, "
      "%84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, "
      "%98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, "
      "%110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, "
      "%124, %125, "
      "%126, %127}, "
      "%128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : INFER_ACC64(d), INFER_ACC64_AT(d, 64)
      : "l"(a), "l"(b), "r"(accumulate));
}

/// wgmmaSS256 with N = 224: d[64 x 224] (+)= A[64 x 16] * B[16 x 224], the
/// same layouts (thread l of warp w holds d[4c + e] = row 16w + l/4 + 8
/// (e/2), column 8c + 2 (l%4) + e%2, c < 28).
__device__ __forceinline__ void wgmmaSS224(float (&d)[112], uint64_t a,
                                           uint64_t b, int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %114, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n224k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, "
      "%28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "
      "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, "
      "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, "
      "%84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, "
      "%98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, "
      "%110, %111"
      "}, "
      "%112, %113, p, 1, 1, 0, 0;\n"
      "}\n"
      : INFER_ACC64(d), INFER_ACC8(d, 64), INFER_ACC8(d, 72), INFER_ACC8(d, 80),
        INFER_ACC8(d, 88), INFER_ACC8(d, 96), INFER_ACC8(d, 104)
      : "l"(a), "l"(b), "r"(accumulate));
}

/// d[64 x 128] += A[64 x 16] * B[16 x 128]: A from registers (the A fragment
/// of PTX "wgmma .m64nNk16": a[0] = row l/4, columns 2 (l%4) + {0, 1};
/// a[1] the same 8 rows down; a[2], a[3] columns 8 further), B in shared
/// memory, MN-major (trans-b).
__device__ __forceinline__ void wgmmaRS128(float (&d)[64],
                                           const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
      "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
      "%58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
      : INFER_ACC64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

/// wgmmaRS128 for a 64-column B (head_dim 64).
__device__ __forceinline__ void wgmmaRS64(float (&d)[32],
                                          const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
      "%30, %31}, "
      "{%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
      : INFER_ACC32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

#undef INFER_ACC8
#undef INFER_ACC32
#undef INFER_ACC64
#undef INFER_ACC64_AT

} // namespace infer::cuda::sm90

#endif // INFER_RUNTIME_CUDA_KERNELS_SM90_CUH
