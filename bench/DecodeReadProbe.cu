//===- DecodeReadProbe.cu - The decode attention's loads, without its math
//-===//
//
// How fast can a GPU stream the paged KV pool in the pattern the tensor-core
// decode kernel reads it (kernels/DecodeAttentionMma.cuh): one warp per
// (sequence, kv head), 4 warps a block, 16 keys a step, lane (g, t) loading
// keys j0 + g and j0 + 8 + g in 16-byte chunks 4 i + t, through the block
// table. The probe keeps the loads and drops the arithmetic (the chunks are
// xor-ed into one word a lane), so its rate is what the access pattern
// allows at a given number of warps an SM and steps in flight:
//
//   slot            the pool as it is: [block][layer][k|v][slot][head][d],
//                   a head's key rows 256 bytes long, numKVHeads * 256
//                   bytes apart
//   head            [block][layer][k|v][head][slot][d]: a head's 16 keys of
//                   a block contiguous (4 KiB at D = 128)
//   Nw              N warps an SM (8, 12, 24): shared memory reserved so that
//                   that many fit (the real kernel: 8, 2 blocks of 210
//                   registers)
//   a1, a2          a1: a step's loads, then its use; a2: step j + 1's
//                   loads before step j's use (the real kernel on bf16
//                   pools)
//
// And the copy engine instead of the lanes' loads: lane 0 of each warp
// hands a step to the TMA unit into a ring of 2 or 4 shared-memory stages
// (rows: 32 1-d copies of 256 bytes; head: two 1-d copies of 4 KiB of the
// head-major layout; boxes: two boxes of a 4-d tensor map of the pool as it
// is), and the lanes read the stage.
//
// Then the boxes' 4-stage ring with what a decode kernel adds, one thing at
// a time: the kernel's reads of a stage (2-way bank conflicts), --work FMAS
// dependent FMAs a lane a step (its arithmetic's latency), and a
// persistent grid whose warps' rings run on from task to task.
//
// Beside them, a plain streaming read of the same bytes (each thread
// 16-byte loads, grid-stride) gives the device's read ceiling in the same
// run. The pool holds each shape's keys and values over enough layers to
// outgrow L2, under 24 GB; a layer is a launch, as in the model.
//
// infer-decode-read-probe [--shapes B:C,...] [--tables sequential,shuffled]
// [--repeats N] [--work FMAS]; bench/RESULTS.md (fifteenth session) has what it
// found on an H100.
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSupport.h"
#include "runtime/cuda/kernels/Sm90.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

/// A CUDA call that must succeed (infer::bench::check names it).
#define CHECK(x) infer::bench::check((x), #x)

constexpr int kD = 128;
constexpr int kHeads = 8;
constexpr int kBlockSize = 16;
constexpr int kWarps = 4;
constexpr int kChunks = kD / 32;

struct Shape {
  int batch, context;
};

/// Element offset of key (kv = 0) or value (kv = 1) of `inBlock` of a head.
template <bool kHeadMajor>
__device__ __forceinline__ int64_t offsetOf(int block, int layer, int layers,
                                            int kv, int inBlock, int head) {
  const int64_t base =
      ((int64_t(block) * layers + layer) * 2 + kv) * kBlockSize * kHeads * kD;
  return kHeadMajor ? base + (int64_t(head) * kBlockSize + inBlock) * kD
                    : base + (int64_t(inBlock) * kHeads + head) * kD;
}

__device__ __forceinline__ uint4 load16(const uint16_t *p) {
  uint4 x;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(x.x), "=r"(x.y), "=r"(x.z), "=r"(x.w)
               : "l"(p));
  return x;
}

struct StepRegs {
  uint4 k[2][kChunks], v[2][kChunks];
};

template <bool kHeadMajor, int kAhead>
__global__ void __launch_bounds__(32 * kWarps)
    probeKernel(const uint16_t *pool, const int32_t *tables, int maxBlocks,
                int context, int layer, int layers, int tasks, uint32_t *sink) {
  extern __shared__ uint8_t reserve[]; // only to cap the warps an SM
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int task = blockIdx.x * kWarps + warp;
  if (task >= tasks)
    return;
  const int seq = task / kHeads, head = task % kHeads;
  const int32_t *table = tables + int64_t(seq) * maxBlocks;
  const int64_t valueDelta = offsetOf<kHeadMajor>(0, 0, layers, 1, 0, 0) -
                             offsetOf<kHeadMajor>(0, 0, layers, 0, 0, 0);
  auto load = [&](int j0, StepRegs &s) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = j0 + 8 * half + g;
      if (j < context) {
        const int64_t o = offsetOf<kHeadMajor>(table[j / kBlockSize], layer,
                                               layers, 0, j % kBlockSize, head);
#pragma unroll
        for (int i = 0; i < kChunks; ++i) {
          s.k[half][i] = load16(pool + o + 8 * (4 * i + t));
          s.v[half][i] = load16(pool + o + valueDelta + 8 * (4 * i + t));
        }
      } else {
#pragma unroll
        for (int i = 0; i < kChunks; ++i)
          s.k[half][i] = s.v[half][i] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  uint32_t acc = 0;
  auto use = [&](const StepRegs &s) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int i = 0; i < kChunks; ++i)
        acc ^= s.k[half][i].x ^ s.k[half][i].y ^ s.k[half][i].z ^
               s.k[half][i].w ^ s.v[half][i].x ^ s.v[half][i].y ^
               s.v[half][i].z ^ s.v[half][i].w;
  };
  StepRegs cur;
  load(0, cur);
  for (int j0 = 0; j0 < context; j0 += 16) {
    if constexpr (kAhead == 2) {
      StepRegs next;
      if (j0 + 16 < context)
        load(j0 + 16, next);
      use(cur);
      cur = next;
    } else {
      use(cur);
      if (j0 + 16 < context)
        load(j0 + 16, cur);
    }
  }
  if (acc == 0x12345678u)
    sink[task] = acc;
}

__global__ void streamKernel(const uint4 *data, int64_t n, uint32_t *sink) {
  uint32_t acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint4 x;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(x.x), "=r"(x.y), "=r"(x.z), "=r"(x.w)
                 : "l"(data + i));
    acc ^= x.x ^ x.y ^ x.z ^ x.w;
  }
  if (acc == 0x12345678u)
    sink[0] = acc;
}

/// The copy engine instead of the lanes' loads: lane 0 of a warp fills a
/// ring of kStages stages (a step's 16 keys and 16 values, 8 KiB at D = 128)
/// on an mbarrier each; the lanes read a stage from shared memory, then the
/// stage takes step j + kStages.
///   kMode 0  1-d bulk copies of each key's and value's 256-byte row (32 a
///            step; the pool as it is)
///   kMode 1  two 1-d bulk copies of 4 KiB (the head-major layout)
///   kMode 2  two boxes of a 4-d tensor map of the pool as it is, 16 rows
///            of one head each
enum BulkMode { kRows = 0, kHeadBlocks = 1, kTensorBoxes = 2 };

__device__ __forceinline__ void bulkCopy(void *dst, const void *src,
                                         uint32_t bytes, uint64_t *bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
               "bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   infer::cuda::sm90::smemAddress(dst)),
               "l"(src), "r"(bytes), "r"(infer::cuda::sm90::smemAddress(bar))
               : "memory");
}

/// A warp's ring of kStages steps in the block's dynamic shared memory (the
/// warps' rings, then their mbarriers).
template <int kStages> struct WarpRing {
  static constexpr int kStepBytes = 2 * 16 * kD * 2;
  uint8_t *stages;
  uint64_t *bars;

  __device__ WarpRing(uint8_t *smem, int warp)
      : stages(smem + warp * kStages * kStepBytes),
        bars(
            reinterpret_cast<uint64_t *>(smem + kWarps * kStages * kStepBytes) +
            warp * kStages) {}
  /// Every lane of the warp, before its first step.
  __device__ void init(int lane) const {
    if (lane == 0) {
      for (int s = 0; s < kStages; ++s)
        infer::cuda::sm90::mbarrierInit(&bars[s], 1);
      infer::cuda::sm90::fenceBarrierInit();
    }
    __syncwarp();
  }
};

template <int kMode, int kStages>
__global__ void __launch_bounds__(32 * kWarps)
    bulkProbeKernel(const __grid_constant__ CUtensorMap map,
                    const uint16_t *pool, const int32_t *tables, int maxBlocks,
                    int context, int layer, int layers, int tasks,
                    uint32_t *sink) {
  constexpr int kStepBytes = 2 * 16 * kD * 2;
  extern __shared__ __align__(1024) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const WarpRing<kStages> warpRing(smem, warp);
  uint8_t *ring = warpRing.stages;
  uint64_t *bars = warpRing.bars;
  const int task = blockIdx.x * kWarps + warp;
  if (task >= tasks)
    return;
  warpRing.init(lane);
  const int seq = task / kHeads, head = task % kHeads;
  const int32_t *table = tables + int64_t(seq) * maxBlocks;
  const int steps = context / 16;
  auto issue = [&](int step, int stage) {
    const int block = table[step]; // 16 keys a step: one pool block
    uint8_t *dst = ring + stage * kStepBytes;
    if constexpr (kMode == kRows) {
      if (lane == 0)
        infer::cuda::sm90::mbarrierArriveExpectTx(&bars[stage], kStepBytes);
      __syncwarp();
      // Lane r copies key row r % 16 (r < 16) or value row r % 16.
      const int kv = lane / 16, slot = lane % 16;
      const int64_t o = offsetOf<false>(block, layer, layers, kv, slot, head);
      bulkCopy(dst + kv * (kStepBytes / 2) + slot * kD * 2, pool + o, kD * 2,
               &bars[stage]);
    } else if (lane == 0) {
      infer::cuda::sm90::mbarrierArriveExpectTx(&bars[stage], kStepBytes);
      for (int kv = 0; kv < 2; ++kv) {
        if constexpr (kMode == kHeadBlocks) {
          const int64_t o = offsetOf<true>(block, layer, layers, kv, 0, head);
          bulkCopy(dst + kv * (kStepBytes / 2), pool + o, kStepBytes / 2,
                   &bars[stage]);
        } else {
          infer::cuda::sm90::tmaLoad4d(dst + kv * (kStepBytes / 2), &map,
                                       &bars[stage], 0, head, 0,
                                       (block * layers + layer) * 2 + kv);
        }
      }
    }
  };
  for (int s = 0; s < kStages && s < steps; ++s)
    issue(s, s);
  uint32_t acc = 0;
  for (int step = 0; step < steps; ++step) {
    const int stage = step % kStages;
    infer::cuda::sm90::mbarrierWait(&bars[stage], (step / kStages) & 1);
    const uint8_t *src = ring + stage * kStepBytes;
#pragma unroll
    for (int i = 0; i < kStepBytes / 16 / 32; ++i) {
      const uint4 x =
          *reinterpret_cast<const uint4 *>(src + (i * 32 + lane) * 16);
      acc ^= x.x ^ x.y ^ x.z ^ x.w;
    }
    __syncwarp();
    if (step + kStages < steps)
      issue(step + kStages, stage);
  }
  if (acc == 0x12345678u)
    sink[task] = acc;
}

/// The tensor-map boxes again, with what a decode kernel adds, to find what
/// keeps one from the boxes' rate:
///   kernelReads  the lanes read the stage as the decode kernel does (lane
///                (g, t): rows 8 h + g, chunks 4 i + t: two rows a quarter
///                warp, a 2-way bank conflict) instead of linearly;
///   work         that many dependent FMAs a lane after each step's reads
///                (the arithmetic's latency, roughly);
///   a grid of fewer warps than tasks: each warp takes task after task and
///                its ring runs on across them (lane 0 gives the copy
///                engine the next task's first steps while this task's last
///                are read), a persistent decode's feed.
template <int kStages>
__global__ void __launch_bounds__(32 * kWarps)
    ringProbeKernel(const __grid_constant__ CUtensorMap map,
                    const int32_t *tables, int maxBlocks, int context,
                    int layer, int layers, int tasks, bool kernelReads,
                    int work, uint32_t *sink) {
  constexpr int kStepBytes = 2 * 16 * kD * 2;
  extern __shared__ __align__(1024) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const WarpRing<kStages> warpRing(smem, warp);
  uint8_t *ring = warpRing.stages;
  uint64_t *bars = warpRing.bars;
  const int first = blockIdx.x * kWarps + warp;
  const int stride = gridDim.x * kWarps;
  if (first >= tasks)
    return;
  warpRing.init(lane);
  const int steps = context / 16;
  // Lane 0's issue cursor: the next step to hand over, of task issueTask.
  int issueTask = first, issueStep = 0, issued = 0;
  auto issueNext = [&] {
    if (issueTask >= tasks)
      return;
    const int seq = issueTask / kHeads, head = issueTask % kHeads;
    const int block = tables[int64_t(seq) * maxBlocks + issueStep];
    const int stage = issued % kStages;
    infer::cuda::sm90::mbarrierArriveExpectTx(&bars[stage], kStepBytes);
    for (int kv = 0; kv < 2; ++kv)
      infer::cuda::sm90::tmaLoad4d(
          ring + stage * kStepBytes + kv * (kStepBytes / 2), &map, &bars[stage],
          0, head, 0, (block * layers + layer) * 2 + kv);
    ++issued;
    if (++issueStep == steps) {
      issueStep = 0;
      issueTask += stride;
    }
  };
  if (lane == 0)
    for (int s = 0; s < kStages; ++s)
      issueNext();
  uint32_t acc = 0;
  float chain = float(lane);
  int n = 0; // steps read
  for (int task = first; task < tasks; task += stride) {
    for (int step = 0; step < steps; ++step, ++n) {
      const int stage = n % kStages;
      infer::cuda::sm90::mbarrierWait(&bars[stage], (n / kStages) & 1);
      const uint8_t *src = ring + stage * kStepBytes;
#pragma unroll
      for (int i = 0; i < kStepBytes / 16 / 32; ++i) {
        // i = 8 kv + 4 half + chunk group, as the decode kernel's loop
        // nest reads them.
        const int kv = i / 8, half = (i / 4) % 2, c = i % 4;
        const int offset = kernelReads
                               ? kv * (kStepBytes / 2) +
                                     (8 * half + g) * kD * 2 + (4 * c + t) * 16
                               : (i * 32 + lane) * 16;
        const uint4 x = *reinterpret_cast<const uint4 *>(src + offset);
        acc ^= x.x ^ x.y ^ x.z ^ x.w;
      }
      __syncwarp();
      if (lane == 0)
        issueNext();
      for (int k = 0; k < work; ++k)
        chain = fmaf(chain, 0.999f, float(acc & 1));
    }
  }
  if (acc == 0x12345678u || chain == 1.2345f)
    sink[first] = acc;
}

std::vector<Shape> parseShapes(const std::string &s) {
  std::vector<Shape> out;
  for (const std::string &item : infer::bench::splitCommas(s)) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) {
      std::fprintf(stderr, "a shape is BATCH:CONTEXT, got '%s'\n",
                   item.c_str());
      std::exit(2);
    }
    out.push_back({std::atoi(item.substr(0, colon).c_str()),
                   std::atoi(item.substr(colon + 1).c_str())});
    if (out.back().batch <= 0 || out.back().context <= 0 ||
        out.back().context % 16 != 0) {
      std::fprintf(stderr, "a shape's batch must be > 0 and its context a "
                           "positive multiple of 16 (whole steps)\n");
      std::exit(2);
    }
  }
  return out;
}

/// The median over `repeats` runs (after one warm-up) of a run's time a
/// layer, us: a run launches layer 0 .. layers - 1 in turn
/// (launchLayer(l)), back to back on the default stream.
template <typename LaunchLayer>
float timeLayers(int layers, int repeats, LaunchLayer launchLayer) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> times;
  for (int r = 0; r < repeats + 1; ++r) {
    CHECK(cudaEventRecord(a));
    for (int l = 0; l < layers; ++l)
      launchLayer(l);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (r > 0)
      times.push_back(ms * 1000.0f / layers);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

template <bool kHeadMajor, int kAhead>
float timeProbe(const uint16_t *pool, const int32_t *tables, int maxBlocks,
                Shape shape, int layers, int warpsPerSm, int repeats,
                uint32_t *sink) {
  auto kernel = probeKernel<kHeadMajor, kAhead>;
  int smemPerSm = 0;
  CHECK(cudaDeviceGetAttribute(&smemPerSm,
                               cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
  const int blocksPerSm = warpsPerSm / kWarps;
  // A block's reserve: the SM's shared memory over the blocks wanted, less
  // the 1 KiB the system takes a block.
  const int reserve = smemPerSm / blocksPerSm - 1024 - 16;
  CHECK(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, reserve));
  int fits = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fits, kernel,
                                                      32 * kWarps, reserve));
  if (fits != blocksPerSm) {
    std::fprintf(stderr, "%d warps an SM: %d blocks fit, wanted %d\n",
                 warpsPerSm, fits, blocksPerSm);
  }
  const int tasks = shape.batch * kHeads;
  const int grid = (tasks + kWarps - 1) / kWarps;
  return timeLayers(layers, repeats, [&](int l) {
    kernel<<<grid, 32 * kWarps, reserve>>>(
        pool, tables, maxBlocks, shape.context, l, layers, tasks, sink);
  });
}

CUtensorMap poolMap(const uint16_t *pool, int64_t blocks, int layers) {
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                         cudaEnableDefault, &found));
  auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  CUtensorMap map;
  const cuuint64_t dims[4] = {kD, kHeads, kBlockSize,
                              cuuint64_t(blocks) * layers * 2};
  const cuuint64_t strides[3] = {kD * 2, kHeads * kD * 2,
                                 kBlockSize * kHeads * kD * 2};
  const cuuint32_t box[4] = {kD, 1, kBlockSize, 1};
  const cuuint32_t elementStrides[4] = {1, 1, 1, 1};
  if (!encode ||
      encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4,
             const_cast<uint16_t *>(pool), dims, strides, box, elementStrides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed\n");
    std::exit(1);
  }
  return map;
}

template <int kMode, int kStages>
float timeBulk(const CUtensorMap &map, const uint16_t *pool,
               const int32_t *tables, int maxBlocks, Shape shape, int layers,
               int repeats, uint32_t *sink, int *warpsPerSm) {
  auto kernel = bulkProbeKernel<kMode, kStages>;
  const int smem = kWarps * kStages * (2 * 16 * kD * 2 + 8) + 1024;
  CHECK(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int fits = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fits, kernel,
                                                      32 * kWarps, smem));
  *warpsPerSm = fits * kWarps;
  const int tasks = shape.batch * kHeads;
  const int grid = (tasks + kWarps - 1) / kWarps;
  return timeLayers(layers, repeats, [&](int l) {
    kernel<<<grid, 32 * kWarps, smem>>>(map, pool, tables, maxBlocks,
                                        shape.context, l, layers, tasks, sink);
  });
}

/// ringProbeKernel at 4 stages, 1 block of 4 warps an SM; `persistent`:
/// one wave of warps.
float timeRing(const CUtensorMap &map, const int32_t *tables, int maxBlocks,
               Shape shape, int layers, int repeats, uint32_t *sink,
               bool kernelReads, int work, bool persistent) {
  constexpr int kStages = 4;
  auto kernel = ringProbeKernel<kStages>;
  const int smem = kWarps * kStages * (2 * 16 * kD * 2 + 8) + 1024;
  CHECK(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int fits = 0, sms = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fits, kernel,
                                                      32 * kWarps, smem));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int tasks = shape.batch * kHeads;
  int grid = (tasks + kWarps - 1) / kWarps;
  if (persistent)
    grid = std::min(grid, fits * sms);
  return timeLayers(layers, repeats, [&](int l) {
    kernel<<<grid, 32 * kWarps, smem>>>(map, tables, maxBlocks, shape.context,
                                        l, layers, tasks, kernelReads, work,
                                        sink);
  });
}

} // namespace

int main(int argc, char **argv) {
  infer::bench::benchTool = "infer-decode-read-probe";
  std::string shapesArg = "256:128,1024:128,256:512,256:2048";
  std::string tableArg = "sequential,shuffled";
  int repeats = 5;
  // Dependent FMAs a lane per step in the ring's last columns: about the
  // decode kernel's arithmetic latency a step (24 mma, the softmax's
  // shuffles and exponentials), a guess to vary.
  int workFmas = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--shapes" && i + 1 < argc)
      shapesArg = argv[++i];
    else if (arg == "--tables" && i + 1 < argc)
      tableArg = argv[++i];
    else if (arg == "--repeats" && i + 1 < argc)
      repeats = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--work" && i + 1 < argc)
      workFmas = std::max(0, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr,
                   "usage: %s [--shapes B:C,...] [--tables "
                   "sequential,shuffled] [--repeats N] [--work FMAS]\n",
                   argv[0]);
      return 2;
    }
  }
  const std::vector<Shape> shapes = parseShapes(shapesArg);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20);

  uint32_t *sink;
  CHECK(cudaMalloc(&sink, 1 << 20));
  std::printf("| shape | tables | layers | stream GB/s | slot 8w a1 | slot 8w "
              "a2 | slot 12w a2 | slot 24w a1 | head 8w a2 | head 24w a1 |\n");
  for (const Shape &shape : shapes) {
    const int blocksPerSeq = (shape.context + kBlockSize - 1) / kBlockSize;
    const int64_t blocks = int64_t(shape.batch) * blocksPerSeq;
    const int64_t bytesPerLayerBlock = 2LL * kBlockSize * kHeads * kD * 2;
    // Enough layers that one layer's keys and values outgrow L2 by far, and
    // the pool under 24 GB.
    const int64_t layerBytes = blocks * bytesPerLayerBlock;
    int layers = int(
        std::min<int64_t>(32, std::max<int64_t>(2, (24LL << 30) / layerBytes)));
    layers = std::max(layers, 2);
    const int64_t poolBytes = layerBytes * layers;
    uint16_t *pool;
    CHECK(cudaMalloc(&pool, poolBytes));
    CHECK(cudaMemset(pool, 0x3c, poolBytes));
    for (size_t tb = 0; tb < 2; ++tb) {
      const bool shuffled = tb == 1;
      if (tableArg.find(shuffled ? "shuffled" : "sequential") ==
          std::string::npos)
        continue;
      std::vector<int32_t> ids(blocks);
      std::iota(ids.begin(), ids.end(), 0);
      if (shuffled)
        std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
      int32_t *tables = infer::bench::uploadInts(ids);
      // The plain read of one layer's bytes, layer after layer.
      const int64_t vecs = layerBytes / 16;
      const double us = timeLayers(layers, repeats, [&](int l) {
        streamKernel<<<prop.multiProcessorCount * 8, 256>>>(
            reinterpret_cast<const uint4 *>(
                reinterpret_cast<const uint8_t *>(pool) + l * layerBytes),
            vecs, sink);
      });
      const double gb = double(layerBytes) / 1e9;
      // The probe reads only the keys before `context` (all of them here:
      // the contexts are multiples of 16).
      const double readGb =
          double(shape.batch) * shape.context * kHeads * kD * 2 * 2 / 1e9;
      auto rate = [&](float probeUs) { return readGb / (probeUs * 1e-6); };
      const float s8a1 = timeProbe<false, 1>(pool, tables, blocksPerSeq, shape,
                                             layers, 8, repeats, sink);
      const float s8a2 = timeProbe<false, 2>(pool, tables, blocksPerSeq, shape,
                                             layers, 8, repeats, sink);
      const float s16a2 = timeProbe<false, 2>(pool, tables, blocksPerSeq, shape,
                                              layers, 12, repeats, sink);
      const float s32a1 = timeProbe<false, 1>(pool, tables, blocksPerSeq, shape,
                                              layers, 24, repeats, sink);
      const float h8a2 = timeProbe<true, 2>(pool, tables, blocksPerSeq, shape,
                                            layers, 8, repeats, sink);
      const float h32a1 = timeProbe<true, 1>(pool, tables, blocksPerSeq, shape,
                                             layers, 24, repeats, sink);
      std::printf("| %d x %d | %s | %d | %.0f (%.1f us) | %.0f (%.1f) | %.0f "
                  "(%.1f) | %.0f (%.1f) | %.0f (%.1f) | %.0f (%.1f) | %.0f "
                  "(%.1f) |\n",
                  shape.batch, shape.context,
                  shuffled ? "shuffled" : "sequential", layers,
                  gb / (us * 1e-6), us, rate(s8a1), s8a1, rate(s8a2), s8a2,
                  rate(s16a2), s16a2, rate(s32a1), s32a1, rate(h8a2), h8a2,
                  rate(h32a1), h32a1);
      const CUtensorMap map = poolMap(pool, blocks, layers);
      int w[6];
      const float b0s2 = timeBulk<kRows, 2>(
          map, pool, tables, blocksPerSeq, shape, layers, repeats, sink, &w[0]);
      const float b0s4 = timeBulk<kRows, 4>(
          map, pool, tables, blocksPerSeq, shape, layers, repeats, sink, &w[1]);
      const float b1s2 = timeBulk<kHeadBlocks, 2>(
          map, pool, tables, blocksPerSeq, shape, layers, repeats, sink, &w[2]);
      const float b1s4 = timeBulk<kHeadBlocks, 4>(
          map, pool, tables, blocksPerSeq, shape, layers, repeats, sink, &w[3]);
      const float b2s2 = timeBulk<kTensorBoxes, 2>(
          map, pool, tables, blocksPerSeq, shape, layers, repeats, sink, &w[4]);
      const float b2s4 = timeBulk<kTensorBoxes, 4>(
          map, pool, tables, blocksPerSeq, shape, layers, repeats, sink, &w[5]);
      std::printf(
          "|   copy engine | rows s2 %dw %.0f (%.1f) | rows s4 %dw %.0f "
          "(%.1f) | head s2 %dw %.0f (%.1f) | head s4 %dw %.0f (%.1f) "
          "| boxes s2 %dw %.0f (%.1f) | boxes s4 %dw %.0f (%.1f) |\n",
          w[0], rate(b0s2), b0s2, w[1], rate(b0s4), b0s4, w[2], rate(b1s2),
          b1s2, w[3], rate(b1s4), b1s4, w[4], rate(b2s2), b2s2, w[5],
          rate(b2s4), b2s4);
      // What a decode kernel adds to the 4-stage ring, one thing at a time.
      const float linear = timeRing(map, tables, blocksPerSeq, shape, layers,
                                    repeats, sink, false, 0, false);
      const float reads = timeRing(map, tables, blocksPerSeq, shape, layers,
                                   repeats, sink, true, 0, false);
      const float work = timeRing(map, tables, blocksPerSeq, shape, layers,
                                  repeats, sink, true, workFmas, false);
      const float persistent =
          timeRing(map, tables, blocksPerSeq, shape, layers, repeats, sink,
                   true, workFmas, true);
      std::printf("|   ring s4 4w | linear reads %.0f (%.1f) | the kernel's "
                  "reads %.0f (%.1f) | and %d FMAs a step %.0f (%.1f) | "
                  "and persistent %.0f (%.1f) |\n",
                  rate(linear), linear, rate(reads), reads, workFmas,
                  rate(work), work, rate(persistent), persistent);
      std::fflush(stdout);
      CHECK(cudaFree(tables));
    }
    CHECK(cudaFree(pool));
  }
  return 0;
}
