//===- GemmSm90.cu - Hopper GEMM with a SwiGLU epilogue -------------------===//
//
// y = x[T, K] * w[N, K]^T (GemmSm90.h). A persistent, warp-specialized
// kernel, one CTA an SM: a CTA owns tiles of 128 tokens x 256 weight rows;
// a producer warp streams 64-wide K tiles of x (128 rows, past T
// zero-filled by the TMA unit) and w (256 rows: with kSwiGlu 128 gate rows
// and the same 128 up rows) through a ring of 4 stages in the 128-byte
// swizzle wgmma reads (Sm90.cuh), full/empty mbarriers between it and two
// consumer warpgroups, each owning 64 tokens x 256 rows (m64n256k16, 128
// fp32 accumulators a thread) and keeping one stage's wgmma group in
// flight. Tiles go out in groups of 16 token tiles, the tokens fastest
// within a group, so the CTAs at work share a few weight tiles and the
// group's x in L2.
//
// The producer runs ahead into the next tile while the consumers write
// their accumulators: thread (warp, lane) holds d[4c + e] = y[token 16 warp
// + lane / 4 + 8 (e / 2)][row 8c + 2 (lane % 4) + e % 2], so with the gate
// rows in chunks 0-15 and the up rows in chunks 16-31 the gate and up
// values of an output element are the same thread's (d[4c + e] and
// d[4 (c + 16) + e]). A warpgroup writes y in boxes of 64 tokens x 64
// columns through its own 8 KiB buffer in the 128-byte swizzle (one 4-byte
// store a thread per 16-byte chunk: no bank conflicts), then one thread
// hands the box to the TMA unit, which stores it asynchronously and clips
// rows past T.
//
// kSwiGlu also runs in tiles of 224 weight rows (112 gate + 112 up,
// m64n224k16; y in boxes of 56 columns, rows of 112 bytes unswizzled)
// where N / 2 is a multiple of 112 and that leaves the last wave of tiles
// fuller (gemmSm90SwiGluTileRows): Llama-3-8B's gate/up at 256 tokens is
// 224 tiles of 256 rows on 132 SMs, two waves of which the second is 70%
// full, or 256 tiles of 224 rows, two waves of 12.5% less work a tile
// (108.4 against 104.1 us on an H100; 179.6 against 161.4 at 512 tokens).
//
// Measured (infer-swiglu-gemm, infer-gemm-search; bench/RESULTS.md), the
// plain product is not ahead of cuBLASLt's first choice on Llama-3-8B's
// other shapes: 0-5% behind from 1900 to 8192 rows in bursts on an H100
// (26% for q/k/v at 1024; tenth session), 4-17% behind sustained at
// 1925-5357 rows on an H200 (sixteenth), so only linear_swiglu runs it.
// The SwiGLU epilogue saves the [T, 2I] product's write and read and the
// silu_mul pass: 5-17% over cuBLASLt + silu_mul at the board's power limit
// from 256 to 8192 rows (H100). Clusters of two CTAs sharing the weight
// tile by TMA multicast ran at half the rate (not kept); direct stores from
// registers lost 10% to the store.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/GemmSm90.h"
#include "runtime/cuda/kernels/CurrentDevice.h"
#include "runtime/cuda/kernels/Sm90.cuh"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace infer::cuda {

namespace {

using namespace sm90;

constexpr int kTokensPerTile = 128;
constexpr int kRowsPerTile = 256;
constexpr int kKTile = 64;
constexpr int kStages = 4;
/// x tile (128 rows) then w tile (kRows rows) of 128 bytes each.
constexpr int kXBytes = kTokensPerTile * 128;
/// The shared-memory layout of a kernel with tiles of kRows weight rows:
/// 256, or 224 (kSwiGlu only: 112 gate and 112 up rows, y in boxes of 56
/// columns, unswizzled).
template <int kRows> struct Layout {
  static constexpr int kWBytes = kRows * 128;
  static constexpr int kStageBytes = kXBytes + kWBytes;
  /// A consumer warpgroup's epilogue buffer: 64 tokens x one box of y.
  static constexpr int kOutBytes = 64 * 128;
  static constexpr int kOutOffset = kStages * kStageBytes;
  static constexpr int kBarriers = kOutOffset + 2 * kOutBytes;
  static constexpr int kSmemBytes = kBarriers + 2 * kStages * 8 + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "the stages do not fit");
};
constexpr int kThreads = 384;
constexpr int kConsumerWarps = 8;
/// Token tiles a group of tiles spans: the CTAs at work share its x (16 MB
/// at K = 4096) and a few weight tiles in L2.
constexpr int kGroupTokenTiles = 16;
/// swiGluKernelMinRows' default: Llama-3-8B's gate/up on the H100
/// (infer-swiglu-gemm, bench/RESULTS.md): the epilogue kernel is 2-4%
/// slower than cuBLASLt's GEMV-like choices and silu_mul at 1-16 rows, even
/// at 32 and 1-9% faster from 64 to 8192.
constexpr int64_t kDefaultSwiGluMinRows = 32;
/// The SwiGLU tile of 224 rows: 112 gate and 112 up rows.
constexpr int kNarrowRows = 224;

struct Params {
  int t, n, kTiles, tokenTiles, rowTiles, units;
};

__device__ __forceinline__ float silu(float v) {
  return __fdividef(v, 1.0f + __expf(-v));
}

__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t *>(&pair);
}

/// Unit `unit`'s tiles: groups of kGroupTokenTiles token tiles, each over
/// every row tile with the tokens fastest.
__device__ __forceinline__ void tileOf(const Params &p, int unit,
                                       int &tokenTile, int &rowTile) {
  const int perGroup = kGroupTokenTiles * p.rowTiles;
  const int group = unit / perGroup, within = unit % perGroup;
  const int tiles =
      min(kGroupTokenTiles, p.tokenTiles - group * kGroupTokenTiles);
  tokenTile = group * kGroupTokenTiles + within % tiles;
  rowTile = within / tiles;
}

template <GemmSm90Epilogue kEpilogue, int kRows>
__global__ void __launch_bounds__(kThreads, 1)
    gemmSm90Kernel(const __grid_constant__ CUtensorMap wMap,
                   const __grid_constant__ CUtensorMap xMap,
                   const __grid_constant__ CUtensorMap yMap, const Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(
      kRows == kRowsPerTile ||
          (kRows == kNarrowRows && kEpilogue == GemmSm90Epilogue::kSwiGlu),
      "224-row tiles are the SwiGLU epilogue's");
  using L = Layout<kRows>;
  constexpr int kWBytes = L::kWBytes, kStageBytes = L::kStageBytes,
                kOutBytes = L::kOutBytes, kOutOffset = L::kOutOffset,
                kBarriers = L::kBarriers;
  /// Accumulators a thread: 64 tokens x kRows of a warpgroup.
  constexpr int kAcc = kRows / 2;
  extern __shared__ uint8_t sharedRaw[];
  uint8_t *smem = reinterpret_cast<uint8_t *>(
      (reinterpret_cast<uintptr_t>(sharedRaw) + 1023) & ~uintptr_t(1023));
  uint64_t *full = reinterpret_cast<uint64_t *>(smem + kBarriers);
  uint64_t *empty = full + kStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrierInit(&full[s], 1);
      mbarrierInit(&empty[s], kConsumerWarps);
    }
    fenceBarrierInit();
  }
  if (threadIdx.x == 32) {
    prefetchTensorMap(&wMap);
    prefetchTensorMap(&xMap);
    prefetchTensorMap(&yMap);
  }
  __syncthreads();

  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  if (warpgroup == 0) {
    lowerRegisters<40>();
    if (threadIdx.x == 0) {
      int i = 0;
      for (int unit = blockIdx.x; unit < p.units; unit += gridDim.x) {
        int tokenTile, rowTile;
        tileOf(p, unit, tokenTile, rowTile);
        for (int kt = 0; kt < p.kTiles; ++kt, ++i) {
          const int stage = i % kStages;
          // A fresh barrier is in phase 0: the first round's waits return.
          mbarrierWait(&empty[stage], ((i / kStages) & 1) ^ 1);
          uint8_t *base = smem + stage * kStageBytes;
          mbarrierArriveExpectTx(&full[stage], kStageBytes);
          tmaLoad2d(base, &xMap, &full[stage], kt * kKTile,
                    tokenTile * kTokensPerTile);
          if constexpr (kEpilogue == GemmSm90Epilogue::kSwiGlu) {
            // kRows / 2 gate rows, then the same up rows (n / 2 further).
            tmaLoad2d(base + kXBytes, &wMap, &full[stage], kt * kKTile,
                      rowTile * (kRows / 2));
            tmaLoad2d(base + kXBytes + kWBytes / 2, &wMap, &full[stage],
                      kt * kKTile, p.n / 2 + rowTile * (kRows / 2));
          } else {
            tmaLoad2d(base + kXBytes, &wMap, &full[stage], kt * kKTile,
                      rowTile * kRows);
          }
        }
      }
    }
  } else {
    raiseRegisters<232>();
    const int wg = warpgroup - 1;
    const int local = threadIdx.x % 128;
    const int warp = local / 32, lane = threadIdx.x % 32;
    const uint32_t smemBase = smemAddress(smem);
    uint8_t *out = smem + kOutOffset + wg * kOutBytes;
    const uint32_t outBase = smemAddress(out);
    float d[kAcc];
    int i = 0;
    for (int unit = blockIdx.x; unit < p.units; unit += gridDim.x) {
      int tokenTile, rowTile;
      tileOf(p, unit, tokenTile, rowTile);
      int previous = -1;
      for (int kt = 0; kt < p.kTiles; ++kt, ++i) {
        const int stage = i % kStages;
        mbarrierWait(&full[stage], (i / kStages) & 1);
        const uint32_t base = smemBase + stage * kStageBytes;
        const uint64_t a = matrixDescriptor(base + wg * 64 * 128, 16, 1024);
        const uint64_t b = matrixDescriptor(base + kXBytes, 16, 1024);
        wgmmaFence();
#pragma unroll
        for (int k = 0; k < kKTile / 16; ++k) {
          if constexpr (kRows == kNarrowRows)
            wgmmaSS224(d, advance(a, k * 32), advance(b, k * 32),
                       kt > 0 || k > 0);
          else
            wgmmaSS256(d, advance(a, k * 32), advance(b, k * 32),
                       kt > 0 || k > 0);
        }
        wgmmaCommit();
        // The previous stage's group is done once at most this one is
        // pending.
        wgmmaWait<1>();
        if (previous >= 0 && lane == 0)
          mbarrierArrive(&empty[previous]);
        previous = stage;
      }
      wgmmaWait<0>();
      fenceRegisters(d);
      if (lane == 0)
        mbarrierArrive(&empty[previous]);

      // y in boxes of 64 tokens x 64 columns through the warpgroup's
      // buffer, in the 128-byte swizzle of yMap: thread (warp, lane) writes
      // rows 16 warp + lane / 4 (+ 8), 4 bytes of each 16-byte chunk. With
      // 224-row tiles, boxes of 56 columns in rows of 112 bytes, unswizzled
      // (a warp's 8 rows x 4 lanes still fall in 32 banks: 28 row + 4 chunk
      // + lane % 4 words).
      constexpr bool kNarrow = kRows == kNarrowRows;
      constexpr int kBoxChunks = kNarrow ? 7 : 8;
      constexpr int kBoxes =
          (kEpilogue == GemmSm90Epilogue::kSwiGlu ? kRows / 2 : kRows) /
          (8 * kBoxChunks);
      /// Chunks of 8 gate rows: the up rows' chunks follow.
      constexpr int kGateChunks = kRows / 16;
#pragma unroll
      for (int box = 0; box < kBoxes; ++box) {
        // The buffer is free once the previous box's store has read it.
        if (local == 0)
          bulkWaitRead<0>();
        namedBarrier(1 + wg, 128);
#pragma unroll
        for (int chunk = 0; chunk < kBoxChunks; ++chunk)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int row = 16 * warp + lane / 4 + 8 * r;
            uint32_t v;
            if constexpr (kEpilogue == GemmSm90Epilogue::kSwiGlu) {
              const float *gate = d + 4 * (kBoxChunks * box + chunk) + 2 * r;
              const float *up = gate + 4 * kGateChunks;
              v = packBf16(silu(gate[0]) * up[0], silu(gate[1]) * up[1]);
            } else {
              const float *e = d + 4 * (kBoxChunks * box + chunk) + 2 * r;
              v = packBf16(e[0], e[1]);
            }
            const uint32_t at = kNarrow ? row * (16 * kBoxChunks) + 16 * chunk
                                        : swizzle128(row, chunk);
            storeShared4(outBase + at + 4 * (lane % 4), v);
          }
        fenceProxyAsync();
        namedBarrier(1 + wg, 128);
        if (local == 0) {
          constexpr int kColumns =
              kEpilogue == GemmSm90Epilogue::kSwiGlu ? kRows / 2 : kRows;
          tmaStore2d(&yMap, out, rowTile * kColumns + 8 * kBoxChunks * box,
                     tokenTile * kTokensPerTile + 64 * wg);
          bulkCommit();
        }
      }
    }
    if (local == 0)
      bulkWait<0>();
  }
#else
  __trap();
#endif
}

bool kernelRuns() {
  static PerDeviceFlag runs;
  return tensorMapEncoder() != nullptr && runs.get([] {
    return deviceRunsSm90a(reinterpret_cast<const void *>(
        gemmSm90Kernel<GemmSm90Epilogue::kStore, kRowsPerTile>));
  });
}

/// The SMs of the current device (132 where the query fails).
int multiprocessors() { return currentDeviceSms(132); }

/// The tensor map of y's boxes of 64 rows x `boxCols` (< 64) columns,
/// unswizzled (the 224-row SwiGLU tiles' 56 columns).
cudaError_t encodeNarrowOutMap(CUtensorMap *map, void *y, int64_t rows,
                               int64_t cols, int boxCols) {
  const cuuint64_t globalDim[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t globalStrides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {cuuint32_t(boxCols), 64};
  const cuuint32_t elementStrides[2] = {1, 1};
  const CUresult result = tensorMapEncoder()(
      map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, y, globalDim, globalStrides,
      box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

template <GemmSm90Epilogue kEpilogue, int kRows>
cudaError_t launchEpilogue(const CUtensorMap &wMap, const CUtensorMap &xMap,
                           const CUtensorMap &yMap, const Params &p,
                           cudaStream_t stream) {
  constexpr int kSmemBytes = Layout<kRows>::kSmemBytes;
  auto *kernel = gemmSm90Kernel<kEpilogue, kRows>;
  // Every launch: the attribute is the current device's (tensor-parallel
  // ranks in one process run on several).
  const cudaError_t configured = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (configured != cudaSuccess)
    return configured;
  const int ctas = std::min(p.units, multiprocessors());
  kernel<<<ctas, kThreads, kSmemBytes, stream>>>(wMap, xMap, yMap, p);
  return cudaGetLastError();
}

} // namespace

namespace {

int64_t initialSwiGluMinRows() {
  const char *text = std::getenv("INFER_SWIGLU_MIN_ROWS");
  if (!text || !*text)
    return kDefaultSwiGluMinRows;
  if (std::string(text) == "off")
    return INT64_MAX;
  char *end = nullptr;
  const long long rows = std::strtoll(text, &end, 10);
  if (*end != '\0' || rows < 0) {
    std::fprintf(stderr,
                 "infer: INFER_SWIGLU_MIN_ROWS=%s is not a row count or "
                 "\"off\"; using %lld\n",
                 text, static_cast<long long>(kDefaultSwiGluMinRows));
    return kDefaultSwiGluMinRows;
  }
  return rows;
}

std::atomic<int64_t> &swiGluMinRows() {
  static std::atomic<int64_t> rows{initialSwiGluMinRows()};
  return rows;
}

} // namespace

int64_t swiGluKernelMinRows() { return swiGluMinRows().load(); }

void setSwiGluKernelMinRows(int64_t rows) { swiGluMinRows().store(rows); }

bool gemmSm90Supports(int64_t t, int64_t n, int64_t k) {
  if (t < 1 || t > INT32_MAX - kTokensPerTile || n < kRowsPerTile ||
      n % kRowsPerTile != 0 || n > INT32_MAX || k < kKTile || k % kKTile != 0 ||
      k > INT32_MAX)
    return false;
  const int64_t tiles =
      (t + kTokensPerTile - 1) / kTokensPerTile * (n / kRowsPerTile);
  return tiles <= INT32_MAX && kernelRuns();
}

namespace {

/// setSwiGluTileRows' value (0: chosen per shape).
std::atomic<int> &swiGluTileOverride() {
  static std::atomic<int> rows{[] {
    const char *text = std::getenv("INFER_SWIGLU_TILE_ROWS");
    if (!text || !*text || std::string(text) == "auto")
      return 0;
    if (std::string(text) == "224")
      return kNarrowRows;
    if (std::string(text) == "256")
      return kRowsPerTile;
    std::fprintf(stderr,
                 "infer: INFER_SWIGLU_TILE_ROWS=%s is not 224, 256 or auto; "
                 "choosing per shape\n",
                 text);
    return 0;
  }()};
  return rows;
}

} // namespace

void setSwiGluTileRows(int rows) {
  swiGluTileOverride().store(rows == kNarrowRows || rows == kRowsPerTile ? rows
                                                                         : 0);
}

int gemmSm90SwiGluTileRows(int64_t t, int64_t n) {
  const bool narrowFits = (n / 2) % (kNarrowRows / 2) == 0;
  const int override = swiGluTileOverride().load();
  if (override != 0)
    return override == kNarrowRows && !narrowFits ? kRowsPerTile : override;
  if (!narrowFits)
    return kRowsPerTile;
  // Waves of tiles over the SMs, each as long as its rows: the last wave
  // of few tiles costs a whole one (Llama-3-8B at 256 tokens: 224 tiles of
  // 256 rows in 2 waves on 132 SMs, or 256 of 224 rows in 2 shorter ones).
  const int64_t sms = multiprocessors();
  const int64_t tokenTiles = (t + kTokensPerTile - 1) / kTokensPerTile;
  auto cost = [&](int64_t rows) {
    const int64_t tiles = tokenTiles * (n / rows);
    return (tiles + sms - 1) / sms * rows;
  };
  return cost(kNarrowRows) < cost(kRowsPerTile) ? kNarrowRows : kRowsPerTile;
}

cudaError_t launchGemmSm90(const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                           __nv_bfloat16 *y, int64_t t, int64_t n, int64_t k,
                           GemmSm90Epilogue epilogue, cudaStream_t stream) {
  if (t == 0)
    return cudaSuccess;
  auto aligned16 = [](const void *q) {
    return reinterpret_cast<uintptr_t>(q) % 16 == 0;
  };
  if (!gemmSm90Supports(t, n, k) || !aligned16(x) || !aligned16(w) ||
      !aligned16(y))
    return cudaErrorInvalidValue;
  const bool swiglu = epilogue == GemmSm90Epilogue::kSwiGlu;
  const int rows = swiglu ? gemmSm90SwiGluTileRows(t, n) : kRowsPerTile;
  const bool narrow = rows == kNarrowRows;
  CUtensorMap wMap, xMap, yMap;
  cudaError_t status = encodeRowsMap(&wMap, w, n, k, swiglu ? rows / 2 : rows);
  if (status == cudaSuccess)
    status = encodeRowsMap(&xMap, x, t, k, kTokensPerTile);
  if (status == cudaSuccess)
    status = narrow ? encodeNarrowOutMap(&yMap, y, t, n / 2, kNarrowRows / 4)
                    : encodeRowsMap(&yMap, y, t, swiglu ? n / 2 : n, 64);
  if (status != cudaSuccess)
    return status;
  Params p{};
  p.t = static_cast<int>(t);
  p.n = static_cast<int>(n);
  p.kTiles = static_cast<int>(k / kKTile);
  p.tokenTiles = static_cast<int>((t + kTokensPerTile - 1) / kTokensPerTile);
  p.rowTiles = static_cast<int>(n / rows);
  p.units = p.tokenTiles * p.rowTiles;
  if (!swiglu)
    return launchEpilogue<GemmSm90Epilogue::kStore, kRowsPerTile>(
        wMap, xMap, yMap, p, stream);
  return narrow ? launchEpilogue<GemmSm90Epilogue::kSwiGlu, kNarrowRows>(
                      wMap, xMap, yMap, p, stream)
                : launchEpilogue<GemmSm90Epilogue::kSwiGlu, kRowsPerTile>(
                      wMap, xMap, yMap, p, stream);
}

} // namespace infer::cuda
