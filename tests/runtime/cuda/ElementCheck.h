//===- ElementCheck.h - bf16 / f16 GPU results against fp32 -----*- C++ -*-===//
//
// What the tests of the bf16 and f16 kernels (Bf16KernelsTest, Bf16GemmTest)
// share: host conversions of the element types, the unit in the last place
// of each, an element-wise bound that names the element it fails on, a bit
// comparison, and a check that a CUDA graph replays a launch bit for bit.
//
// A kernel that computes in fp32 what the CPU kernel computes and rounds
// once stores round(cpu + d), d the difference of the two fp32 computations
// (order of sums, fma, expf against exp). So for each element
//
//   |gpu - cpu| <= ulp(cpu) / 2 + |d|
//
// with the CPU's unrounded fp32 result: the GPU value is round(cpu), or its
// neighbour where cpu lies within |d| of a midpoint; at most 1 ulp from
// round(cpu). The tests bound |d| per kernel (Bound::rel, Bound::abs); a
// result rounded twice, or taken from a wrong element, misses the bound.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_TESTS_RUNTIME_CUDA_ELEMENTCHECK_H
#define INFER_TESTS_RUNTIME_CUDA_ELEMENTCHECK_H

#include "runtime/support/Status.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace infer::testing {

template <typename T> struct ElementTraits;
template <> struct ElementTraits<float> {
  static constexpr const char *kName = "f32";
  static constexpr int kMantissaBits = 23;
  static constexpr int kMinExponent = -126;
  static float widen(float v) { return v; }
  static float narrow(float v) { return v; }
};
template <> struct ElementTraits<__nv_bfloat16> {
  static constexpr const char *kName = "bf16";
  static constexpr int kMantissaBits = 7;
  static constexpr int kMinExponent = -126;
  static float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __nv_bfloat16 narrow(float v) { return __float2bfloat16_rn(v); }
};
template <> struct ElementTraits<__half> {
  static constexpr const char *kName = "f16";
  static constexpr int kMantissaBits = 10;
  static constexpr int kMinExponent = -14;
  static float widen(__half v) { return __half2float(v); }
  static __half narrow(float v) { return __float2half_rn(v); }
};

template <typename T> std::vector<T> narrowAll(const std::vector<float> &v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = ElementTraits<T>::narrow(v[i]);
  return out;
}
template <typename T> std::vector<float> widenAll(const std::vector<T> &v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = ElementTraits<T>::widen(v[i]);
  return out;
}
/// `n` values drawn uniformly from [-scale, scale].
inline std::vector<float> uniform(size_t n, float scale, std::mt19937 &rng) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

/// Rows of [a_r | b_r], each half `cols` wide: a merged gate/up projection's
/// output, whose halves silu_mul reads as column views.
inline std::vector<float> mergedHalves(const std::vector<float> &a,
                                       const std::vector<float> &b,
                                       int64_t rows, int64_t cols) {
  std::vector<float> merged(size_t(rows * cols) * 2);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(a.begin() + r * cols, cols, merged.begin() + r * 2 * cols);
    std::copy_n(b.begin() + r * cols, cols,
                merged.begin() + r * 2 * cols + cols);
  }
  return merged;
}

/// v rounded to T and back: the values a T tensor holds.
template <typename T>
std::vector<float> roundedTo(const std::vector<float> &v) {
  return widenAll(narrowAll<T>(v));
}

/// The spacing of T's values at |v| (subnormals: the smallest spacing).
template <typename T> double ulpOf(double v) {
  int exponent = ElementTraits<T>::kMinExponent;
  if (v != 0.0 && std::isfinite(v)) {
    int e = 0;
    std::frexp(std::fabs(v), &e); // |v| = m 2^e, m in [0.5, 1)
    exponent = std::max(e - 1, ElementTraits<T>::kMinExponent);
  }
  return std::ldexp(1.0, exponent - ElementTraits<T>::kMantissaBits);
}

/// |got - want| <= ulps * ulp(want) + rel * |want| + abs (+ absEach[i]).
struct Bound {
  double ulps = 0.5;
  double rel = 0.0;
  double abs = 0.0;
};

/// Checks every element of `got` (T, from the GPU) against `want` (the
/// CPU's fp32 result), `cols` per row for the message: the number beyond
/// the bound and the worst one, with its row, column and values. A NaN or
/// infinity fails unless `want` has the same.
template <typename T>
::testing::AssertionResult
withinBound(const std::vector<T> &got, const std::vector<float> &want,
            const Bound &bound, int64_t cols,
            const std::vector<double> &absEach = {}) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "sizes differ: " << got.size() << " against " << want.size();
  int64_t beyond = 0, worst = -1;
  double worstRatio = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = ElementTraits<T>::widen(got[i]), w = want[i];
    double ratio;
    if (!std::isfinite(g) || !std::isfinite(w)) {
      const bool same = (std::isnan(g) && std::isnan(w)) || g == w;
      ratio = same ? 0.0 : INFINITY;
    } else {
      const double limit = bound.ulps * ulpOf<T>(w) + bound.rel * std::fabs(w) +
                           bound.abs + (absEach.empty() ? 0.0 : absEach[i]);
      const double diff = std::fabs(g - w);
      ratio = diff == 0.0 ? 0.0 : limit > 0.0 ? diff / limit : INFINITY;
    }
    if (ratio > 1.0)
      ++beyond;
    if (worst < 0 || ratio > worstRatio) {
      worst = int64_t(i);
      worstRatio = ratio;
    }
  }
  if (beyond == 0)
    return ::testing::AssertionSuccess();
  const double g = ElementTraits<T>::widen(got[worst]), w = want[worst];
  char text[320];
  std::snprintf(text, sizeof(text),
                "%lld of %zu %s elements beyond the bound; worst [%lld, %lld]: "
                "gpu %.9g, cpu %.9g, |diff| %.3g = %.3g x the bound (ulp %.3g)",
                (long long)beyond, got.size(), ElementTraits<T>::kName,
                (long long)(worst / cols), (long long)(worst % cols), g, w,
                std::fabs(g - w), worstRatio, ulpOf<T>(w));
  return ::testing::AssertionFailure() << text;
}

/// The same bits element for element (`cols` per row for the message);
/// any two NaNs are the same (conversions need not keep their payloads).
template <typename T>
::testing::AssertionResult sameBits(const std::vector<T> &got,
                                    const std::vector<T> &want, int64_t cols) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "sizes differ: " << got.size() << " against " << want.size();
  int64_t differ = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 &&
        !(std::isnan(ElementTraits<T>::widen(got[i])) &&
          std::isnan(ElementTraits<T>::widen(want[i])))) {
      if (first < 0)
        first = int64_t(i);
      ++differ;
    }
  if (differ == 0)
    return ::testing::AssertionSuccess();
  char text[240];
  std::snprintf(text, sizeof(text),
                "%lld of %zu elements differ; first [%lld, %lld]: %.9g "
                "against %.9g",
                (long long)differ, got.size(), (long long)(first / cols),
                (long long)(first % cols),
                double(ElementTraits<T>::widen(got[first])),
                double(ElementTraits<T>::widen(want[first])));
  return ::testing::AssertionFailure() << text;
}

/// A device buffer the graph check snapshots.
struct DeviceBytes {
  void *data;
  size_t bytes;
};

/// Runs `launch` eagerly on a fresh stream (the backend runs each shape so
/// before capturing it), copies `outputs`, fills them with `fill` bytes,
/// captures `launch` in a CUDA graph and replays it: the outputs must come
/// back with the same bytes. Outputs the launch writes in part (a KV pool)
/// take the fill they held before it (0), so only what it writes changes.
inline ::testing::AssertionResult
replaysInGraph(const std::function<Status(cudaStream_t)> &launch,
               const std::vector<DeviceBytes> &outputs, int fill = 0xff) {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess)
    return ::testing::AssertionFailure() << "cudaStreamCreate failed";
  std::string failure;
  auto check = [&](bool ok, const std::string &what) {
    if (!ok && failure.empty())
      failure = what;
    return ok;
  };
  std::vector<std::vector<char>> eager(outputs.size());
  Status status = launch(stream);
  check(status.isOk(), "eager launch: " + status.message());
  check(cudaStreamSynchronize(stream) == cudaSuccess, "eager launch failed");
  for (size_t i = 0; i < outputs.size() && failure.empty(); ++i) {
    eager[i].resize(outputs[i].bytes);
    check(cudaMemcpy(eager[i].data(), outputs[i].data, outputs[i].bytes,
                     cudaMemcpyDeviceToHost) == cudaSuccess &&
              cudaMemset(outputs[i].data, fill, outputs[i].bytes) ==
                  cudaSuccess,
          "copying the eager outputs failed");
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (failure.empty() &&
      check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) ==
                cudaSuccess,
            "cudaStreamBeginCapture failed")) {
    status = launch(stream);
    const bool ended = cudaStreamEndCapture(stream, &graph) == cudaSuccess;
    check(status.isOk(), "captured launch: " + status.message());
    check(ended, "cudaStreamEndCapture failed");
  }
  if (failure.empty())
    check(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess &&
              cudaGraphLaunch(exec, stream) == cudaSuccess &&
              cudaStreamSynchronize(stream) == cudaSuccess,
          "graph replay failed");
  for (size_t i = 0; i < outputs.size() && failure.empty(); ++i) {
    std::vector<char> replayed(outputs[i].bytes);
    check(cudaMemcpy(replayed.data(), outputs[i].data, outputs[i].bytes,
                     cudaMemcpyDeviceToHost) == cudaSuccess,
          "copying the replayed outputs failed");
    check(replayed == eager[i],
          "output " + std::to_string(i) + " differs after the graph replay");
  }
  if (exec)
    cudaGraphExecDestroy(exec);
  if (graph)
    cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  if (failure.empty())
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failure;
}

} // namespace infer::testing

#endif // INFER_TESTS_RUNTIME_CUDA_ELEMENTCHECK_H
