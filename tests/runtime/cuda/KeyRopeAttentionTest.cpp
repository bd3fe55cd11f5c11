//===- KeyRopeAttentionTest.cpp - Streaming attention (key rope) vs CPU ---===//
//
// launchPagedAttention with AttentionDims::keyRotaryDim (StreamingLLM: keys
// cached unrotated, key j of a sequence rotated at j, its index in the
// cache) against the CPU kernel with AttentionParams::keyRope, on fresh
// random inputs: bf16 and both fp8 pools, full and partial rotary dims,
// GQA, block sizes 16/32, mixed prefill + decode batches over several
// blocks. Both sides rotate the same dequantized keys with the same fp32
// arithmetic (cos and sin in double, rounded to float) and sum in fp32 in a
// different order: 1e-5 of the largest output.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Kernels.h"
#include "tests/runtime/cuda/AttentionTestSupport.h"
#include "tests/runtime/cuda/DeviceArray.h"

#include <gtest/gtest.h>

#include <iostream>

namespace infer::testing {
namespace {

using cuda::KVCacheDtype;

constexpr double kF32Tol = 1e-5;

struct Case {
  int heads, kvHeads, headDim, rotaryDim, blockSize;
  SeqShape seqs;
};

using KeyRopeAttentionTest = GpuAttentionTest;

TEST_F(KeyRopeAttentionTest, MatchesCpuAttention) {
  const Case cases[] = {
      {8, 2, 64, 64, 16, {{40, 1}, {0, 37}, {100, 1}}},
      {32, 8, 128, 128, 32, {{300, 1}, {20, 50}}},
      {4, 4, 64, 32, 16, {{70, 9}, {5, 1}}},
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
      p.keyRopeInvFreq = cpu::ropeInverseFrequencies(p.keyRope);
      const PagedBatch b =
          makePagedBatch(c.seqs, dtype, g, p, /*spareBlocks=*/2);

      DevicePool pool(b, dtype);
      DeviceArray<float> dq(b.q), dFreq(p.keyRopeInvFreq);
      DeviceArray<int32_t> dTables(b.tables), dContext(b.contextLens),
          dQsl(b.qsl);
      cuda::AttentionDims a =
          attentionDims(layer, c.heads, c.kvHeads, c.headDim, 0);
      a.keyRotaryDim = c.rotaryDim;
      a.keyRopeInvFreq = dFreq.get();
      cuda::CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
      auto out = DeviceArray<float>::poisoned(b.q.size());
      ASSERT_EQ(cuda::launchPagedAttention(
                    dq.get(), pool.pool, dims, a, dTables.get(), b.maxBlocks,
                    dContext.get(), dQsl.get(), c.seqs.size(), b.t, out.get(),
                    nullptr),
                cudaSuccess);
      const double err = relError(out.download(), b.ref);
      std::cout << "[ kernel   ] key_rope_attention " << what << " max rel err "
                << err << "\n";
      EXPECT_LT(err, kF32Tol) << what;
    }
}

} // namespace
} // namespace infer::testing
