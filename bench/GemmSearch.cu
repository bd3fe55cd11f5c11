//===- GemmSearch.cu - cuBLASLt's configurations against its heuristic ----===//
//
//   infer-gemm-search [--rows 256,1024,2048] [--shapes 6144x4096,...]
//       [--split-k 1,2,3,4,6,8] [--heuristic 32] [--top 3] [--no-search]
//       [--fp32-y] [--sustained MS] [--round R]
//
// For each y[T,N] = x[T,K] * w[N,K]^T in bf16 with fp32 accumulation and a
// bf16 y (--fp32-y: an fp32 y, as the logits, without the search) (the
// CUDA backend's bf16 cuBLASLt path, runtime/cuda/Gemm.cpp:
// TN layout, split-K partial sums reduced in fp32 only), times
//   heuristic#0  the heuristic's first choice (what a forward call runs
//                for T > 256),
//   heuristic    the fastest of its first --heuristic candidates (what
//                Gemm::tune picks from, with 8, for T <= 256),
//   search       the fastest configuration cuBLASLt accepts
//                (cublasLtMatmulAlgoCheck) over every algorithm id, tile,
//                split-K count (--split-k), reduction scheme and cluster
//                shape, stages left to the library; the --top fastest are
//                printed with their settings (--no-search: not run),
//   skinny       the Hopper skinny kernel (launchSkinnyGemmSm90, T <= 256
//                on an sm_90a device) at 1, 2 and skinnyGemmSm90Splits K
//                splits in clusters of 1, 2 and 4 CTAs: the fastest, with
//                its splits and cluster,
//   sm90         the persistent Hopper GEMM (launchGemmSm90, kStore: what
//                linear_swiglu runs with its SwiGLU epilogue) where it
//                takes the shape (N % 256 == 0, an sm_90a device).
// --sustained MS times the first --heuristic candidates the way a long
// offline run meets them instead: the board first held at its power limit
// (2 s of the heuristic's first choice), then each candidate run back to back
// for MS milliseconds, 3 rounds in turn, over enough copies of the weights
// that none stays in L2 (no flush between runs); the median of the rounds'
// mean times. A 700 W board runs sustained bf16 GEMMs at ~1.4-1.6 GHz instead
// of the ~1.98 GHz a short burst gets, so configurations can rank otherwise.
// --round R adds the heuristic's first choice for the rows rounded up to a
// multiple of R as the last candidate (where cuBLASLt takes it for T rows).
// Operands are random bf16 values (constant ones draw less power and run
// faster than a model's), the weights flushed from L2 before every timed
// run; each time is the minimum of 3 runs (search) or the median of 7
// (the final comparison of the three). TFLOP/s and the weight bytes' GB/s
// beside. Default shapes: Llama-3-8B's q/k/v, o, gate/up and down.
//
//===----------------------------------------------------------------------===//

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "bench/GemmBenchSupport.cuh"
#include "runtime/cuda/GemmSm90.h"
#include "runtime/cuda/GemvKernels.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using infer::bench::backendMatmulDesc;
using infer::bench::backendPreference;
using infer::bench::check;
using infer::bench::die;
using infer::bench::fillKernel;
using infer::bench::parseList;
using infer::bench::parseShapes;

struct Problem {
  int64_t t, n, k;
  __nv_bfloat16 *x, *w;
  void *y;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t wl, xl, yl;
};

struct Timer {
  cudaStream_t stream;
  cudaEvent_t start, stop;
  void *flush;
  size_t flushBytes;
};

/// Milliseconds of one run of `launch` after an L2 flush (-1: refused).
float timeLaunch(const std::function<bool()> &launch, Timer &timer,
                 int seed) {
  check(cudaMemsetAsync(timer.flush, seed, timer.flushBytes, timer.stream),
        "flush");
  check(cudaEventRecord(timer.start, timer.stream), "event");
  const bool ok = launch();
  check(cudaEventRecord(timer.stop, timer.stream), "event");
  check(cudaEventSynchronize(timer.stop), "sync");
  if (!ok)
    return -1.0f;
  float ms = 0;
  check(cudaEventElapsedTime(&ms, timer.start, timer.stop), "elapsed");
  return ms;
}

/// Milliseconds of one run of `algo` after an L2 flush (-1: refused).
float timeOnce(cublasLtHandle_t handle, const Problem &p,
               const cublasLtMatmulAlgo_t &algo, void *workspace,
               size_t workspaceBytes, Timer &timer, int seed) {
  const float alpha = 1.0f, beta = 0.0f;
  return timeLaunch(
      [&] {
        return cublasLtMatmul(handle, p.op, &alpha, p.w, p.wl, p.x, p.xl,
                              &beta, p.y, p.yl, p.y, p.yl, &algo, workspace,
                              workspaceBytes,
                              timer.stream) == CUBLAS_STATUS_SUCCESS;
      },
      timer, seed);
}

float timeMin(cublasLtHandle_t handle, const Problem &p,
              const cublasLtMatmulAlgo_t &algo, void *workspace,
              size_t workspaceBytes, Timer &timer, int runs) {
  float best = -1.0f;
  for (int r = 0; r < runs; ++r) {
    const float ms =
        timeOnce(handle, p, algo, workspace, workspaceBytes, timer, r);
    if (ms < 0)
      return -1.0f;
    best = best < 0 ? ms : std::min(best, ms);
  }
  return best;
}

float timeMedian(cublasLtHandle_t handle, const Problem &p,
                 const cublasLtMatmulAlgo_t &algo, void *workspace,
                 size_t workspaceBytes, Timer &timer) {
  std::vector<float> ms;
  for (int r = 0; r < 7; ++r)
    ms.push_back(
        timeOnce(handle, p, algo, workspace, workspaceBytes, timer, r));
  std::sort(ms.begin(), ms.end());
  return ms[3];
}

template <typename T>
std::vector<T> capList(const cublasLtMatmulAlgo_t &algo,
                       cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) !=
          CUBLAS_STATUS_SUCCESS ||
      bytes == 0)
    return {};
  std::vector<T> values(bytes / sizeof(T));
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, values.data(), bytes,
                                        &written) != CUBLAS_STATUS_SUCCESS)
    return {};
  values.resize(written / sizeof(T));
  return values;
}

template <typename T>
T capValue(const cublasLtMatmulAlgo_t &algo,
           cublasLtMatmulAlgoCapAttributes_t attr) {
  T value{};
  size_t written = 0;
  cublasLtMatmulAlgoCapGetAttribute(&algo, attr, &value, sizeof(value),
                                    &written);
  return value;
}

template <typename T>
T configValue(const cublasLtMatmulAlgo_t &algo,
              cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value),
                                       &written);
  return value;
}

std::string describe(const cublasLtMatmulAlgo_t &algo) {
  char text[160];
  std::snprintf(
      text, sizeof(text),
      "id %d tile %u stages %u split-k %d reduction %u cluster %u swizzle %u "
      "option %u",
      configValue<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID),
      configValue<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
      configValue<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
      configValue<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
      configValue<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
      configValue<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
      configValue<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
      configValue<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
  return text;
}

/// The mean milliseconds of `algo` run back to back for about `ms`
/// milliseconds, cycling over `weights` (no flush: the copies outsize L2).
float timeSustained(cublasLtHandle_t handle, const Problem &p,
                    const std::vector<__nv_bfloat16 *> &weights,
                    const cublasLtMatmulAlgo_t &algo, void *workspace,
                    size_t workspaceBytes, Timer &timer, double ms) {
  const float alpha = 1.0f, beta = 0.0f;
  auto launch = [&](int64_t i) {
    return cublasLtMatmul(handle, p.op, &alpha, weights[i % weights.size()],
                          p.wl, p.x, p.xl, &beta, p.y, p.yl, p.y, p.yl, &algo,
                          workspace, workspaceBytes,
                          timer.stream) == CUBLAS_STATUS_SUCCESS;
  };
  // Calibrate the count on 8 runs, then time the whole batch.
  check(cudaEventRecord(timer.start, timer.stream), "event");
  for (int64_t i = 0; i < 8; ++i)
    if (!launch(i))
      return -1.0f;
  check(cudaEventRecord(timer.stop, timer.stream), "event");
  check(cudaEventSynchronize(timer.stop), "sync");
  float first = 0;
  check(cudaEventElapsedTime(&first, timer.start, timer.stop), "elapsed");
  const int64_t runs =
      std::max<int64_t>(8, static_cast<int64_t>(ms / (first / 8)));
  check(cudaEventRecord(timer.start, timer.stream), "event");
  for (int64_t i = 0; i < runs; ++i)
    launch(i);
  check(cudaEventRecord(timer.stop, timer.stream), "event");
  check(cudaEventSynchronize(timer.stop), "sync");
  float total = 0;
  check(cudaEventElapsedTime(&total, timer.start, timer.stop), "elapsed");
  return total / static_cast<float>(runs);
}

/// --sustained: the heuristic's candidates at the board's power limit.
void sustainedCompare(
    cublasLtHandle_t handle, const Problem &p,
    const std::vector<cublasLtMatmulHeuristicResult_t> &results, int count,
    void *workspace, size_t workspaceBytes, Timer &timer, double ms) {
  const size_t weightBytes = size_t(p.n) * p.k * 2;
  const size_t copies = std::max<size_t>(
      1, ((size_t(160) << 20) + weightBytes - 1) / weightBytes);
  std::vector<__nv_bfloat16 *> weights = {p.w};
  for (size_t c = 1; c < copies; ++c) {
    __nv_bfloat16 *w;
    check(cudaMalloc(&w, weightBytes), "weights");
    fillKernel<<<1024, 256, 0, timer.stream>>>(w, p.n * p.k, 2 + c, 0.02f);
    weights.push_back(w);
  }
  timeSustained(handle, p, weights, results[0].algo, workspace, workspaceBytes,
                timer, 2000.0);
  std::vector<std::vector<float>> rounds(count);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < count; ++i)
      rounds[i].push_back(timeSustained(handle, p, weights, results[i].algo,
                                        workspace, workspaceBytes, timer, ms));
  int best = 0;
  std::vector<float> median(count);
  for (int i = 0; i < count; ++i) {
    std::sort(rounds[i].begin(), rounds[i].end());
    median[i] = rounds[i][1];
    if (median[i] > 0 && median[i] < median[best])
      best = i;
  }
  const double flops = 2.0 * p.t * p.n * p.k;
  std::printf("sustained | %lld | %lld x %lld | #0 %.1f us (%.0f TFLOP/s) | "
              "best #%d %.1f us (%.0f TFLOP/s) | %.3f | %s\n",
              (long long)p.t, (long long)p.n, (long long)p.k, median[0] * 1e3,
              flops / (median[0] * 1e-3) / 1e12, best, median[best] * 1e3,
              flops / (median[best] * 1e-3) / 1e12, median[best] / median[0],
              describe(results[best].algo).c_str());
  for (int i = 0; i < count; ++i)
    std::printf("  #%d %.1f us %s\n", i, median[i] * 1e3,
                describe(results[i].algo).c_str());
  std::fflush(stdout);
  for (size_t c = 1; c < weights.size(); ++c)
    cudaFree(weights[c]);
}

struct Found {
  float ms;
  cublasLtMatmulAlgo_t algo;
};

} // namespace

int main(int argc, char **argv) {
  infer::bench::benchTool = "infer-gemm-search";
  std::vector<int64_t> rows = {256, 1024, 2048};
  std::vector<std::pair<int64_t, int64_t>> shapes = {
      {6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  std::vector<int64_t> splits = {1, 2, 3, 4, 6, 8};
  int heuristicCount = 32, top = 3;
  bool search = true, fp32Y = false;
  double sustainedMs = 0;
  int64_t roundRows = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc)
        die(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--rows")
      rows = parseList(next());
    else if (arg == "--split-k")
      splits = parseList(next());
    else if (arg == "--heuristic")
      heuristicCount = std::stoi(next());
    else if (arg == "--top")
      top = std::stoi(next());
    else if (arg == "--no-search")
      search = false;
    else if (arg == "--fp32-y")
      fp32Y = true;
    else if (arg == "--sustained")
      sustainedMs = std::stod(next());
    else if (arg == "--round")
      roundRows = std::stoll(next());
    else if (arg == "--shapes") {
      shapes = parseShapes(next());
    } else {
      die("unknown argument " + arg +
          " (--rows, --shapes, --split-k, --heuristic, --top, "
          "--no-search, --fp32-y, --sustained, --round)");
    }
  }

  if (fp32Y || sustainedMs > 0) // the enumeration is of bf16 outputs'
    search = false;             // algorithms, timed in bursts
  cublasLtHandle_t handle;
  check(cublasLtCreate(&handle), "cublasLtCreate");
  const size_t workspaceBytes = size_t(64) << 20;
  void *workspace;
  check(cudaMalloc(&workspace, workspaceBytes), "workspace");
  Timer timer;
  check(cudaStreamCreate(&timer.stream), "stream");
  check(cudaEventCreate(&timer.start), "event");
  check(cudaEventCreate(&timer.stop), "event");
  timer.flushBytes = size_t(128) << 20;
  check(cudaMalloc(&timer.flush, timer.flushBytes), "flush");

  int ids[256];
  int idCount = 0;
  check(cublasLtMatmulAlgoGetIds(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F,
                                 CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                 CUDA_R_16BF, 256, ids, &idCount),
        "cublasLtMatmulAlgoGetIds");
  std::printf("cuBLASLt %zu, %d algorithm ids for bf16 x bf16 -> bf16\n",
              cublasLtGetVersion(), idCount);
  const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO,
                               CUBLASLT_CLUSTER_SHAPE_1x1x1,
                               CUBLASLT_CLUSTER_SHAPE_2x1x1,
                               CUBLASLT_CLUSTER_SHAPE_1x2x1};

  std::printf(
      "| T | N x K | heuristic#0 us | best of %d heuristic us | "
      "search us | search / heuristic#0 | TFLOP/s (search) | weight "
      "GB/s (search) | configs timed | skinny sm90 us (splits x cluster) | "
      "skinny / heuristic#0 | weight GB/s (skinny) | sm90 us | sm90 / "
      "heuristic#0 | TFLOP/s (sm90) |\n|---|---|---|"
      "---|---|---|---|---|---|---|---|---|---|---|---|\n",
      heuristicCount);
  std::vector<std::string> details;
  for (int64_t t : rows)
    for (const auto &[n, k] : shapes) {
      Problem p{t, n, k};
      check(cudaMalloc(&p.x, size_t(t) * k * 2), "x");
      check(cudaMalloc(&p.w, size_t(n) * k * 2), "w");
      check(cudaMalloc(&p.y, size_t(t) * n * (fp32Y ? 4 : 2)), "y");
      fillKernel<<<1024, 256, 0, timer.stream>>>(p.x, t * k, 1, 1.0f);
      fillKernel<<<1024, 256, 0, timer.stream>>>(p.w, n * k, 2, 0.02f);
      check(cudaGetLastError(), "fill");
      p.op = backendMatmulDesc();
      check(cublasLtMatrixLayoutCreate(&p.wl, CUDA_R_16BF, k, n, k), "w");
      check(cublasLtMatrixLayoutCreate(&p.xl, CUDA_R_16BF, k, t, k), "x");
      check(cublasLtMatrixLayoutCreate(&p.yl, fp32Y ? CUDA_R_32F : CUDA_R_16BF,
                                       n, t, n),
            "y");

      // The heuristic, with the backend's preferences.
      // As Gemm.cpp: only bf16 outputs restrict the reduction.
      cublasLtMatmulPreference_t preference =
          backendPreference(workspaceBytes, /*restrictReduction=*/!fp32Y);
      std::vector<cublasLtMatmulHeuristicResult_t> results(heuristicCount);
      int count = 0;
      check(cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.wl, p.xl, p.yl, p.yl,
                                           preference, heuristicCount,
                                           results.data(), &count),
            "heuristic");
      if (count == 0)
        die("no heuristic algorithm");
      // --round R: the heuristic's first choice for the rows rounded up to
      // a multiple of R, run on these rows (where cuBLASLt takes it), as
      // the last candidate.
      if (roundRows > 0 && t % roundRows != 0) {
        const int64_t rounded = (t + roundRows - 1) / roundRows * roundRows;
        cublasLtMatrixLayout_t xr, yr;
        check(cublasLtMatrixLayoutCreate(&xr, CUDA_R_16BF, k, rounded, k), "x");
        check(cublasLtMatrixLayoutCreate(&yr, CUDA_R_16BF, n, rounded, n), "y");
        cublasLtMatmulHeuristicResult_t first{};
        int found = 0;
        cublasLtMatmulHeuristicResult_t checked{};
        if (cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.wl, xr, yr, yr,
                                           preference, 1, &first,
                                           &found) == CUBLAS_STATUS_SUCCESS &&
            found == 1 &&
            cublasLtMatmulAlgoCheck(handle, p.op, p.wl, p.xl, p.yl, p.yl,
                                    &first.algo,
                                    &checked) == CUBLAS_STATUS_SUCCESS &&
            checked.workspaceSize <= workspaceBytes) {
          results.resize(count + 1);
          results[count++] = first;
          std::printf("T=%lld %lldx%lld: candidate #%d is the first choice "
                      "for %lld rows\n",
                      (long long)t, (long long)n, (long long)k, count - 1,
                      (long long)rounded);
        }
        cublasLtMatrixLayoutDestroy(xr);
        cublasLtMatrixLayoutDestroy(yr);
      }
      cublasLtMatmulPreferenceDestroy(preference);
      // Warm up the clocks and the library.
      for (int i = 0; i < 20; ++i)
        timeOnce(handle, p, results[0].algo, workspace, workspaceBytes, timer,
                 i);
      Found heuristicBest{-1.0f, results[0].algo};
      for (int i = 0; i < count; ++i) {
        const float ms = timeMin(handle, p, results[i].algo, workspace,
                                 workspaceBytes, timer, 3);
        if (ms > 0 && (heuristicBest.ms < 0 || ms < heuristicBest.ms))
          heuristicBest = {ms, results[i].algo};
      }

      if (sustainedMs > 0) {
        sustainedCompare(handle, p, results, count, workspace, workspaceBytes,
                         timer, sustainedMs);
      }

      // Every configuration cuBLASLt accepts.
      std::vector<Found> found;
      int timed = 0;
      for (int a = 0; search && a < idCount; ++a) {
        cublasLtMatmulAlgo_t algo;
        if (cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F,
                                   CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                   CUDA_R_16BF, ids[a],
                                   &algo) != CUBLAS_STATUS_SUCCESS)
          continue;
        std::vector<uint32_t> tiles =
            capList<uint32_t>(algo, CUBLASLT_ALGO_CAP_TILE_IDS);
        if (tiles.empty())
          tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
        const int32_t splitSupport =
            capValue<int32_t>(algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT);
        const uint32_t reductionMask =
            capValue<uint32_t>(algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
        for (uint32_t tile : tiles)
          for (int64_t split : splits) {
            if (split > 1 && !splitSupport)
              continue;
            for (uint32_t scheme :
                 {uint32_t(CUBLASLT_REDUCTION_SCHEME_NONE),
                  uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)}) {
              if ((split == 1) != (scheme == CUBLASLT_REDUCTION_SCHEME_NONE))
                continue;
              if (split > 1 && !(reductionMask & scheme))
                continue;
              for (uint16_t cluster : clusters) {
                cublasLtMatmulAlgo_t c = algo;
                const int32_t splitNum = static_cast<int32_t>(split);
                cublasLtMatmulAlgoConfigSetAttribute(
                    &c, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile));
                cublasLtMatmulAlgoConfigSetAttribute(
                    &c, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitNum,
                    sizeof(splitNum));
                cublasLtMatmulAlgoConfigSetAttribute(
                    &c, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                    sizeof(scheme));
                cublasLtMatmulAlgoConfigSetAttribute(
                    &c, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                    sizeof(cluster));
                cublasLtMatmulHeuristicResult_t checked{};
                if (cublasLtMatmulAlgoCheck(handle, p.op, p.wl, p.xl, p.yl,
                                            p.yl, &c, &checked) !=
                        CUBLAS_STATUS_SUCCESS ||
                    checked.workspaceSize > workspaceBytes)
                  continue;
                ++timed;
                const float ms = timeMin(handle, p, c, workspace,
                                         workspaceBytes, timer, 3);
                if (ms > 0)
                  found.push_back({ms, c});
              }
            }
          }
      }
      std::sort(found.begin(), found.end(),
                [](const Found &a, const Found &b) { return a.ms < b.ms; });
      // The three contenders again, medians of 7, in turn.
      const float h0 = timeMedian(handle, p, results[0].algo, workspace,
                                  workspaceBytes, timer);
      const float hb = timeMedian(handle, p, heuristicBest.algo, workspace,
                                  workspaceBytes, timer);
      const float sb = found.empty()
                           ? -1.0f
                           : timeMedian(handle, p, found[0].algo, workspace,
                                        workspaceBytes, timer);
      // The Hopper skinny kernel (runtime/cuda/kernels/SkinnyGemmSm90.cu)
      // at 1, 2 and the device-filling number of K splits: the fastest.
      float skinny = -1.0f;
      int64_t skinnySplits = 0, skinnyCluster = 0;
      if (!fp32Y && infer::cuda::skinnyGemmSm90Supports(t, n, k)) {
        const int64_t fill = infer::cuda::skinnyGemmSm90Splits(t, n, k);
        for (int64_t splits : {int64_t(1), int64_t(2), fill})
          for (int64_t cluster : {1, 2, 4}) {
            if (splits > fill || (n / 128) % cluster != 0)
              continue;
            std::vector<float> ms;
            for (int r = 0; r < 7; ++r)
              ms.push_back(timeLaunch(
                  [&] {
                    return infer::cuda::launchSkinnyGemmSm90(
                               p.x, p.w, nullptr, nullptr,
                               static_cast<__nv_bfloat16 *>(p.y), p.t, p.n, p.k,
                               splits, cluster, static_cast<float *>(workspace),
                               workspaceBytes, timer.stream) == cudaSuccess;
                  },
                  timer, r));
            std::sort(ms.begin(), ms.end());
            if (ms[3] > 0 && (skinny < 0 || ms[3] < skinny)) {
              skinny = ms[3];
              skinnySplits = splits;
              skinnyCluster = cluster;
            }
          }
      }
      // The persistent Hopper GEMM (runtime/cuda/kernels/GemmSm90.cu).
      float sm90 = -1.0f;
      if (!fp32Y && infer::cuda::gemmSm90Supports(t, n, k)) {
        std::vector<float> ms;
        for (int r = 0; r < 7; ++r)
          ms.push_back(timeLaunch(
              [&] {
                return infer::cuda::launchGemmSm90(
                           p.x, p.w, static_cast<__nv_bfloat16 *>(p.y), p.t,
                           p.n, p.k, infer::cuda::GemmSm90Epilogue::kStore,
                           timer.stream) == cudaSuccess;
              },
              timer, r));
        std::sort(ms.begin(), ms.end());
        sm90 = ms[3];
      }
      const double flops = 2.0 * t * n * k;
      std::printf("| %lld | %lld x %lld | %.1f | %.1f | %.1f | %.3f | %.0f | "
                  "%.0f | %d | %.1f (%lld x %lld) | %.3f | %.0f | %.1f | "
                  "%.3f | %.0f |\n",
                  (long long)t, (long long)n, (long long)k, h0 * 1e3, hb * 1e3,
                  sb * 1e3, sb > 0 ? sb / h0 : 0.0,
                  sb > 0 ? flops / (sb * 1e-3) / 1e12 : 0.0,
                  sb > 0 ? 2.0 * n * k / (sb * 1e-3) / 1e9 : 0.0, timed,
                  skinny * 1e3, (long long)skinnySplits,
                  (long long)skinnyCluster, skinny > 0 ? skinny / h0 : 0.0,
                  skinny > 0 ? 2.0 * n * k / (skinny * 1e-3) / 1e9 : 0.0,
                  sm90 * 1e3, sm90 > 0 ? sm90 / h0 : 0.0,
                  sm90 > 0 ? flops / (sm90 * 1e-3) / 1e12 : 0.0);
      std::fflush(stdout);
      std::string text = "T=" + std::to_string(t) + " " + std::to_string(n) +
                         "x" + std::to_string(k) +
                         ": heuristic#0 " + describe(results[0].algo) +
                         "\n  best heuristic " + describe(heuristicBest.algo);
      for (int i = 0; i < top && i < static_cast<int>(found.size()); ++i) {
        char ms[32];
        std::snprintf(ms, sizeof(ms), " %.1f us", found[i].ms * 1e3);
        text += "\n  search#" + std::to_string(i) + ms + " " +
                describe(found[i].algo);
      }
      details.push_back(text);
      cublasLtMatrixLayoutDestroy(p.wl);
      cublasLtMatrixLayoutDestroy(p.xl);
      cublasLtMatrixLayoutDestroy(p.yl);
      cublasLtMatmulDescDestroy(p.op);
      cudaFree(p.x);
      cudaFree(p.w);
      cudaFree(p.y);
    }
  std::printf("\n");
  for (const std::string &text : details)
    std::printf("%s\n", text.c_str());
  return 0;
}
