//===- RopeFrequency.cuh - A token's rotary inverse frequency --*- CUDA -*-===//
//
// The inverse frequency a rope kernel rotates pair j of a token by, shared
// by Rope.cu and CacheWrite.cu: the table's entry (longrope: the second
// table from position longFrom on), or for a dynamic NTK rope the one of
// the token's sequence, whose base follows the sequence's length after the
// step (plan::dynamicRopeInverseFrequencies, with the same fp32 and double
// operations).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_KERNELS_ROPEFREQUENCY_CUH
#define INFER_RUNTIME_CUDA_KERNELS_ROPEFREQUENCY_CUH

#include "runtime/cuda/Kernels.h"

#include <cstdint>

namespace infer::cuda {

__device__ inline float ropeInvFreq(const float *invFreq, int j, int rotaryDim,
                                    int longFrom, const int32_t *positions,
                                    int64_t token, const DynamicRope &dynamic) {
  const int half = rotaryDim / 2;
  if (!dynamic.queryStartLoc) {
    const int32_t pos = positions[token];
    return invFreq[longFrom > 0 && pos >= longFrom ? j + half : j];
  }
  // The token's sequence: the last b with queryStartLoc[b] <= token.
  int64_t lo = 0, hi = dynamic.numSeqs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (dynamic.queryStartLoc[mid] <= token)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t seqLen =
      int64_t(positions[dynamic.queryStartLoc[lo + 1] - 1]) + 1;
  float base = dynamic.theta;
  if (seqLen > dynamic.originalMaxPositionEmbeddings) {
    const float factor = dynamic.factor;
    const float ratio =
        factor * static_cast<float>(seqLen) /
            static_cast<float>(dynamic.originalMaxPositionEmbeddings) -
        (factor - 1.0f);
    base = dynamic.theta *
           powf(ratio, static_cast<float>(static_cast<double>(rotaryDim) /
                                          static_cast<double>(rotaryDim - 2)));
  }
  const float exponent =
      static_cast<float>(2 * j) / static_cast<float>(rotaryDim);
  return 1.0f / static_cast<float>(pow(static_cast<double>(base),
                                       static_cast<double>(exponent)));
}

/// The rotation factors of tokens first .. first + count - 1 for a block:
/// factors[tk * rotaryDim + j] = cos and [tk * rotaryDim + half + j] = sin
/// of pair j's angle (position * inv_freq in fp32, the cosine and sine taken
/// in double then rounded, as the CPU reference). Each of the block's
/// threads takes one of the values at a time: the double sin and cos are
/// the rope kernels' costliest instructions.
__device__ inline void ropeFactors(float *factors, int64_t first, int count,
                                   int rotaryDim, const float *invFreq,
                                   int longFrom, const int32_t *positions,
                                   const DynamicRope &dynamic) {
  const int half = rotaryDim / 2;
  for (int i = threadIdx.x; i < count * rotaryDim; i += blockDim.x) {
    const int tk = i / rotaryDim, r = i - tk * rotaryDim;
    const bool sine = r >= half;
    const int j = sine ? r - half : r;
    const int64_t token = first + tk;
    const float angle =
        static_cast<float>(positions[token]) *
        ropeInvFreq(invFreq, j, rotaryDim, longFrom, positions, token, dynamic);
    const double a = static_cast<double>(angle);
    factors[i] = static_cast<float>(sine ? sin(a) : cos(a));
  }
}

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_KERNELS_ROPEFREQUENCY_CUH
