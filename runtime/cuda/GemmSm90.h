//===- GemmSm90.h - Hopper GEMM with a SwiGLU epilogue ----------*- C++ -*-===//
//
// y = x * w^T on sm_90a (a persistent TMA + wgmma kernel), bf16 operands,
// fp32 accumulation, bf16 y, with one of two epilogues:
//   kStore   y[T, N]: the product rounded once.
//   kSwiGlu  y[T, N / 2] = silu(x w_gate^T) * (x w_up^T), where w = [w_gate;
//            w_up] (gate rows first, as infer.concat_weights stacks them)
//            and N / 2 is a multiple of 128: a CTA's weight tile is 128
//            (or 112: gemmSm90SwiGluTileRows) gate rows and the same up
//            rows, so one thread's
//            accumulators hold both of an output element; gate and up never
//            leave registers and the result is rounded once from fp32.
// What infer.linear_swiglu runs on the CUDA backend (the gate/up projection
// and silu_mul of a Llama MLP in one kernel).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_GEMMSM90_H
#define INFER_RUNTIME_CUDA_GEMMSM90_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace infer::cuda {

enum class GemmSm90Epilogue { kStore, kSwiGlu };

/// Whether the current device and build run launchGemmSm90 for this shape:
/// an sm_90a device (the first one asked about: the answer is kept), N a
/// multiple of 256, K of 64, T >= 1, and the tile counts within int
/// (kSwiGlu as kStore: N / 2 a multiple of 128).
bool gemmSm90Supports(int64_t t, int64_t n, int64_t k);

/// y = x[T, K] * w[N, K]^T through `epilogue` (see the file comment); x, w
/// and y 16-byte aligned, row-major and dense (y's rows N or N / 2 long).
/// An error where gemmSm90Supports is false.
cudaError_t launchGemmSm90(const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                           __nv_bfloat16 *y, int64_t t, int64_t n, int64_t k,
                           GemmSm90Epilogue epilogue, cudaStream_t stream);

/// The weight rows of launchGemmSm90's kSwiGlu tiles for T x N: 256 (128
/// gate + 128 up rows), or 224 (112 + 112, where N / 2 is a multiple of
/// 112) where that leaves the last wave of tiles over the SMs fuller, as
/// for Llama-3-8B's gate/up at up to 512 tokens on an H100 (bench/RESULTS.md).
/// INFER_SWIGLU_TILE_ROWS=224|256|auto sets the choice at start;
/// setSwiGluTileRows(224, 256 or 0: auto) after (224 stays 256 where N / 2
/// is not a multiple of 112).
int gemmSm90SwiGluTileRows(int64_t t, int64_t n);
void setSwiGluTileRows(int rows);

/// The fewest rows for which linear_swiglu runs launchGemmSm90's SwiGLU
/// epilogue; smaller batches take the linear's GEMM (cuBLASLt, the GEMV
/// kernels) and silu_mul. INFER_SWIGLU_MIN_ROWS sets it at start ("off":
/// never); setSwiGluKernelMinRows after, for the steps run after it (a
/// captured CUDA graph replays the path it captured).
int64_t swiGluKernelMinRows();
void setSwiGluKernelMinRows(int64_t rows);

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_GEMMSM90_H
