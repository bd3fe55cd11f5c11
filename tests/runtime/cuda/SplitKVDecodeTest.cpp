//===- SplitKVDecodeTest.cpp - Split-KV GQA decode attention vs CPU -------===//
//
// launchPagedAttention on decode batches (one new token per sequence), which
// it sends to the split-KV kernel (DecodeAttention.cu), against the CPU
// kernel on fresh random inputs: contexts of 1, 17, 1000, 5000 and 20000
// tokens, GQA ratios 1/4/8 (and 5, a partial head tile; 16, two tiles),
// head_dim 64/128/256, bf16 and both fp8 pools, sliding windows, block
// sizes 16, 32 and 24 (slots by division, not shift); with the
// workspace (long contexts split over many blocks) and without (one split).
// Both sides read the same dequantized fp32 keys and values and differ only
// in fp32 summation order; the outputs average n values, so they shrink like
// 1/sqrt(n) while each sum's rounding stays ~1e-7 of its terms: the bound
// is 1e-5 + 2e-6 sqrt(n) of the largest output (1/256 more with bf16
// outputs; the queries are bf16 values, so fp32 and bf16 q/out run the same
// inputs). Slots no sequence owns hold NaN, so a read outside a sequence's
// keys shows. A captured graph replays for other context lengths of the same
// block-table width. Soft-capped scores (Gemma 2; caps of 5 to 50 over
// scores of 4 to 30 standard deviations) keep the bound on every pool and
// shape kind (the kernel's fastTanh moves a capped score by at most
// cap * 2^-21, well inside it), and the same batch run without the cap is
// far from the capped reference (the cases test the cap). Launches of bf16
// q and pools that fill the GPU go to the tensor-core kernel
// (decodeKernelOf): its routing,
// and its results on the shapes it takes (forced by setDecodeKernel, and
// routed there on its own) within the tensor-core prefills' 1e-2 (q and the
// probabilities in bf16).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/support/Fp8.h"
#include "tests/runtime/cuda/AttentionTestSupport.h"
#include "tests/runtime/cuda/DeviceArray.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>

namespace infer::testing {
namespace {

using cuda::AttentionDims;
using cuda::CacheDims;
using cuda::KVCacheDtype;

struct Case {
  int heads, kvHeads, headDim, window, blockSize;
  std::vector<int> contexts; ///< One decode sequence per context length.
};

std::string describe(const Case &c, KVCacheDtype dtype) {
  std::string s = dtype == KVCacheDtype::kBf16     ? "bf16"
                  : dtype == KVCacheDtype::kF8E5M2 ? "e5m2"
                                                   : "e4m3";
  s += " h=" + std::to_string(c.heads) + " kvh=" + std::to_string(c.kvHeads) +
       " d=" + std::to_string(c.headDim) +
       " window=" + std::to_string(c.window) +
       " bs=" + std::to_string(c.blockSize) + " contexts";
  for (int n : c.contexts)
    s += " " + std::to_string(n);
  return s;
}

class SplitKVDecodeTest : public GpuAttentionTest {
protected:
  SplitKVDecodeTest() : GpuAttentionTest(/*threads=*/8) {}

  /// One decode sequence per context length over a pool of `dtype` with 2
  /// spare blocks.
  PagedBatch make(const Case &c, KVCacheDtype dtype, int layer, int numLayers,
                  ScoreOptions scores = {}) {
    SeqShape seqs;
    for (int n : c.contexts)
      seqs.push_back({n - 1, 1});
    return makePagedBatch(
        seqs, dtype,
        cacheGeometry(numLayers, c.kvHeads, c.headDim, c.blockSize),
        cpuAttentionParams(layer, c.heads, c.kvHeads, c.headDim, c.window,
                           scores),
        /*spareBlocks=*/2, /*bf16Queries=*/true);
  }
};

double tolerance(const Case &c) {
  int longest = 0;
  for (int n : c.contexts)
    longest = std::max(longest, c.window > 0 ? std::min(n, c.window) : n);
  return 1e-5 + 2e-6 * std::sqrt(double(longest));
}

/// Restores decodeKernelOf's own choice when a test that forced one ends.
struct ForcedDecodeKernel {
  explicit ForcedDecodeKernel(cuda::DecodeKernel kernel) {
    cuda::setDecodeKernel(kernel);
  }
  ~ForcedDecodeKernel() { cuda::setDecodeKernel(cuda::DecodeKernel::kAuto); }
};

/// The tensor-core decode rounds q (bf16 here already), fp8 keys and values
/// and the probabilities to bf16, as the tensor-core prefills do.
constexpr double kMmaTol = 1e-2;

TEST_F(SplitKVDecodeTest, MatchesCpuAttention) {
  // The split-KV kernel on every shape (bf16 q would take the tensor-core
  // one where it fills the GPU: TensorCoreDecodeMatchesCpuAttention).
  ForcedDecodeKernel splitKV(cuda::DecodeKernel::kSplitKV);
  const Case cases[] = {
      {8, 8, 128, 0, 16, {1, 17, 1000, 5000}},  // MHA
      {32, 8, 128, 0, 16, {1, 17, 1000, 5000}}, // GQA 4
      {16, 2, 128, 0, 32, {20000}},             // GQA 8, batch 1
      {4, 4, 64, 0, 16, {20000, 3}},            // MHA, d 64
      {32, 4, 64, 0, 16, {5000, 1000}},         // GQA 8, d 64
      {10, 2, 128, 0, 16, {1, 4000}},           // GQA 5: partial tile
      {32, 2, 64, 0, 16, {700}},                // GQA 16: two tiles
      {8, 2, 256, 0, 16, {3000, 2}},            // d 256
      {16, 4, 128, 700, 16, {5000, 300, 701}},  // GQA 4, window
      {8, 2, 128, 0, 24, {3000, 50}},           // block size 24: no shift
  };
  const int layer = 1, numLayers = 2;
  const size_t workspaceBytes = cuda::splitKVWorkspaceBytes(256);
  auto workspace = DeviceArray<float>::poisoned(workspaceBytes / sizeof(float));
  for (KVCacheDtype dtype :
       {KVCacheDtype::kBf16, KVCacheDtype::kF8E5M2, KVCacheDtype::kF8E4M3})
    for (const Case &c : cases) {
      PagedBatch b = make(c, dtype, layer, numLayers);
      const int64_t numSeqs = c.contexts.size();
      AttentionDims a =
          attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window);
      CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
      ASSERT_TRUE(cuda::splitKVDecodeSupports(a, dims)) << describe(c, dtype);
      DevicePool pool(b, dtype);
      DeviceArray<int32_t> tables(b.tables), context(b.contextLens), qsl(b.qsl);
      const int splits = cuda::splitKVSplits(a, c.blockSize, b.maxBlocks,
                                             numSeqs, workspaceBytes);
      for (QueryType type : {QueryType::kF32, QueryType::kBf16})
        for (bool split : {true, false}) {
          const cuda::SplitKVWorkspace ws =
              split ? cuda::SplitKVWorkspace{workspace.get(), workspaceBytes}
                    : cuda::SplitKVWorkspace{};
          const std::vector<float> got =
              runWithQueries(type, b.q, [&](auto q, auto out) {
                return cuda::launchPagedAttention(
                    q, pool.pool, dims, a, tables.get(), b.maxBlocks,
                    context.get(), qsl.get(), numSeqs, numSeqs, out, nullptr,
                    ws);
              });
          const double err = relError(got, b.ref);
          std::cout << "[ kernel   ] split_kv_decode " << nameOf(type) << " "
                    << describe(c, dtype) << " splits " << (split ? splits : 1)
                    << " max rel err " << err << "\n";
          EXPECT_LT(err, tolerance(c) + outputTolerance(type))
              << nameOf(type) << " " << describe(c, dtype) << " split "
              << split;
        }
      // Long contexts of few sequences are split over many blocks.
      if (numSeqs == 1 && c.contexts[0] >= 5000)
        EXPECT_GT(splits, 8) << describe(c, dtype);
    }
}

TEST_F(SplitKVDecodeTest, SoftcappedScoresMatchCpuAttention) {
  ForcedDecodeKernel splitKV(cuda::DecodeKernel::kSplitKV);
  struct SoftcapCase {
    Case shape;
    ScoreOptions scores;
  };
  const SoftcapCase cases[] = {
      {{8, 8, 128, 0, 16, {1, 17, 1000, 5000}}, {4, 5}}, // MHA
      {{32, 8, 128, 0, 16, {3000, 2}}, {4, 10}},         // GQA 4
      {{16, 2, 64, 0, 32, {20000}}, {4, 5}},             // GQA 8, d 64, split
      {{8, 4, 256, 4096, 16, {6000, 300}}, {30, 50}},    // d 256, window
      {{10, 2, 128, 8, 24, {40, 9, 3}}, {4, 5}},         // GQA 5, window 8
  };
  const int layer = 1, numLayers = 2;
  const size_t workspaceBytes = cuda::splitKVWorkspaceBytes(256);
  auto workspace = DeviceArray<float>::poisoned(workspaceBytes / sizeof(float));
  const cuda::SplitKVWorkspace ws{workspace.get(), workspaceBytes};
  for (KVCacheDtype dtype :
       {KVCacheDtype::kBf16, KVCacheDtype::kF8E5M2, KVCacheDtype::kF8E4M3})
    for (const SoftcapCase &k : cases) {
      const Case &c = k.shape;
      const ScoreOptions &scores = k.scores;
      const std::string what = describe(c, dtype) + " " + describe(scores);
      PagedBatch b = make(c, dtype, layer, numLayers, scores);
      const int64_t numSeqs = c.contexts.size();
      const AttentionDims a =
          attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window, scores);
      AttentionDims uncapped = a;
      uncapped.logitSoftcap = 0.0f;
      const CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
      ASSERT_TRUE(cuda::splitKVDecodeSupports(a, dims)) << what;
      DevicePool pool(b, dtype);
      DeviceArray<int32_t> tables(b.tables), context(b.contextLens), qsl(b.qsl);
      auto run = [&](QueryType type, const AttentionDims &attention) {
        return runWithQueries(type, b.q, [&](auto q, auto out) {
          return cuda::launchPagedAttention(
              q, pool.pool, dims, attention, tables.get(), b.maxBlocks,
              context.get(), qsl.get(), numSeqs, numSeqs, out, nullptr, ws);
        });
      };
      for (QueryType type : {QueryType::kF32, QueryType::kBf16}) {
        const double err = relError(run(type, a), b.ref);
        std::cout << "[ kernel   ] split_kv_decode " << nameOf(type) << " "
                  << what << " max rel err " << err << "\n";
        EXPECT_LT(err, tolerance(c) + outputTolerance(type))
            << nameOf(type) << " " << what;
      }
      const double uncappedErr =
          relError(run(QueryType::kF32, uncapped), b.ref);
      std::cout << "[ kernel   ] split_kv_decode " << what
                << " without the cap: max rel err " << uncappedErr << "\n";
      EXPECT_GT(uncappedErr, 0.1) << what;
    }
}

TEST_F(SplitKVDecodeTest, RoutesLaunchesThatFillTheGpuToTensorCores) {
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
      cudaSuccess);
  const int64_t bigBatch = 4 * int64_t(sms); // 32 units per SM of 8 kv heads
  const CacheDims llama{1, 8, 128, 16};
  const AttentionDims a = attentionDims(0, 32, 8, 128, 0);
  auto kernelOf = [&](const AttentionDims &attention, const CacheDims &dims,
                      KVCacheDtype dtype, bool bf16Queries, int64_t keys,
                      int64_t numSeqs) {
    return cuda::decodeKernelOf(attention, dims, dtype, bf16Queries,
                                keys / dims.blockSize, numSeqs);
  };
  using cuda::DecodeKernel;
  EXPECT_EQ(kernelOf(a, llama, KVCacheDtype::kBf16, true, 128, bigBatch),
            DecodeKernel::kMma);
  EXPECT_EQ(kernelOf(a, llama, KVCacheDtype::kBf16, true, 2048, bigBatch),
            DecodeKernel::kMma);
  // One sequence of 8192 keys is split into enough warps (64 splits); one
  // short one is not, and one of 32768 keys would take 256 splits.
  EXPECT_EQ(kernelOf(a, llama, KVCacheDtype::kBf16, true, 8192, 1),
            DecodeKernel::kMma);
  EXPECT_EQ(kernelOf(a, llama, KVCacheDtype::kBf16, true, 128, 1),
            DecodeKernel::kSplitKV);
  EXPECT_EQ(kernelOf(a, llama, KVCacheDtype::kBf16, true, 32768, 1),
            DecodeKernel::kSplitKV);
  EXPECT_EQ(kernelOf(a, llama, KVCacheDtype::kF8E4M3, true, 32768, 1),
            DecodeKernel::kSplitKV);
  // fp8 pools too; fp32 q: split-KV.
  EXPECT_EQ(kernelOf(a, llama, KVCacheDtype::kF8E4M3, true, 128, bigBatch),
            DecodeKernel::kMma);
  EXPECT_EQ(kernelOf(a, llama, KVCacheDtype::kF8E5M2, true, 128, bigBatch),
            DecodeKernel::kMma);
  EXPECT_EQ(kernelOf(a, llama, KVCacheDtype::kBf16, false, 128, bigBatch),
            DecodeKernel::kSplitKV);
  // A sliding window bounds the keys of long tables, so their splits.
  AttentionDims windowed = a;
  windowed.slidingWindow = 512;
  EXPECT_EQ(kernelOf(windowed, llama, KVCacheDtype::kBf16, true, 8192, 1),
            DecodeKernel::kSplitKV);
  EXPECT_EQ(
      kernelOf(windowed, llama, KVCacheDtype::kBf16, true, 8192, bigBatch),
      DecodeKernel::kMma);
  // Shapes the tensor cores do not take: key rope, head_dim 256, groups of
  // 32.
  AttentionDims rotated = a;
  rotated.keyRotaryDim = 128;
  const std::vector<float> invFreq(64, 1.0f);
  rotated.keyRopeInvFreq = invFreq.data();
  EXPECT_FALSE(
      cuda::mmaDecodeSupports(rotated, llama, KVCacheDtype::kBf16, true));
  EXPECT_EQ(kernelOf(rotated, llama, KVCacheDtype::kBf16, true, 128, bigBatch),
            DecodeKernel::kSplitKV);
  EXPECT_FALSE(cuda::mmaDecodeSupports(attentionDims(0, 8, 2, 256, 0),
                                       CacheDims{1, 2, 256, 16},
                                       KVCacheDtype::kBf16, true));
  EXPECT_FALSE(cuda::mmaDecodeSupports(attentionDims(0, 64, 2, 128, 0),
                                       CacheDims{1, 2, 128, 16},
                                       KVCacheDtype::kBf16, true));
  AttentionDims capped = a;
  capped.logitSoftcap = 30.0f;
  EXPECT_EQ(kernelOf(capped, llama, KVCacheDtype::kBf16, true, 128, bigBatch),
            DecodeKernel::kMma);
  // Big batches fill the GPU unsplit; one long sequence is split.
  EXPECT_EQ(cuda::mmaDecodeSplits(a, 16, 128 / 16, bigBatch,
                                  cuda::splitKVWorkspaceBytes(128)),
            1);
  EXPECT_GT(cuda::mmaDecodeSplits(a, 16, 32768 / 16, 1,
                                  cuda::splitKVWorkspaceBytes(128)),
            64);
  EXPECT_EQ(cuda::mmaDecodeSplits(a, 16, 32768 / 16, 1, 0), 1);
  // Forcing a kernel holds where it supports the launch only.
  {
    ForcedDecodeKernel forced(DecodeKernel::kSplitKV);
    EXPECT_EQ(kernelOf(a, llama, KVCacheDtype::kBf16, true, 128, bigBatch),
              DecodeKernel::kSplitKV);
  }
  {
    ForcedDecodeKernel forced(DecodeKernel::kMma);
    EXPECT_EQ(kernelOf(a, llama, KVCacheDtype::kBf16, true, 128, 1),
              DecodeKernel::kMma);
    EXPECT_EQ(kernelOf(a, llama, KVCacheDtype::kBf16, false, 128, bigBatch),
              DecodeKernel::kSplitKV);
  }
}

TEST_F(SplitKVDecodeTest, TensorCoreOperandsAreTheCodesValues) {
  // The tensor-core decode makes its mma operands of fp8 codes by moving
  // their bits into bf16's and one multiply (codesToBf16x8): every code in
  // every position of its 8 gives the bf16 of the value the CPU decodes,
  // bit for bit (bf16 holds every fp8 value). Codes of NaN and infinity,
  // which the cache writes never store, are not asked of it.
  for (KVCacheDtype dtype : {KVCacheDtype::kF8E4M3, KVCacheDtype::kF8E5M2}) {
    const Fp8Format format =
        dtype == KVCacheDtype::kF8E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
    // Each code at each of the 8 positions: 8 rotations of 0 .. 255.
    std::vector<uint8_t> codes;
    for (int shift = 0; shift < 8; ++shift)
      for (int c = 0; c < 256; ++c)
        codes.push_back(static_cast<uint8_t>((c + shift * 37) % 256));
    DeviceArray<uint8_t> dCodes(codes);
    auto out = DeviceArray<__nv_bfloat16>::poisoned(codes.size());
    ASSERT_EQ(cuda::launchDecodeOperandBf16(dCodes.get(), codes.size(), dtype,
                                            out.get(), nullptr),
              cudaSuccess);
    const std::vector<__nv_bfloat16> got = out.download();
    int checked = 0;
    for (size_t i = 0; i < codes.size(); ++i) {
      const float value = decodeFp8(codes[i], format);
      if (!std::isfinite(value))
        continue;
      const __nv_bfloat16 want = __float2bfloat16_rn(value);
      ASSERT_EQ(__bfloat162float(want), value) << "bf16 holds fp8 values";
      ASSERT_EQ(std::memcmp(&got[i], &want, sizeof(want)), 0)
          << (dtype == KVCacheDtype::kF8E4M3 ? "e4m3" : "e5m2") << " code 0x"
          << std::hex << int(codes[i]) << " at position " << std::dec << i % 8
          << ": " << __bfloat162float(got[i]) << ", the CPU decodes " << value;
      ++checked;
    }
    EXPECT_EQ(checked, 8 * (dtype == KVCacheDtype::kF8E4M3 ? 254 : 248));
  }
}

TEST_F(SplitKVDecodeTest, TensorCoreDecodeMatchesCpuAttention) {
  // Forced onto the tensor-core kernel, every pool, with the workspace
  // (long contexts split) and without: ragged short contexts and a few long
  // ones, every group size it takes, head_dim 64/128, windows, block sizes
  // 24 and 8 (two blocks a step), soft-caps.
  std::uniform_int_distribution<int> shortContext(1, 200);
  auto ragged = [&](int n) {
    std::vector<int> contexts;
    for (int i = 0; i < n; ++i)
      contexts.push_back(shortContext(rng_));
    return contexts;
  };
  struct MmaCase {
    Case shape;
    ScoreOptions scores;
  };
  const MmaCase cases[] = {
      {{32, 8, 128, 0, 16, ragged(24)}, {}},                 // GQA 4
      {{32, 8, 128, 0, 16, {1, 2, 15, 16, 17, 31, 33}}, {}}, // step edges
      {{8, 8, 128, 0, 16, ragged(12)}, {}},                  // MHA
      {{16, 2, 128, 0, 32, ragged(12)}, {}},                 // GQA 8
      {{10, 2, 128, 0, 16, ragged(12)}, {}},                 // GQA 5
      {{24, 2, 128, 0, 16, ragged(12)}, {}},                 // GQA 12
      {{32, 2, 64, 0, 16, ragged(12)}, {}},                  // GQA 16, d 64
      {{4, 4, 64, 0, 16, ragged(12)}, {}},                   // MHA, d 64
      {{32, 8, 64, 0, 16, {3000, 700, 64}}, {}},             // long, d 64
      {{16, 4, 128, 0, 16, {5000, 1000, 3}}, {}},            // long
      {{16, 4, 128, 50, 16, {300, 51, 50, 49, 7}}, {}},      // window
      {{8, 2, 128, 0, 24, ragged(12)}, {}},                  // bs 24
      {{8, 2, 128, 0, 8, {1500, 260, 257, 9}}, {}},          // bs 8, windows
      {{32, 8, 128, 0, 16, ragged(12)}, {4, 10}},            // soft-cap
      {{16, 2, 64, 8, 16, {40, 9, 3}}, {4, 5}},              // cap, window
  };
  ForcedDecodeKernel forced(cuda::DecodeKernel::kMma);
  const int layer = 1, numLayers = 2;
  const size_t workspaceBytes = cuda::splitKVWorkspaceBytes(128);
  auto workspace = DeviceArray<float>::poisoned(workspaceBytes / sizeof(float));
  const cuda::DecodePrefetch initial = cuda::decodePrefetch();
  // Every pool with its steps loaded one ahead and without.
  for (cuda::DecodePrefetch prefetch :
       {cuda::DecodePrefetch::kAll, cuda::DecodePrefetch::kNone})
    for (KVCacheDtype dtype :
         {KVCacheDtype::kBf16, KVCacheDtype::kF8E5M2, KVCacheDtype::kF8E4M3})
      for (const MmaCase &k : cases) {
        cuda::setDecodePrefetch(prefetch);
        const Case &c = k.shape;
        const std::string what =
            describe(c, dtype) + " " + describe(k.scores) +
            (prefetch == cuda::DecodePrefetch::kAll ? " prefetch" : "");
        PagedBatch b = make(c, dtype, layer, numLayers, k.scores);
        const int64_t numSeqs = c.contexts.size();
        const AttentionDims a = attentionDims(layer, c.heads, c.kvHeads,
                                              c.headDim, c.window, k.scores);
        const CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
        ASSERT_EQ(
            cuda::decodeKernelOf(a, dims, dtype, true, b.maxBlocks, numSeqs),
            cuda::DecodeKernel::kMma)
            << what;
        DevicePool pool(b, dtype);
        DeviceArray<int32_t> tables(b.tables), context(b.contextLens),
            qsl(b.qsl);
        const int splits = cuda::mmaDecodeSplits(a, c.blockSize, b.maxBlocks,
                                                 numSeqs, workspaceBytes);
        for (bool split : {true, false}) {
          const cuda::SplitKVWorkspace ws =
              split ? cuda::SplitKVWorkspace{workspace.get(), workspaceBytes}
                    : cuda::SplitKVWorkspace{};
          const std::vector<float> got =
              runWithQueries(QueryType::kBf16, b.q, [&](auto q, auto out) {
                return cuda::launchPagedAttention(
                    q, pool.pool, dims, a, tables.get(), b.maxBlocks,
                    context.get(), qsl.get(), numSeqs, numSeqs, out, nullptr,
                    ws);
              });
          const double err = relError(got, b.ref);
          std::cout << "[ kernel   ] mma_decode " << what << " splits "
                    << (split ? splits : 1) << " max rel err " << err << "\n";
          EXPECT_LT(err, kMmaTol) << what << " split " << split;
        }
        // Long contexts of few sequences are split, short ragged ones among
        // them too (splits with no keys).
        if (c.contexts[0] >= 3000)
          EXPECT_GT(splits, 8) << what;
      }
  cuda::setDecodePrefetch(initial);
}

TEST_F(SplitKVDecodeTest, BigShortBatchTakesTensorCores) {
  // Llama-3-8B's shape, 8 kv heads: enough sequences for 4 units per SM,
  // ragged contexts of at most 256, on decodeKernelOf's own choice.
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
      cudaSuccess);
  std::uniform_int_distribution<int> length(1, 256);
  Case c{32, 8, 128, 0, 16, {256}};
  while (int(c.contexts.size()) < sms / 2 + 1)
    c.contexts.push_back(length(rng_));
  const int layer = 0, numLayers = 1;
  PagedBatch b = make(c, KVCacheDtype::kBf16, layer, numLayers);
  const int64_t numSeqs = c.contexts.size();
  const AttentionDims a =
      attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window);
  const CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
  ASSERT_EQ(cuda::decodeKernelOf(a, dims, KVCacheDtype::kBf16, true,
                                 b.maxBlocks, numSeqs),
            cuda::DecodeKernel::kMma);
  DevicePool pool(b, KVCacheDtype::kBf16);
  DeviceArray<int32_t> tables(b.tables), context(b.contextLens), qsl(b.qsl);
  const size_t workspaceBytes = cuda::splitKVWorkspaceBytes(c.headDim);
  auto workspace = DeviceArray<float>::poisoned(workspaceBytes / sizeof(float));
  const std::vector<float> got =
      runWithQueries(QueryType::kBf16, b.q, [&](auto q, auto out) {
        return cuda::launchPagedAttention(
            q, pool.pool, dims, a, tables.get(), b.maxBlocks, context.get(),
            qsl.get(), numSeqs, numSeqs, out, nullptr,
            cuda::SplitKVWorkspace{workspace.get(), workspaceBytes});
      });
  const double err = relError(got, b.ref);
  std::cout << "[ kernel   ] mma_decode " << numSeqs
            << " sequences: max rel err " << err << "\n";
  EXPECT_LT(err, kMmaTol);
}

TEST_F(SplitKVDecodeTest, LongContextBatchOneTiming) {
  // Llama-3-8B's attention shape (32 heads, 8 kv heads, d 128), one
  // sequence: split over the GPU vs one block per (kv head, tile). Prints
  // the time per launch and the KV bytes read per second; both ways give
  // the same output to fp32 summation order.
  const int heads = 32, kvHeads = 8, d = 128, blockSize = 16;
  const size_t workspaceBytes = cuda::splitKVWorkspaceBytes(d);
  auto workspace = DeviceArray<float>::poisoned(workspaceBytes / sizeof(float));
  for (KVCacheDtype dtype : {KVCacheDtype::kBf16, KVCacheDtype::kF8E4M3})
    for (int context : {4096, 32768}) {
      const int64_t blocks = context / blockSize;
      CacheDims dims{1, kvHeads, d, blockSize};
      const int64_t elements = blocks * 2 * blockSize * kvHeads * d;
      std::uniform_int_distribution<int> byte(0, 255);
      PagedBatch b;
      b.maxBlocks = blocks;
      for (int64_t j = 0; j < blocks; ++j)
        b.tables.push_back(int32_t(j));
      b.contextLens = {context};
      b.qsl = {0, 1};
      if (dtype == KVCacheDtype::kBf16) {
        b.bf16.resize(elements);
        for (__nv_bfloat16 &x : b.bf16)
          x = __float2bfloat16_rn(normal());
      } else {
        // Finite codes of magnitude below 1, unit scales.
        b.codes.resize(elements);
        for (uint8_t &x : b.codes)
          x = uint8_t(byte(rng_) & 0xB7);
        b.scales.assign(elements / d, 1.0f);
      }
      b.q.resize(heads * d);
      for (float &x : b.q)
        x = normal();
      DevicePool pool(b, dtype);
      DeviceArray<float> q(b.q);
      DeviceArray<int32_t> tables(b.tables), contextLens(b.contextLens),
          qsl(b.qsl);
      AttentionDims a = attentionDims(0, heads, kvHeads, d, 0);
      const double kvBytes =
          2.0 * context * kvHeads * d * cuda::kvCacheElementBytes(dtype);
      std::vector<float> outputs[2];
      for (bool split : {true, false}) {
        const cuda::SplitKVWorkspace ws =
            split ? cuda::SplitKVWorkspace{workspace.get(), workspaceBytes}
                  : cuda::SplitKVWorkspace{};
        auto out = DeviceArray<float>::poisoned(b.q.size());
        auto launch = [&] {
          return cuda::launchPagedAttention(
              q.get(), pool.pool, dims, a, tables.get(), b.maxBlocks,
              contextLens.get(), qsl.get(), 1, 1, out.get(), nullptr, ws);
        };
        ASSERT_EQ(launch(), cudaSuccess);
        cudaEvent_t start, stop;
        ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
        ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
        constexpr int kRuns = 20;
        ASSERT_EQ(cudaEventRecord(start), cudaSuccess);
        for (int r = 0; r < kRuns; ++r)
          ASSERT_EQ(launch(), cudaSuccess);
        ASSERT_EQ(cudaEventRecord(stop), cudaSuccess);
        ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
        float ms = 0.0f;
        ASSERT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        const double us = 1e3 * ms / kRuns;
        const int splits =
            split ? cuda::splitKVSplits(a, blockSize, blocks, 1, workspaceBytes)
                  : 1;
        std::cout << "[ timing   ] split_kv_decode batch 1 context " << context
                  << (dtype == KVCacheDtype::kBf16 ? " bf16" : " e4m3")
                  << " splits " << splits << ": " << us << " us, "
                  << kvBytes / (us * 1e-6) / 1e9 << " GB/s of KV\n";
        outputs[split] = out.download();
      }
      EXPECT_LT(relError(outputs[1], outputs[0]),
                1e-5 + 2e-6 * std::sqrt(double(context)));
    }
}

TEST_F(SplitKVDecodeTest, CapturedGraphReplaysForOtherContexts) {
  // Captured once for block tables 320 blocks wide, replayed after the
  // context lengths (device memory the graph reads) change.
  const Case c{32, 8, 128, 0, 16, {5000, 300}};
  const int layer = 0, numLayers = 1;
  PagedBatch b = make(c, KVCacheDtype::kBf16, layer, numLayers);
  const int64_t numSeqs = c.contexts.size();
  AttentionDims a =
      attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window);
  CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
  DevicePool pool(b, KVCacheDtype::kBf16);
  DeviceArray<float> q(b.q);
  DeviceArray<int32_t> tables(b.tables), context(b.contextLens), qsl(b.qsl);
  const size_t workspaceBytes = cuda::splitKVWorkspaceBytes(c.headDim);
  auto workspace = DeviceArray<float>::poisoned(workspaceBytes / sizeof(float));
  const cuda::SplitKVWorkspace ws{workspace.get(), workspaceBytes};
  ASSERT_GT(
      cuda::splitKVSplits(a, c.blockSize, b.maxBlocks, numSeqs, workspaceBytes),
      1);
  auto replayed = DeviceArray<float>::poisoned(b.q.size());

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  const cudaError_t launched = cuda::launchPagedAttention(
      q.get(), pool.pool, dims, a, tables.get(), b.maxBlocks, context.get(),
      qsl.get(), numSeqs, numSeqs, replayed.get(), stream, ws);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(launched, cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  for (const std::vector<int32_t> &lengths :
       {std::vector<int32_t>{5000, 300}, std::vector<int32_t>{4001, 17}}) {
    ASSERT_EQ(cudaMemcpy(context.get(), lengths.data(),
                         lengths.size() * sizeof(int32_t),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    auto eager = DeviceArray<float>::poisoned(b.q.size());
    ASSERT_EQ(cuda::launchPagedAttention(q.get(), pool.pool, dims, a,
                                         tables.get(), b.maxBlocks,
                                         context.get(), qsl.get(), numSeqs,
                                         numSeqs, eager.get(), nullptr, ws),
              cudaSuccess);
    const std::vector<float> got = replayed.download();
    EXPECT_EQ(relError(got, eager.download()), 0.0)
        << lengths[0] << "+" << lengths[1];
    if (lengths == b.contextLens)
      EXPECT_LT(relError(got, b.ref), tolerance(c));
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

} // namespace
} // namespace infer::testing
