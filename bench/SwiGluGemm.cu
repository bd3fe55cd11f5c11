//===- SwiGluGemm.cu - the MLP's gate/up projection and silu_mul, timed ---===//
//
//   infer-swiglu-gemm [--rows 256,2048,8192] [--shapes 28672x4096,...]
//       [--sustained MS] [--residual]
//
// For y = silu(x w_gate^T) * (x w_up^T) with w = [w_gate; w_up] of N x K
// (default Llama-3-8B's 28672 x 4096), times
//   lt+silu     cuBLASLt's first heuristic choice for the [T, N] product (what
//               the CUDA backend's linear runs) and then the silu_mul kernel,
//   sm90+silu   launchGemmSm90 (kStore) for the product, then silu_mul,
//   sm90 swiglu launchGemmSm90 (kSwiGlu): one kernel,
// and the two products alone (lt, sm90), in bursts (the median of 7 runs,
// each after an L2 flush) and, with --sustained MS, the way a long offline
// run meets them: the board first held at its power limit (2 s of lt), then
// each variant back to back for MS milliseconds, the variants in turn for 3
// rounds; the median of the rounds' mean times. Checks first: sm90's product
// against cuBLASLt's and the fused result against silu_mul of cuBLASLt's
// (max |difference| over max |reference|). TFLOP/s count the product.
//
// --residual times linear_residual's product instead: y = x w^T + r with r
// a [T, N] bf16 matrix apart from y, through cuBLASLt as Gemm.cpp runs it
// (r as C, beta 1: lt+res; the heuristic sees the same layouts, so its
// first choice is the plain product's, run with C apart from D), beside
// the plain products (lt, sm90); "vs" is then against lt.
//
//===----------------------------------------------------------------------===//

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "bench/GemmBenchSupport.cuh"
#include "runtime/cuda/GemmSm90.h"
#include "runtime/cuda/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
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

using infer::cuda::GemmSm90Epilogue;

/// max |a - b| / max |b| over n elements (on the host).
double relativeError(const __nv_bfloat16 *a, const __nv_bfloat16 *b,
                     int64_t n) {
  std::vector<__nv_bfloat16> ha(n), hb(n);
  check(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost), "copy");
  check(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost), "copy");
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = __bfloat162float(ha[i]), y = __bfloat162float(hb[i]);
    if (!std::isfinite(x))
      return INFINITY;
    diff = std::max(diff, std::fabs(x - y));
    scale = std::max(scale, std::fabs(y));
  }
  return scale > 0 ? diff / scale : diff;
}

} // namespace

int main(int argc, char **argv) {
  infer::bench::benchTool = "infer-swiglu-gemm";
  std::vector<int64_t> rows = {256, 2048, 8192};
  std::vector<std::pair<int64_t, int64_t>> shapes = {{28672, 4096}};
  double sustainedMs = 0;
  bool residual = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc)
        die(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--rows") {
      rows = parseList(next());
    } else if (arg == "--sustained") {
      sustainedMs = std::stod(next());
    } else if (arg == "--shapes") {
      shapes = parseShapes(next());
    } else if (arg == "--residual") {
      residual = true;
    } else {
      die("unknown argument " + arg +
          " (--rows, --shapes, --sustained, --residual)");
    }
  }

  cublasLtHandle_t handle;
  check(cublasLtCreate(&handle), "cublasLtCreate");
  const size_t workspaceBytes = size_t(64) << 20;
  void *workspace;
  check(cudaMalloc(&workspace, workspaceBytes), "workspace");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  const size_t flushBytes = size_t(128) << 20;
  void *flush;
  check(cudaMalloc(&flush, flushBytes), "flush");

  std::printf("| T | N x K | check sm90 / lt | check swiglu | variant | "
              "burst us | TFLOP/s | sustained us | TFLOP/s | vs lt+silu "
              "(sustained) |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t t : rows)
    for (const auto &shape : shapes) {
      const int64_t n = shape.first, k = shape.second;
      if (!infer::cuda::gemmSm90Supports(t, n, k))
        die("launchGemmSm90 does not take T=" + std::to_string(t) + " " +
            std::to_string(n) + "x" + std::to_string(k) +
            " on this device and build");
      __nv_bfloat16 *x, *w, *y, *y2, *h, *h2, *r;
      check(cudaMalloc(&r, size_t(t) * n * 2), "r");
      fillKernel<<<1024, 256, 0, stream>>>(r, t * n, 3, 1.0f);
      check(cudaMalloc(&x, size_t(t) * k * 2), "x");
      check(cudaMalloc(&w, size_t(n) * k * 2), "w");
      check(cudaMalloc(&y, size_t(t) * n * 2), "y");
      check(cudaMalloc(&y2, size_t(t) * n * 2), "y");
      check(cudaMalloc(&h, size_t(t) * n), "h");
      check(cudaMalloc(&h2, size_t(t) * n), "h");
      fillKernel<<<1024, 256, 0, stream>>>(x, t * k, 1, 1.0f);
      fillKernel<<<1024, 256, 0, stream>>>(w, n * k, 2, 0.02f);
      check(cudaGetLastError(), "fill");

      // cuBLASLt as Gemm.cpp calls it: y^T[N, T] = w[K, N]^T x^T[K, T].
      cublasLtMatmulDesc_t op = backendMatmulDesc();
      cublasLtMatrixLayout_t wl, xl, yl;
      check(cublasLtMatrixLayoutCreate(&wl, CUDA_R_16BF, k, n, k), "w");
      check(cublasLtMatrixLayoutCreate(&xl, CUDA_R_16BF, k, t, k), "x");
      check(cublasLtMatrixLayoutCreate(&yl, CUDA_R_16BF, n, t, n), "y");
      cublasLtMatmulPreference_t preference =
          backendPreference(workspaceBytes, /*restrictReduction=*/true);
      cublasLtMatmulHeuristicResult_t first{};
      int found = 0;
      check(cublasLtMatmulAlgoGetHeuristic(handle, op, wl, xl, yl, yl,
                                           preference, 1, &first, &found),
            "heuristic");
      if (found == 0)
        die("no heuristic algorithm");
      // linear_residual's problem: the same layouts, beta 1 and C = r.
      cublasLtMatmulHeuristicResult_t firstResidual{};
      check(cublasLtMatmulAlgoGetHeuristic(handle, op, wl, xl, yl, yl,
                                           preference, 1, &firstResidual,
                                           &found),
            "heuristic");
      if (found == 0)
        die("no heuristic algorithm for the residual");
      cublasLtMatmulPreferenceDestroy(preference);

      const float alpha = 1.0f, beta = 0.0f, one = 1.0f;
      auto ltResidual = [&] {
        check(cublasLtMatmul(handle, op, &alpha, w, wl, x, xl, &one, r, yl, y,
                             yl, &firstResidual.algo, workspace, workspaceBytes,
                             stream),
              "cublasLtMatmul");
      };
      auto lt = [&] {
        check(cublasLtMatmul(handle, op, &alpha, w, wl, x, xl, &beta, y, yl, y,
                             yl, &first.algo, workspace, workspaceBytes,
                             stream),
              "cublasLtMatmul");
      };
      auto siluMul = [&](const __nv_bfloat16 *product, __nv_bfloat16 *out) {
        check(infer::cuda::launchSiluMul(product, n, product + n / 2, n, out, t,
                                         n / 2, stream),
              "silu_mul");
      };
      auto sm90 = [&](const __nv_bfloat16 *weights, __nv_bfloat16 *out,
                      GemmSm90Epilogue epilogue) {
        check(infer::cuda::launchGemmSm90(x, weights, out, t, n, k, epilogue,
                                          stream),
              "launchGemmSm90");
      };
      struct Variant {
        const char *name;
        std::function<void()> run;
      };
      const std::vector<Variant> residualVariants = {
          {"lt", lt},
          {"lt+res", ltResidual},
          {"sm90", [&] { sm90(w, y2, GemmSm90Epilogue::kStore); }},
      };
      const std::vector<Variant> swigluVariants = {
          {"lt+silu",
           [&] {
             lt();
             siluMul(y, h);
           }},
          {"sm90+silu",
           [&] {
             sm90(w, y2, GemmSm90Epilogue::kStore);
             siluMul(y2, h);
           }},
          {"sm90 swiglu", [&] { sm90(w, h2, GemmSm90Epilogue::kSwiGlu); }},
          {"lt", lt},
          {"sm90", [&] { sm90(w, y2, GemmSm90Epilogue::kStore); }},
      };
      const std::vector<Variant> &variants =
          residual ? residualVariants : swigluVariants;

      // The checks.
      lt();
      siluMul(y, h);
      sm90(w, y2, GemmSm90Epilogue::kStore);
      sm90(w, h2, GemmSm90Epilogue::kSwiGlu);
      check(cudaStreamSynchronize(stream), "check run");
      const double productError = relativeError(y2, y, t * n);
      const double swigluError =
          residual ? 0.0 : relativeError(h2, h, t * n / 2);

      auto burst = [&](const Variant &v) {
        std::vector<float> ms;
        for (int r = 0; r < 7; ++r) {
          check(cudaMemsetAsync(flush, r, flushBytes, stream), "flush");
          check(cudaEventRecord(start, stream), "event");
          v.run();
          check(cudaEventRecord(stop, stream), "event");
          check(cudaEventSynchronize(stop), "sync");
          float m = 0;
          check(cudaEventElapsedTime(&m, start, stop), "elapsed");
          ms.push_back(m);
        }
        std::sort(ms.begin(), ms.end());
        return ms[3];
      };
      auto sustained = [&](const Variant &v, double budget) {
        check(cudaEventRecord(start, stream), "event");
        for (int i = 0; i < 4; ++i)
          v.run();
        check(cudaEventRecord(stop, stream), "event");
        check(cudaEventSynchronize(stop), "sync");
        float probe = 0;
        check(cudaEventElapsedTime(&probe, start, stop), "elapsed");
        const int runs = std::max(4, static_cast<int>(budget / (probe / 4.0f)));
        check(cudaEventRecord(start, stream), "event");
        for (int i = 0; i < runs; ++i)
          v.run();
        check(cudaEventRecord(stop, stream), "event");
        check(cudaEventSynchronize(stop), "sync");
        float total = 0;
        check(cudaEventElapsedTime(&total, start, stop), "elapsed");
        return total / runs;
      };
      for (int i = 0; i < 10; ++i) // clocks and the library warm
        for (const Variant &v : variants)
          v.run();
      std::vector<float> bursts;
      for (const Variant &v : variants)
        bursts.push_back(burst(v));
      std::vector<float> held(variants.size(), -1.0f);
      if (sustainedMs > 0) {
        sustained(variants[residual ? 0 : 3], 2000.0);
        std::vector<std::vector<float>> rounds(variants.size());
        for (int r = 0; r < 3; ++r)
          for (size_t v = 0; v < variants.size(); ++v)
            rounds[v].push_back(sustained(variants[v], sustainedMs));
        for (size_t v = 0; v < variants.size(); ++v) {
          std::sort(rounds[v].begin(), rounds[v].end());
          held[v] = rounds[v][1];
        }
      }
      const double flops = 2.0 * t * n * k;
      for (size_t v = 0; v < variants.size(); ++v)
        std::printf("| %lld | %lld x %lld | %.2e | %.2e | %s | %.1f | %.0f | "
                    "%.1f | %.0f | %.3f |\n",
                    (long long)t, (long long)n, (long long)k, productError,
                    swigluError, variants[v].name, bursts[v] * 1e3,
                    flops / (bursts[v] * 1e-3) / 1e12, held[v] * 1e3,
                    held[v] > 0 ? flops / (held[v] * 1e-3) / 1e12 : 0.0,
                    held[v] > 0 ? held[v] / held[0] : 0.0);
      std::fflush(stdout);
      cublasLtMatrixLayoutDestroy(wl);
      cublasLtMatrixLayoutDestroy(xl);
      cublasLtMatrixLayoutDestroy(yl);
      cublasLtMatmulDescDestroy(op);
      for (void *q : {(void *)x, (void *)w, (void *)y, (void *)y2, (void *)h,
                      (void *)h2, (void *)r})
        cudaFree(q);
    }
  return 0;
}
