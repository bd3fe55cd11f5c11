//===- RopeFrequency.cuh - A token's rotary inverse frequency --*- CUDA -*-===//
//
// The inverse frequency a rope kernel rotates pair j of a token by, shared
// by Rope.cu and CacheWrite.cu: the table's entry (longrope: the second
// table from position longFrom on), or for a dynamic NTK rope the one of
// the token's sequence, whose base follows the sequence's length after the
// step (plan::dynamicRopeInverseFrequencies, with the same fp32 and double
// operations); the factors a block takes from it (ropeFactors), the
// rotation of a pair by them (ropeRotate) and the 16-byte packs of the
// packed paths (RopeItem: Rope.cu's and rope_qkv_cache_write's queries).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_KERNELS_ROPEFREQUENCY_CUH
#define INFER_RUNTIME_CUDA_KERNELS_ROPEFREQUENCY_CUH

#include "runtime/cuda/Kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

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

/// Pair (x1, x2) of a rotate-half rope turned by the factors (c, s): .x =
/// x1 c - x2 s, .y = x2 c + x1 s, each product, difference and sum rounded
/// on its own as the CPU reference computes them. Written out, not left to
/// FMA contraction, whose choice of the product to fuse the compiler makes
/// anew in each kernel: the element and packed paths of Rope.cu and
/// CacheWrite.cu (bf16 and f16 rows) give the CPU's fp32 values bit for bit.
__device__ __forceinline__ float2 ropeRotate(float x1, float x2, float c,
                                             float s) {
  return make_float2(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)),
                     __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
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

/// Eight bf16 or f16 elements as one 16-byte access, element 0 in the low
/// half of .x: the packed paths keep rows as raw words and convert them
/// with these, where a Pack<T, 8> held across the factors' computation came
/// out of the compiler as eight 2-byte stores.
constexpr int kRopePack = 8;

template <typename T>
__device__ __forceinline__ void unpackFloats(uint4 words,
                                             float (&out)[kRopePack]) {
  static_assert(sizeof(T) == 2, "packs of bf16 or f16");
  const uint32_t w[4] = {words.x, words.y, words.z, words.w};
#pragma unroll
  for (int e = 0; e < kRopePack; ++e) {
    const auto bits = static_cast<unsigned short>(w[e / 2] >> (16 * (e % 2)));
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
      out[e] = __bfloat162float(__ushort_as_bfloat16(bits));
    else
      out[e] = __half2float(__ushort_as_half(bits));
  }
}

/// The words of `in` each rounded once to T (fromFloat's rounding).
template <typename T>
__device__ __forceinline__ uint4 packFloats(const float (&in)[kRopePack]) {
  static_assert(sizeof(T) == 2, "packs of bf16 or f16");
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t bits[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>)
        bits[h] = __bfloat16_as_ushort(__float2bfloat16_rn(in[2 * i + h]));
      else
        bits[h] = __half_as_ushort(__float2half_rn(in[2 * i + h]));
    }
    w[i] = bits[0] | bits[1] << 16;
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/// One item of a packed rope (Rope.cu's file comment) as raw words: the
/// items of a token's heads are numbered head by head, packsPerHead =
/// (headDim - half) / kRopePack each.
struct RopeItem {
  uint4 x1, x2;   // x2: the partners of x1 (unused by a copied pack)
  int64_t at = 0; // element offset of x1 in the token's row and in y's
  int pair = -1;  // the first pair of a rotated pack; -1: copied
};

template <typename T>
__device__ __forceinline__ RopeItem loadRopeItem(const T *xt, int i,
                                                 int packsPerHead, int headDim,
                                                 int half) {
  const int h = i / packsPerHead, j = (i - h * packsPerHead) * kRopePack;
  RopeItem item;
  item.pair = j < half ? j : -1;
  item.at = int64_t(h) * headDim + (j < half ? j : j + half);
  item.x1 = *reinterpret_cast<const uint4 *>(xt + item.at);
  item.x2 = j < half ? *reinterpret_cast<const uint4 *>(xt + item.at + half)
                     : make_uint4(0, 0, 0, 0);
  return item;
}

/// Stores `item` into the token's result row yt: a rotated pack turned by
/// the token's factors ([half] cos, [half] sin), a copied one as it is.
template <typename T>
__device__ __forceinline__ void storeRopeItem(T *yt, const RopeItem &item,
                                              const float *factors, int half) {
  if (item.pair >= 0) {
    const int f = item.pair;
    float x1[kRopePack], x2[kRopePack], y1[kRopePack], y2[kRopePack];
    unpackFloats<T>(item.x1, x1);
    unpackFloats<T>(item.x2, x2);
#pragma unroll
    for (int e = 0; e < kRopePack; ++e) {
      const float2 r =
          ropeRotate(x1[e], x2[e], factors[f + e], factors[half + f + e]);
      y1[e] = r.x;
      y2[e] = r.y;
    }
    __stwb(reinterpret_cast<uint4 *>(yt + item.at), packFloats<T>(y1));
    __stwb(reinterpret_cast<uint4 *>(yt + item.at + half), packFloats<T>(y2));
  } else {
    __stwb(reinterpret_cast<uint4 *>(yt + item.at), item.x1);
  }
}

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_KERNELS_ROPEFREQUENCY_CUH
