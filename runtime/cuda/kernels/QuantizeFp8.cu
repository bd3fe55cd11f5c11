//===- QuantizeFp8.cu - Per-token E4M3 activations -------------*- CUDA -*-===//
//
// The activation side of the fp8 tensor-core GEMM (Gemm.h): each row of
// x[T, K] (one token, fp32 or bf16 read as fp32) becomes E4M3 codes and one
// fp32 scale, exactly as the weight quantizer quantize_fp8_e4m3 does per
// row (runtime/engine/Artifact.cpp):
//
//   scale[t] = amax(|x[t, :]|) / 448       (0 for an all-zero row)
//   code[t, i] = e4m3_satfinite(x[t, i] / scale[t])   (0 where scale is 0)
//
// One block per row, two passes over it: the amax (a block reduction), then
// the codes, one 16-byte load of x per thread and store (4 or 8 codes), from
// a second read that hits L2. The arithmetic is E4M3Rows.cuh's, which the
// producers that quantize their own output (launchRmsNormFp8,
// launchSiluMulFp8) share, so their codes and scales are these bit for bit.
// No host synchronisation, so the launch can be captured in a CUDA graph.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/GemvKernels.h"
#include "runtime/cuda/kernels/E4M3Rows.cuh"

namespace infer::cuda {
namespace {

constexpr int kThreads = 512;

/// N: x is read in packs of N elements (k % N == 0, rows 16-byte aligned,
/// codes N-byte aligned) or, N == 1, one element at a time.
template <int N, typename X>
__global__ void __launch_bounds__(kThreads)
    quantizeRowsKernel(const X *__restrict__ x, int64_t k,
                       uint8_t *__restrict__ codes,
                       float *__restrict__ scales) {
  const X *row = x + blockIdx.x * k;
  uint8_t *out = codes + blockIdx.x * k;
  float amax = 0.0f;
  for (int64_t i = threadIdx.x * int64_t(N); i < k; i += kThreads * N) {
    float v[N];
    loadFloats<N>(row + i, v);
#pragma unroll
    for (int e = 0; e < N; ++e)
      amax = fmaxf(amax, fabsf(v[e]));
  }
  // The same float division as the host quantizer, so the codes agree.
  const float scale = e4m3Scale(blockMax(amax));
  if (threadIdx.x == 0)
    scales[blockIdx.x] = scale;
  for (int64_t i = threadIdx.x * int64_t(N); i < k; i += kThreads * N) {
    float v[N];
    loadFloats<N>(row + i, v);
    storeCodes<N>(out + i, v, scale);
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

template <typename X>
cudaError_t launchQuantizeRowsFp8(const X *x, int64_t rows, int64_t k,
                                  uint8_t *codes, float *scales,
                                  cudaStream_t stream) {
  if (rows <= 0)
    return cudaSuccess;
  // Codes go out N bytes at a time: their rows must stay N-byte aligned.
  constexpr int N = kPack<X>;
  const bool packed = k % N == 0 && packAligned(x) &&
                      reinterpret_cast<uintptr_t>(codes) % N == 0;
  if (packed)
    quantizeRowsKernel<N><<<rows, kThreads, 0, stream>>>(x, k, codes, scales);
  else
    quantizeRowsKernel<1><<<rows, kThreads, 0, stream>>>(x, k, codes, scales);
  return cudaGetLastError();
}

template cudaError_t launchQuantizeRowsFp8<float>(const float *, int64_t,
                                                  int64_t, uint8_t *, float *,
                                                  cudaStream_t);
template cudaError_t launchQuantizeRowsFp8<__nv_bfloat16>(const __nv_bfloat16 *,
                                                          int64_t, int64_t,
                                                          uint8_t *, float *,
                                                          cudaStream_t);

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
