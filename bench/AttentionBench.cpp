//===- AttentionBench.cpp - Paged attention kernels against ceilings ------===//
//
//   infer-attention-bench [--prefill 2048,8192] [--decode 1:32768,256:2048]
//       [--rope 2048,8192] [--mixed 8x128+1024:192,3x2048+465:2112+1583/465]
//       [--heads 32 --kv-heads 8 --head-dim 128 --block-size 16 --layers 1]
//       [--pools bf16,e4m3,e5m2] [--softcap 0] [--repeats 7]
//
// Times the attention kernels of runtime/cuda/Kernels.h alone on one layer
// of a paged pool (blocks handed out shuffled, random bf16 values or finite
// fp8 codes of magnitude < 1 with unit E4M3 scales), bf16 q and out; the
// pool has --layers layers (the kernels read the last), as a model's pool
// keeps every layer of a block together:
//   prefill  one sequence of N new tokens, causal, on the Hopper kernel
//            (launchPrefillAttentionSm90, where the device takes it and
//            INFER_ATTENTION_KERNEL is not "fallback") and the mma.sync one
//            (launchPrefillAttention): ms and TFLOP/s counting
//            2 matmuls x 2 FLOPs x N(N+1)/2 x head_dim x heads;
//   decode   B sequences of C cached tokens, one new token each
//            (launchPagedAttention: the split-KV kernel with its workspace,
//            or the tensor-core one, decodeKernelOf; INFER_DECODE_KERNEL
//            forces one): us and GB/s counting the K/V bytes (and E4M3
//            scales) read;
//   rope     (only with --rope) N tokens' rope of q (launchRope) and
//            rope_kv_cache_write of k and v into each pool
//            (launchRopeKVCacheWrite, slots in shuffled blocks), q, k and v
//            column views of one merged q/k/v row as a forward call has
//            them, positions 0 .. N-1, full rotary dims, plain inverse
//            frequencies of theta 500000: us and GB/s counting the bytes
//            read and written (rows, codes and E4M3 scales), as the
//            launchers' packed kernels take them (access=packed) and with
//            every row one element off 16-byte alignment, which they leave
//            to the element kernels (access=element); then both in one
//            launch (launchRopeQKVCacheWrite, kernel=rope_qkv_cache_write)
//            and as the two launches it replaces, back to back
//            (kernel=rope+rope_kv_cache_write).
//   mixed    (only with --mixed) P prompts of L new tokens and B decode
//            rows of C cached tokens in one batch, as chunked prefill makes
//            them: launchPagedAttention of the whole batch (the prefill
//            kernel on the prompts' rows, then the decode kernel), of the
//            prompts alone (prefill_us, and prefill_mma_us on the mma.sync
//            kernel) and of the decode rows alone (decode_us); fp8 pools
//            also with the prompts' keys and values read from FreshKV
//            (fresh_us, prefill_fresh_us), as the backend's calls with
//            prompt rows read them. A "+K/N" suffix adds, first, the chunk
//            of a chunked prompt: N new tokens after K cached, whose keys
//            FreshKV's context rows give (prefill_fresh_us) or the pool
//            (prefill_fresh0_us: FreshKV without context rows). The prefill
//            mode's kernel=sm90-fresh rows are those reads too.
// Beside them the ceilings measured in the same run: the device-to-device
// copy bandwidth (1 GiB cudaMemcpy, read + write) and a bf16 GEMM of
// 8192^3 through cuBLASLt (fp32 accumulation). Each figure is the median of
// `repeats` samples; a sample is the mean over a captured CUDA graph of 10
// back-to-back launches (launch gaps out of the kernel time). Every line of
// results starts with "result" and names its fields, for
// bench/attention_check.sh. --softcap C > 0 times the soft-capped kernels
// (Gemma 2's attn_logit_softcapping, AttentionDims::logitSoftcap).
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSupport.h"
#include "runtime/cuda/CacheWriteKernels.h"
#include "runtime/cuda/Kernels.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace infer::bench;
using namespace infer::cuda;

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

/// Median over `repeats` samples of the mean ms of one launch, each sample a
/// replay of a graph of 10 captured launches.
double timeLaunches(const std::function<cudaError_t(cudaStream_t)> &launch,
                    int repeats) {
  constexpr int kLaunches = 10;
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "stream");
  check(launch(stream), "warm-up launch");
  check(cudaStreamSynchronize(stream), "warm-up");
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
        "capture");
  for (int i = 0; i < kLaunches; ++i)
    check(launch(stream), "captured launch");
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  check(cudaGraphLaunch(exec, stream), "graph warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    check(cudaEventRecord(start, stream), "record");
    check(cudaGraphLaunch(exec, stream), "graph launch");
    check(cudaEventRecord(stop, stream), "record");
    check(cudaEventSynchronize(stop), "sync");
    float t = 0.0f;
    check(cudaEventElapsedTime(&t, start, stop), "elapsed");
    ms.push_back(t / kLaunches);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return median(ms);
}

double copyBandwidth(int repeats) {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, bytes), "copy source");
  check(cudaMalloc(&b, bytes), "copy destination");
  check(cudaMemset(a, 1, bytes), "memset");
  const double ms = timeLaunches(
      [&](cudaStream_t s) {
        return cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s);
      },
      repeats);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (ms * 1e-3); // read + write
}

/// TFLOP/s of C = A B, bf16 8192^3 (random operands), fp32 accumulation,
/// through cuBLASLt's first heuristic algorithm.
double gemmCeiling(int repeats) {
  constexpr int n = 8192;
  const size_t elements = size_t(n) * n;
  std::vector<__nv_bfloat16> host(elements);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (auto &x : host)
    x = __float2bfloat16_rn(normal(rng));
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  check(cudaMalloc(&a, elements * 2), "gemm a");
  check(cudaMalloc(&b, elements * 2), "gemm b");
  check(cudaMalloc(&c, elements * 2), "gemm c");
  check(cudaMemcpy(a, host.data(), elements * 2, cudaMemcpyHostToDevice), "a");
  check(cudaMemcpy(b, host.data(), elements * 2, cudaMemcpyHostToDevice), "b");
  const size_t workspaceBytes = size_t(64) << 20;
  void *workspace = nullptr;
  check(cudaMalloc(&workspace, workspaceBytes), "gemm workspace");
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t layout;
  cublasLtMatmulPreference_t preference;
  if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, n, n, n) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulPreferenceCreate(&preference) != CUBLAS_STATUS_SUCCESS)
    die("cuBLASLt setup");
  cublasLtMatmulPreferenceSetAttribute(preference,
                                       CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspaceBytes, sizeof(workspaceBytes));
  cublasLtMatmulHeuristicResult_t heuristic;
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(handle, desc, layout, layout, layout,
                                     layout, preference, 1, &heuristic,
                                     &found) != CUBLAS_STATUS_SUCCESS ||
      found == 0)
    die("no cuBLASLt algorithm for the bf16 GEMM");
  const float one = 1.0f, zero = 0.0f;
  const double ms = timeLaunches(
      [&](cudaStream_t s) {
        return cublasLtMatmul(handle, desc, &one, a, layout, b, layout, &zero,
                              c, layout, c, layout, &heuristic.algo, workspace,
                              workspaceBytes, s) == CUBLAS_STATUS_SUCCESS
                   ? cudaSuccess
                   : cudaErrorUnknown;
      },
      repeats);
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatrixLayoutDestroy(layout);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
  cudaFree(workspace);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 2.0 * n * n * double(n) / (ms * 1e-3) / 1e12;
}

struct Options {
  std::vector<int> prefill = {2048, 4096, 8192};
  std::vector<std::pair<int, int>> decode = {
      {1, 32768},  {32, 1024},  {32, 8192}, {32, 32768},
      {128, 4096}, {256, 1024}, {256, 2048}};
  std::vector<int> rope;
  /// Mixed batches as the engine's chunked prefill makes them: prompts x
  /// prompt length + decode rows x context, and optionally first a chunk
  /// of chunkNew tokens after chunkCached.
  struct Mixed {
    int prompts, promptLen, decodes, context, chunkCached, chunkNew;
  };
  std::vector<Mixed> mixed;
  std::vector<std::string> pools = {"bf16", "e4m3", "e5m2"};
  int heads = 32, kvHeads = 8, headDim = 128, blockSize = 16, repeats = 7;
  /// Layers of the pool (the kernels run on the last): a model's pool holds
  /// every layer of a block together, so one layer's rows lie further apart.
  int layers = 1;
  float softcap = 0.0f;
};

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc)
      die("missing value of " + flag);
    const std::string value = argv[++i];
    if (flag == "--prefill") {
      o.prefill.clear();
      for (const std::string &n : splitCommas(value))
        o.prefill.push_back(std::stoi(n));
    } else if (flag == "--decode") {
      o.decode.clear();
      for (const std::string &bc : splitCommas(value)) {
        const size_t colon = bc.find(':');
        if (colon == std::string::npos)
          die("--decode takes BATCH:CONTEXT,...");
        o.decode.push_back(
            {std::stoi(bc.substr(0, colon)), std::stoi(bc.substr(colon + 1))});
      }
    } else if (flag == "--mixed") {
      for (const std::string &m : splitCommas(value)) {
        Options::Mixed x{};
        const int fields = std::sscanf(m.c_str(), "%dx%d+%d:%d+%d/%d",
                                       &x.prompts, &x.promptLen, &x.decodes,
                                       &x.context, &x.chunkCached, &x.chunkNew);
        if ((fields != 4 && fields != 6) || x.prompts < 1 || x.promptLen < 2 ||
            x.decodes < 1 || x.context < 1 ||
            (fields == 6 && (x.chunkCached < 1 || x.chunkNew < 2)))
          die("--mixed takes PROMPTSxLENGTH+DECODES:CONTEXT[+CACHED/NEW],...");
        o.mixed.push_back(x);
      }
    } else if (flag == "--rope") {
      o.rope.clear();
      for (const std::string &n : splitCommas(value))
        o.rope.push_back(std::stoi(n));
    } else if (flag == "--pools") {
      o.pools = splitCommas(value);
    } else if (flag == "--heads") {
      o.heads = std::stoi(value);
    } else if (flag == "--kv-heads") {
      o.kvHeads = std::stoi(value);
    } else if (flag == "--head-dim") {
      o.headDim = std::stoi(value);
    } else if (flag == "--block-size") {
      o.blockSize = std::stoi(value);
    } else if (flag == "--layers") {
      o.layers = std::stoi(value);
      if (o.layers < 1)
        die("--layers takes a count >= 1");
    } else if (flag == "--softcap") {
      o.softcap = std::stof(value);
      if (!(o.softcap >= 0.0f))
        die("--softcap takes a cap >= 0 (0: none)");
    } else if (flag == "--repeats") {
      o.repeats = std::stoi(value);
    } else {
      die("unknown flag " + flag);
    }
  }
  return o;
}

KVCacheDtype dtypeOf(const std::string &name) {
  if (name == "bf16")
    return KVCacheDtype::kBf16;
  if (name == "e4m3")
    return KVCacheDtype::kF8E4M3;
  if (name == "e5m2")
    return KVCacheDtype::kF8E5M2;
  die("unknown pool " + name);
}

/// A one-layer pool of `tokens` tokens' blocks, filled on the device with
/// random values, and the block tables of `numSeqs` sequences of `context`
/// tokens over it, blocks in shuffled order.
struct Batch {
  KVCachePool pool;
  CacheDims dims;
  void *data = nullptr;
  float *scales = nullptr;
  int32_t *tables = nullptr, *contextLens = nullptr, *qsl = nullptr;
  __nv_bfloat16 *q = nullptr, *out = nullptr;
  /// FreshKV's rows of the batch's new tokens (fp8 pools): random bf16 as
  /// the pool's values are; then the context rows its chunks take
  /// (freshContextRows), which the launches fill.
  __nv_bfloat16 *fresh = nullptr;
  int64_t maxBlocks = 0, numSeqs = 0, t = 0, contextRows = 0;

  Batch(const Options &o, KVCacheDtype dtype, int64_t seqs, int context,
        int newTokens, std::mt19937 &rng)
      : Batch(o, dtype,
              std::vector<std::pair<int, int>>(seqs, {context, newTokens}),
              rng) {}

  /// One sequence per (context, new tokens) pair, in that order.
  Batch(const Options &o, KVCacheDtype dtype,
        const std::vector<std::pair<int, int>> &sequences, std::mt19937 &rng) {
    const int64_t seqs = static_cast<int64_t>(sequences.size());
    numSeqs = seqs;
    dims = CacheDims{o.layers, o.kvHeads, o.headDim, o.blockSize};
    for (const auto &[context, newTokens] : sequences)
      maxBlocks = std::max<int64_t>(maxBlocks,
                                    (context + o.blockSize - 1) / o.blockSize);
    const int64_t blocks = seqs * maxBlocks;
    const int64_t elements =
        blocks * o.layers * 2 * int64_t(o.blockSize) * o.kvHeads * o.headDim;
    const size_t bytes = elements * kvCacheElementBytes(dtype);
    check(cudaMalloc(&data, bytes), "pool");
    // Random bytes, 64 MiB of them repeated over larger pools: bf16 values
    // with the exponent's high bits 0111110 (finite, |x| < 1/2), fp8 codes
    // masked with 0xB7 (finite, |x| < 1).
    const size_t chunk = std::min<size_t>(bytes, size_t(64) << 20);
    std::vector<uint8_t> host(chunk);
    std::uniform_int_distribution<int> byte(0, 255);
    for (size_t i = 0; i < chunk; ++i) {
      uint8_t x = uint8_t(byte(rng));
      if (dtype == KVCacheDtype::kBf16)
        x = i % 2 ? uint8_t((x & 0x80) | 0x3E | (x & 1)) : x;
      else
        x &= 0xB7;
      host[i] = x;
    }
    for (size_t offset = 0; offset < bytes; offset += chunk)
      check(cudaMemcpy(static_cast<uint8_t *>(data) + offset, host.data(),
                       std::min(chunk, bytes - offset), cudaMemcpyHostToDevice),
            "pool upload");
    if (dtype == KVCacheDtype::kF8E4M3) {
      std::vector<float> ones(elements / o.headDim, 1.0f);
      check(cudaMalloc(&scales, ones.size() * 4), "scales");
      check(cudaMemcpy(scales, ones.data(), ones.size() * 4,
                       cudaMemcpyHostToDevice),
            "scales upload");
    }
    pool = dtype == KVCacheDtype::kBf16
               ? KVCachePool(static_cast<__nv_bfloat16 *>(data))
               : KVCachePool(static_cast<uint8_t *>(data), scales, dtype);
    std::vector<int32_t> order(blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int32_t> lens(seqs), starts(seqs + 1, 0);
    for (int64_t s = 0; s < seqs; ++s) {
      lens[s] = sequences[s].first;
      starts[s + 1] = starts[s] + sequences[s].second;
    }
    t = starts[seqs];
    tables = uploadInts(order);
    contextLens = uploadInts(lens);
    qsl = uploadInts(starts);
    const int64_t qElements = t * o.heads * o.headDim;
    std::vector<__nv_bfloat16> hq(qElements);
    std::normal_distribution<float> normal;
    for (auto &x : hq)
      x = __float2bfloat16_rn(normal(rng));
    check(cudaMalloc(&q, qElements * 2), "q");
    check(cudaMalloc(&out, qElements * 2), "out");
    check(cudaMemcpy(q, hq.data(), qElements * 2, cudaMemcpyHostToDevice),
          "q upload");
    if (dtype != KVCacheDtype::kBf16) {
      contextRows = freshContextRows(starts.data(), lens.data(), seqs,
                                     o.heads / o.kvHeads);
      std::vector<__nv_bfloat16> hf(2 * (t + contextRows) * o.kvHeads *
                                    o.headDim);
      for (auto &x : hf)
        x = __float2bfloat16_rn(0.5f * normal(rng));
      check(cudaMalloc(&fresh, hf.size() * 2), "fresh");
      check(cudaMemcpy(fresh, hf.data(), hf.size() * 2, cudaMemcpyHostToDevice),
            "fresh upload");
    }
  }
  /// FreshKV as the backend passes it; withContext false: without context
  /// rows (the chunks read the pool; planes of t rows of the same random
  /// values).
  FreshKV freshKV(bool withContext = true) const {
    if (!fresh)
      return FreshKV();
    return FreshKV{fresh, t, withContext ? contextRows : 0};
  }
  ~Batch() {
    for (void *p :
         {data, static_cast<void *>(scales), static_cast<void *>(tables),
          static_cast<void *>(contextLens), static_cast<void *>(qsl),
          static_cast<void *>(q), static_cast<void *>(out),
          static_cast<void *>(fresh)})
      if (p)
        cudaFree(p);
  }
  Batch(const Batch &) = delete;
};

AttentionDims attentionOf(const Options &o) {
  AttentionDims a;
  a.numHeads = o.heads;
  a.numKVHeads = o.kvHeads;
  a.headDim = o.headDim;
  a.scale = 1.0f / std::sqrt(float(o.headDim));
  a.logitSoftcap = o.softcap;
  a.layer = o.layers - 1;
  return a;
}

/// Device memory of `count` elements of T, freed with the object.
template <typename T> struct DeviceBuffer {
  T *data = nullptr;
  explicit DeviceBuffer(size_t count) {
    check(cudaMalloc(&data, std::max<size_t>(count, 1) * sizeof(T)), "buffer");
  }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  void upload(const std::vector<T> &host) {
    check(cudaMemcpy(data, host.data(), host.size() * sizeof(T),
                     cudaMemcpyHostToDevice),
          "upload");
  }
};

/// The rope mode (see the file comment): "result rope" lines.
void benchRope(const Options &o, double copy, std::mt19937 &rng) {
  const int d = o.headDim;
  const int64_t qWidth = int64_t(o.heads) * d, kvWidth = int64_t(o.kvHeads) * d;
  const int64_t ld = qWidth + 2 * kvWidth; // a merged q/k/v row
  std::vector<float> invFreq(d / 2);
  for (int j = 0; j < d / 2; ++j)
    invFreq[j] =
        static_cast<float>(1.0 / std::pow(500000.0, 2.0 * j / double(d)));
  DeviceBuffer<float> dFreq(invFreq.size());
  dFreq.upload(invFreq);
  for (int n : o.rope) {
    if (n <= 0)
      die("--rope takes token counts > 0");
    // Rows ld apart from the buffer's start (packed) or ld + 1 apart from
    // its second element (element); random bf16 bits, finite, |x| < 1/2.
    const size_t elements = size_t(n) * (ld + 8);
    std::vector<__nv_bfloat16> chunk(std::min<size_t>(elements, 1 << 22));
    std::uniform_int_distribution<int> bits(0, 0xFFFF);
    for (auto &x : chunk) {
      const auto b = static_cast<unsigned short>(bits(rng));
      x = __ushort_as_bfloat16(
          static_cast<unsigned short>((b & 0x80FF) | 0x3E00));
    }
    DeviceBuffer<__nv_bfloat16> qkv(elements), out(size_t(n) * qWidth);
    for (size_t at = 0; at < elements; at += chunk.size())
      check(cudaMemcpy(qkv.data + at, chunk.data(),
                       std::min(chunk.size(), elements - at) * 2,
                       cudaMemcpyHostToDevice),
            "qkv upload");
    std::vector<int32_t> positions(n);
    std::iota(positions.begin(), positions.end(), 0);
    const int64_t blocks = (n + o.blockSize - 1) / o.blockSize;
    std::vector<int64_t> order(blocks), slots(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int p = 0; p < n; ++p)
      slots[p] = order[p / o.blockSize] * o.blockSize + p % o.blockSize;
    DeviceBuffer<int32_t> dPositions(n);
    DeviceBuffer<int64_t> dSlots(n);
    dPositions.upload(positions);
    dSlots.upload(slots);
    auto report = [&](const std::string &kernel, const char *access,
                      double bytes, double ms) {
      const double gbps = bytes / (ms * 1e-3) / 1e9;
      std::printf("result rope kernel=%s access=%s tokens=%d us=%.1f "
                  "gbps=%.0f pct_copy=%.0f\n",
                  kernel.c_str(), access, n, ms * 1e3, gbps,
                  100 * gbps * 1e9 / copy);
    };
    for (const char *access : {"packed", "element"}) {
      const bool packed = std::strcmp(access, "packed") == 0;
      const __nv_bfloat16 *q = qkv.data + (packed ? 0 : 1);
      const int64_t rowLd = packed ? ld : ld + 1;
      const double ms = timeLaunches(
          [&](cudaStream_t s) {
            return launchRope(q, out.data, n, o.heads, d, d, dPositions.data,
                              dFreq.data, s, rowLd);
          },
          o.repeats);
      report("rope", access, 2.0 * n * qWidth * 2, ms);
    }
    for (const std::string &name : o.pools) {
      const KVCacheDtype dtype = dtypeOf(name);
      const CacheDims dims{1, o.kvHeads, d, o.blockSize};
      const size_t poolElements =
          size_t(blocks) * 2 * o.blockSize * size_t(kvWidth);
      DeviceBuffer<uint8_t> data(poolElements * kvCacheElementBytes(dtype));
      DeviceBuffer<float> scales(poolElements / d);
      check(cudaMemset(scales.data, 0, poolElements / d * sizeof(float)),
            "scales");
      const KVCachePool pool =
          dtype == KVCacheDtype::kBf16
              ? KVCachePool(reinterpret_cast<__nv_bfloat16 *>(data.data))
              : KVCachePool(data.data, scales.data, dtype);
      const double bytes =
          2.0 * n * kvWidth * (2 + kvCacheElementBytes(dtype)) +
          (dtype == KVCacheDtype::kF8E4M3 ? 2.0 * n * o.kvHeads * 4 : 0.0);
      for (const char *access : {"packed", "element"}) {
        const bool packed = std::strcmp(access, "packed") == 0;
        const __nv_bfloat16 *k = qkv.data + (packed ? 0 : 1) + qWidth;
        const int64_t rowLd = packed ? ld : ld + 1;
        const double ms = timeLaunches(
            [&](cudaStream_t s) {
              return launchRopeKVCacheWrite(pool, dims, 0, k, k + kvWidth,
                                            dSlots.data, dPositions.data, n, d,
                                            dFreq.data, s, rowLd, rowLd);
            },
            o.repeats);
        report("rope_kv_cache_write pool=" + name, access, bytes, ms);
      }
      // q, k and v in one launch, against the two launches it replaces.
      const double qkvBytes = bytes + 2.0 * n * qWidth * 2;
      for (const char *access : {"packed", "element"}) {
        const bool packed = std::strcmp(access, "packed") == 0;
        const __nv_bfloat16 *q = qkv.data + (packed ? 0 : 1), *k = q + qWidth;
        const int64_t rowLd = packed ? ld : ld + 1;
        const double fused = timeLaunches(
            [&](cudaStream_t s) {
              return launchRopeQKVCacheWrite(q, out.data, o.heads, pool, dims,
                                             0, k, k + kvWidth, dSlots.data,
                                             dPositions.data, n, d, dFreq.data,
                                             s, rowLd, rowLd, rowLd);
            },
            o.repeats);
        report("rope_qkv_cache_write pool=" + name, access, qkvBytes, fused);
        const double twoLaunches = timeLaunches(
            [&](cudaStream_t s) {
              const cudaError_t rope =
                  launchRope(q, out.data, n, o.heads, d, d, dPositions.data,
                             dFreq.data, s, rowLd);
              if (rope != cudaSuccess)
                return rope;
              return launchRopeKVCacheWrite(pool, dims, 0, k, k + kvWidth,
                                            dSlots.data, dPositions.data, n, d,
                                            dFreq.data, s, rowLd, rowLd);
            },
            o.repeats);
        report("rope+rope_kv_cache_write pool=" + name, access, qkvBytes,
               twoLaunches);
      }
    }
  }
}

} // namespace

int main(int argc, char **argv) {
  benchTool = "infer-attention-bench";
  const Options o = parse(argc, argv);
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "device");
  const double copy = copyBandwidth(o.repeats);
  const double gemm = gemmCeiling(o.repeats);
  std::printf("device %s, %d SMs; heads %d, kv heads %d, head_dim %d, block "
              "size %d, pool layers %d, softcap %g\n",
              prop.name, prop.multiProcessorCount, o.heads, o.kvHeads,
              o.headDim, o.blockSize, o.layers, o.softcap);
  std::printf("result ceiling copy_gbps=%.0f gemm_tflops=%.1f\n", copy / 1e9,
              gemm);
  std::mt19937 rng(1);
  const AttentionDims a = attentionOf(o);

  const size_t workspaceBytes = splitKVWorkspaceBytes(o.headDim);
  for (const std::string &name : o.pools) {
    const KVCacheDtype dtype = dtypeOf(name);
    float *workspace = nullptr;
    check(cudaMalloc(&workspace, workspaceBytes), "workspace");
    const SplitKVWorkspace ws{workspace, workspaceBytes};
    for (int n : o.prefill) {
      Batch b(o, dtype, 1, n, n, rng);
      const double flops =
          4.0 * (double(n) * (n + 1) / 2) * o.headDim * o.heads;
      // sm90-fresh: the Hopper kernel reading FreshKV (fp8 pools; the
      // sequence has nothing cached before the call).
      for (const char *kernel : {"sm90", "sm90-fresh", "mma"}) {
        const bool sm90 = std::strncmp(kernel, "sm90", 4) == 0;
        const bool fresh = std::strcmp(kernel, "sm90-fresh") == 0;
        if (sm90 && !(prefillAttentionSm90Enabled() &&
                      prefillAttentionSm90Supports(a, b.dims, dtype)))
          continue;
        if (fresh && !(b.fresh && freshKVReadsOn()))
          continue;
        const double ms = timeLaunches(
            [&](cudaStream_t s) {
              return fresh ? launchPrefillAttentionSm90(
                                 b.q, b.pool, b.dims, a, b.tables, b.maxBlocks,
                                 b.contextLens, b.qsl, 1, b.t, b.out, s, ws,
                                 b.freshKV())
                     : sm90 ? launchPrefillAttentionSm90(
                                  b.q, b.pool, b.dims, a, b.tables, b.maxBlocks,
                                  b.contextLens, b.qsl, 1, b.t, b.out, s)
                            : launchPrefillAttention(
                                  b.q, b.pool, b.dims, a, b.tables, b.maxBlocks,
                                  b.contextLens, b.qsl, 1, b.t, b.out, s);
            },
            o.repeats);
        const double tflops = flops / (ms * 1e-3) / 1e12;
        std::printf("result prefill kernel=%s pool=%s tokens=%d ms=%.3f "
                    "tflops=%.1f pct_gemm=%.0f\n",
                    kernel, name.c_str(), n, ms, tflops, 100 * tflops / gemm);
      }
    }
    for (auto [batch, context] : o.decode) {
      Batch b(o, dtype, batch, context, 1, rng);
      const double bytes = double(batch) * context * o.kvHeads * 2 *
                           (double(o.headDim) * kvCacheElementBytes(dtype) +
                            (dtype == KVCacheDtype::kF8E4M3 ? 4 : 0));
      const double ms = timeLaunches(
          [&](cudaStream_t s) {
            return launchPagedAttention(
                b.q, b.pool, b.dims, a, b.tables, b.maxBlocks, b.contextLens,
                b.qsl, batch, b.t, b.out, s,
                SplitKVWorkspace{workspace, workspaceBytes});
          },
          o.repeats);
      const double gbps = bytes / (ms * 1e-3) / 1e9;
      const bool mma = decodeKernelOf(a, b.dims, dtype, /*bf16Queries=*/true,
                                      b.maxBlocks, batch) == DecodeKernel::kMma;
      std::printf(
          "result decode pool=%s batch=%d context=%d kernel=%s splits=%d "
          "us=%.1f gbps=%.0f pct_copy=%.0f\n",
          name.c_str(), batch, context, mma ? "mma" : "split",
          (mma ? mmaDecodeSplits : splitKVSplits)(a, o.blockSize, b.maxBlocks,
                                                  batch, workspaceBytes),
          ms * 1e3, gbps, 100 * gbps * 1e9 / copy);
    }
    // A mixed batch as one launch (the prompts' rows on the prefill
    // kernel, then the decode rows), against its two parts alone: the
    // prompts on the sm_90 kernel and on the mma.sync one, the decode rows.
    for (const Options::Mixed &m : o.mixed) {
      std::vector<std::pair<int, int>> prompts;
      if (m.chunkNew > 0)
        prompts.push_back({m.chunkCached + m.chunkNew, m.chunkNew});
      prompts.insert(prompts.end(), m.prompts, {m.promptLen, m.promptLen});
      std::vector<std::pair<int, int>> decodes(m.decodes, {m.context, 1});
      std::vector<std::pair<int, int>> all = prompts;
      all.insert(all.end(), decodes.begin(), decodes.end());
      Batch whole(o, dtype, all, rng), prefill(o, dtype, prompts, rng),
          decode(o, dtype, decodes, rng);
      const SplitKVWorkspace ws{workspace, workspaceBytes};
      auto paged = [&](Batch &b, bool fresh = false, bool context = true) {
        return timeLaunches(
            [&](cudaStream_t s) {
              return launchPagedAttention(
                  b.q, b.pool, b.dims, a, b.tables, b.maxBlocks, b.contextLens,
                  b.qsl, b.numSeqs, b.t, b.out, s, ws,
                  fresh ? b.freshKV(context) : FreshKV());
            },
            o.repeats);
      };
      const bool sm90 = prefillAttentionSm90Enabled() &&
                        prefillAttentionSm90Supports(a, prefill.dims, dtype);
      const double prefillMma = timeLaunches(
          [&](cudaStream_t s) {
            return launchPrefillAttention(
                prefill.q, prefill.pool, prefill.dims, a, prefill.tables,
                prefill.maxBlocks, prefill.contextLens, prefill.qsl,
                prefill.numSeqs, prefill.t, prefill.out, s);
          },
          o.repeats);
      // fresh_us / prefill_fresh_us: the same launches reading FreshKV
      // for the prompts (fp8 pools; a bf16 pool's launch ignores it).
      std::printf("result mixed pool=%s prompts=%d prompt_len=%d decodes=%d "
                  "context=%d chunk=%d/%d us=%.1f fresh_us=%.1f "
                  "prefill_us=%.1f prefill_fresh_us=%.1f "
                  "prefill_fresh0_us=%.1f prefill_kernel=%s "
                  "prefill_mma_us=%.1f decode_us=%.1f\n",
                  name.c_str(), m.prompts, m.promptLen, m.decodes, m.context,
                  m.chunkCached, m.chunkNew, paged(whole) * 1e3,
                  paged(whole, true) * 1e3, paged(prefill) * 1e3,
                  paged(prefill, true) * 1e3, paged(prefill, true, false) * 1e3,
                  sm90 ? "sm90" : "mma", prefillMma * 1e3, paged(decode) * 1e3);
    }
    cudaFree(workspace);
  }
  benchRope(o, copy, rng);
  return 0;
}
