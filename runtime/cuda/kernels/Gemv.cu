//===- Gemv.cu - Skinny GEMMs and fp8 weight decoding ----------*- CUDA -*-===//
//
// y[T,N] = x[T,K] * w[N,K]^T (+ bias) for a few rows T (decode), streaming
// the weights once at the memory roofline; Gemm.h says which kernel runs
// when. The CUDA-core kernel (T = 1..8, fastest at T = 1 and 2):
//
//   grid   one block of kWarps warps per kWarps * R output rows; each warp
//          owns R consecutive rows and walks their whole K, so no split-K
//          and no atomics (the sums are deterministic).
//   x      read straight from the activation (fp32 or bf16, widened to
//          fp32) into shared memory in K-chunks of kChunkFloats / T
//          columns, shared by the block's warps.
//   w      16-byte loads that skip L1 (8 bf16 or 16 E4M3 codes per lane),
//          U groups of R rows issued before the first use; fp8 codes are
//          decoded in registers by cvt e4m3x2 -> f16x2 (exact: every E4M3
//          value is a half), then scaled per row after the sum.
//
// A K that is not a multiple of the vector width (or a misaligned pointer)
// takes the same kernel with element-wise loads. The tensor-core kernel
// (T = 1..8 on mma.sync; fp8 at T >= 2) has its own section below. Both
// store y = sum * rowScale + bias[row] (+ residual[t, row]) as fp32 or
// rounded once to bf16 (GemvOutput; the bias and residual in y's type).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/GemvKernels.h"
#include "runtime/cuda/kernels/DependentLaunch.cuh"
#include "runtime/cuda/kernels/Elements.cuh"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <type_traits>

namespace infer::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
/// Shared memory for the x chunk: 32 KiB, so several blocks fit an SM.
constexpr int kChunkFloats = 8192;
/// Chunk widths are multiples of one warp's vector span of fp8 codes.
constexpr int kChunkAlign = 32 * 16;

/// The weight element types: bf16, or E4M3 codes (uint8_t).
template <typename W> struct WeightTraits;
template <> struct WeightTraits<__nv_bfloat16> {
  static constexpr int kVec = 8;
  __device__ static float one(__nv_bfloat16 w) { return __bfloat162float(w); }
  /// The 8 values of a 16-byte load.
  __device__ static void decode(const uint4 &v, float *out) {
    const __nv_bfloat162 *pairs = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(pairs[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
};
template <> struct WeightTraits<uint8_t> {
  static constexpr int kVec = 16;
  __device__ static float one(uint8_t code) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
  }
  /// The 16 values of a 16-byte load.
  __device__ static void decode(const uint4 &v, float *out) {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const __half2 pair(__nv_cvt_fp8x2_to_halfraw2(
            static_cast<__nv_fp8x2_storage_t>(words[i] >> (16 * h)),
            __NV_E4M3));
        const float2 f = __half22float2(pair);
        out[4 * i + 2 * h] = f.x;
        out[4 * i + 2 * h + 1] = f.y;
      }
    }
  }
};

__device__ __forceinline__ uint4 loadStreaming(const void *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/// y, its bias and its residual (y's layout), fp32 or bf16: the type is a
/// launch parameter rather than a template one, since each output element
/// is stored once.
struct GemvOutput {
  void *y = nullptr;
  const void *bias = nullptr;
  const void *residual = nullptr;
  bool bf16 = false;

  __device__ float biasAt(int row) const {
    if (!bias)
      return 0.0f;
    return bf16
               ? __bfloat162float(static_cast<const __nv_bfloat16 *>(bias)[row])
               : static_cast<const float *>(bias)[row];
  }
  /// Stores `value` (the row's sum, scaled, plus its bias) plus the
  /// residual at `index`, rounded once.
  __device__ void store(int64_t index, float value) const {
    if (bf16) {
      if (residual)
        value += __bfloat162float(
            static_cast<const __nv_bfloat16 *>(residual)[index]);
      static_cast<__nv_bfloat16 *>(y)[index] = __float2bfloat16_rn(value);
    } else {
      if (residual)
        value += static_cast<const float *>(residual)[index];
      static_cast<float *>(y)[index] = value;
    }
  }
};

template <typename Y>
GemvOutput gemvOutput(Y *y, const Y *bias, const Y *residual) {
  static_assert(std::is_same_v<Y, float> || std::is_same_v<Y, __nv_bfloat16>,
                "the skinny kernels write fp32 or bf16");
  return GemvOutput{y, bias, residual, std::is_same_v<Y, __nv_bfloat16>};
}

/// Four consecutive x values as fp32 (16-byte fp32 or 8-byte bf16 loads).
__device__ __forceinline__ float4 loadX4(const float *p) {
  return *reinterpret_cast<const float4 *>(p);
}
__device__ __forceinline__ float4 loadX4(const __nv_bfloat16 *p) {
  const uint2 raw = *reinterpret_cast<const uint2 *>(p);
  const float2 lo =
      __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&raw.x));
  const float2 hi =
      __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&raw.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

/// Columns of x per shared-memory chunk at T rows.
__host__ __device__ constexpr int chunkColumns(int t) {
  return kChunkFloats / t / kChunkAlign * kChunkAlign;
}

template <typename X, typename W, int T, int R, bool kVector>
__global__ void __launch_bounds__(kThreads)
    gemvKernel(const X *__restrict__ x, const W *__restrict__ w,
               const float *__restrict__ rowScales, GemvOutput out, int n,
               int k) {
  using Traits = WeightTraits<W>;
  constexpr int E = Traits::kVec;
  // Loads of 16 bytes in flight per lane before the first use.
  constexpr int U = R >= 4 ? 1 : 4 / R;
  constexpr int kc = chunkColumns(T);
  __shared__ __align__(16) float xs[T * kc];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * kWarps + warp) * R;
  const W *rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    rows[r] = w + static_cast<int64_t>(min(row0 + r, n - 1)) * k;

  waitForPriorGrids();
  allowDependentGrids();

  float acc[R][T];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t)
      acc[r][t] = 0.0f;

  for (int c0 = 0; c0 < k; c0 += kc) {
    const int cn = min(kc, k - c0);
    __syncthreads();
    if constexpr (kVector) {
      // Stored as [T][E / 4][kc / E] float4s: quad q of lane group g at
      // (q, g), so a warp's reads of one q are consecutive (no conflicts).
      const int quads = cn / 4;
      for (int i = threadIdx.x; i < T * quads; i += kThreads) {
        const int t = i / quads, q = i % quads;
        reinterpret_cast<float4 *>(
            xs)[(t * (E / 4) + q % (E / 4)) * (kc / E) + q / (E / 4)] =
            loadX4(x + int64_t(t) * k + c0 + 4 * q);
      }
    } else {
      for (int i = threadIdx.x; i < T * cn; i += kThreads) {
        const int t = i / cn, j = i % cn;
        xs[t * kc + j] = toFloat(x[int64_t(t) * k + c0 + j]);
      }
    }
    __syncthreads();

    if constexpr (kVector) {
      const int groups = cn / E;
      for (int g0 = lane; g0 < groups; g0 += 32 * U) {
        uint4 wv[U][R];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int r = 0; r < R; ++r)
            wv[u][r] = g0 + 32 * u < groups
                           ? loadStreaming(rows[r] + c0 + (g0 + 32 * u) * E)
                           : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int g = g0 + 32 * u;
          if (g >= groups)
            break;
          float wf[R][E];
#pragma unroll
          for (int r = 0; r < R; ++r)
            Traits::decode(wv[u][r], wf[r]);
            // x four columns at a time, so that few of it live in registers.
#pragma unroll
          for (int q = 0; q < E / 4; ++q)
#pragma unroll
            for (int t = 0; t < T; ++t) {
              const float4 f = reinterpret_cast<const float4 *>(
                  xs)[(t * (E / 4) + q) * (kc / E) + g];
#pragma unroll
              for (int r = 0; r < R; ++r) {
                acc[r][t] = fmaf(wf[r][4 * q], f.x, acc[r][t]);
                acc[r][t] = fmaf(wf[r][4 * q + 1], f.y, acc[r][t]);
                acc[r][t] = fmaf(wf[r][4 * q + 2], f.z, acc[r][t]);
                acc[r][t] = fmaf(wf[r][4 * q + 3], f.w, acc[r][t]);
              }
            }
        }
      }
    } else {
      for (int j = lane; j < cn; j += 32) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float wf = Traits::one(rows[r][c0 + j]);
#pragma unroll
          for (int t = 0; t < T; ++t)
            acc[r][t] = fmaf(wf, xs[t * kc + j], acc[r][t]);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], offset);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int row = row0 + r;
    if (row >= n)
      continue;
    const float scale = rowScales ? rowScales[row] : 1.0f;
    const float b = out.biasAt(row);
#pragma unroll
    for (int t = 0; t < T; ++t)
      if (lane == (r * T + t) % 32)
        out.store(int64_t(t) * n + row, acc[r][t] * scale + b);
  }
}

//===----------------------------------------------------------------------===//
// Tensor-core skinny GEMM (2 <= T <= 8)
//===----------------------------------------------------------------------===//
//
// At a few rows the CUDA-core kernel runs out of FMA throughput (T FMAs per
// weight element, twice per byte for fp8). This one feeds mma.sync
// m16n8k16 (bf16 in, fp32 accumulate): the weights are the 16-row A
// operand, x (bf16; an fp32 x rounded to bf16, as cuBLASLt reads it) the
// 8-column B operand with the columns past T zero. A lane's 16-byte load of row
// g holds E consecutive k; the mma's k slots are a permutation of them that A
// and B share (the sum does not care about the order):
//
//   step s, lane q = lane % 4:  slots {2q, 2q+1, 2q+8, 2q+9}
//                               = k0 + q*E + 4s + {0, 1, 2, 3}
//
// so a bf16 load is already two steps of A registers, an fp8 load decodes
// into four, and B is 4 consecutive x values per step. Each block owns
// kMmaRows rows; its warps take interleaved K slices and sum their
// accumulators in shared memory in a fixed order (deterministic).

constexpr int kMmaWarps = 8;
constexpr int kMmaTiles = 2; // m16 tiles per warp: 32 rows per block
constexpr int kMmaRows = 16 * kMmaTiles;

__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t *>(&v);
}

/// x[0 .. 4) as the two bf16x2 registers of a B step (an fp32 x rounded).
__device__ __forceinline__ uint2 loadB(const float *p) {
  const float4 v = *reinterpret_cast<const float4 *>(p);
  return make_uint2(packBf16(v.x, v.y), packBf16(v.z, v.w));
}
__device__ __forceinline__ uint2 loadB(const __nv_bfloat16 *p) {
  return *reinterpret_cast<const uint2 *>(p);
}

/// Two E4M3 codes (low 16 bits) as a bf16x2 register (exact).
__device__ __forceinline__ uint32_t fp8PairToBf16(uint32_t bits) {
  const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(bits & 0xffffu), __NV_E4M3)));
  return packBf16(f.x, f.y);
}

__device__ __forceinline__ void mma16816(float *c, uint32_t a0, uint32_t a1,
                                         uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <typename X, typename W>
__global__ void __launch_bounds__(kMmaWarps * 32)
    gemvMmaKernel(const X *__restrict__ x, const W *__restrict__ w,
                  const float *__restrict__ rowScales, GemvOutput out, int t,
                  int n, int k) {
  waitForPriorGrids();
  allowDependentGrids();
  constexpr int E = WeightTraits<W>::kVec;
  constexpr int KI = 4 * E; // k per warp iteration
  constexpr int U = 2;      // iterations loaded before the first use
  __shared__ float partial[kMmaWarps][kMmaRows][8];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int rowBase = blockIdx.x * kMmaRows;
  // This lane's rows: g and g + 8 of each tile.
  const W *rows[kMmaTiles][2];
#pragma unroll
  for (int m = 0; m < kMmaTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      rows[m][h] =
          w +
          static_cast<int64_t>(min(rowBase + 16 * m + 8 * h + g, n - 1)) * k +
          q * E;
  // B: x row g (zero past T).
  const X *xr = x + static_cast<int64_t>(min(g, t - 1)) * k + q * E;
  const bool xLive = g < t;

  float acc[kMmaTiles][4] = {};
  const int iterations = k / KI;
  for (int i0 = warp; i0 < iterations; i0 += kMmaWarps * U) {
    uint4 wv[U][kMmaTiles][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + kMmaWarps * u;
#pragma unroll
      for (int m = 0; m < kMmaTiles; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wv[u][m][h] = i < iterations
                            ? loadStreaming(rows[m][h] + int64_t(i) * KI)
                            : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + kMmaWarps * u;
      if (i >= iterations)
        break;
#pragma unroll
      for (int s = 0; s < E / 4; ++s) {
        const uint2 b =
            xLive ? loadB(xr + int64_t(i) * KI + 4 * s) : make_uint2(0, 0);
        const uint32_t b0 = b.x, b1 = b.y;
#pragma unroll
        for (int m = 0; m < kMmaTiles; ++m) {
          uint32_t a[2][2]; // [row g / g+8][slots 2q.. / 2q+8..]
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t words[4] = {wv[u][m][h].x, wv[u][m][h].y,
                                       wv[u][m][h].z, wv[u][m][h].w};
            if constexpr (E == 8) {
              a[h][0] = words[2 * s];
              a[h][1] = words[2 * s + 1];
            } else {
              a[h][0] = fp8PairToBf16(words[s]);
              a[h][1] = fp8PairToBf16(words[s] >> 16);
            }
          }
          mma16816(acc[m], a[0][0], a[1][0], a[0][1], a[1][1], b0, b1);
        }
      }
    }
  }
  // C: rows g / g+8 of the tile, columns (x rows) 2q, 2q+1.
#pragma unroll
  for (int m = 0; m < kMmaTiles; ++m) {
    partial[warp][16 * m + g][2 * q] = acc[m][0];
    partial[warp][16 * m + g][2 * q + 1] = acc[m][1];
    partial[warp][16 * m + g + 8][2 * q] = acc[m][2];
    partial[warp][16 * m + g + 8][2 * q + 1] = acc[m][3];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kMmaRows * 8; e += kMmaWarps * 32) {
    const int r = e / 8, c = e % 8, row = rowBase + r;
    if (c >= t || row >= n)
      continue;
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < kMmaWarps; ++v)
      sum += partial[v][r][c];
    const float scale = rowScales ? rowScales[row] : 1.0f;
    out.store(int64_t(c) * n + row, sum * scale + out.biasAt(row));
  }
}

template <typename X, typename W>
cudaError_t launchMma(const X *x, const W *w, const float *rowScales,
                      GemvOutput out, int64_t t, int64_t n, int64_t k,
                      cudaStream_t stream) {
  if (t <= 0 || n <= 0)
    return cudaSuccess;
  if (t > 8 || n > INT32_MAX || k > INT32_MAX / 8 ||
      k % (4 * WeightTraits<W>::kVec) != 0 ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return cudaErrorInvalidValue;
  const int blocks = static_cast<int>((n + kMmaRows - 1) / kMmaRows);
  return launchDependent(gemvMmaKernel<X, W>, blocks, kMmaWarps * 32, 0, stream,
                         x, w, rowScales, out, static_cast<int>(t),
                         static_cast<int>(n), static_cast<int>(k));
}

template <typename X, typename W, int T>
cudaError_t launchT(const X *x, const W *w, const float *rowScales,
                    GemvOutput out, int n, int k, cudaStream_t stream) {
  // Two rows per warp from T = 3 halve the x reads from shared memory.
  constexpr int R = T <= 2 ? 1 : 2;
  const int blocks = (n + kWarps * R - 1) / (kWarps * R);
  const bool vector = k % WeightTraits<W>::kVec == 0 &&
                      reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(w) % 16 == 0;
  return launchDependent(
      vector ? gemvKernel<X, W, T, R, true> : gemvKernel<X, W, T, R, false>,
      blocks, kThreads, 0, stream, x, w, rowScales, out, n, k);
}

template <typename X, typename W>
cudaError_t launchGemvTyped(const X *x, const W *w, const float *rowScales,
                            GemvOutput out, int64_t t, int64_t n, int64_t k,
                            cudaStream_t stream) {
  if (t <= 0 || n <= 0)
    return cudaSuccess;
  if (n > INT32_MAX || k > INT32_MAX / kGemvMaxRows)
    return cudaErrorInvalidValue;
  const int ni = static_cast<int>(n), ki = static_cast<int>(k);
  switch (t) {
  case 1:
    return launchT<X, W, 1>(x, w, rowScales, out, ni, ki, stream);
  case 2:
    return launchT<X, W, 2>(x, w, rowScales, out, ni, ki, stream);
  case 3:
    return launchT<X, W, 3>(x, w, rowScales, out, ni, ki, stream);
  case 4:
    return launchT<X, W, 4>(x, w, rowScales, out, ni, ki, stream);
  case 5:
    return launchT<X, W, 5>(x, w, rowScales, out, ni, ki, stream);
  case 6:
    return launchT<X, W, 6>(x, w, rowScales, out, ni, ki, stream);
  case 7:
    return launchT<X, W, 7>(x, w, rowScales, out, ni, ki, stream);
  case 8:
    return launchT<X, W, 8>(x, w, rowScales, out, ni, ki, stream);
  default:
    return cudaErrorInvalidValue;
  }
}

__global__ void dequantizeKernel(const uint8_t *__restrict__ codes,
                                 __nv_bfloat16 *__restrict__ out, int64_t n) {
  const int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * 8;
  if (i + 8 <= n && reinterpret_cast<uintptr_t>(codes + i) % 8 == 0) {
    const uint2 v = *reinterpret_cast<const uint2 *>(codes + i);
    const uint32_t words[2] = {v.x, v.y};
    __align__(16) __nv_bfloat16 b[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>(words[j / 2] >> (16 * (j % 2))),
          __NV_E4M3)));
      b[2 * j] = __float2bfloat16_rn(f.x);
      b[2 * j + 1] = __float2bfloat16_rn(f.y);
    }
    if (reinterpret_cast<uintptr_t>(out + i) % 16 == 0) {
      *reinterpret_cast<uint4 *>(out + i) = *reinterpret_cast<uint4 *>(b);
      return;
    }
    for (int j = 0; j < 8; ++j)
      out[i + j] = b[j];
    return;
  }
  for (int64_t j = i; j < min(n, i + 8); ++j)
    out[j] = __float2bfloat16_rn(WeightTraits<uint8_t>::one(codes[j]));
}

__global__ void scaleColumnsKernel(float *__restrict__ y,
                                   const float *__restrict__ scales,
                                   const float *__restrict__ bias, int64_t rows,
                                   int64_t cols) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * cols)
    return;
  const int64_t j = i % cols;
  y[i] = y[i] * scales[j] + (bias ? bias[j] : 0.0f);
}

} // namespace

template <typename X, typename Y>
cudaError_t launchGemv(const X *x, const __nv_bfloat16 *w,
                       const NonDeduced<Y> *bias, Y *y, int64_t t, int64_t n,
                       int64_t k, cudaStream_t stream,
                       const NonDeduced<Y> *residual) {
  return launchGemvTyped(x, w, nullptr, gemvOutput(y, bias, residual), t, n, k,
                         stream);
}

template <typename X, typename Y>
cudaError_t launchGemvFp8(const X *x, const uint8_t *codes,
                          const float *rowScales, const NonDeduced<Y> *bias,
                          Y *y, int64_t t, int64_t n, int64_t k,
                          cudaStream_t stream, const NonDeduced<Y> *residual) {
  return launchGemvTyped(x, codes, rowScales, gemvOutput(y, bias, residual), t,
                         n, k, stream);
}

bool gemvMmaSupports(int64_t t, int64_t k, bool fp8) {
  return t >= 1 && t <= 8 && k % (fp8 ? 64 : 32) == 0;
}

template <typename X, typename Y>
cudaError_t launchGemvMma(const X *x, const __nv_bfloat16 *w,
                          const NonDeduced<Y> *bias, Y *y, int64_t t, int64_t n,
                          int64_t k, cudaStream_t stream,
                          const NonDeduced<Y> *residual) {
  return launchMma(x, w, nullptr, gemvOutput(y, bias, residual), t, n, k,
                   stream);
}

template <typename X, typename Y>
cudaError_t launchGemvMmaFp8(const X *x, const uint8_t *codes,
                             const float *rowScales, const NonDeduced<Y> *bias,
                             Y *y, int64_t t, int64_t n, int64_t k,
                             cudaStream_t stream,
                             const NonDeduced<Y> *residual) {
  return launchMma(x, codes, rowScales, gemvOutput(y, bias, residual), t, n, k,
                   stream);
}

cudaError_t launchDequantizeFp8(const uint8_t *codes, __nv_bfloat16 *out,
                                int64_t n, cudaStream_t stream) {
  if (n <= 0)
    return cudaSuccess;
  const int64_t threads = (n + 7) / 8;
  dequantizeKernel<<<(threads + 255) / 256, 256, 0, stream>>>(codes, out, n);
  return cudaGetLastError();
}

cudaError_t launchScaleColumns(float *y, const float *scales, const float *bias,
                               int64_t rows, int64_t cols,
                               cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n <= 0)
    return cudaSuccess;
  scaleColumnsKernel<<<(n + 255) / 256, 256, 0, stream>>>(y, scales, bias, rows,
                                                          cols);
  return cudaGetLastError();
}

// fp32 x and y (the fp32 backend), bf16 x with bf16 y (activations) or fp32
// y (logits).
#define INFER_GEMV_KERNELS(X, Y)                                               \
  template cudaError_t launchGemv<X, Y>(const X *, const __nv_bfloat16 *,      \
                                        const Y *, Y *, int64_t, int64_t,      \
                                        int64_t, cudaStream_t, const Y *);     \
  template cudaError_t launchGemvFp8<X, Y>(                                    \
      const X *, const uint8_t *, const float *, const Y *, Y *, int64_t,      \
      int64_t, int64_t, cudaStream_t, const Y *);                              \
  template cudaError_t launchGemvMma<X, Y>(const X *, const __nv_bfloat16 *,   \
                                           const Y *, Y *, int64_t, int64_t,   \
                                           int64_t, cudaStream_t, const Y *);  \
  template cudaError_t launchGemvMmaFp8<X, Y>(                                 \
      const X *, const uint8_t *, const float *, const Y *, Y *, int64_t,      \
      int64_t, int64_t, cudaStream_t, const Y *);
INFER_GEMV_KERNELS(float, float)
INFER_GEMV_KERNELS(__nv_bfloat16, __nv_bfloat16)
INFER_GEMV_KERNELS(__nv_bfloat16, float)
#undef INFER_GEMV_KERNELS

} // namespace infer::cuda
