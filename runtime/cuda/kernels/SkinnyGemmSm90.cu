//===- SkinnyGemmSm90.cu - Hopper GEMM of a few hundred rows --------------===//
//
// y[T, N] = x[T, K] * w[N, K]^T (+ bias[N]) (+ residual[T, N]), bf16 x, w
// and y, fp32 accumulation, each element of y rounded once from the fp32
// sum plus the bias plus the residual: the decode batches (T <= 256) whose
// products cuBLASLt runs at 1.2-2.2 TB/s of weights on an H100 (Llama-3-8B
// at T = 256: infer-gemm-search), neither at the copy bandwidth nor at the
// tensor cores' rate. Measured, it is 1-34% slower than cuBLASLt's first
// choice on those shapes at T = 32-256 (bench/RESULTS.md), so Gemm times
// it as a tuning candidate only when asked (Gemm::setSkinnyCandidates).
//
// The operands are swapped (y^T = w x^T): wgmma's M runs over weight rows,
// its N over tokens, so a CTA owns 128 weight rows (two consumer
// warpgroups of 64) and every token (one or two halves of 128, a 64 x 128
// fp32 accumulator each per warpgroup), and the K range of its split: K is
// cut into `splits` ranges so that N / 128 x splits CTAs fill the SMs. A
// producer warp streams 64-wide K tiles of w (128 rows) and x (128 or 256
// rows, past T zero-filled by the TMA unit) through a ring of stages in
// the 128-byte swizzle wgmma reads (Sm90.cuh), full/empty mbarriers between
// it and the consumers, which keep one stage's wgmma group in flight.
// Every CTA reads all of x's K tile, 1-2x the bytes of its w tile; in a
// cluster of 2 or 4 CTAs (adjacent row tiles, one split) each loads a
// share of the x boxes and the TMA unit multicasts them to all, so a stage
// is free once every CTA's consumers have released it. That L2 traffic is
// not what bounds it (clusters gain nothing): ncu at T = 256 shows shared
// memory (74% busy: every 64 weight rows' n = 128 wgmma reads the token
// tile again) and wgmma waits.
//
// One split writes y itself (bias and residual added to the fp32 sum, one
// rounding). More write fp32 partial sums [splits][T][N] into `partials`,
// and a second kernel adds them in split order (the same sum every run),
// then the bias and the residual, and rounds once.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/GemvKernels.h"
#include "runtime/cuda/kernels/CurrentDevice.h"
#include "runtime/cuda/kernels/Sm90.cuh"

#include <cuda_bf16.h>

namespace infer::cuda {

namespace {

using namespace sm90;

/// Weight rows of a CTA (two consumer warpgroups of 64).
constexpr int kRowsPerCta = 128;
/// Tokens of one accumulator: wgmma's N.
constexpr int kTokensPerHalf = 128;
/// K elements of a stage: one 128-byte swizzled row of bf16.
constexpr int kKTile = 64;
/// One operand tile of a stage: 128 rows of 128 bytes.
constexpr int kTileBytes = 128 * 128;
/// Rows of x in one TMA box: the unit the CTAs of a cluster share out.
constexpr int kXBoxRows = 64;
constexpr int kThreads = 384;
constexpr int kConsumerWarps = 8;

template <int kHalves> struct Layout {
  /// A stage: the w tile, then `kHalves` x tiles.
  static constexpr int kStageBytes = kTileBytes * (1 + kHalves);
  static constexpr int kStages = kHalves == 1 ? 6 : 4;
  static constexpr int kBarriers = kStages * kStageBytes;
  /// With the slack to align the dynamic buffer to 1024 bytes.
  static constexpr int kBytes = kBarriers + 2 * kStages * 8 + 1024;
};

struct Params {
  const __nv_bfloat16 *bias;
  const __nv_bfloat16 *residual;
  __nv_bfloat16 *y;
  float *partials;
  int t, n, kTiles, splits;
};

template <int kHalves, int kCluster>
__global__ void __launch_bounds__(kThreads, 1)
    skinnyGemmSm90Kernel(const __grid_constant__ CUtensorMap wMap,
                         const __grid_constant__ CUtensorMap xMap,
                         const Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<kHalves>;
  constexpr int kStages = L::kStages;
  extern __shared__ uint8_t sharedRaw[];
  uint8_t *smem = reinterpret_cast<uint8_t *>(
      (reinterpret_cast<uintptr_t>(sharedRaw) + 1023) & ~uintptr_t(1023));
  uint64_t *full = reinterpret_cast<uint64_t *>(smem + L::kBarriers);
  uint64_t *empty = full + kStages;
  const int rowTile = blockIdx.x, split = blockIdx.y;
  const int kBegin = split * p.kTiles / p.splits;
  const int kEnd = (split + 1) * p.kTiles / p.splits;
  const uint32_t rank = kCluster > 1 ? clusterRank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrierInit(&full[s], 1);
      // A stage's x boxes come from every CTA of the cluster, so each
      // stage is free again once every CTA's consumers are done with it.
      mbarrierInit(&empty[s], kConsumerWarps * kCluster);
    }
    fenceBarrierInit();
  }
  if (threadIdx.x == 32) {
    prefetchTensorMap(&wMap);
    prefetchTensorMap(&xMap);
  }
  // The cluster's barriers are initialized before any CTA arrives on or
  // multicasts into another's.
  if constexpr (kCluster > 1)
    clusterSync();
  else
    __syncthreads();

  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  if (warpgroup == 0) {
    lowerRegisters<40>();
    if (threadIdx.x == 0) {
      for (int kt = kBegin, i = 0; kt < kEnd; ++kt, ++i) {
        const int stage = i % kStages;
        // A fresh barrier is in phase 0: the first round's waits return.
        mbarrierWait(&empty[stage], ((i / kStages) & 1) ^ 1);
        uint8_t *base = smem + stage * L::kStageBytes;
        // Every byte of the stage, the other CTAs' multicasts included.
        mbarrierArriveExpectTx(&full[stage], L::kStageBytes);
        tmaLoad2d(base, &wMap, &full[stage], kt * kKTile,
                  rowTile * kRowsPerCta);
        // The x tiles in boxes of kXBoxRows, box b loaded by the CTA of
        // rank b % kCluster into every CTA of the cluster.
#pragma unroll
        for (int b = 0; b < kHalves * kTokensPerHalf / kXBoxRows; ++b) {
          if (b % kCluster != static_cast<int>(rank))
            continue;
          uint8_t *dst = base + kTileBytes + b * kXBoxRows * 128;
          if constexpr (kCluster > 1)
            tmaLoad2dMulticast(dst, &xMap, &full[stage], kt * kKTile,
                               b * kXBoxRows, (1u << kCluster) - 1);
          else
            tmaLoad2d(dst, &xMap, &full[stage], kt * kKTile, b * kXBoxRows);
        }
      }
    }
  } else {
    raiseRegisters<232>();
    const int wg = warpgroup - 1;
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    float d[kHalves][64];
#pragma unroll
    for (int h = 0; h < kHalves; ++h)
#pragma unroll
      for (int i = 0; i < 64; ++i)
        d[h][i] = 0.0f;
    const uint32_t smemBase = smemAddress(smem);
    int previous = -1;
    auto release = [&](int stage) {
      __syncwarp();
      if (lane != 0)
        return;
      if constexpr (kCluster > 1) {
#pragma unroll
        for (int r = 0; r < kCluster; ++r)
          mbarrierArriveCluster(&empty[stage], r);
      } else {
        mbarrierArrive(&empty[stage]);
      }
    };
    for (int kt = kBegin, i = 0; kt < kEnd; ++kt, ++i) {
      const int stage = i % kStages;
      mbarrierWait(&full[stage], (i / kStages) & 1);
      const uint32_t base = smemBase + stage * L::kStageBytes;
      const uint64_t a = matrixDescriptor(base + wg * 64 * 128, 16, 1024);
      wgmmaFence();
#pragma unroll
      for (int k = 0; k < kKTile / 16; ++k)
#pragma unroll
        for (int h = 0; h < kHalves; ++h)
          wgmmaSS128(
              d[h], advance(a, k * 32),
              matrixDescriptor(base + kTileBytes * (1 + h) + k * 32, 16, 1024),
              1);
      wgmmaCommit();
      // The previous stage's group is done once at most this one is
      // pending.
      wgmmaWait<1>();
      if (previous >= 0)
        release(previous);
      previous = stage;
    }
    wgmmaWait<0>();
#pragma unroll
    for (int h = 0; h < kHalves; ++h)
      fenceRegisters(d[h]);

    // Thread (warp, lane) holds d[h][4c + e] = y^T[row 16 warp + lane / 4 +
    // 8 (e / 2)][token 128 h + 8 c + 2 (lane % 4) + e % 2] of its 64 rows.
    const int rowBase = rowTile * kRowsPerCta + wg * 64 + 16 * warp + lane / 4;
    float biasOf[2] = {0.0f, 0.0f};
    if (p.splits == 1 && p.bias)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        biasOf[r] = __bfloat162float(p.bias[rowBase + 8 * r]);
#pragma unroll
    for (int h = 0; h < kHalves; ++h)
#pragma unroll
      for (int c = 0; c < 16; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int token = kTokensPerHalf * h + 8 * c + 2 * (lane % 4) + e % 2;
          if (token >= p.t)
            continue;
          const int row = rowBase + 8 * (e / 2);
          const int64_t at = int64_t(token) * p.n + row;
          if (p.splits > 1) {
            p.partials[int64_t(split) * p.t * p.n + at] = d[h][4 * c + e];
            continue;
          }
          float v = d[h][4 * c + e] + biasOf[e / 2];
          if (p.residual)
            v += __bfloat162float(p.residual[at]);
          p.y[at] = __float2bfloat16(v);
        }
  }
  // No CTA leaves while another may still multicast into it or arrive on
  // its barriers.
  if constexpr (kCluster > 1)
    clusterSync();
#else
  __trap();
#endif
}

/// y = the partial sums in split order + bias + residual, rounded once;
/// four elements a thread.
__global__ void addSplitsKernel(const float *partials, int splits,
                                const __nv_bfloat16 *bias,
                                const __nv_bfloat16 *residual, __nv_bfloat16 *y,
                                int64_t t, int64_t n) {
  const int64_t vectors = t * n / 4, plane = t * n;
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < vectors;
       v += int64_t(gridDim.x) * blockDim.x) {
    const int64_t at = 4 * v;
    float4 sum = *reinterpret_cast<const float4 *>(partials + at);
    for (int s = 1; s < splits; ++s) {
      const float4 part =
          *reinterpret_cast<const float4 *>(partials + s * plane + at);
      sum.x += part.x;
      sum.y += part.y;
      sum.z += part.z;
      sum.w += part.w;
    }
    float out[4] = {sum.x, sum.y, sum.z, sum.w};
    const int64_t col = at % n;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (bias)
        out[i] += __bfloat162float(bias[col + i]);
      if (residual)
        out[i] += __bfloat162float(residual[at + i]);
    }
    __nv_bfloat162 pair[2] = {__floats2bfloat162_rn(out[0], out[1]),
                              __floats2bfloat162_rn(out[2], out[3])};
    *reinterpret_cast<uint2 *>(y + at) = *reinterpret_cast<uint2 *>(pair);
  }
}

/// Whether this build holds the kernel's sm_90a code, the current device
/// runs it, and the driver encodes tensor maps.
bool kernelRuns() {
  static PerDeviceFlag runs;
  return tensorMapEncoder() != nullptr && runs.get([] {
    return deviceRunsSm90a(
        reinterpret_cast<const void *>(skinnyGemmSm90Kernel<1, 1>));
  });
}

bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <int kHalves, int kCluster>
cudaError_t launchVariant(const CUtensorMap &wMap, const CUtensorMap &xMap,
                          const Params &p, cudaStream_t stream) {
  using L = Layout<kHalves>;
  static_assert(L::kBytes <= 227 * 1024, "the stages do not fit");
  auto *kernel = skinnyGemmSm90Kernel<kHalves, kCluster>;
  cudaError_t status = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes);
  if (status != cudaSuccess)
    return status;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(p.n / kRowsPerCta),
                        static_cast<unsigned>(p.splits));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = L::kBytes;
  config.stream = stream;
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = kCluster;
  cluster[0].val.clusterDim.y = 1;
  cluster[0].val.clusterDim.z = 1;
  config.attrs = cluster;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, wMap, xMap, p);
}

template <int kHalves>
cudaError_t launchHalves(const CUtensorMap &wMap, const CUtensorMap &xMap,
                         const Params &p, int64_t cluster,
                         cudaStream_t stream) {
  switch (cluster) {
  case 1:
    return launchVariant<kHalves, 1>(wMap, xMap, p, stream);
  case 2:
    return launchVariant<kHalves, 2>(wMap, xMap, p, stream);
  case 4:
    return launchVariant<kHalves, 4>(wMap, xMap, p, stream);
  default:
    return cudaErrorInvalidValue;
  }
}

} // namespace

bool skinnyGemmSm90Supports(int64_t t, int64_t n, int64_t k) {
  return t >= 1 && t <= kSkinnyGemmSm90MaxRows && n >= kRowsPerCta &&
         n % kRowsPerCta == 0 && n <= INT32_MAX && k >= kKTile &&
         k % kKTile == 0 && k / kKTile <= INT32_MAX && kernelRuns();
}

int64_t skinnyGemmSm90Splits(int64_t t, int64_t n, int64_t k) {
  (void)t;
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
          cudaSuccess)
    sms = 132;
  const int64_t tiles = n / kRowsPerCta, kTiles = k / kKTile;
  // As many splits as keep one wave of CTAs, each with at least 8 K tiles.
  return std::max<int64_t>(
      1, std::min(sms / std::max<int64_t>(tiles, 1), kTiles / 8));
}

size_t skinnyGemmSm90WorkspaceBytes(int64_t t, int64_t n, int64_t splits) {
  return splits > 1 ? size_t(splits) * size_t(t) * size_t(n) * sizeof(float)
                    : 0;
}

cudaError_t launchSkinnyGemmSm90(const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                                 const __nv_bfloat16 *bias,
                                 const __nv_bfloat16 *residual,
                                 __nv_bfloat16 *y, int64_t t, int64_t n,
                                 int64_t k, int64_t splits, int64_t cluster,
                                 float *workspace, size_t workspaceBytes,
                                 cudaStream_t stream) {
  if (t == 0)
    return cudaSuccess;
  if (!skinnyGemmSm90Supports(t, n, k) || splits < 1 || splits > k / kKTile ||
      (cluster != 1 && cluster != 2 && cluster != 4) ||
      (n / kRowsPerCta) % cluster != 0 || !aligned16(x) || !aligned16(w) ||
      !aligned16(y) || (residual && !aligned16(residual)))
    return cudaErrorInvalidValue;
  if (splits > 1 &&
      (!workspace || !aligned16(workspace) ||
       workspaceBytes < skinnyGemmSm90WorkspaceBytes(t, n, splits)))
    return cudaErrorInvalidValue;
  CUtensorMap wMap, xMap;
  cudaError_t status = encodeRowsMap(&wMap, w, n, k, kRowsPerCta);
  if (status == cudaSuccess)
    status = encodeRowsMap(&xMap, x, t, k, kXBoxRows);
  if (status != cudaSuccess)
    return status;
  Params p;
  p.bias = bias;
  p.residual = residual;
  p.y = y;
  p.partials = workspace;
  p.t = static_cast<int>(t);
  p.n = static_cast<int>(n);
  p.kTiles = static_cast<int>(k / kKTile);
  p.splits = static_cast<int>(splits);
  status = t <= kTokensPerHalf
               ? launchHalves<1>(wMap, xMap, p, cluster, stream)
               : launchHalves<2>(wMap, xMap, p, cluster, stream);
  if (status != cudaSuccess || splits == 1)
    return status;
  const int64_t vectors = t * n / 4;
  const int blocks =
      static_cast<int>(std::min<int64_t>((vectors + 255) / 256, 4096));
  addSplitsKernel<<<blocks, 256, 0, stream>>>(
      workspace, static_cast<int>(splits), bias, residual, y, t, n);
  return cudaGetLastError();
}

} // namespace infer::cuda
