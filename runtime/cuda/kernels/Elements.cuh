//===- Elements.cuh - Activation element types on the device ---*- CUDA -*-===//
//
// Loads and stores of the activation element types (fp32, bf16, f16) as
// fp32, shared by the kernels that read and write activations: a load
// widens exactly, a store rounds once to nearest even (fp32: no rounding).
// Packs are the 16-byte vectors of the memory-bound kernels:
//
//   Pack<T, N>   N elements of T, 16-byte aligned, N * sizeof(T) a multiple
//                of 16 (one or two 16-byte accesses)
//   kPack<T...>  16 / the smallest sizeof: 4 for fp32 alone, 8 as soon as
//                a 2-byte type takes part, so every operand's pack is whole
//                16-byte accesses
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_KERNELS_ELEMENTS_CUH
#define INFER_RUNTIME_CUDA_KERNELS_ELEMENTS_CUH

#include "runtime/cuda/Kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

namespace infer::cuda {

__device__ __forceinline__ float toFloat(float v) { return v; }
__device__ __forceinline__ float toFloat(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float toFloat(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T fromFloat(float v);
template <> __device__ __forceinline__ float fromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half fromFloat<__half>(float v) {
  return __float2half_rn(v);
}

/// Element i of a tensor of runtime type `type` (FusedProgram's operands).
__device__ __forceinline__ float loadAs(const void *p, ElementType type,
                                        int64_t i) {
  switch (type) {
  case ElementType::kBf16:
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  case ElementType::kF16:
    return __half2float(static_cast<const __half *>(p)[i]);
  default:
    return static_cast<const float *>(p)[i];
  }
}
__device__ __forceinline__ void storeAs(void *p, ElementType type, int64_t i,
                                        float v) {
  switch (type) {
  case ElementType::kBf16:
    static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
    break;
  case ElementType::kF16:
    static_cast<__half *>(p)[i] = __float2half_rn(v);
    break;
  default:
    static_cast<float *>(p)[i] = v;
    break;
  }
}

template <typename T, int N> struct alignas(16) Pack {
  static_assert(N * sizeof(T) % 16 == 0, "a pack is whole 16-byte vectors");
  T v[N];
};

/// Elements per pack of kernels over these types (see the file comment).
template <typename... Ts>
inline constexpr int kPack = 16 / static_cast<int>(std::min({sizeof(Ts)...}));

/// Whether p can be read or written in packs (16-byte aligned).
__host__ __device__ inline bool packAligned(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

/// p[0 .. N) as fp32; N == 1 is a plain element access (any alignment).
template <int N, typename T>
__device__ __forceinline__ void loadFloats(const T *p, float (&out)[N]) {
  if constexpr (N == 1) {
    out[0] = toFloat(*p);
  } else {
    const Pack<T, N> pack = *reinterpret_cast<const Pack<T, N> *>(p);
#pragma unroll
    for (int i = 0; i < N; ++i)
      out[i] = toFloat(pack.v[i]);
  }
}

/// p[0 .. N) = in, each rounded once to T.
template <int N, typename T>
__device__ __forceinline__ void storeFloats(T *p, const float (&in)[N]) {
  if constexpr (N == 1) {
    *p = fromFloat<T>(in[0]);
  } else {
    Pack<T, N> pack;
#pragma unroll
    for (int i = 0; i < N; ++i)
      pack.v[i] = fromFloat<T>(in[i]);
    *reinterpret_cast<Pack<T, N> *>(p) = pack;
  }
}

/// p[0 .. N) copied as they are (no conversion).
template <int N, typename T>
__device__ __forceinline__ void copyElements(const T *from, T *to) {
  if constexpr (N == 1)
    *to = *from;
  else
    *reinterpret_cast<Pack<T, N> *>(to) =
        *reinterpret_cast<const Pack<T, N> *>(from);
}

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_KERNELS_ELEMENTS_CUH
