//===- WeightQuantize.cu - fp8 weights quantized at load -------*- CUDA -*-===//
//
// WeightKernels.h: the load-time quantize_fp8_e4m3 transform. Unlike the
// activation quantizer (QuantizeFp8.cu) it keeps a NaN in a row's amax, so
// that a weight holding NaN is an error as on the host, and its scales are
// per group of rows (per-tensor, per part, per channel).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/WeightKernels.h"
#include "runtime/cuda/kernels/Elements.cuh"

#include <cuda_fp8.h>

namespace infer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kE4M3Max = 448.0f;

/// max that stays NaN once either is, as the host's amax.
__device__ __forceinline__ float maxKeepingNaN(float a, float b) {
  return isnan(a) || isnan(b) ? __int_as_float(0x7fc00000) : fmaxf(a, b);
}

/// The block's maximum of `v` keeping NaN (thread 0 gets it).
__device__ float blockMaxKeepingNaN(float v) {
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      partial[threadIdx.x] =
          maxKeepingNaN(partial[threadIdx.x], partial[threadIdx.x + half]);
    __syncthreads();
  }
  return partial[0];
}

template <typename X>
__global__ void __launch_bounds__(kThreads)
    rowAmaxKernel(const X *__restrict__ x, int64_t cols,
                  float *__restrict__ rowAmax) {
  const X *row = x + blockIdx.x * cols;
  float amax = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads)
    amax = maxKeepingNaN(amax, fabsf(toFloat(row[c])));
  amax = blockMaxKeepingNaN(amax);
  if (threadIdx.x == 0)
    rowAmax[blockIdx.x] = amax;
}

/// One block per group of rows.
__global__ void __launch_bounds__(kThreads)
    groupScalesKernel(const float *__restrict__ rowAmax,
                      const int64_t *__restrict__ groupEnds,
                      float *__restrict__ rowScales, int *nonFinite) {
  const int64_t g = blockIdx.x;
  const int64_t first = g == 0 ? 0 : groupEnds[g - 1], last = groupEnds[g];
  float amax = 0.0f;
  for (int64_t r = first + threadIdx.x; r < last; r += kThreads)
    amax = maxKeepingNaN(amax, rowAmax[r]);
  amax = blockMaxKeepingNaN(amax);
  if (threadIdx.x == 0 && !isfinite(amax))
    *nonFinite = 1;
  // IEEE division (no fast math), as the host's amax / kFp8E4M3Max.
  const float scale = __fdiv_rn(amax, kE4M3Max);
  for (int64_t r = first + threadIdx.x; r < last; r += kThreads)
    rowScales[r] = scale;
}

template <typename X>
__global__ void __launch_bounds__(kThreads)
    encodeKernel(const X *__restrict__ x, int64_t cols,
                 const float *__restrict__ rowScales,
                 uint8_t *__restrict__ codes) {
  const X *row = x + blockIdx.x * cols;
  uint8_t *out = codes + blockIdx.x * cols;
  const float scale = rowScales[blockIdx.x];
  for (int64_t c = threadIdx.x; c < cols; c += kThreads)
    out[c] =
        scale == 0.0f
            ? uint8_t(0)
            : uint8_t(__nv_cvt_float_to_fp8(__fdiv_rn(toFloat(row[c]), scale),
                                            __NV_SATFINITE, __NV_E4M3));
}

template <template <typename> class Launch, typename... Args>
cudaError_t dispatch(ElementType type, Args &&...args) {
  switch (type) {
  case ElementType::kBf16:
    return Launch<__nv_bfloat16>::run(args...);
  case ElementType::kF16:
    return Launch<__half>::run(args...);
  default:
    return Launch<float>::run(args...);
  }
}

template <typename X> struct RowAmax {
  static cudaError_t run(const void *x, int64_t rows, int64_t cols,
                         float *rowAmax, cudaStream_t stream) {
    rowAmaxKernel<X><<<rows, kThreads, 0, stream>>>(static_cast<const X *>(x),
                                                    cols, rowAmax);
    return cudaGetLastError();
  }
};

template <typename X> struct Encode {
  static cudaError_t run(const void *x, int64_t rows, int64_t cols,
                         const float *rowScales, uint8_t *codes,
                         cudaStream_t stream) {
    encodeKernel<X><<<rows, kThreads, 0, stream>>>(static_cast<const X *>(x),
                                                   cols, rowScales, codes);
    return cudaGetLastError();
  }
};

} // namespace

cudaError_t launchWeightRowAmax(const void *x, ElementType type, int64_t rows,
                                int64_t cols, float *rowAmax,
                                cudaStream_t stream) {
  if (rows <= 0)
    return cudaSuccess;
  return dispatch<RowAmax>(type, x, rows, cols, rowAmax, stream);
}

cudaError_t launchWeightGroupScales(const float *rowAmax,
                                    const int64_t *groupEnds, int64_t groups,
                                    float *rowScales, int *nonFinite,
                                    cudaStream_t stream) {
  if (groups <= 0)
    return cudaSuccess;
  groupScalesKernel<<<groups, kThreads, 0, stream>>>(rowAmax, groupEnds,
                                                     rowScales, nonFinite);
  return cudaGetLastError();
}

cudaError_t launchWeightEncodeFp8(const void *x, ElementType type, int64_t rows,
                                  int64_t cols, const float *rowScales,
                                  uint8_t *codes, cudaStream_t stream) {
  if (rows <= 0)
    return cudaSuccess;
  return dispatch<Encode>(type, x, rows, cols, rowScales, codes, stream);
}

} // namespace infer::cuda
