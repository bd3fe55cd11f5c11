//===- KVCache.cuh - Reads and writes of the paged KV pool -----*- CUDA -*-===//
//
// The element offsets of the pool (KVCachePool in runtime/cuda/Kernels.h)
// and the conversions of its element types, shared by the cache writes and
// the attention kernels:
//
//   pool[block][layer][k|v][slot in block][kv_head][head_dim]
//   token at position p of a sequence: block = table[p / bs], slot p % bs
//   E4M3 scale of the head vector at element offset o: scales[o / head_dim]
//
// fp8 codes are made by __nv_cvt_float_to_fp8 with __NV_SATFINITE (round to
// nearest even, finite values past the largest saturate), the function that
// runtime/support/Fp8.h ports to the host for the CPU backend; decoding is
// exact (every fp8 value is a half), and E4M3 values are multiplied by their
// scale in fp32, as cpu::KVPool::decodeHead does.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_KERNELS_KVCACHE_CUH
#define INFER_RUNTIME_CUDA_KERNELS_KVCACHE_CUH

#include "runtime/cuda/Kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace infer::cuda {

/// Element offset of the keys (kv = 0) or values (kv = 1) of `slot`.
__device__ __forceinline__ int64_t kvSlotOffset(CacheDims d, int64_t slot,
                                                int layer, int kv) {
  const int64_t slotElements = int64_t(d.numKVHeads) * d.headDim;
  const int64_t block = slot / d.blockSize, inBlock = slot % d.blockSize;
  return ((block * d.numLayers + layer) * 2 + kv) * d.blockSize * slotElements +
         inBlock * slotElements;
}

/// The index in the pool's E4M3 scales of the key of kv head `kvHead` in
/// slot `inBlock` of pool block `block` (kvSlotOffset's element offset of
/// that head vector over headDim); its value's is blockSize * numKVHeads
/// further on. int32 arguments: no 64-bit divisions.
__device__ __forceinline__ int64_t kvScaleIndex(CacheDims d, int block,
                                                int inBlock, int layer,
                                                int kvHead) {
  return (int64_t(block) * d.numLayers + layer) * 2 * d.blockSize *
             d.numKVHeads +
         inBlock * d.numKVHeads + kvHead;
}

template <KVCacheDtype T> struct KVElement;

template <> struct KVElement<KVCacheDtype::kBf16> {
  using Storage = __nv_bfloat16;
  static constexpr bool kScaled = false;
};
template <> struct KVElement<KVCacheDtype::kF8E5M2> {
  using Storage = uint8_t;
  static constexpr bool kScaled = false;
  static constexpr __nv_fp8_interpretation_t kFormat = __NV_E5M2;
};
template <> struct KVElement<KVCacheDtype::kF8E4M3> {
  using Storage = uint8_t;
  static constexpr bool kScaled = true;
  static constexpr __nv_fp8_interpretation_t kFormat = __NV_E4M3;
};

/// The fp32 value of element `index` of the pool; `scale` is its head
/// vector's (E4M3) and ignored otherwise.
template <KVCacheDtype T>
__device__ __forceinline__ float loadKV(const void *data, int64_t index,
                                        float scale) {
  if constexpr (T == KVCacheDtype::kBf16) {
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(data)[index]);
  } else {
    const uint8_t code = static_cast<const uint8_t *>(data)[index];
    const float value = __half2float(
        __half(__nv_cvt_fp8_to_halfraw(code, KVElement<T>::kFormat)));
    return KVElement<T>::kScaled ? value * scale : value;
  }
}

/// Decodes the 8 codes in `codes` (little-endian, first element lowest) and
/// multiplies them by `scale` where the format is scaled, unless
/// kApplyScale is false (the caller applies E4M3 scales later).
template <KVCacheDtype T, bool kApplyScale = true>
__device__ __forceinline__ void decodeFp8x8(uint2 codes, float scale,
                                            float (&out)[8]) {
  constexpr bool kScale = KVElement<T>::kScaled && kApplyScale;
  const uint32_t words[2] = {codes.x, codes.y};
#pragma unroll
  for (int w = 0; w < 2; ++w)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 pair = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>(words[w] >> (16 * h)),
          KVElement<T>::kFormat)));
      out[w * 4 + h * 2] = kScale ? pair.x * scale : pair.x;
      out[w * 4 + h * 2 + 1] = kScale ? pair.y * scale : pair.y;
    }
}

/// Elements [offset, offset + 8) of the pool as fp32 (16 bytes of bf16 or 8
/// of fp8, `offset` a multiple of 8); `scale` as loadKV's.
template <KVCacheDtype T>
__device__ __forceinline__ void loadKV8(const void *data, int64_t offset,
                                        float scale, float (&x)[8]) {
  if constexpr (T == KVCacheDtype::kBf16) {
    const uint4 raw = *reinterpret_cast<const uint4 *>(
        static_cast<const __nv_bfloat16 *>(data) + offset);
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __nv_bfloat162 pair;
      *reinterpret_cast<uint32_t *>(&pair) = words[i];
      const float2 f = __bfloat1622float2(pair);
      x[2 * i] = f.x;
      x[2 * i + 1] = f.y;
    }
  } else {
    const uint2 raw = *reinterpret_cast<const uint2 *>(
        static_cast<const uint8_t *>(data) + offset);
    decodeFp8x8<T>(raw, scale, x);
  }
}

/// Streaming plans' key rope (AttentionDims::keyRotaryDim > 0): element e of
/// the unrotated key cached at element offset `key` (head vector start,
/// `scale` its loadKV scale), whose own value `x` the caller loaded, rotated
/// at `position` as ropeKernel (Rope.cu) rotates: rotate-half over
/// keyRotaryDim, angle position * keyRopeInvFreq[f] in fp32, cos and sin in
/// double rounded to float. The partner element is read from the pool, so
/// callers may overwrite their copies in place. Elements past keyRotaryDim
/// are x. Every attention kernel rotates keys through this function.
template <KVCacheDtype T>
__device__ __forceinline__ float ropeKeyElement(const void *data, int64_t key,
                                                float scale,
                                                const AttentionDims &a, int e,
                                                float x, int64_t position) {
  if (e >= a.keyRotaryDim)
    return x;
  const int half = a.keyRotaryDim / 2;
  const int f = e < half ? e : e - half;
  const float angle = static_cast<float>(position) * a.keyRopeInvFreq[f];
  const float c = static_cast<float>(cos(static_cast<double>(angle)));
  const float s = static_cast<float>(sin(static_cast<double>(angle)));
  const float partner = loadKV<T>(data, key + (e < half ? e + half : f), scale);
  const float x1 = e < half ? x : partner, x2 = e < half ? partner : x;
  return e < half ? x1 * c - x2 * s : x2 * c + x1 * s;
}

/// 2^x by one MUFU.EX2 (ex2.approx.ftz.f32). exp2f compiles to the same
/// instruction plus a denormal guard (a compare, two predicated multiplies
/// and their predicate logic: five instructions where one does), which
/// ncu counted as a quarter of the sm_90 prefill's instructions. The two
/// differ only where 2^x is below 2^-126 (flushed to zero here), far under
/// the rounding of a softmax whose largest term is 1; -inf gives 0.
__device__ __forceinline__ float fastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// Attention logit soft-capping (AttentionDims::logitSoftcap) of a score a
/// kernel holds in its own unit (u times the scaled score s: u = log2(e)
/// for base-2 softmaxes, 1 / scale for raw dot products): `cap` is the cap
/// in that unit (u * logitSoftcap) and `inverseCap` its reciprocal, so the
/// result is u * logitSoftcap * tanh(s / logitSoftcap). tanhf, not
/// tanh.approx: its 2^-11 relative error would move capped scores by more
/// than the fp32 softmax's rounding.
__device__ __forceinline__ float softcapScore(float score, float cap,
                                              float inverseCap) {
  return cap * tanhf(score * inverseCap);
}

/// tanh(x) as 1 - 2 / (2^(2 log2(e) x) + 1), x clamped to [-9, 9] (tanh(9)
/// is 1 in fp32; NaN stays NaN), the reciprocal by three Newton steps from
/// the exponent-trick guess (12% off): one MUFU operation (ex2) where tanhf
/// takes two (ex2 and rcp) and tanh.approx one but 2^-11 relative error.
/// The tensor-core prefills, whose softmax exp2 already keeps the MUFU
/// units busy, and the split-KV decode soft-cap through this. Absolute error
/// below 2^-21 (1.8e-7 with an exact exp2 over [-20, 20]): capped scores
/// move by at most cap * 2^-21, far under the bf16 rounding of the
/// prefills' probabilities and within the decode's fp32 test bound.
__device__ __forceinline__ float fastTanh(float x) {
  x = x > 9.0f ? 9.0f : (x < -9.0f ? -9.0f : x);
  const float d = fastExp2(2.8853900817779268f * x) + 1.0f; // [1, 6.6e7]
  float r = __int_as_float(0x7EF311C3 - __float_as_int(d));
#pragma unroll
  for (int i = 0; i < 3; ++i)
    r = fmaf(r, fmaf(-d, r, 1.0f), r);
  return fmaf(-2.0f, r, 1.0f);
}

/// softcapScore through fastTanh (the tensor-core prefills, split-KV decode).
__device__ __forceinline__ float fastSoftcapScore(float score, float cap,
                                                  float inverseCap) {
  return cap * fastTanh(score * inverseCap);
}

/// The fp8 code of `x` (E4M3: of x / scale, the caller passes the quotient).
template <KVCacheDtype T>
__device__ __forceinline__ uint8_t encodeFp8(float x) {
  return static_cast<uint8_t>(
      __nv_cvt_float_to_fp8(x, __NV_SATFINITE, KVElement<T>::kFormat));
}

/// Stores one warp's head vector of `d` elements at element offset `dst` of
/// the pool's `data` (E4M3: its scale into `scales`), lane l holding elements
/// l, l + 32, ... in x (fp32) and `amax` the largest |x| of its elements: bf16
/// rounded, E5M2 codes, or E4M3 codes of x / scale with scale = the vector's
/// amax / 448 (lane 0 stores it).
template <KVCacheDtype T, int kPerLane>
__device__ __forceinline__ void
storeHeadVector(typename KVElement<T>::Storage *data, float *scales,
                int64_t dst, int d, const float (&x)[kPerLane], float amax,
                int lane) {
  if constexpr (T == KVCacheDtype::kBf16) {
#pragma unroll
    for (int r = 0; r < kPerLane; ++r)
      if (lane + 32 * r < d)
        data[dst + lane + 32 * r] = __float2bfloat16_rn(x[r]);
  } else if constexpr (!KVElement<T>::kScaled) {
#pragma unroll
    for (int r = 0; r < kPerLane; ++r)
      if (lane + 32 * r < d)
        data[dst + lane + 32 * r] = encodeFp8<T>(x[r]);
  } else {
    for (int offset = 16; offset > 0; offset /= 2)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    // A head whose scale is 0 (all zeros, or an amax so small that
    // amax / 448 underflows) keeps codes 0: no 0 / 0.
    const float scale = amax / 448.0f;
    if (lane == 0)
      scales[dst / d] = scale;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r)
      if (lane + 32 * r < d)
        data[dst + lane + 32 * r] =
            scale == 0.0f ? uint8_t(0) : encodeFp8<T>(x[r] / scale);
  }
}

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_KERNELS_KVCACHE_CUH
