//===- QuantizingKernels.h - Norms that quantize for fp8 GEMMs --*- C++ -*-===//
//
// rms_norm and silu_mul of bf16 rows that also write their output's per-token
// E4M3 codes and scales for the fp8 GEMM that reads it (Gemm.h: fp8Operand,
// linearQuantized), bit for bit what launchQuantizeRowsFp8 (GemvKernels.h)
// would write from the stored bf16 output (kernels/E4M3Rows.cuh). The bf16
// output is written as launchRmsNorm / launchSiluMul (Kernels.h) write it,
// or, where y is null (the GEMM reads only the codes: Gemm::
// fp8OperandSuffices), kept in the block's shared memory and not stored:
// the same codes and scales without the row's store and read-back. Kernels
// in kernels/Elementwise.cu.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_QUANTIZINGKERNELS_H
#define INFER_RUNTIME_CUDA_QUANTIZINGKERNELS_H

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace infer::cuda {

/// The widest row a producer quantizes without storing it (null y): 96 KiB
/// of bf16 in shared memory, two blocks an SM.
inline constexpr int64_t kMaxUnstoredRowElements = 48 * 1024;

/// launchRmsNorm of bf16 rows [rows, h] that also writes the E4M3 codes
/// [rows, h] and scales [rows] of y (one block per row: the row's amax over
/// the stored bf16 values). `codes` 16-byte aligned; y may be null for h
/// <= kMaxUnstoredRowElements (cudaErrorInvalidValue otherwise).
template <typename P>
cudaError_t launchRmsNormFp8(const __nv_bfloat16 *x, const P *w,
                             __nv_bfloat16 *y, uint8_t *codes, float *scales,
                             int64_t rows, int64_t h, float epsilon,
                             cudaStream_t stream, float weightOffset = 0.0f);
/// launchSiluMul of bf16 rows (gate and up rows gateLd and upLd elements
/// apart) that also writes the E4M3 codes [rows, cols] and scales [rows] of
/// y, as launchRmsNormFp8 does.
cudaError_t launchSiluMulFp8(const __nv_bfloat16 *gate, int64_t gateLd,
                             const __nv_bfloat16 *up, int64_t upLd,
                             __nv_bfloat16 *y, uint8_t *codes, float *scales,
                             int64_t rows, int64_t cols, cudaStream_t stream);

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_QUANTIZINGKERNELS_H
