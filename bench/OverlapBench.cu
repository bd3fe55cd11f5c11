//===- OverlapBench.cu - GEMMs beside decode attention, on SM partitions --===//
//
//   infer-overlap-bench [--rows 3200] [--pieces 1,2] [--decode 190:2112]
//       [--attention-sms 16,24,32,48] [--layers 200] [--repeats 3]
//       [--warmup-s 4] [--lanes 1|0] [--power-s S]
//
// How much of a mixed batch's decode attention could hide under its
// GEMMs if the two ran at once. A long-prompt offline run (issue 11's
// 2048/128 x 1000) spends each forward call on two kinds of work that run
// one after the other today: the linear layers of ~3,200 rows, bound by the
// tensor cores (and the board's power), and the decode rows' attention over
// ~190 sequences of ~2,100 cached tokens, bound by HBM. This tool times one
// layer's worth of each, Llama-3-8B's shapes (bf16 q/k/v 6144x4096, o
// 4096x4096, gate/up 28672x4096, down 4096x14336 through cuBLASLt as the
// CUDA backend calls it, the heuristic's first choice; the tensor-core or
// split-KV decode kernel of launchPagedAttention over a bf16 paged pool,
// 32 query heads over 8 kv heads of 128):
//
//   serial      on the whole GPU, one stream: --layers x (GEMMs, attention);
//   together    the whole GPU, two streams, --layers of each, no partition;
//   split k     two green contexts, k SMs for the attention and the rest
//               for the GEMMs (cuBLASLt told the rest's SM count through
//               CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET), --layers of each at
//               once; beside it each part alone on its own partition.
//
//   lanes k     the schedule a forward call could run (per split k, and
//               on the whole GPU with two plain streams): the decode rows
//               (--decode's sequences, one row each) and the other rows as
//               two lanes with their own GEMMs, on the GEMMs' partition the
//               prefill rows' q/k/v, the decode rows' q/k/v, the prefill
//               rows' o, gate/up and down, then (after their attention on
//               the k SMs, which waited for their q/k/v) the decode rows'
//               o, gate/up and down; against serial.
//
//   disagg k    the decode rows as their own forward pass on k SMs: their
//               GEMMs (cuBLASLt's choice for k SMs) and their attention, one
//               after the other on the k SMs' stream, while the prefill
//               rows' GEMMs run on the rest, --layers of each lane with no
//               event between them (decode and prefill rows are different
//               sequences: nothing a lane computes is read by the other, so
//               the two may run their layers apart); against serial.
//
// --pieces P cuts the rows into P equal GEMMs a projection, as a pipeline
// of P nano-batches would run them (lanes and disagg only with P = 1; --lanes
// 0 skips lanes). Every figure is ms
// a layer, the median of --repeats samples; a sample is the wall time of
// --layers layers from an idle queue to both streams drained. Random operands
// (GemmBenchSupport: constant ones draw less power), and --warmup-s seconds of
// serial layers first, so the GEMMs run at the clock the board holds at its
// power limit. "result" lines name their fields.
//
// --power-s S measures energy instead (and nothing else): S seconds each of
// the idle board, the GEMMs alone, the attention alone and the serial layer,
// the board's energy counter read through NVML (loaded at run time, so the
// tool builds without NVML's header) before and after each phase. What it
// is for: on a board held at its power limit, work that runs beside the
// GEMMs takes its power from them. If the attention alone draws P_a watts
// over t_a, the idle board P_0 and the limit P_cap, no schedule that runs
// both at once (with the GEMMs' energy a FLOP unchanged) can take less than
// t_g + t_a (P_a - P_0) / (P_cap - P_0) a layer; the tool prints that bound
// beside the serial layer. It is not a hard bound: the attention on fewer
// SMs may move its bytes for less energy, so --attention-sms's partitions
// are measured too: the attention alone on k SMs, split k, and the serial
// layer with its attention on k SMs.
//
//===----------------------------------------------------------------------===//

#include "bench/GemmBenchSupport.cuh"
#include "runtime/cuda/Kernels.h"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace infer::bench;
using namespace infer::cuda;

namespace {

void checkDriver(CUresult status, const char *what) {
  if (status != CUDA_SUCCESS) {
    const char *text = nullptr;
    cuGetErrorString(status, &text);
    die(std::string(what) + ": " + (text ? text : "CUDA driver error"));
  }
}

struct Options {
  int64_t rows = 3200;
  std::vector<int64_t> pieces{1, 2};
  int decodeSeqs = 190, context = 2112;
  std::vector<int64_t> attentionSms{16, 24, 32, 48};
  int layers = 200, repeats = 3;
  double warmupSeconds = 4.0;
  bool lanes = true;
  double powerSeconds = 0;
};

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc)
      die("flag " + flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--rows")
      o.rows = std::stoll(value);
    else if (flag == "--pieces")
      o.pieces = parseList(value);
    else if (flag == "--decode") {
      const size_t colon = value.find(':');
      if (colon == std::string::npos)
        die("--decode takes SEQS:CONTEXT");
      o.decodeSeqs = std::stoi(value.substr(0, colon));
      o.context = std::stoi(value.substr(colon + 1));
    } else if (flag == "--attention-sms")
      o.attentionSms = parseList(value);
    else if (flag == "--layers")
      o.layers = std::stoi(value);
    else if (flag == "--repeats")
      o.repeats = std::stoi(value);
    else if (flag == "--warmup-s")
      o.warmupSeconds = std::stod(value);
    else if (flag == "--lanes")
      o.lanes = value != "0";
    else if (flag == "--power-s")
      o.powerSeconds = std::stod(value);
    else
      die("unknown flag " + flag);
  }
  if (o.rows <= 0 || o.decodeSeqs <= 0 || o.context <= 0 || o.layers <= 0 ||
      o.repeats <= 0)
    die("--rows, --decode, --layers and --repeats take positive values");
  if (o.decodeSeqs >= o.rows)
    die("--rows counts the decode rows and some prefill rows: more than "
        "--decode's sequences");
  for (int64_t p : o.pieces)
    if (p <= 0 || o.rows % p != 0)
      die("--pieces must divide --rows");
  return o;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

/// One projection: y[T, N] = x[T, K] w[N, K]^T.
struct Projection {
  int64_t n, k;
};
constexpr Projection kLayer[] = {
    {6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};

/// A layer's GEMMs over `rows` in `pieces` equal parts, with the
/// heuristic's first choice for an `sms`-SM target (0: the device's).
struct LayerGemms {
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = size_t(32) << 20;
  __nv_bfloat16 *x = nullptr, *w = nullptr, *y = nullptr;
  int64_t pieceRows = 0, pieces = 0;
  struct Product {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t w, x, y;
    cublasLtMatmulAlgo_t algo;
    const __nv_bfloat16 *wData;
  };
  std::vector<Product> products;

  LayerGemms(int64_t rows, int64_t pieces_, int sms, __nv_bfloat16 *x_,
             __nv_bfloat16 *w_, __nv_bfloat16 *y_)
      : x(x_), w(w_), y(y_), pieceRows(rows / pieces_), pieces(pieces_) {
    check(cublasLtCreate(&handle), "cublasLtCreate");
    check(cudaMalloc(&workspace, workspaceBytes), "workspace");
    const __nv_bfloat16 *weights = w;
    for (const Projection &p : kLayer) {
      Product product{};
      product.op = backendMatmulDesc();
      if (sms > 0) {
        const int32_t target = sms;
        check(cublasLtMatmulDescSetAttribute(
                  product.op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &target,
                  sizeof(target)),
              "SM count target");
      }
      check(cublasLtMatrixLayoutCreate(&product.w, CUDA_R_16BF, p.k, p.n, p.k),
            "w layout");
      check(cublasLtMatrixLayoutCreate(&product.x, CUDA_R_16BF, p.k, pieceRows,
                                       p.k),
            "x layout");
      check(cublasLtMatrixLayoutCreate(&product.y, CUDA_R_16BF, p.n, pieceRows,
                                       p.n),
            "y layout");
      cublasLtMatmulPreference_t preference =
          backendPreference(workspaceBytes, /*restrictReduction=*/true);
      cublasLtMatmulHeuristicResult_t result{};
      int count = 0;
      check(cublasLtMatmulAlgoGetHeuristic(handle, product.op, product.w,
                                           product.x, product.y, product.y,
                                           preference, 1, &result, &count),
            "heuristic");
      cublasLtMatmulPreferenceDestroy(preference);
      if (count == 0)
        die("cuBLASLt has no algorithm for " + std::to_string(p.n) + "x" +
            std::to_string(p.k));
      product.algo = result.algo;
      product.wData = weights;
      weights += p.n * p.k;
      products.push_back(product);
    }
  }
  ~LayerGemms() {
    for (Product &p : products) {
      cublasLtMatrixLayoutDestroy(p.y);
      cublasLtMatrixLayoutDestroy(p.x);
      cublasLtMatrixLayoutDestroy(p.w);
      cublasLtMatmulDescDestroy(p.op);
    }
    cudaFree(workspace);
    cublasLtDestroy(handle);
  }
  LayerGemms(const LayerGemms &) = delete;

  /// Products [first, last) of kLayer (0 q/k/v, 1 o, 2 gate/up, 3 down).
  void run(cudaStream_t stream, size_t first = 0, size_t last = 4) {
    const float one = 1.0f, zero = 0.0f;
    for (int64_t piece = 0; piece < pieces; ++piece)
      for (size_t i = first; i < last; ++i) {
        const Product &p = products[i];
        // x and y are large enough for the widest row of every product.
        const __nv_bfloat16 *xs = x + piece * pieceRows * 14336;
        __nv_bfloat16 *ys = y + piece * pieceRows * 28672;
        check(cublasLtMatmul(handle, p.op, &one, p.wData, p.w, xs, p.x, &zero,
                             ys, p.y, ys, p.y, &p.algo, workspace,
                             workspaceBytes, stream),
              "cublasLtMatmul");
      }
  }
};

/// A decode batch: `seqs` sequences of `context` cached tokens in a
/// one-layer bf16 pool of shuffled blocks, one new token each.
struct DecodeBatch {
  CacheDims dims{1, 8, 128, 16};
  AttentionDims attention;
  __nv_bfloat16 *pool = nullptr, *q = nullptr, *out = nullptr;
  int32_t *tables = nullptr, *lens = nullptr, *starts = nullptr;
  float *workspace = nullptr;
  size_t workspaceBytes = 0;
  int64_t seqs = 0, maxBlocks = 0;

  DecodeBatch(int seqs_, int context, std::mt19937 &rng) : seqs(seqs_) {
    attention.numHeads = 32;
    attention.numKVHeads = dims.numKVHeads;
    attention.headDim = dims.headDim;
    attention.scale = 1.0f / std::sqrt(float(dims.headDim));
    maxBlocks = (context + dims.blockSize - 1) / dims.blockSize;
    const int64_t blocks = seqs * maxBlocks;
    const int64_t elements =
        blocks * 2 * int64_t(dims.blockSize) * dims.numKVHeads * dims.headDim;
    check(cudaMalloc(&pool, elements * 2), "pool");
    fillKernel<<<1024, 256>>>(pool, elements, 7u, 0.5f);
    const int64_t qElements = seqs * attention.numHeads * dims.headDim;
    check(cudaMalloc(&q, qElements * 2), "q");
    check(cudaMalloc(&out, qElements * 2), "out");
    fillKernel<<<256, 256>>>(q, qElements, 11u, 1.0f);
    check(cudaGetLastError(), "fill");
    std::vector<int32_t> order(blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int32_t> contextLens(seqs, context), queryStarts(seqs + 1);
    std::iota(queryStarts.begin(), queryStarts.end(), 0);
    tables = uploadInts(order);
    lens = uploadInts(contextLens);
    starts = uploadInts(queryStarts);
    workspaceBytes = splitKVWorkspaceBytes(dims.headDim);
    check(cudaMalloc(&workspace, workspaceBytes), "split-KV workspace");
  }
  ~DecodeBatch() {
    for (void *p : {static_cast<void *>(pool), static_cast<void *>(q),
                    static_cast<void *>(out), static_cast<void *>(tables),
                    static_cast<void *>(lens), static_cast<void *>(starts),
                    static_cast<void *>(workspace)})
      cudaFree(p);
  }
  DecodeBatch(const DecodeBatch &) = delete;

  void run(cudaStream_t stream) {
    check(launchPagedAttention(q, KVCachePool(pool), dims, attention, tables,
                               maxBlocks, lens, starts, seqs, seqs, out, stream,
                               SplitKVWorkspace{workspace, workspaceBytes}),
          "launchPagedAttention");
  }

  double kvBytes(int context) const {
    return double(seqs) * context * dims.numKVHeads * 2 * dims.headDim * 2;
  }
};

/// Two green contexts of the device: `attentionSms` SMs (rounded up as the
/// driver requires) and the rest, a stream in each.
struct Partition {
  CUgreenCtx attentionCtx = nullptr, gemmCtx = nullptr;
  CUstream attention = nullptr, gemm = nullptr;
  unsigned attentionSms = 0, gemmSms = 0;

  explicit Partition(unsigned wanted) {
    CUdevice device;
    checkDriver(cuDeviceGet(&device, 0), "cuDeviceGet");
    CUdevResource all{}, part{}, rest{};
    checkDriver(cuDeviceGetDevResource(device, &all, CU_DEV_RESOURCE_TYPE_SM),
                "cuDeviceGetDevResource");
    unsigned groups = 1;
    if (cuDevSmResourceSplitByCount(&part, &groups, &all, &rest, 0, wanted) !=
            CUDA_SUCCESS ||
        groups != 1)
      die("the driver has no partition of " + std::to_string(wanted) +
          " SMs (Hopper's are multiples of 8)");
    attentionSms = part.sm.smCount;
    gemmSms = rest.sm.smCount;
    CUdevResourceDesc partDesc, restDesc;
    checkDriver(cuDevResourceGenerateDesc(&partDesc, &part, 1),
                "cuDevResourceGenerateDesc");
    checkDriver(cuDevResourceGenerateDesc(&restDesc, &rest, 1),
                "cuDevResourceGenerateDesc");
    checkDriver(cuGreenCtxCreate(&attentionCtx, partDesc, device,
                                 CU_GREEN_CTX_DEFAULT_STREAM),
                "cuGreenCtxCreate");
    checkDriver(cuGreenCtxCreate(&gemmCtx, restDesc, device,
                                 CU_GREEN_CTX_DEFAULT_STREAM),
                "cuGreenCtxCreate");
    checkDriver(cuGreenCtxStreamCreate(&attention, attentionCtx,
                                       CU_STREAM_NON_BLOCKING, 0),
                "cuGreenCtxStreamCreate");
    checkDriver(
        cuGreenCtxStreamCreate(&gemm, gemmCtx, CU_STREAM_NON_BLOCKING, 0),
        "cuGreenCtxStreamCreate");
  }
  ~Partition() {
    cuStreamDestroy(attention);
    cuStreamDestroy(gemm);
    cuGreenCtxDestroy(attentionCtx);
    cuGreenCtxDestroy(gemmCtx);
  }
  Partition(const Partition &) = delete;

  cudaStream_t gemmStream() const {
    return reinterpret_cast<cudaStream_t>(gemm);
  }
  cudaStream_t attentionStream() const {
    return reinterpret_cast<cudaStream_t>(attention);
  }
};

/// ms a layer: the wall time of `layers` calls of each non-null part, each
/// on its stream, from idle to both drained.
double timeLayers(int layers, cudaStream_t gemmStream,
                  const std::function<void(cudaStream_t)> &gemm,
                  cudaStream_t attentionStream,
                  const std::function<void(cudaStream_t)> &attention) {
  check(cudaDeviceSynchronize(), "sync");
  if (gemmStream)
    check(cudaStreamSynchronize(gemmStream), "sync");
  if (attentionStream)
    check(cudaStreamSynchronize(attentionStream), "sync");
  const auto start = std::chrono::steady_clock::now();
  // Interleaved, so neither stream waits on the host for its next launch.
  for (int l = 0; l < layers; ++l) {
    if (gemm)
      gemm(gemmStream);
    if (attention)
      attention(attentionStream);
  }
  if (gemmStream)
    check(cudaStreamSynchronize(gemmStream), "sync");
  if (attentionStream)
    check(cudaStreamSynchronize(attentionStream), "sync");
  const auto end = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(end - start).count() /
         layers;
}

/// Medians over `repeats` rounds of ms a layer: `first` alone on
/// firstStream, `second` alone on secondStream, both at once on their
/// streams, and `serialLayer` on serialStream, in that order each round.
struct PairTimes {
  double first, second, both, serial;
};
PairTimes timePair(int layers, int repeats, cudaStream_t firstStream,
                   const std::function<void(cudaStream_t)> &first,
                   cudaStream_t secondStream,
                   const std::function<void(cudaStream_t)> &second,
                   cudaStream_t serialStream,
                   const std::function<void(cudaStream_t)> &serialLayer) {
  std::vector<double> f, s, b, serial;
  for (int r = 0; r < repeats; ++r) {
    f.push_back(timeLayers(layers, firstStream, first, nullptr, nullptr));
    s.push_back(timeLayers(layers, nullptr, nullptr, secondStream, second));
    b.push_back(timeLayers(layers, firstStream, first, secondStream, second));
    serial.push_back(
        timeLayers(layers, serialStream, serialLayer, nullptr, nullptr));
  }
  return {median(f), median(s), median(b), median(serial)};
}

/// ms a layer of the two-lane schedule: on gemmStream the prefill rows'
/// q/k/v and the decode rows' (then `ready`), the prefill rows' o, gate/up
/// and down, and, once the decode rows' attention on attentionStream has
/// recorded `done`, the decode rows' o, gate/up and down.
double timeLanes(int layers, LayerGemms &prefillRows, LayerGemms &decodeRows,
                 DecodeBatch &decode, cudaStream_t gemmStream,
                 cudaStream_t attentionStream, cudaEvent_t ready,
                 cudaEvent_t done) {
  check(cudaDeviceSynchronize(), "sync");
  check(cudaStreamSynchronize(gemmStream), "sync");
  check(cudaStreamSynchronize(attentionStream), "sync");
  const auto start = std::chrono::steady_clock::now();
  for (int l = 0; l < layers; ++l) {
    prefillRows.run(gemmStream, 0, 1);
    decodeRows.run(gemmStream, 0, 1);
    check(cudaEventRecord(ready, gemmStream), "record");
    check(cudaStreamWaitEvent(attentionStream, ready, 0), "wait");
    decode.run(attentionStream);
    check(cudaEventRecord(done, attentionStream), "record");
    prefillRows.run(gemmStream, 1, 4);
    check(cudaStreamWaitEvent(gemmStream, done, 0), "wait");
    decodeRows.run(gemmStream, 1, 4);
  }
  check(cudaStreamSynchronize(gemmStream), "sync");
  check(cudaStreamSynchronize(attentionStream), "sync");
  const auto end = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(end - start).count() /
         layers;
}

} // namespace

/// The board's energy counter, clocks and power limit through NVML, opened
/// with dlopen: the driver ships libnvidia-ml.so.1 wherever a GPU runs, and
/// the toolkit does not always ship nvml.h. The few entry points used here
/// are declared by hand with NVML's C signatures.
class Nvml {
public:
  explicit Nvml(int cudaDevice) {
    library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library)
      die("--power-s needs NVML (libnvidia-ml.so.1): " +
          std::string(dlerror()));
    init = load<Init>("nvmlInit_v2");
    shutdown = load<Shutdown>("nvmlShutdown");
    byBusId = load<ByBusId>("nvmlDeviceGetHandleByPciBusId_v2");
    energy = load<Energy>("nvmlDeviceGetTotalEnergyConsumption");
    clock = load<Clock>("nvmlDeviceGetClockInfo");
    limit = load<Limit>("nvmlDeviceGetEnforcedPowerLimit");
    call(init(), "nvmlInit");
    char busId[32] = {};
    check(cudaDeviceGetPCIBusId(busId, sizeof(busId), cudaDevice), "bus id");
    call(byBusId(busId, &device), "nvmlDeviceGetHandleByPciBusId");
  }
  ~Nvml() {
    if (shutdown)
      shutdown();
    if (library)
      dlclose(library);
  }
  Nvml(const Nvml &) = delete;
  Nvml &operator=(const Nvml &) = delete;

  /// Joules since the driver loaded (the counter counts mJ).
  double joules() const {
    unsigned long long millijoules = 0;
    call(energy(device, &millijoules), "nvmlDeviceGetTotalEnergyConsumption");
    return millijoules * 1e-3;
  }
  unsigned smClockMHz() const {
    unsigned mhz = 0;
    call(clock(device, /*NVML_CLOCK_SM=*/1, &mhz), "nvmlDeviceGetClockInfo");
    return mhz;
  }
  double powerLimitWatts() const {
    unsigned milliwatts = 0;
    call(limit(device, &milliwatts), "nvmlDeviceGetEnforcedPowerLimit");
    return milliwatts * 1e-3;
  }

private:
  using Init = int (*)();
  using Shutdown = int (*)();
  using ByBusId = int (*)(const char *, void **);
  using Energy = int (*)(void *, unsigned long long *);
  using Clock = int (*)(void *, int, unsigned *);
  using Limit = int (*)(void *, unsigned *);

  template <typename F> F load(const char *name) {
    void *symbol = dlsym(library, name);
    if (!symbol)
      die(std::string("NVML has no ") + name);
    return reinterpret_cast<F>(symbol);
  }
  static void call(int status, const char *what) {
    if (status != 0)
      die(std::string(what) + " failed: NVML error " + std::to_string(status));
  }

  void *library = nullptr;
  void *device = nullptr;
  Init init = nullptr;
  Shutdown shutdown = nullptr;
  ByBusId byBusId = nullptr;
  Energy energy = nullptr;
  Clock clock = nullptr;
  Limit limit = nullptr;
};

/// One --power-s phase: how long a layer took, what the board drew.
struct PowerPhase {
  double msPerLayer = 0, joulesPerLayer = 0, watts = 0;
  unsigned smMHz = 0;
};

/// Runs `first` on firstStream and `second` on secondStream (either may be
/// null; both null: the idle board) in batches of 20 layers for `seconds`,
/// reading the energy counter before and after and the SM clock half way.
PowerPhase
measurePower(const Nvml &nvml, double seconds, cudaStream_t firstStream,
             const std::function<void(cudaStream_t)> &first,
             cudaStream_t secondStream = nullptr,
             const std::function<void(cudaStream_t)> &second = nullptr) {
  check(cudaDeviceSynchronize(), "sync");
  const double startJoules = nvml.joules();
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  int64_t layers = 0;
  unsigned mhz = 0;
  while (elapsed() < seconds) {
    if (first || second) {
      timeLayers(20, firstStream, first, secondStream, second);
      layers += 20;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (mhz == 0 && elapsed() >= seconds / 2)
      mhz = nvml.smClockMHz();
  }
  const double wall = elapsed();
  const double joules = nvml.joules() - startJoules;
  PowerPhase phase;
  phase.watts = joules / wall;
  phase.smMHz = mhz;
  if (layers > 0) {
    phase.msPerLayer = wall * 1e3 / layers;
    phase.joulesPerLayer = joules / layers;
  }
  return phase;
}

int main(int argc, char **argv) {
  benchTool = "infer-overlap-bench";
  const Options o = parse(argc, argv);
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "device");
  checkDriver(cuInit(0), "cuInit");
  check(cudaFree(nullptr), "context");

  int64_t weightElements = 0;
  for (const Projection &p : kLayer)
    weightElements += p.n * p.k;
  __nv_bfloat16 *x = nullptr, *w = nullptr, *y = nullptr;
  check(cudaMalloc(&x, o.rows * 14336 * 2), "x");
  check(cudaMalloc(&w, weightElements * 2), "w");
  check(cudaMalloc(&y, o.rows * 28672 * 2), "y");
  fillKernel<<<1024, 256>>>(x, o.rows * 14336, 1u, 1.0f);
  fillKernel<<<1024, 256>>>(w, weightElements, 2u, 0.05f);
  check(cudaGetLastError(), "fill");
  std::mt19937 rng(1);
  DecodeBatch decode(o.decodeSeqs, o.context, rng);
  check(cudaDeviceSynchronize(), "setup");

  double gemmFlops = 0;
  for (const Projection &p : kLayer)
    gemmFlops += 2.0 * o.rows * p.n * p.k;
  std::printf("device %s, %d SMs; rows %lld, decode %d x %d (%.2f GB of KV a "
              "layer), %.1f GFLOP of GEMMs a layer\n",
              prop.name, prop.multiProcessorCount,
              static_cast<long long>(o.rows), o.decodeSeqs, o.context,
              decode.kvBytes(o.context) / 1e9, gemmFlops / 1e9);

  cudaStream_t stream, second;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  check(cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking), "stream");
  auto attend = [&](cudaStream_t s) { decode.run(s); };
  cudaEvent_t ready, done;
  check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "event");
  check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "event");

  // The two lanes (the decode rows' own GEMMs, their attention on
  // attentionStream, a forward call's dependencies) against serialLayer
  // (the whole rows in one piece), the lanes' GEMMs chosen for `sms` SMs
  // (0: the device's).
  const int64_t prefillRows = o.rows - o.decodeSeqs;
  auto measureLanes = [&](const std::function<void(cudaStream_t)> &serialLayer,
                          int sms, cudaStream_t gemmStream,
                          cudaStream_t attentionStream,
                          const std::string &attentionSms,
                          const std::string &gemmSms) {
    LayerGemms prefillGemms(prefillRows, 1, sms, x, w, y);
    LayerGemms decodeGemms(o.decodeSeqs, 1, sms, x + prefillRows * 14336, w,
                           y + prefillRows * 28672);
    auto prefillAlone = [&](cudaStream_t s) { prefillGemms.run(s); };
    auto decodeAlone = [&](cudaStream_t s) { decodeGemms.run(s); };
    std::vector<double> lanes, serial, pa, da;
    for (int r = 0; r < o.repeats; ++r) {
      lanes.push_back(timeLanes(o.layers, prefillGemms, decodeGemms, decode,
                                gemmStream, attentionStream, ready, done));
      pa.push_back(
          timeLayers(o.layers, gemmStream, prefillAlone, nullptr, nullptr));
      da.push_back(
          timeLayers(o.layers, gemmStream, decodeAlone, nullptr, nullptr));
      serial.push_back(
          timeLayers(o.layers, stream, serialLayer, nullptr, nullptr));
    }
    const double la = median(lanes), sl = median(serial);
    std::printf("result lanes attention_sms=%s gemm_sms=%s prefill_rows=%lld "
                "decode_rows=%d prefill_gemm_ms=%.3f decode_gemm_ms=%.3f "
                "lanes_ms=%.3f serial_ms=%.3f lanes_vs_serial=%.3f\n",
                attentionSms.c_str(), gemmSms.c_str(),
                static_cast<long long>(prefillRows), o.decodeSeqs, median(pa),
                median(da), la, sl, la / sl);
  };

  // Intra-GPU disaggregation: the decode rows' own GEMMs and attention on
  // `partition`'s attention SMs, the prefill rows' GEMMs on the rest, no
  // dependency between the lanes.
  auto measureDisagg = [&](const std::function<void(cudaStream_t)> &serialLayer,
                           const Partition &partition) {
    LayerGemms prefillGemms(prefillRows, 1, int(partition.gemmSms), x, w, y);
    LayerGemms decodeGemms(o.decodeSeqs, 1, int(partition.attentionSms),
                           x + prefillRows * 14336, w, y + prefillRows * 28672);
    auto prefillLane = [&](cudaStream_t s) { prefillGemms.run(s); };
    auto decodeLane = [&](cudaStream_t s) {
      decodeGemms.run(s);
      decode.run(s);
    };
    const PairTimes t =
        timePair(o.layers, o.repeats, partition.gemmStream(), prefillLane,
                 partition.attentionStream(), decodeLane, stream, serialLayer);
    std::printf("result disagg decode_sms=%u prefill_sms=%u prefill_rows=%lld "
                "decode_rows=%d prefill_lane_ms=%.3f decode_lane_ms=%.3f "
                "disagg_ms=%.3f serial_ms=%.3f disagg_vs_serial=%.3f\n",
                partition.attentionSms, partition.gemmSms,
                static_cast<long long>(prefillRows), o.decodeSeqs, t.first,
                t.second, t.both, t.serial, t.both / t.serial);
  };

  auto release = [&] {
    cudaEventDestroy(ready);
    cudaEventDestroy(done);
    cudaStreamDestroy(stream);
    cudaStreamDestroy(second);
    cudaFree(x);
    cudaFree(w);
    cudaFree(y);
  };

  if (o.powerSeconds > 0) {
    Nvml nvml(0);
    LayerGemms full(o.rows, 1, 0, x, w, y);
    auto gemm = [&](cudaStream_t s) { full.run(s); };
    auto serialLayer = [&](cudaStream_t s) {
      full.run(s);
      decode.run(s);
    };
    const PowerPhase idle = measurePower(nvml, o.powerSeconds, stream, nullptr);
    // The board to its sustained clock before the GEMMs' phase.
    measurePower(nvml, o.warmupSeconds, stream, serialLayer);
    const PowerPhase g = measurePower(nvml, o.powerSeconds, stream, gemm);
    const PowerPhase a = measurePower(nvml, o.powerSeconds, stream, attend);
    const PowerPhase s =
        measurePower(nvml, o.powerSeconds, stream, serialLayer);
    // The attention alone on k SMs, and beside the GEMMs on the rest.
    std::vector<std::pair<std::string, PowerPhase>> parts;
    for (int64_t wanted : o.attentionSms) {
      Partition partition(static_cast<unsigned>(wanted));
      LayerGemms rest(o.rows, 1, static_cast<int>(partition.gemmSms), x, w, y);
      auto restGemm = [&](cudaStream_t st) { rest.run(st); };
      const std::string k = std::to_string(partition.attentionSms);
      parts.emplace_back("attention_on_" + k,
                         measurePower(nvml, o.powerSeconds, nullptr, nullptr,
                                      partition.attentionStream(), attend));
      parts.emplace_back("split_" + k,
                         measurePower(nvml, o.powerSeconds,
                                      partition.gemmStream(), restGemm,
                                      partition.attentionStream(), attend));
      // Serial still, the GEMMs on every SM, the attention on k of them: the
      // same work one after the other, the attention's bytes moved by fewer
      // SMs.
      cudaStream_t as = partition.attentionStream();
      auto serialOnK = [&](cudaStream_t st) {
        full.run(st);
        check(cudaEventRecord(ready, st), "event");
        check(cudaStreamWaitEvent(as, ready), "wait");
        decode.run(as);
        check(cudaEventRecord(done, as), "event");
        check(cudaStreamWaitEvent(st, done), "wait");
      };
      parts.emplace_back("serial_attention_on_" + k,
                         measurePower(nvml, o.powerSeconds, stream, serialOnK));
    }
    auto line = [](const char *name, const PowerPhase &p) {
      std::printf(
          "result power phase=%s ms_per_layer=%.3f joules_per_layer=%.4f "
          "watts=%.0f sm_mhz=%u\n",
          name, p.msPerLayer, p.joulesPerLayer, p.watts, p.smMHz);
    };
    line("idle", idle);
    line("gemm", g);
    line("attention", a);
    line("serial", s);
    for (const auto &[name, phase] : parts)
      line(name.c_str(), phase);
    const double cap = nvml.powerLimitWatts();
    const double bound = g.msPerLayer + a.msPerLayer * (a.watts - idle.watts) /
                                            std::max(1.0, cap - idle.watts);
    std::printf("result power_bound limit_w=%.0f gemm_tflops=%.0f "
                "attention_gbps=%.0f serial_ms=%.3f sum_ms=%.3f "
                "overlap_bound_ms=%.3f bound_vs_serial=%.3f\n",
                cap, gemmFlops / (g.msPerLayer * 1e-3) / 1e12,
                decode.kvBytes(o.context) / (a.msPerLayer * 1e-3) / 1e9,
                s.msPerLayer, g.msPerLayer + a.msPerLayer, bound,
                bound / s.msPerLayer);
    release();
    return 0;
  }

  for (int64_t pieces : o.pieces) {
    LayerGemms full(o.rows, pieces, 0, x, w, y);
    auto gemm = [&](cudaStream_t s) { full.run(s); };
    auto serialLayer = [&](cudaStream_t s) {
      full.run(s);
      decode.run(s);
    };
    // The board to its sustained clock.
    const auto warm = std::chrono::steady_clock::now();
    while (
        std::chrono::duration<double>(std::chrono::steady_clock::now() - warm)
            .count() < o.warmupSeconds)
      timeLayers(20, stream, serialLayer, nullptr, nullptr);

    std::vector<double> gemmAlone, attentionAlone, serial, together;
    for (int r = 0; r < o.repeats; ++r) {
      gemmAlone.push_back(timeLayers(o.layers, stream, gemm, nullptr, nullptr));
      attentionAlone.push_back(
          timeLayers(o.layers, nullptr, nullptr, stream, attend));
      serial.push_back(
          timeLayers(o.layers, stream, serialLayer, nullptr, nullptr));
      together.push_back(timeLayers(o.layers, stream, gemm, second, attend));
    }
    const double g = median(gemmAlone), a = median(attentionAlone),
                 s = median(serial), t = median(together);
    std::printf("result whole pieces=%lld gemm_ms=%.3f gemm_tflops=%.0f "
                "attention_ms=%.3f attention_gbps=%.0f serial_ms=%.3f "
                "together_ms=%.3f together_vs_serial=%.3f\n",
                static_cast<long long>(pieces), g,
                gemmFlops / (g * 1e-3) / 1e12, a,
                decode.kvBytes(o.context) / (a * 1e-3) / 1e9, s, t, t / s);

    for (int64_t wanted : o.attentionSms) {
      Partition partition(static_cast<unsigned>(wanted));
      LayerGemms rest(o.rows, pieces, static_cast<int>(partition.gemmSms), x, w,
                      y);
      auto restGemm = [&](cudaStream_t st) { rest.run(st); };
      cudaStream_t gs = partition.gemmStream();
      cudaStream_t as = partition.attentionStream();
      const PairTimes st = timePair(o.layers, o.repeats, gs, restGemm, as,
                                    attend, stream, serialLayer);
      std::printf("result split pieces=%lld attention_sms=%u gemm_sms=%u "
                  "gemm_ms=%.3f attention_ms=%.3f split_ms=%.3f "
                  "serial_ms=%.3f split_vs_serial=%.3f\n",
                  static_cast<long long>(pieces), partition.attentionSms,
                  partition.gemmSms, st.first, st.second, st.both, st.serial,
                  st.both / st.serial);
      if (pieces == 1) {
        if (o.lanes)
          measureLanes(serialLayer, static_cast<int>(partition.gemmSms), gs, as,
                       std::to_string(partition.attentionSms),
                       std::to_string(partition.gemmSms));
        measureDisagg(serialLayer, partition);
      }
    }
    if (pieces == 1 && o.lanes)
      measureLanes(serialLayer, 0, stream, second, "all", "all");
  }
  release();
  return 0;
}
