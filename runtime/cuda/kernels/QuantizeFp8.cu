//===- QuantizeFp8.cu - Per-token E4M3 activations -------------*- CUDA -*-===//
//
// The activation side of the fp8 tensor-core GEMM (Gemm.h): each row of
// x[T, K] (one token) becomes E4M3 codes and one fp32 scale, exactly as the
// weight quantizer quantize_fp8_e4m3 does per row (runtime/engine/
// Artifact.cpp):
//
//   scale[t] = amax(|x[t, :]|) / 448       (0 for an all-zero row)
//   code[t, i] = e4m3_satfinite(x[t, i] / scale[t])   (0 where scale is 0)
//
// One block per row, two passes over it: the amax (a block reduction), then
// the codes, four per thread and store, from a second read that hits L2.
// No host synchronisation, so the launch can be captured in a CUDA graph.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/GemvKernels.h"

#include <cuda_fp8.h>

namespace infer::cuda {
namespace {

constexpr int kThreads = 512;
constexpr float kE4M3Max = 448.0f;

__device__ uint8_t encodeE4M3(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

/// The block's maximum of `v` (all threads get it).
__device__ float blockMax(float v) {
  __shared__ float warpMax[kThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0)
    warpMax[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? warpMax[lane] : 0.0f;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// `Vec4`: x rows are float4-aligned and K % 4 == 0.
template <bool Vec4>
__global__ void __launch_bounds__(kThreads)
    quantizeRowsKernel(const float *__restrict__ x, int64_t k,
                       uint8_t *__restrict__ codes,
                       float *__restrict__ scales) {
  const float *row = x + blockIdx.x * k;
  uint8_t *out = codes + blockIdx.x * k;
  float amax = 0.0f;
  if constexpr (Vec4) {
    const float4 *row4 = reinterpret_cast<const float4 *>(row);
    for (int64_t i = threadIdx.x; i < k / 4; i += kThreads) {
      const float4 v = row4[i];
      amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)),
                               fmaxf(fabsf(v.z), fabsf(v.w))));
    }
  } else {
    for (int64_t i = threadIdx.x; i < k; i += kThreads)
      amax = fmaxf(amax, fabsf(row[i]));
  }
  amax = blockMax(amax);
  // The same float division as the host quantizer, so the codes agree.
  const float scale = amax / kE4M3Max;
  if (threadIdx.x == 0)
    scales[blockIdx.x] = scale;
  auto encode = [&](float v) {
    // Scale 0 (all zeros, or amax / 448 underflowing) gives codes 0, as
    // the host quantizer does.
    return scale == 0.0f ? uint8_t(0) : encodeE4M3(v / scale);
  };
  if constexpr (Vec4) {
    const float4 *row4 = reinterpret_cast<const float4 *>(row);
    uint32_t *out4 = reinterpret_cast<uint32_t *>(out);
    for (int64_t i = threadIdx.x; i < k / 4; i += kThreads) {
      const float4 v = row4[i];
      out4[i] = uint32_t(encode(v.x)) | uint32_t(encode(v.y)) << 8 |
                uint32_t(encode(v.z)) << 16 | uint32_t(encode(v.w)) << 24;
    }
  } else {
    for (int64_t i = threadIdx.x; i < k; i += kThreads)
      out[i] = encode(row[i]);
  }
}

__global__ void scaleRowsColumnsKernel(float *__restrict__ y,
                                       const float *__restrict__ rowScales,
                                       const float *__restrict__ colScales,
                                       const float *__restrict__ bias,
                                       int64_t rows, int64_t cols) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * cols)
    return;
  const int64_t r = i / cols, j = i % cols;
  y[i] = y[i] * (rowScales[r] * colScales[j]) + (bias ? bias[j] : 0.0f);
}

} // namespace

cudaError_t launchQuantizeRowsFp8(const float *x, int64_t rows, int64_t k,
                                  uint8_t *codes, float *scales,
                                  cudaStream_t stream) {
  if (rows <= 0)
    return cudaSuccess;
  // Codes go out four bytes at a time: their rows must stay 4-byte aligned.
  const bool vec4 = k % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(codes) % 4 == 0;
  if (vec4)
    quantizeRowsKernel<true>
        <<<rows, kThreads, 0, stream>>>(x, k, codes, scales);
  else
    quantizeRowsKernel<false>
        <<<rows, kThreads, 0, stream>>>(x, k, codes, scales);
  return cudaGetLastError();
}

cudaError_t launchScaleRowsColumns(float *y, const float *rowScales,
                                   const float *colScales, const float *bias,
                                   int64_t rows, int64_t cols,
                                   cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n <= 0)
    return cudaSuccess;
  scaleRowsColumnsKernel<<<(n + 255) / 256, 256, 0, stream>>>(
      y, rowScales, colScales, bias, rows, cols);
  return cudaGetLastError();
}

} // namespace infer::cuda
