//===- Fp8Tolerance.h - The bound of fp8 cuBLASLt's sums --------*- C++ -*-===//
//
// How far fp8 cuBLASLt's product may be from the CPU's linearFp8 on the same
// quantized operands, as a share of the largest |y|: the E4M3 x E4M3 products
// are exact, so only the K-long sums differ. With fast accumulation
// (Gemm::fp8FastAccumulation, the default) the tensor cores keep the partial
// sums in their own accumulator, which holds fewer bits than fp32 (DeepSeek-
// V3's report measured about 14 on Hopper): an H100 gives 2.2e-3 to 4.5e-3 of
// max |y| on Llama-3-8B's shapes (the most at K = 14336), bound 1e-2. With
// INFER_FP8_FAST_ACCUM=0 cuBLASLt promotes them to fp32 registers: 2.2e-4 to
// 3.8e-4, bound 1e-3. Fp8GemmTest and Bf16GemmTest hold the product to it.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_TESTS_RUNTIME_CUDA_FP8TOLERANCE_H
#define INFER_TESTS_RUNTIME_CUDA_FP8TOLERANCE_H

#include "runtime/cuda/Gemm.h"

namespace infer::testing {

/// The bound of the file comment for this process's accumulation mode.
inline double fp8QuantizedTolerance() {
  return cuda::Gemm::fp8FastAccumulation() ? 1e-2 : 1e-3;
}

} // namespace infer::testing

#endif // INFER_TESTS_RUNTIME_CUDA_FP8TOLERANCE_H
