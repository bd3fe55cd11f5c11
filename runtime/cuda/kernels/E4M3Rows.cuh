//===- E4M3Rows.cuh - Per-row E4M3 quantization on the device --*- CUDA -*-===//
//
// The arithmetic of per-token E4M3 activations, shared by the kernels that
// write them: launchQuantizeRowsFp8 (QuantizeFp8.cu) and the producers that
// quantize their own output on the way out (launchRmsNormFp8,
// launchSiluMulFp8: Elementwise.cu). One block per row:
//
//   scale = amax(|row|) / 448              (the same float division as the
//                                           host quantizer)
//   code[i] = e4m3_satfinite(row[i] / scale), 0 where scale is 0
//
// The amax is a maximum, exact in any order, so every kernel that reduces
// the same values (however its threads split the row) gets the same scale
// and the same codes.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_KERNELS_E4M3ROWS_CUH
#define INFER_RUNTIME_CUDA_KERNELS_E4M3ROWS_CUH

#include "runtime/cuda/kernels/Elements.cuh"

#include <cuda_fp8.h>

#include <cstdint>

namespace infer::cuda {

inline constexpr float kE4M3Max = 448.0f;

__device__ __forceinline__ uint8_t encodeE4M3(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

/// The block's maximum of `v` (blockDim.x a multiple of 32; all threads
/// get it). One call per kernel: its shared array is not reused.
__device__ __forceinline__ float blockMax(float v) {
  __shared__ float warpMax[32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0)
    warpMax[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? warpMax[lane] : 0.0f;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// The row's scale from its amax: 0 for an all-zero row (or amax / 448
/// underflowing), whose codes are then 0, as the host quantizer does.
__device__ __forceinline__ float e4m3Scale(float amax) {
  return amax / kE4M3Max;
}
__device__ __forceinline__ uint8_t encodeScaled(float v, float scale) {
  return scale == 0.0f ? uint8_t(0) : encodeE4M3(v / scale);
}

/// out[0 .. N) = the codes of v (N == 1, 4 or 8; out N-byte aligned for
/// N > 1). Little-endian words: element e in byte e % 4 of word e / 4.
template <int N>
__device__ __forceinline__ void storeCodes(uint8_t *out, const float (&v)[N],
                                           float scale) {
  if constexpr (N == 1) {
    out[0] = encodeScaled(v[0], scale);
  } else {
    uint32_t words[N / 4] = {};
#pragma unroll
    for (int e = 0; e < N; ++e)
      words[e / 4] |= uint32_t(encodeScaled(v[e], scale)) << (8 * (e % 4));
    if constexpr (N == 4)
      *reinterpret_cast<uint32_t *>(out) = words[0];
    else
      *reinterpret_cast<uint2 *>(out) = make_uint2(words[0], words[1]);
  }
}

/// max(amax, |v[e]| as stored in T): the values a later read of the stored
/// row sees.
template <typename T, int N>
__device__ __forceinline__ float storedAmax(float amax, const float (&v)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e)
    amax = fmaxf(amax, fabsf(toFloat(fromFloat<T>(v[e]))));
  return amax;
}

/// The second half of a producer that quantizes its own row: `row` (k
/// elements of T) was stored by this block, each thread the packs of N at
/// threadIdx.x * N + j * blockDim.x * N, and `amax` is the thread's
/// storedAmax over them. Writes the row's scale and codes; each thread reads
/// back only what it stored (program order, no barrier needed for it).
template <int N, typename T>
__device__ __forceinline__ void quantizeStoredRow(const T *row, int64_t k,
                                                  float amax, uint8_t *codes,
                                                  float *scale) {
  const float s = e4m3Scale(blockMax(amax));
  if (threadIdx.x == 0)
    *scale = s;
  for (int64_t i = threadIdx.x * int64_t(N); i < k; i += blockDim.x * N) {
    float v[N];
    loadFloats<N>(row + i, v);
    storeCodes<N>(codes + i, v, s);
  }
}

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_KERNELS_E4M3ROWS_CUH
