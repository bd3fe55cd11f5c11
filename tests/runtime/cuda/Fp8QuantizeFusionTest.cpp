//===- Fp8QuantizeFusionTest.cpp - Quantization fused into producers ------===//
//
// fp8 activation quantization fused into the step that produces the
// activation (CudaBackendOptions::fuseFp8Quantize) must change nothing but
// the launches:
//
//   kernels  launchRmsNormFp8 / launchSiluMulFp8 write the bf16 output of
//            launchRmsNorm / launchSiluMul and the codes and scales of
//            launchQuantizeRowsFp8 on that output, bit for bit (rows 1 to
//            300, widths 64 to 14336 with and without whole 16-byte packs,
//            all-zero rows, large values, strided silu_mul operands)
//   Gemm     linearQuantized after a producer wrote into fp8Operand() gives
//            linear's y bit for bit; fp8Operand() is none where linear does
//            not take fp8 cuBLASLt in one chunk
//   backend  an fp8 artifact ($INFER_CUDA_FP8_ARTIFACTS/tiny-pycode-target)
//            with the fusion on and off on one backend (the same cuBLASLt
//            algorithms): the same logits bit for bit and the same sampled
//            tokens for an eager prefill and a decode batch run as a CUDA
//            graph, with fused launches counted
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/GemvKernels.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/QuantizingKernels.h"
#include "runtime/engine/Artifact.h"
#include "tests/runtime/cuda/DeviceArray.h"
#include "tests/runtime/cuda/Fp8Artifacts.h"
#include "tests/runtime/support/Batches.h"
#include "tests/runtime/support/FixtureCases.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace infer::testing {
namespace {

using cuda::Gemm;

bool gpuAvailable(std::string *why) { return cuda::cudaDeviceAvailable(why); }

/// Row r of [rows, cols] bf16 values: all zeros for r % 7 == 3, values up
/// to `large` for r % 5 == 1, else up to 2.
std::vector<__nv_bfloat16> randomRows(int64_t rows, int64_t cols,
                                      std::mt19937 &rng, float large) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<__nv_bfloat16> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = r % 7 == 3 ? 0.0f : r % 5 == 1 ? large : 2.0f;
    for (int64_t c = 0; c < cols; ++c)
      v[r * cols + c] = __float2bfloat16_rn(scale * dist(rng));
  }
  return v;
}

template <typename T>
void expectSameBytes(const std::vector<T> &a, const std::vector<T> &b,
                     const std::string &what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t first = a.size();
  for (size_t i = 0; i < a.size() && first == a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0)
      first = i;
  EXPECT_EQ(first, a.size())
      << what << ": first difference at element " << first;
}

/// (rows, width): whole packs of 8 and not (100, 4100), up to Llama-3-8B's
/// intermediate size and past it (28672: an unstored row of 56 KiB, above
/// the default 48 KiB of shared memory).
const std::pair<int64_t, int64_t> kShapes[] = {
    {1, 64},   {7, 100},   {33, 384},  {300, 1024},
    {5, 4100}, {17, 4096}, {3, 14336}, {2, 28672}};

TEST(CudaFp8QuantizeFusionTest, RmsNormWritesTheQuantizerCodes) {
  std::string why;
  if (!gpuAvailable(&why))
    GTEST_SKIP() << "needs a GPU: " << why;
  std::mt19937 rng(7);
  for (const auto &[rows, h] : kShapes)
    for (bool f32Weight : {false, true}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + ", h " + std::to_string(h) +
                   (f32Weight ? ", fp32 weight" : ", bf16 weight"));
      const std::vector<__nv_bfloat16> xHost = randomRows(rows, h, rng, 3.0e4f);
      const std::vector<__nv_bfloat16> wBf16 = randomRows(1, h, rng, 1.0f);
      std::vector<float> wF32(wBf16.size());
      for (size_t i = 0; i < wF32.size(); ++i)
        wF32[i] = 40.0f * __bfloat162float(wBf16[i]);
      DeviceArray<__nv_bfloat16> x(xHost), wb(wBf16);
      DeviceArray<float> wf(wF32);
      const size_t n = static_cast<size_t>(rows * h);
      auto yRef = DeviceArray<__nv_bfloat16>::poisoned(n);
      auto y = DeviceArray<__nv_bfloat16>::poisoned(n);
      auto codesRef = DeviceArray<uint8_t>::poisoned(n);
      auto codes = DeviceArray<uint8_t>::poisoned(n);
      auto scalesRef = DeviceArray<float>::poisoned(rows);
      auto scales = DeviceArray<float>::poisoned(rows);
      const float eps = 1e-5f, offset = f32Weight ? 0.0f : 1.0f;
      if (f32Weight) {
        ASSERT_EQ(cuda::launchRmsNorm(x.get(), wf.get(), yRef.get(), rows, h,
                                      eps, nullptr, offset),
                  cudaSuccess);
        ASSERT_EQ(cuda::launchRmsNormFp8(x.get(), wf.get(), y.get(),
                                         codes.get(), scales.get(), rows, h,
                                         eps, nullptr, offset),
                  cudaSuccess);
      } else {
        ASSERT_EQ(cuda::launchRmsNorm(x.get(), wb.get(), yRef.get(), rows, h,
                                      eps, nullptr, offset),
                  cudaSuccess);
        ASSERT_EQ(cuda::launchRmsNormFp8(x.get(), wb.get(), y.get(),
                                         codes.get(), scales.get(), rows, h,
                                         eps, nullptr, offset),
                  cudaSuccess);
      }
      ASSERT_EQ(cuda::launchQuantizeRowsFp8(yRef.get(), rows, h, codesRef.get(),
                                            scalesRef.get(), nullptr),
                cudaSuccess);
      expectSameBytes(y.download(), yRef.download(), "y");
      expectSameBytes(codes.download(), codesRef.download(), "codes");
      const std::vector<float> s = scales.download();
      expectSameBytes(s, scalesRef.download(), "scales");
      if (rows > 3)
        EXPECT_EQ(s[3], 0.0f) << "an all-zero row has scale 0";
      // y not stored: the row stays in shared memory, the same codes.
      auto unstoredCodes = DeviceArray<uint8_t>::poisoned(n);
      auto unstoredScales = DeviceArray<float>::poisoned(rows);
      ASSERT_EQ(f32Weight
                    ? cuda::launchRmsNormFp8(
                          x.get(), wf.get(), nullptr, unstoredCodes.get(),
                          unstoredScales.get(), rows, h, eps, nullptr, offset)
                    : cuda::launchRmsNormFp8(
                          x.get(), wb.get(), nullptr, unstoredCodes.get(),
                          unstoredScales.get(), rows, h, eps, nullptr, offset),
                cudaSuccess);
      expectSameBytes(unstoredCodes.download(), codesRef.download(),
                      "codes, y not stored");
      expectSameBytes(unstoredScales.download(), s, "scales, y not stored");
    }
}

TEST(CudaFp8QuantizeFusionTest, SiluMulWritesTheQuantizerCodes) {
  std::string why;
  if (!gpuAvailable(&why))
    GTEST_SKIP() << "needs a GPU: " << why;
  std::mt19937 rng(11);
  for (const auto &[rows, cols] : kShapes)
    for (bool merged : {true, false}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + ", cols " +
                   std::to_string(cols) +
                   (merged ? ", column views of gate_up" : ", contiguous"));
      // merged: gate and up are the two halves of gate_up [rows, 2 cols].
      const int64_t ld = merged ? 2 * cols : cols;
      const std::vector<__nv_bfloat16> a = randomRows(rows, ld, rng, 12.0f);
      const std::vector<__nv_bfloat16> b = randomRows(rows, ld, rng, 1.0e30f);
      DeviceArray<__nv_bfloat16> gateUp(a), other(b);
      const __nv_bfloat16 *gate = gateUp.get();
      const __nv_bfloat16 *up = merged ? gateUp.get() + cols : other.get();
      const size_t n = static_cast<size_t>(rows * cols);
      auto yRef = DeviceArray<__nv_bfloat16>::poisoned(n);
      auto y = DeviceArray<__nv_bfloat16>::poisoned(n);
      auto codesRef = DeviceArray<uint8_t>::poisoned(n);
      auto codes = DeviceArray<uint8_t>::poisoned(n);
      auto scalesRef = DeviceArray<float>::poisoned(rows);
      auto scales = DeviceArray<float>::poisoned(rows);
      ASSERT_EQ(cuda::launchSiluMul(gate, ld, up, ld, yRef.get(), rows, cols,
                                    nullptr),
                cudaSuccess);
      ASSERT_EQ(cuda::launchQuantizeRowsFp8(yRef.get(), rows, cols,
                                            codesRef.get(), scalesRef.get(),
                                            nullptr),
                cudaSuccess);
      ASSERT_EQ(cuda::launchSiluMulFp8(gate, ld, up, ld, y.get(), codes.get(),
                                       scales.get(), rows, cols, nullptr),
                cudaSuccess);
      expectSameBytes(y.download(), yRef.download(), "y");
      expectSameBytes(codes.download(), codesRef.download(), "codes");
      expectSameBytes(scales.download(), scalesRef.download(), "scales");
      auto unstoredCodes = DeviceArray<uint8_t>::poisoned(n);
      auto unstoredScales = DeviceArray<float>::poisoned(rows);
      ASSERT_EQ(
          cuda::launchSiluMulFp8(gate, ld, up, ld, nullptr, unstoredCodes.get(),
                                 unstoredScales.get(), rows, cols, nullptr),
          cudaSuccess);
      expectSameBytes(unstoredCodes.download(), codesRef.download(),
                      "codes, y not stored");
      expectSameBytes(unstoredScales.download(), scalesRef.download(),
                      "scales, y not stored");
    }
}

TEST(CudaFp8QuantizeFusionTest, UnstoredRowsPastTheLimitAreRejected) {
  std::string why;
  if (!gpuAvailable(&why))
    GTEST_SKIP() << "needs a GPU: " << why;
  const int64_t cols = cuda::kMaxUnstoredRowElements + 8;
  DeviceArray<__nv_bfloat16> x(std::vector<__nv_bfloat16>(
      static_cast<size_t>(cols), __float2bfloat16_rn(1.0f)));
  auto codes = DeviceArray<uint8_t>::poisoned(static_cast<size_t>(cols));
  auto scales = DeviceArray<float>::poisoned(1);
  EXPECT_EQ(cuda::launchRmsNormFp8(x.get(), x.get(), nullptr, codes.get(),
                                   scales.get(), 1, cols, 1e-5f, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launchSiluMulFp8(x.get(), cols, x.get(), cols, nullptr,
                                   codes.get(), scales.get(), 1, cols, nullptr),
            cudaErrorInvalidValue);
}

TEST(CudaFp8QuantizeFusionTest, MisalignedCodesAreRejected) {
  std::string why;
  if (!gpuAvailable(&why))
    GTEST_SKIP() << "needs a GPU: " << why;
  const std::vector<__nv_bfloat16> host(2 * 64, __float2bfloat16_rn(1.0f));
  DeviceArray<__nv_bfloat16> x(host), y(host);
  auto codes = DeviceArray<uint8_t>::poisoned(2 * 64 + 8);
  auto scales = DeviceArray<float>::poisoned(2);
  EXPECT_EQ(cuda::launchRmsNormFp8(x.get(), x.get(), y.get(), codes.get() + 8,
                                   scales.get(), 2, 64, 1e-5f, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launchSiluMulFp8(x.get(), 64, x.get(), 64, y.get(),
                                   codes.get() + 8, scales.get(), 2, 64,
                                   nullptr),
            cudaErrorInvalidValue);
}

/// E4M3 codes [n, k] (no NaN codes) and row scales around 1 / 64.
struct Fp8Weight {
  DeviceArray<uint8_t> codes;
  DeviceArray<float> scales;

  static Fp8Weight random(int64_t n, int64_t k, std::mt19937 &rng) {
    std::uniform_int_distribution<int> code(0, 255);
    std::uniform_real_distribution<float> scale(0.5f / 64, 2.0f / 64);
    std::vector<uint8_t> c(static_cast<size_t>(n * k));
    for (uint8_t &v : c) {
      v = static_cast<uint8_t>(code(rng));
      if ((v & 0x7f) == 0x7f)
        v ^= 1;
    }
    std::vector<float> s(static_cast<size_t>(n));
    for (float &v : s)
      v = scale(rng);
    return {DeviceArray<uint8_t>(c), DeviceArray<float>(s)};
  }
  cuda::GemmWeight weight() const {
    cuda::GemmWeight w;
    w.fp8 = codes.get();
    w.rowScales = scales.get();
    return w;
  }
};

TEST(CudaFp8QuantizeFusionTest, LinearQuantizedMatchesLinear) {
  std::string why;
  if (!gpuAvailable(&why))
    GTEST_SKIP() << "needs a GPU: " << why;
  StatusOr<std::unique_ptr<Gemm>> gemm = Gemm::create(32 << 20, 64 << 20);
  ASSERT_TRUE(gemm.isOk()) << gemm.status().message();
  std::mt19937 rng(3);
  constexpr int64_t kN = 512, kK = 1024;
  Fp8Weight w = Fp8Weight::random(kN, kK, rng);
  const std::vector<__nv_bfloat16> normHost = randomRows(1, kK, rng, 1.0f);
  DeviceArray<__nv_bfloat16> norm(normHost);
  for (int64_t t : {16, 100, 300}) {
    SCOPED_TRACE("T " + std::to_string(t));
    const std::vector<__nv_bfloat16> xHost = randomRows(t, kK, rng, 50.0f);
    const std::vector<__nv_bfloat16> rHost = randomRows(t, kN, rng, 4.0f);
    DeviceArray<__nv_bfloat16> x(xHost), residual(rHost);
    const size_t xn = static_cast<size_t>(t * kK), yn = size_t(t * kN);
    auto xn1 = DeviceArray<__nv_bfloat16>::poisoned(xn);
    auto xn2 = DeviceArray<__nv_bfloat16>::poisoned(xn);
    auto yRef = DeviceArray<__nv_bfloat16>::poisoned(yn);
    auto y = DeviceArray<__nv_bfloat16>::poisoned(yn);
    const std::optional<Gemm::Fp8Operand> q =
        (*gemm)->fp8Operand(t, kN, kK, w.weight(), 2, false, true);
    ASSERT_TRUE(q.has_value());
    // Unfused: the norm, then linear quantizes its output.
    ASSERT_EQ(cuda::launchRmsNorm(x.get(), norm.get(), xn1.get(), t, kK, 1e-5f,
                                  nullptr),
              cudaSuccess);
    Status status = (*gemm)->linear<__nv_bfloat16>(xn1.get(), w.weight(),
                                                   nullptr, yRef.get(), t, kN,
                                                   kK, nullptr, residual.get());
    ASSERT_TRUE(status.isOk()) << status.message();
    // Fused: the norm writes the codes where linear would have.
    ASSERT_EQ(cuda::launchRmsNormFp8(x.get(), norm.get(), xn2.get(), q->codes,
                                     q->scales, t, kK, 1e-5f, nullptr),
              cudaSuccess);
    status = (*gemm)->linearQuantized<__nv_bfloat16>(
        xn2.get(), w.weight(), nullptr, y.get(), t, kN, kK, nullptr,
        residual.get());
    ASSERT_TRUE(status.isOk()) << status.message();
    expectSameBytes(xn2.download(), xn1.download(), "x");
    expectSameBytes(y.download(), yRef.download(), "y");
  }
}

TEST(CudaFp8QuantizeFusionTest, Fp8OperandOnlyForOneChunkOfFp8CublasLt) {
  std::string why;
  if (!gpuAvailable(&why))
    GTEST_SKIP() << "needs a GPU: " << why;
  // A scratch of 64 rows of K = 1024 (and its 256-byte scale block).
  constexpr int64_t kK = 1024;
  StatusOr<std::unique_ptr<Gemm>> gemm =
      Gemm::create(32 << 20, 256 + 64 * (kK + 4));
  ASSERT_TRUE(gemm.isOk()) << gemm.status().message();
  std::mt19937 rng(5);
  Fp8Weight w = Fp8Weight::random(64, kK, rng);
  const cuda::GemmWeight fp8 = w.weight();
  // The skinny kernels.
  EXPECT_FALSE((*gemm)->fp8Operand(8, 64, kK, fp8, 2, false, false));
  EXPECT_TRUE((*gemm)->fp8Operand(9, 64, kK, fp8, 2, false, false));
  EXPECT_TRUE((*gemm)->fp8Operand(64, 64, kK, fp8, 2, true, true));
  // Two chunks.
  EXPECT_FALSE((*gemm)->fp8Operand(65, 64, kK, fp8, 2, false, false));
  // bf16 y rows of 60 elements: not 16-byte multiples.
  EXPECT_FALSE((*gemm)->fp8Operand(16, 60, kK, fp8, 2, false, false));
  // bf16 weights.
  cuda::GemmWeight bf16;
  bf16.bf16 = reinterpret_cast<const __nv_bfloat16 *>(w.codes.get());
  EXPECT_FALSE((*gemm)->fp8Operand(16, 64, kK, bf16, 2, false, false));
  // linearQuantized where linear quantizes in chunks is an error.
  const std::vector<__nv_bfloat16> xHost = randomRows(65, kK, rng, 1.0f);
  DeviceArray<__nv_bfloat16> x(xHost);
  auto y = DeviceArray<__nv_bfloat16>::poisoned(65 * 64);
  Status status = (*gemm)->linearQuantized<__nv_bfloat16>(
      x.get(), fp8, nullptr, y.get(), 65, 64, kK, nullptr);
  EXPECT_FALSE(status.isOk());
}

/// Sequence s of the batches: prompt tokens s * 37 + i, positions from 0,
/// its KV cache in blocks s * kBlocksPerSeq ...
constexpr int kBlocksPerSeq = 4;

/// `length` tokens of sequence `seq` from `position` on (ids from a
/// formula of both); logits for every one when `everyLogit`.
SequencePart part(int seq, int32_t position, int32_t length,
                  bool everyLogit = false) {
  SequencePart p{seq, position, {}, everyLogit};
  for (int32_t i = 0; i < length; ++i)
    p.tokens.push_back((seq * 37 + (position + i) * 11) % 4000 + 3);
  return p;
}

SamplingBatch seededSampling(size_t rows) {
  SamplingBatch sampling;
  sampling.rows.resize(rows);
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<double> uniform;
  for (size_t i = 0; i < rows; ++i) {
    RowSampling &r = sampling.rows[i];
    if (i % 3 == 0)
      continue; // greedy
    r.temperature = 1.1;
    r.topK = 50;
    r.topP = 0.95;
    r.uniform = uniform(rng);
  }
  return sampling;
}

TEST(CudaFp8QuantizeFusionTest, BackendIsBitIdenticalWithTheFusionOnAndOff) {
  std::string why;
  if (!gpuAvailable(&why))
    GTEST_SKIP() << "needs a GPU: " << why;
  std::optional<Fp8TinyPycode> loaded;
  if (std::string skip = loadFp8TinyPycode(loaded); !skip.empty())
    GTEST_SKIP() << skip;
  const Artifact *artifact = &loaded->artifact;
  const ParamTable *params = &loaded->params;

  constexpr int kSeqs = 12;
  const int64_t blockSize = artifact->plan.kvCache.blockSize;
  ASSERT_GE(kBlocksPerSeq * blockSize, 40) << "prompts do not fit";
  cuda::CudaBackendOptions options;
  options.numBlocks = kSeqs * kBlocksPerSeq;
  // Graphs for the decode batch (12 rows, padded to 16), not the prefill.
  options.maxGraphTokens = 64;
  auto backend = cuda::createCudaBackend(artifact->plan, 0, *params, options);
  ASSERT_TRUE(backend.isOk()) << backend.status().message();
  Backend &b = **backend;

  // Per layer: input norm -> qkv, post-attention norm -> gate_up,
  // silu_mul -> down.
  const cuda::Fp8QuantizeFusion prepared = cuda::fp8QuantizeFusion(b);
  EXPECT_EQ(prepared.steps, 3 * int(artifact->plan.kvCache.numLayers));

  // A prefill of 12 sequences (5 to 16 tokens, 126 in all: eager), then a
  // decode step of one token each (a CUDA graph).
  std::vector<SequencePart> prefill, decode;
  for (int s = 0; s < kSeqs; ++s) {
    prefill.push_back(part(s, 0, 5 + s, /*everyLogit=*/s % 2 == 0));
    decode.push_back(part(s, 5 + s, 1));
  }
  const Batch batches[] = {
      multiSequenceBatch(prefill, blockSize, kBlocksPerSeq),
      multiSequenceBatch(decode, blockSize, kBlocksPerSeq)};
  for (const Batch &batch : batches) {
    const bool graph = batch.numTokens() <= options.maxGraphTokens;
    SCOPED_TRACE(graph ? "decode batch (CUDA graph)" : "prefill batch (eager)");
    // Off first: the prefill's KV cache is then rewritten with the same
    // values by the fused run, which the decode batch reads.
    std::vector<float> logits[2];
    std::vector<int32_t> tokens[2];
    int64_t launches[2] = {}, unstored = 0;
    for (bool fused : {false, true}) {
      Status set = cuda::setFp8QuantizeFusion(b, fused);
      ASSERT_TRUE(set.isOk()) << set.message();
      const cuda::Fp8QuantizeFusion before = cuda::fp8QuantizeFusion(b);
      StatusOr<Logits> out = b.forward(batch);
      ASSERT_TRUE(out.isOk()) << out.status().message();
      logits[fused] = out->data;
      StatusOr<std::vector<int32_t>> sampled =
          b.forwardSample(batch, seededSampling(batch.logitsIndices.size()));
      ASSERT_TRUE(sampled.isOk()) << sampled.status().message();
      tokens[fused] = *sampled;
      const cuda::Fp8QuantizeFusion after = cuda::fp8QuantizeFusion(b);
      launches[fused] = after.launches - before.launches;
      if (fused)
        unstored = after.unstoredLaunches - before.unstoredLaunches;
    }
    EXPECT_EQ(launches[0], 0);
    EXPECT_GE(launches[1], 2 * prepared.steps)
        << "the fused steps ran unfused (forward and forwardSample)";
    // Where fp8 cuBLASLt has outer-vector scales for a product, its
    // producer keeps the row in shared memory (the H100's cuBLASLt has them
    // for these shapes): the logits below then check those launches too.
    EXPECT_GT(unstored, 0) << "every fused producer stored its bf16 row";
    ASSERT_FALSE(logits[0].empty());
    expectSameBytes(logits[1], logits[0], "logits");
    EXPECT_EQ(tokens[1], tokens[0]);
    std::printf("[ fp8 fusion ] %s: %zu logits bit-identical, %lld fused "
                "launches (%lld with the row unstored)\n",
                graph ? "decode (graph)" : "prefill (eager)", logits[0].size(),
                static_cast<long long>(launches[1]),
                static_cast<long long>(unstored));
  }
}

} // namespace
} // namespace infer::testing
