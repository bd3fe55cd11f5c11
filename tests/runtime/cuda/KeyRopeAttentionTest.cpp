//===- KeyRopeAttentionTest.cpp - Streaming attention (key rope) vs CPU ---===//
//
// launchPagedAttention with AttentionDims::keyRotaryDim (StreamingLLM: keys
// cached unrotated, key j of a sequence rotated at j, its index in the
// cache) against the CPU kernel with AttentionParams::keyRope, on fresh
// random inputs: bf16 and both fp8 pools, full and partial rotary dims (one
// whose half, 10, cuts the 8-element chunks the fast kernels load), GQA,
// block sizes 16/32, mixed prefill + decode batches. Each kernel is checked
// on the rows it serves:
// - decode rows on the split-KV kernel (head_dim 64/128/256), contexts up to
//   3000 keys split over many blocks: both sides rotate the same dequantized
//   keys with the same fp32 arithmetic (cos and sin in double, rounded to
//   float) and sum in fp32 in a different order, so SplitKVDecodeTest's
//   bound, 1e-5 + 2e-6 sqrt(n) of the largest output for n keys;
// - prefill rows on a tensor-core kernel (head_dim 64/128; the Hopper one
//   for bf16 pools on an H100), which rounds the rotated keys, q, the values
//   and the probabilities to bf16: 1e-2 of the largest output,
//   PrefillAttentionTest's bound;
// - every row of head_dim 96 on the fp32 kernel: 1e-5;
// each with fp32 and bf16 q/out (bf16 outputs: 1/256 more).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Kernels.h"
#include "tests/runtime/cuda/AttentionTestSupport.h"
#include "tests/runtime/cuda/DeviceArray.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

namespace infer::testing {
namespace {

using cuda::KVCacheDtype;

constexpr double kF32Tol = 1e-5;
constexpr double kBf16Tol = 1e-2;

struct Case {
  int heads, kvHeads, headDim, rotaryDim, blockSize;
  SeqShape seqs;
};

using KeyRopeAttentionTest = GpuAttentionTest;

TEST_F(KeyRopeAttentionTest, MatchesCpuAttention) {
  const Case cases[] = {
      {8, 2, 128, 128, 16, {{2999, 1}, {0, 37}, {100, 1}}}, // GQA 4, full
      {32, 8, 128, 64, 32, {{3000, 1}, {20, 150}}},         // partial, chunked
      {8, 2, 64, 64, 16, {{0, 200}, {1500, 1}}},            // d 64, full
      {4, 4, 64, 32, 16, {{70, 9}, {5, 1}}},                // d 64, partial
      {8, 4, 64, 20, 16, {{1000, 1}, {30, 70}}},            // half 10
      {8, 2, 256, 128, 16, {{3000, 1}, {40, 1}}},           // d 256, decode
      {4, 2, 96, 64, 16, {{300, 1}, {10, 40}}},             // d 96: fp32
  };
  const int layer = 1, numLayers = 2;
  for (KVCacheDtype dtype :
       {KVCacheDtype::kBf16, KVCacheDtype::kF8E5M2, KVCacheDtype::kF8E4M3})
    for (const Case &c : cases) {
      const std::string what =
          std::string(dtype == KVCacheDtype::kBf16     ? "bf16"
                      : dtype == KVCacheDtype::kF8E5M2 ? "e5m2"
                                                       : "e4m3") +
          " h=" + std::to_string(c.heads) +
          " kvh=" + std::to_string(c.kvHeads) +
          " d=" + std::to_string(c.headDim) +
          " rotary=" + std::to_string(c.rotaryDim);
      const cpu::CacheGeometry g =
          cacheGeometry(numLayers, c.kvHeads, c.headDim, c.blockSize);
      cpu::AttentionParams p =
          cpuAttentionParams(layer, c.heads, c.kvHeads, c.headDim, 0);
      p.keyRope.headDim = c.headDim;
      p.keyRope.rotaryDim = c.rotaryDim;
      p.keyRope.theta = 10000.0;
      ASSERT_TRUE(p.keyRope.validate().isOk());
      p.keyRopeInvFreq = plan::ropeInverseFrequencies(p.keyRope);
      const PagedBatch b = makePagedBatch(c.seqs, dtype, g, p,
                                          /*spareBlocks=*/2,
                                          /*bf16Queries=*/true);
      const int64_t numSeqs = c.seqs.size();

      DevicePool pool(b, dtype);
      DeviceArray<float> dFreq(p.keyRopeInvFreq);
      DeviceArray<int32_t> dTables(b.tables), dContext(b.contextLens),
          dQsl(b.qsl);
      cuda::AttentionDims a =
          attentionDims(layer, c.heads, c.kvHeads, c.headDim, 0);
      a.keyRotaryDim = c.rotaryDim;
      a.keyRopeInvFreq = dFreq.get();
      cuda::CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
      // The routing under test: the fast kernels take streaming shapes.
      const bool splitKV = c.headDim != 96;
      const bool tensorCores = c.headDim == 64 || c.headDim == 128;
      ASSERT_EQ(cuda::splitKVDecodeSupports(a, dims), splitKV) << what;
      ASSERT_EQ(cuda::prefillAttentionSupports(a), tensorCores) << what;
      const size_t workspaceBytes = cuda::splitKVWorkspaceBytes(c.headDim);
      auto workspace =
          DeviceArray<float>::poisoned(workspaceBytes / sizeof(float));
      const int splits = cuda::splitKVSplits(a, c.blockSize, b.maxBlocks,
                                             numSeqs, workspaceBytes);
      const int64_t width = int64_t(c.heads) * c.headDim;
      int longestDecode = 0;
      for (const auto &[cached, fresh] : c.seqs)
        if (fresh == 1)
          longestDecode = std::max(longestDecode, cached + 1);
      const double decodeTol =
          splitKV ? 1e-5 + 2e-6 * std::sqrt(double(longestDecode)) : kF32Tol;
      const double prefillTol = tensorCores ? kBf16Tol : kF32Tol;
      for (QueryType type : {QueryType::kF32, QueryType::kBf16}) {
        const std::vector<float> actual =
            runWithQueries(type, b.q, [&](auto q, auto out) {
              return cuda::launchPagedAttention(
                  q, pool.pool, dims, a, dTables.get(), b.maxBlocks,
                  dContext.get(), dQsl.get(), numSeqs, b.t, out, nullptr,
                  cuda::SplitKVWorkspace{workspace.get(), workspaceBytes});
            });
        for (bool decode : {true, false}) {
          const std::vector<float> expected =
              rowsOfSequences(b.ref, b.qsl, width, decode);
          if (expected.empty())
            continue;
          const double err =
              relError(rowsOfSequences(actual, b.qsl, width, decode), expected);
          const char *kernel = decode ? (splitKV ? "split_kv" : "fp32")
                                      : (tensorCores ? "tensor_core" : "fp32");
          std::cout << "[ kernel   ] key_rope_attention " << nameOf(type) << " "
                    << what << " " << (decode ? "decode" : "prefill")
                    << " rows on " << kernel
                    << (decode && splitKV
                            ? " (" + std::to_string(splits) + " splits)"
                            : std::string())
                    << " max rel err " << err << "\n";
          EXPECT_LT(err,
                    (decode ? decodeTol : prefillTol) + outputTolerance(type))
              << nameOf(type) << " " << what
              << (decode ? " decode" : " prefill");
        }
      }
      // Contexts of 1000+ keys are split over several blocks.
      if (splitKV && longestDecode >= 1000)
        EXPECT_GT(splits, 4) << what;
    }
}

} // namespace
} // namespace infer::testing
