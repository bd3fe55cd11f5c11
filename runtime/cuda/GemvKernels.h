//===- GemvKernels.h - Skinny GEMMs and fp8 weight kernels ------*- C++ -*-===//
//
// Launchers of kernels/Gemv.cu (Gemm.cpp routes matrix products to them)
// and of kernels/QuantizeFp8.cu (the activations of fp8 cuBLASLt). Each
// returns the launch's cudaError_t; none allocates or synchronises, so
// all of them can be captured in CUDA graphs.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_GEMVKERNELS_H
#define INFER_RUNTIME_CUDA_GEMVKERNELS_H

#include "runtime/cuda/Kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace infer::cuda {

/// The most rows of x the skinny kernels take.
inline constexpr int64_t kGemvMaxRows = 8;

/// y[t, j] = sum_i x[t, i] * w[j, i] (+ bias[j]) (+ residual[t, j]) for t
/// in [1, kGemvMaxRows]: x [t, k] fp32 (read as is, not rounded to bf16) or
/// bf16, w bf16 [n, k], fp32 accumulation, y [t, n] fp32 or bf16 (rounded
/// once, after the bias and the residual) with the bias [n] and the
/// residual [t, n] (each may be null; the residual must not overlap y) in
/// y's type. Instantiated for (X, Y) = (float, float), (bf16, bf16) and
/// (bf16, float).
template <typename X, typename Y>
cudaError_t launchGemv(const X *x, const __nv_bfloat16 *w,
                       const NonDeduced<Y> *bias, Y *y, int64_t t, int64_t n,
                       int64_t k, cudaStream_t stream,
                       const NonDeduced<Y> *residual = nullptr);
/// The same with FP8 E4M3 weights: w[j, i] = decode(codes[j * k + i]) *
/// rowScales[j] (runtime/support/Fp8.h), the scale applied to the row's sum.
template <typename X, typename Y>
cudaError_t
launchGemvFp8(const X *x, const uint8_t *codes, const float *rowScales,
              const NonDeduced<Y> *bias, Y *y, int64_t t, int64_t n, int64_t k,
              cudaStream_t stream, const NonDeduced<Y> *residual = nullptr);
/// Whether the tensor-core skinny kernels take T rows and this K: T <= 8,
/// K a multiple of 32 (bf16) or 64 (fp8); x and w must be 16-byte aligned.
bool gemvMmaSupports(int64_t t, int64_t k, bool fp8);
/// launchGemv on the tensor cores (mma.sync): an fp32 x rounded to bf16 as
/// cuBLASLt reads it (a bf16 x as it is), fp32 accumulation; bias and
/// residual may be null.
template <typename X, typename Y>
cudaError_t launchGemvMma(const X *x, const __nv_bfloat16 *w,
                          const NonDeduced<Y> *bias, Y *y, int64_t t, int64_t n,
                          int64_t k, cudaStream_t stream,
                          const NonDeduced<Y> *residual = nullptr);
/// launchGemvFp8 on the tensor cores: codes decoded to bf16 (exact), the
/// row scale applied to the sum.
template <typename X, typename Y>
cudaError_t launchGemvMmaFp8(const X *x, const uint8_t *codes,
                             const float *rowScales, const NonDeduced<Y> *bias,
                             Y *y, int64_t t, int64_t n, int64_t k,
                             cudaStream_t stream,
                             const NonDeduced<Y> *residual = nullptr);
/// out[i] = decode(codes[i]) as bf16 (exact: E4M3 values are bf16 values).
cudaError_t launchDequantizeFp8(const uint8_t *codes, __nv_bfloat16 *out,
                                int64_t n, cudaStream_t stream);
/// y[r, j] = y[r, j] * scales[j] (+ bias[j]); bias may be null.
cudaError_t launchScaleColumns(float *y, const float *scales, const float *bias,
                               int64_t rows, int64_t cols, cudaStream_t stream);
/// Per-token E4M3: scales[r] = max_i |x[r, i]| / 448 and codes[r, i] =
/// encodeFp8(x[r, i] / scales[r], kE4M3) (runtime/support/Fp8.h) for x
/// [rows, k] fp32 or bf16 (X, its values as fp32); an all-zero row gets
/// scale 0 and codes 0.
template <typename X>
cudaError_t launchQuantizeRowsFp8(const X *x, int64_t rows, int64_t k,
                                  uint8_t *codes, float *scales,
                                  cudaStream_t stream);
/// y[r, j] = y[r, j] * (rowScales[r] * colScales[j]) (+ bias[j]); bias may be
/// null.
cudaError_t launchScaleRowsColumns(float *y, const float *rowScales,
                                   const float *colScales, const float *bias,
                                   int64_t rows, int64_t cols,
                                   cudaStream_t stream);

/// The most rows of x the Hopper skinny GEMM takes (two wgmma N halves).
inline constexpr int64_t kSkinnyGemmSm90MaxRows = 256;
/// Whether launchSkinnyGemmSm90 takes T x N x K: T in [1,
/// kSkinnyGemmSm90MaxRows], N a multiple of 128, K of 64, and the build has
/// its sm_90a code and the current device (compute capability 9.0) runs it.
bool skinnyGemmSm90Supports(int64_t t, int64_t n, int64_t k);
/// The K splits that fill the current device's SMs with one wave of CTAs
/// (N / 128 of them a split), each split at least 8 K tiles of 64.
int64_t skinnyGemmSm90Splits(int64_t t, int64_t n, int64_t k);
/// The fp32 partial sums `splits` > 1 need in the workspace.
size_t skinnyGemmSm90WorkspaceBytes(int64_t t, int64_t n, int64_t splits);
/// y[t, j] = sum_i x[t, i] * w[j, i] (+ bias[j]) (+ residual[t, j]), all bf16,
/// fp32 accumulation, y rounded once after the bias and the residual (each
/// may be null; the residual must not overlap y) on the Hopper tensor cores
/// (kernels/SkinnyGemmSm90.cu: weights and activations swapped, K cut into
/// `splits` ranges whose partial sums go to `workspace` and are added in
/// split order; clusters of `cluster` CTAs, 1, 2 or 4 dividing N / 128,
/// share their x tiles by TMA multicast). x, w, y and the residual 16-byte
/// aligned; an error where skinnyGemmSm90Supports is false, the cluster
/// does not divide the row tiles or the workspace is short.
cudaError_t launchSkinnyGemmSm90(const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                                 const __nv_bfloat16 *bias,
                                 const __nv_bfloat16 *residual,
                                 __nv_bfloat16 *y, int64_t t, int64_t n,
                                 int64_t k, int64_t splits, int64_t cluster,
                                 float *workspace, size_t workspaceBytes,
                                 cudaStream_t stream);

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_GEMVKERNELS_H
