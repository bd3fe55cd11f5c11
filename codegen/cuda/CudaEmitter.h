//===- CudaEmitter.h - CUDA C++ for the fused steps of a plan ---*- C++ -*-===//
//
// Every distinct body of a plan's `fused` steps (runtime/plan/FusedBody.h),
// with the element types of its operands and results, becomes one extern "C"
// kernel: one pointer parameter per operand and per result, of its value's
// element type (float, __nv_bfloat16 or __half), then the element count, and
// the body as straight-line fp32 code on registers, so nothing is
// interpreted at run time:
//
//   fused(g, u, r) : bf16  body "gelu_tanh(0); mul(3, 1); add(4, 2)"
//                          yields [5]
//     =>
//   __device__ __forceinline__ void fused_0_element(float r0, float r1,
//                                                   float r2, float &y0) {
//     const float r3 = inferGeluTanh(r0);
//     const float r4 = r3 * r1;
//     const float r5 = r4 + r2;
//     y0 = r5;
//   }
//   extern "C" __global__ void fused_0(const __nv_bfloat16 *x0,
//                                      const __nv_bfloat16 *x1,
//                                      const __nv_bfloat16 *x2,
//                                      __nv_bfloat16 *y0, long long n)
//
// Each operand element is converted to float as it is loaded and each result
// rounded to nearest even as it is stored (inferLoad / inferStore, per
// element type); the registers in between are never rounded, as `infer.fused`
// specifies. The kernel is a grid-stride loop over four elements at a time
// (a float4, or 8 bytes of 16-bit values) when every pointer is aligned for
// that and n is a multiple of 4, else over single elements. The math is the
// fp32 math of the CUDA backend's kernels (expf, tanhf; no fast-math), which
// matches the CPU backend's interpreter to a few ulp. Steps with the same
// body and element types share one kernel. Nothing here needs MLIR: the GPU
// tests emit kernels for random bodies on machines without the compiler.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_CODEGEN_CUDA_CUDAEMITTER_H
#define INFER_CODEGEN_CUDA_CUDAEMITTER_H

#include "runtime/plan/FusedBody.h"
#include "runtime/plan/Plan.h"

#include <string>
#include <vector>

namespace infer::compiler {

/// Threads per block the generated kernels are written for (their
/// __launch_bounds__); Plan.h documents it for the runtime.
inline constexpr int kFusedKernelThreads = 256;

struct FusedKernel {
  std::string name;
  plan::FusedBody body;
  /// Element types of the operands and of the results, in order: f32, bf16
  /// or f16.
  std::vector<plan::DType> inputTypes;
  std::vector<plan::DType> outputTypes;
  /// The steps it computes ("rank 0 step 12"), for the source's comments.
  std::vector<std::string> users;
};

/// The device functions and the kernel of one body.
std::string emitFusedKernel(const FusedKernel &kernel);

/// One translation unit: a header comment, the headers and element accesses
/// of the element types the kernels use, the shared device functions of the
/// ops, then every kernel.
std::string emitCudaUnit(const std::vector<FusedKernel> &kernels);

/// Sets the attribute "kernel" of every `fused` step of every rank to the
/// name of the kernel of its body and its operands' and results' dtypes
/// (fused_0, fused_1, ... in order of first use; equal ones share a kernel)
/// and returns those kernels. A step whose operands or results are not f32,
/// bf16 or f16 values of its rank is an error.
StatusOr<std::vector<FusedKernel>> assignFusedKernels(plan::Plan &plan);

} // namespace infer::compiler

#endif // INFER_CODEGEN_CUDA_CUDAEMITTER_H
