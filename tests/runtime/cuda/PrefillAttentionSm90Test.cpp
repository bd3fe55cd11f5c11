//===- PrefillAttentionSm90Test.cpp - Hopper prefill attention vs CPU -----===//
//
// launchPrefillAttentionSm90 (wgmma + TMA, PrefillAttentionSm90.cuh) on the
// rows of sequences with two or more new tokens, skipped on GPUs other than
// compute capability 9.0:
// - structured values that say where a layout is wrong: with q = 0 every
//   visible key weighs the same, so values v[j][e] = f(e) must come out as
//   f(e) in every row (the P V product and the output's columns), and
//   v[j][e] = j % 64 as the mean over the row's visible keys (its masks,
//   tiles and rows); each bad row is printed with its tile, warpgroup and
//   warp;
// - fresh random batches against the CPU kernel: head_dim 64/128, GQA 1 to
//   16 (5: a group that splits 128-row tiles unevenly), block sizes 8 to
//   256, sliding windows, chunked prefill over up to 20000 cached tokens,
//   speculative-verification rows (few new tokens over a long context),
//   decode rows left to other kernels, fp32 and bf16 q/out;
// - fp8 pools (E4M3 with scales, E5M2) and streaming key rotation (bf16
//   pool), which pass through the producer's staging buffers;
// - soft-capped scores (Gemma 2: caps of 5 to 50, sliding window 8, long
//   windows, chunked prefill, verification rows; bf16 and fp8 pools), and
//   the same batches without the cap far from the capped reference;
// - persistent launches of 1 to 7 CTAs (many work items each) giving the
//   one-CTA-per-item result bit for bit;
// - a captured graph replaying the eager result;
// - FreshKV beside fp8 pools: prompts with nothing cached read the decoded
//   rows instead of the pool, for the same bits.
// q, K, V and the probabilities are bf16 on the GPU: tolerance 1e-2 of the
// largest output (and 1/256 more for bf16 outputs). Slots no sequence owns
// hold NaN, so a read or an unmasked stale key shows.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Kernels.h"
#include "tests/runtime/cuda/AttentionTestSupport.h"
#include "tests/runtime/cuda/DeviceArray.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>

namespace infer::testing {
namespace {

using cuda::AttentionDims;
using cuda::CacheDims;
using cuda::KVCacheDtype;

constexpr double kBf16Tol = 1e-2;
constexpr QueryType kQueryTypes[] = {QueryType::kF32, QueryType::kBf16};

class PrefillAttentionSm90Test : public GpuAttentionTest {
protected:
  void SetUp() override {
    GpuAttentionTest::SetUp();
    if (IsSkipped())
      return;
    const AttentionDims a = attentionDims(0, 8, 8, 128, 0);
    const CacheDims dims{1, 8, 128, 16};
    if (!cuda::prefillAttentionSm90Supports(a, dims, KVCacheDtype::kBf16))
      GTEST_SKIP() << "the Hopper kernel needs a GPU of compute capability "
                      "9.0 and a build with sm_90a code";
  }

  /// launchPrefillAttentionSm90 of batch `b` over `pool`, q and out of
  /// `type`; the rows of decode sequences stay NaN. `workspace`: the
  /// launch's tile map (none: every tile of the flat batch an item).
  std::vector<float> run(QueryType type, const PagedBatch &b,
                         cuda::KVCachePool pool, const CacheDims &dims,
                         const AttentionDims &a, cudaStream_t stream,
                         cuda::SplitKVWorkspace workspace = {}) {
    DeviceArray<int32_t> tables(b.tables), context(b.contextLens), qsl(b.qsl);
    const int64_t numSeqs = b.contextLens.size();
    return runWithQueries(type, b.q, [&](auto q, auto out) {
      return cuda::launchPrefillAttentionSm90(
          q, pool, dims, a, tables.get(), b.maxBlocks, context.get(), qsl.get(),
          numSeqs, b.t, out, stream, workspace);
    });
  }
};

/// A bf16 pool of one layer whose values say which key they belong to.
struct StructuredBatch {
  BlockTables blocks;
  std::vector<__nv_bfloat16> pool;
  std::vector<float> q;
  int64_t t = 0;
};

TEST_F(PrefillAttentionSm90Test, StructuredValuesLocateLayoutErrors) {
  struct Case {
    int heads, kvHeads, headDim, window, blockSize;
    SeqShape seqs;
  };
  const Case cases[] = {
      {2, 1, 128, 0, 16, {{0, 200}}},             // GQA 2: 4 row tiles
      {1, 1, 64, 0, 8, {{0, 130}}},               // d 64, two key tiles
      {4, 2, 128, 0, 16, {{300, 70}, {0, 1}}},    // chunked, a decode row
      {2, 2, 128, 50, 32, {{100, 150}, {5, 20}}}, // window
  };
  for (const Case &c : cases)
    for (int pattern = 0; pattern < 2; ++pattern) {
      const int d = c.headDim;
      StructuredBatch b;
      b.blocks = shuffledBlockTables(c.seqs, c.blockSize, 2, rng_);
      const cpu::CacheGeometry g = cacheGeometry(1, c.kvHeads, d, c.blockSize);
      b.pool.assign(
          b.blocks.numBlocks * g.blockElements(),
          __float2bfloat16_rn(std::numeric_limits<float>::quiet_NaN()));
      for (size_t s = 0; s < c.seqs.size(); ++s) {
        const auto [cached, fresh] = c.seqs[s];
        for (int pos = 0; pos < cached + fresh; ++pos) {
          const int64_t slot = b.blocks.slot(s, pos);
          for (int h = 0; h < c.kvHeads; ++h)
            for (int e = 0; e < d; ++e) {
              const int64_t k = g.offset(slot, 0, 0) + h * d + e;
              const int64_t v = g.offset(slot, 0, 1) + h * d + e;
              b.pool[k] = __float2bfloat16_rn(normal());
              // Exact in bf16: multiples of 1/2 below 64.
              const float value = pattern == 0
                                      ? float(e % 16) - 8.0f + 0.5f * (e / 16)
                                      : float(pos % 64);
              b.pool[v] = __float2bfloat16_rn(value);
            }
        }
      }
      b.t = b.blocks.qsl.back();
      b.q.assign(size_t(b.t) * c.heads * d, 0.0f);

      // Expected: pattern 0 every row f(e); pattern 1 the mean of pos % 64
      // over the row's visible keys.
      std::vector<float> want(b.q.size());
      for (size_t s = 0; s < c.seqs.size(); ++s) {
        const auto [cached, fresh] = c.seqs[s];
        for (int i = 0; i < fresh; ++i) {
          const int pos = cached + i;
          const int first =
              c.window > 0 && pos - c.window + 1 > 0 ? pos - c.window + 1 : 0;
          double mean = 0.0;
          for (int j = first; j <= pos; ++j)
            mean += j % 64;
          mean /= pos - first + 1;
          for (int h = 0; h < c.heads; ++h)
            for (int e = 0; e < d; ++e)
              want[((b.blocks.qsl[s] + i) * c.heads + h) * d + e] =
                  pattern == 0 ? float(e % 16) - 8.0f + 0.5f * (e / 16)
                               : float(mean);
        }
      }

      DeviceArray<__nv_bfloat16> pool(b.pool);
      DeviceArray<int32_t> tables(b.blocks.tables),
          context(b.blocks.contextLens), qsl(b.blocks.qsl);
      const AttentionDims a = attentionDims(0, c.heads, c.kvHeads, d, c.window);
      const CacheDims dims{1, c.kvHeads, d, c.blockSize};
      const std::vector<float> got =
          runWithQueries(QueryType::kBf16, b.q, [&](auto q, auto out) {
            return cuda::launchPrefillAttentionSm90(
                q, cuda::KVCachePool(pool.get()), dims, a, tables.get(),
                b.blocks.maxBlocks, context.get(), qsl.get(), c.seqs.size(),
                b.t, out, nullptr);
          });
      const int64_t width = int64_t(c.heads) * d;
      const std::vector<float> gotRows =
          rowsOfSequences(got, b.blocks.qsl, width, false);
      const std::vector<float> wantRows =
          rowsOfSequences(want, b.blocks.qsl, width, false);
      const double err = relError(gotRows, wantRows, 1.0);
      std::cout << "[ kernel   ] sm90_structured pattern " << pattern << " "
                << describe(AttentionCase{c.heads, c.kvHeads, d, c.window,
                                          c.blockSize, c.seqs})
                << " max rel err " << err << "\n";
      EXPECT_LT(err, 2 * kBf16Tol) << "pattern " << pattern;
      if (err < 2 * kBf16Tol)
        continue;
      // Where the bad rows sit: packed row f of a sequence's kv head is
      // (query f / group, head f % group); a CTA holds 128 of them, its
      // warpgroup w 64, its warps 16 each.
      const int group = c.heads / c.kvHeads;
      int printed = 0;
      for (size_t s = 0; s < c.seqs.size() && printed < 12; ++s) {
        const int fresh = c.seqs[s].second;
        if (fresh < 2)
          continue;
        for (int i = 0; i < fresh && printed < 12; ++i)
          for (int h = 0; h < c.heads && printed < 12; ++h) {
            const int64_t row = (b.blocks.qsl[s] + i) * c.heads + h;
            int bad = -1;
            for (int e = 0; e < d && bad < 0; ++e)
              if (!(std::fabs(got[row * d + e] - want[row * d + e]) <=
                    0.05 * (1.0 + std::fabs(want[row * d + e]))))
                bad = e;
            if (bad < 0)
              continue;
            const int flat = i * group + h % group;
            std::cout << "  bad row: seq " << s << " query " << i << " head "
                      << h << " (packed row " << flat << ": tile " << flat / 128
                      << " warpgroup " << (flat % 128) / 64 << " warp "
                      << (flat % 64) / 16 << " lane row " << flat % 16
                      << ") dim " << bad << " got " << got[row * d + bad]
                      << " want " << want[row * d + bad] << "; dims 0..7 got";
            for (int e = 0; e < 8; ++e)
              std::cout << " " << got[row * d + e];
            std::cout << "\n";
            ++printed;
          }
      }
    }
}

TEST_F(PrefillAttentionSm90Test, MatchesCpuAttention) {
  const AttentionCase cases[] = {
      {32, 8, 128, 0, 16, {{0, 300}}},                           // GQA 4
      {8, 8, 64, 0, 16, {{0, 200}, {37, 1}, {5, 70}, {100, 1}}}, // mixed
      {16, 2, 128, 0, 16, {{150, 77}, {64, 64}}},                // chunked
      {4, 1, 64, 50, 16, {{0, 190}, {120, 33}, {9, 1}}},         // window
      {8, 1, 128, 100, 32, {{300, 130}, {0, 2}}},                // GQA 8
      {2, 2, 64, 0, 8, {{0, 2}, {3, 5}}},                        // tiny
      {10, 2, 128, 0, 16, {{19990, 10}, {4000, 5}, {77, 1}}}, // GQA 5, verify
      {32, 2, 128, 0, 256, {{1000, 300}}},                    // GQA 16, bs 256
      {16, 16, 128, 0, 64, {{0, 129}, {127, 2}}},             // tile edges
      {8, 8, 128, 0, 128, {{5000, 64}}},                      // bs 128
      {32, 8, 128, 1000, 16, {{3000, 1500}}},                 // long window
      {8, 4, 64, 0, 32, {{12000, 40}}},                       // d 64, long
  };
  const int layer = 1, numLayers = 2;
  for (const AttentionCase &c : cases) {
    const PagedBatch b = makePagedBatch(
        c.seqs, KVCacheDtype::kBf16,
        cacheGeometry(numLayers, c.kvHeads, c.headDim, c.blockSize),
        cpuAttentionParams(layer, c.heads, c.kvHeads, c.headDim, c.window),
        /*spareBlocks=*/3, /*bf16Queries=*/true);
    const AttentionDims a =
        attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window);
    const CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
    ASSERT_TRUE(
        cuda::prefillAttentionSm90Supports(a, dims, KVCacheDtype::kBf16))
        << describe(c);
    DeviceArray<__nv_bfloat16> pool(b.bf16);
    const int64_t width = int64_t(c.heads) * c.headDim;
    const std::vector<float> want = rowsOfSequences(b.ref, b.qsl, width, false);
    for (QueryType type : kQueryTypes) {
      const std::vector<float> got = rowsOfSequences(
          run(type, b, cuda::KVCachePool(pool.get()), dims, a, nullptr), b.qsl,
          width, false);
      const double err = relError(got, want);
      std::cout << "[ kernel   ] sm90_prefill " << nameOf(type) << " "
                << describe(c) << " max rel err " << err << "\n";
      EXPECT_LT(err, kBf16Tol + outputTolerance(type))
          << nameOf(type) << " " << describe(c);
    }
  }
}

TEST_F(PrefillAttentionSm90Test, Fp8PoolsAndKeyRope) {
  struct Case {
    KVCacheDtype dtype;
    int rotaryDim;
    AttentionCase shape;
  };
  const Case cases[] = {
      {KVCacheDtype::kF8E4M3, 0, {32, 8, 128, 0, 16, {{100, 300}, {7, 1}}}},
      {KVCacheDtype::kF8E5M2, 0, {32, 8, 128, 0, 16, {{100, 300}, {7, 1}}}},
      {KVCacheDtype::kF8E4M3, 0, {8, 2, 64, 40, 8, {{0, 150}, {2000, 9}}}},
      {KVCacheDtype::kF8E5M2, 0, {4, 4, 64, 0, 32, {{500, 66}}}},
      {KVCacheDtype::kF8E4M3, 0, {10, 2, 128, 0, 256, {{3000, 200}}}},
      {KVCacheDtype::kBf16, 128, {8, 2, 128, 0, 16, {{0, 200}, {300, 37}}}},
      {KVCacheDtype::kBf16, 64, {32, 8, 128, 0, 32, {{20, 150}}}},
      {KVCacheDtype::kBf16, 20, {8, 4, 64, 0, 16, {{30, 70}, {1000, 5}}}},
  };
  const int layer = 0, numLayers = 1;
  for (const Case &k : cases) {
    const AttentionCase &c = k.shape;
    const std::string what =
        std::string(k.dtype == KVCacheDtype::kBf16     ? "bf16"
                    : k.dtype == KVCacheDtype::kF8E5M2 ? "e5m2"
                                                       : "e4m3") +
        " rotary " + std::to_string(k.rotaryDim) + " " + describe(c);
    cpu::AttentionParams p =
        cpuAttentionParams(layer, c.heads, c.kvHeads, c.headDim, c.window);
    if (k.rotaryDim > 0) {
      p.keyRope.headDim = c.headDim;
      p.keyRope.rotaryDim = k.rotaryDim;
      p.keyRope.theta = 10000.0;
      ASSERT_TRUE(p.keyRope.validate().isOk());
      p.keyRopeInvFreq = plan::ropeInverseFrequencies(p.keyRope);
    }
    const PagedBatch b = makePagedBatch(
        c.seqs, k.dtype,
        cacheGeometry(numLayers, c.kvHeads, c.headDim, c.blockSize), p,
        /*spareBlocks=*/2, /*bf16Queries=*/true);
    DeviceArray<float> freq(p.keyRopeInvFreq);
    AttentionDims a =
        attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window);
    a.keyRotaryDim = k.rotaryDim;
    a.keyRopeInvFreq = k.rotaryDim > 0 ? freq.get() : nullptr;
    const CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
    ASSERT_TRUE(cuda::prefillAttentionSm90Supports(a, dims, k.dtype)) << what;
    DevicePool pool(b, k.dtype);
    const int64_t width = int64_t(c.heads) * c.headDim;
    const std::vector<float> want = rowsOfSequences(b.ref, b.qsl, width, false);
    for (QueryType type : kQueryTypes) {
      const std::vector<float> got = rowsOfSequences(
          run(type, b, pool.pool, dims, a, nullptr), b.qsl, width, false);
      const double err = relError(got, want);
      std::cout << "[ kernel   ] sm90_prefill " << nameOf(type) << " " << what
                << " max rel err " << err << "\n";
      EXPECT_LT(err, kBf16Tol + outputTolerance(type))
          << nameOf(type) << " " << what;
    }
  }
}

/// The CPU pool of batch `b`'s codes (`codes` and `scales` its storage).
cpu::KVPool cpuPoolOf(const PagedBatch &b, KVCacheDtype dtype,
                      std::vector<uint8_t> &codes, std::vector<float> &scales) {
  codes = b.codes;
  scales = b.scales;
  cpu::KVPool pool;
  pool.codes = codes.data();
  pool.scales = scales.data();
  pool.format =
      dtype == KVCacheDtype::kF8E5M2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
  return pool;
}

/// FreshKV (Kernels.h) of batch `b` over an fp8 pool of `layer`, in planes
/// of b.t + contextRows rows: the rows of the sequences with nothing cached
/// hold the bf16 of their pool codes times their scales (E4M3), or 0 with
/// `zeros`; the others' rows and the context rows NaN, so a launch that
/// read them without filling them would show it.
std::vector<__nv_bfloat16> freshRowsOf(const PagedBatch &b, KVCacheDtype dtype,
                                       const CacheDims &dims, int layer,
                                       bool zeros, int64_t contextRows) {
  std::vector<int64_t> slots(b.t, -1);
  for (size_t s = 0; s + 1 < b.qsl.size(); ++s) {
    const int first = b.qsl[s], count = b.qsl[s + 1] - first;
    if (b.contextLens[s] != count)
      continue; // keys cached before the call: context rows or the pool
    for (int i = 0; i < count; ++i)
      slots[first + i] = b.slot(s, i);
  }
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  const cpu::CacheGeometry g = cacheGeometry(dims.numLayers, dims.numKVHeads,
                                             dims.headDim, dims.blockSize);
  const std::vector<__nv_bfloat16> rows =
      freshRowsOfPool(cpuPoolOf(b, dtype, codes, scales), g, layer, slots);
  const int64_t width = g.slotElements();
  std::vector<__nv_bfloat16> fresh(size_t(2) * (b.t + contextRows) * width,
                                   __float2bfloat16_rn(NAN));
  for (int kv = 0; kv < 2; ++kv)
    for (int64_t r = 0; r < b.t; ++r)
      std::copy_n(rows.begin() + (kv * b.t + r) * width, width,
                  fresh.begin() + (kv * (b.t + contextRows) + r) * width);
  if (zeros)
    for (int kv = 0; kv < 2; ++kv)
      for (int64_t r = 0; r < b.t; ++r)
        if (slots[r] >= 0)
          std::fill_n(fresh.begin() + (kv * (b.t + contextRows) + r) * width,
                      width, __float2bfloat16_rn(0.0f));
  return fresh;
}

/// The context rows a launch fills for batch `b` in `contextRows` rows:
/// the whole contexts, decoded as the CPU decodes them, of the sequences
/// that take them (freshContextRows' rule) in order while they fit; rows
/// past them NaN. Planes of `contextRows` rows.
std::vector<__nv_bfloat16> contextRowsOf(const PagedBatch &b,
                                         KVCacheDtype dtype,
                                         const CacheDims &dims, int layer,
                                         int group, int64_t contextRows) {
  std::vector<int64_t> slots(contextRows, -1);
  int64_t next = 0;
  for (size_t s = 0; s + 1 < b.qsl.size(); ++s) {
    const int count = b.qsl[s + 1] - b.qsl[s], length = b.contextLens[s];
    if (int64_t(count) * group < cuda::kFreshContextMinRows || length == count)
      continue;
    if (next + length > contextRows)
      break;
    for (int pos = 0; pos < length; ++pos)
      slots[next + pos] = b.slot(s, pos);
    next += length;
  }
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  return freshRowsOfPool(cpuPoolOf(b, dtype, codes, scales),
                         cacheGeometry(dims.numLayers, dims.numKVHeads,
                                       dims.headDim, dims.blockSize),
                         layer, slots);
}

TEST_F(PrefillAttentionSm90Test, FreshKVReadsGiveThePoolsBits) {
  // Batches of prompts with nothing cached (their keys from FreshKV, on the
  // bf16 pool's kernel), chunked prompts of kFreshContextMinRows query rows
  // or more (from context rows the launch fills, on that kernel too, where
  // FreshKV has room for them), shorter chunks and verification rows over
  // cached keys (the fp8 pool's kernel) and decode rows (left to other
  // kernels): the same bits as the pool alone, which the CPU bounds; the
  // context rows hold the CPU's decoding of those contexts; and with the
  // call's FreshKV rows zeroed, the fresh prompts' outputs are 0 and the
  // others' unchanged, so each sequence read where it should.
  const AttentionCase cases[] = {
      {32, 8, 128, 0, 16, {{0, 300}, {100, 300}, {7, 1}, {0, 129}, {0, 2}}},
      {8, 2, 64, 40, 8, {{0, 150}, {2000, 9}, {0, 70}, {500, 200}}},
      {10, 2, 128, 0, 256, {{0, 200}, {3000, 200}, {0, 1000}, {40, 103}}},
      {16, 16, 128, 0, 64, {{0, 129}, {127, 2}, {0, 3}, {1000, 600}}},
      {8, 4, 64, 0, 32, {{0, 17}}},
      {32, 8, 128, 0, 16, {{1583, 465}, {0, 1024}, {50, 1}}},
  };
  const int layer = 1, numLayers = 2;
  const size_t workspaceBytes = cuda::splitKVWorkspaceBytes(128);
  DeviceArray<float> workspace(
      std::vector<float>(workspaceBytes / sizeof(float), 0.0f));
  const cuda::SplitKVWorkspace ws{workspace.get(), workspaceBytes};
  ASSERT_TRUE(cuda::freshKVReadsOn());
  for (KVCacheDtype dtype : {KVCacheDtype::kF8E4M3, KVCacheDtype::kF8E5M2})
    for (const AttentionCase &c : cases) {
      const PagedBatch b = makePagedBatch(
          c.seqs, dtype,
          cacheGeometry(numLayers, c.kvHeads, c.headDim, c.blockSize),
          cpuAttentionParams(layer, c.heads, c.kvHeads, c.headDim, c.window),
          /*spareBlocks=*/2, /*bf16Queries=*/true);
      const AttentionDims a =
          attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window);
      const CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
      ASSERT_TRUE(cuda::prefillAttentionSm90Supports(a, dims, dtype))
          << describe(c);
      DevicePool pool(b, dtype);
      DeviceArray<int32_t> tables(b.tables), context(b.contextLens), qsl(b.qsl);
      const int64_t numSeqs = b.contextLens.size();
      const int group = c.heads / c.kvHeads;
      const int64_t width = int64_t(c.heads) * c.headDim;
      const int64_t slotWidth = int64_t(c.kvHeads) * c.headDim;
      // The launch's outputs, and FreshKV's planes after it in `after`.
      auto launch = [&](const std::vector<__nv_bfloat16> *fresh,
                        int64_t contextRows,
                        std::vector<__nv_bfloat16> *after = nullptr) {
        std::optional<DeviceArray<__nv_bfloat16>> rows;
        if (fresh)
          rows.emplace(*fresh);
        const cuda::FreshKV freshKV{rows ? rows->get() : nullptr,
                                    rows ? b.t : 0, rows ? contextRows : 0};
        std::vector<float> out =
            runWithQueries(QueryType::kBf16, b.q, [&](auto q, auto out) {
              return cuda::launchPrefillAttentionSm90(
                  q, pool.pool, dims, a, tables.get(), b.maxBlocks,
                  context.get(), qsl.get(), numSeqs, b.t, out, nullptr, ws,
                  freshKV);
            });
        if (after && rows)
          *after = rows->download();
        return out;
      };
      const int64_t needed = cuda::freshContextRows(
          b.qsl.data(), b.contextLens.data(), numSeqs, group);
      const std::vector<float> fromPool = launch(nullptr, 0);
      // No context rows, room for all, and one row short of it (the last
      // sequence that takes them reads the pool).
      std::vector<int64_t> roomy = {0};
      if (needed > 0)
        roomy.insert(roomy.end(), {needed, needed - 1});
      for (int64_t contextRows : roomy) {
        const std::string what =
            std::string(dtype == KVCacheDtype::kF8E5M2 ? "e5m2 " : "e4m3 ") +
            describe(c) + ", " + std::to_string(contextRows) + " of " +
            std::to_string(needed) + " context rows";
        const std::vector<__nv_bfloat16> decoded =
            freshRowsOf(b, dtype, dims, layer, /*zeros=*/false, contextRows);
        const std::vector<__nv_bfloat16> zeroed =
            freshRowsOf(b, dtype, dims, layer, /*zeros=*/true, contextRows);
        std::vector<__nv_bfloat16> planes;
        const std::vector<float> fromFresh =
            launch(&decoded, contextRows, &planes);
        const std::vector<float> fromZeros = launch(&zeroed, contextRows);
        for (size_t s = 0; s + 1 < b.qsl.size(); ++s) {
          const int first = b.qsl[s], count = b.qsl[s + 1] - first;
          if (count < 2)
            continue; // a decode row: not this kernel's
          const bool fresh = b.contextLens[s] == count;
          for (int64_t i = int64_t(first) * width;
               i < int64_t(first + count) * width; ++i) {
            ASSERT_EQ(std::memcmp(&fromFresh[i], &fromPool[i], sizeof(float)),
                      0)
                << what << ": sequence " << s << " element " << i << ": "
                << fromFresh[i] << " from FreshKV, " << fromPool[i]
                << " from the pool";
            const float zeroWant = fresh ? 0.0f : fromPool[i];
            ASSERT_EQ(std::memcmp(&fromZeros[i], &zeroWant, sizeof(float)), 0)
                << what << ": sequence " << s << " element " << i
                << (fresh ? " (FreshKV's)" : " (context rows or the pool)")
                << ": " << fromZeros[i] << " with FreshKV zeroed";
          }
        }
        // The context rows the launch filled: each element's bits (NaN
        // past the contexts that fit, untouched).
        const std::vector<__nv_bfloat16> wantContext =
            contextRowsOf(b, dtype, dims, layer, group, contextRows);
        for (int kv = 0; kv < 2; ++kv)
          for (int64_t r = 0; r < contextRows; ++r)
            for (int64_t e = 0; e < slotWidth; ++e) {
              const __nv_bfloat16 got =
                  planes[(kv * (b.t + contextRows) + b.t + r) * slotWidth + e];
              const __nv_bfloat16 want =
                  wantContext[(kv * contextRows + r) * slotWidth + e];
              ASSERT_EQ(std::memcmp(&got, &want, sizeof(got)), 0)
                  << what << ": context row " << r << " kv " << kv
                  << " element " << e << ": " << __bfloat162float(got)
                  << ", the pool's decode " << __bfloat162float(want);
            }
        const std::vector<float> want =
            rowsOfSequences(b.ref, b.qsl, width, false);
        const double err =
            relError(rowsOfSequences(fromFresh, b.qsl, width, false), want);
        std::cout << "[ kernel   ] sm90_prefill FreshKV " << what
                  << " max rel err " << err << "\n";
        EXPECT_LT(err, kBf16Tol + outputTolerance(QueryType::kBf16)) << what;
      }
    }
}

TEST_F(PrefillAttentionSm90Test, SoftcappedScoresMatchCpuAttention) {
  struct Case {
    KVCacheDtype dtype;
    AttentionCase shape;
    ScoreOptions scores;
  };
  const Case cases[] = {
      {KVCacheDtype::kBf16, {32, 8, 128, 0, 16, {{0, 300}}}, {4, 5}},
      {KVCacheDtype::kBf16,
       {8, 8, 64, 0, 16, {{0, 200}, {37, 1}, {5, 70}}},
       {4, 10}},
      {KVCacheDtype::kBf16, {16, 2, 128, 0, 16, {{150, 77}}}, {30, 50}},
      {KVCacheDtype::kBf16, {8, 4, 128, 8, 16, {{0, 33}, {40, 7}}}, {4, 5}},
      {KVCacheDtype::kBf16, {32, 8, 128, 1000, 16, {{3000, 600}}}, {30, 50}},
      {KVCacheDtype::kBf16,
       {10, 2, 128, 0, 16, {{19990, 10}, {4000, 5}}},
       {4, 5}},
      {KVCacheDtype::kF8E4M3, {32, 8, 128, 0, 16, {{100, 300}}}, {4, 5}},
      {KVCacheDtype::kF8E5M2,
       {8, 2, 64, 40, 8, {{0, 150}, {2000, 9}}},
       {4, 10}},
  };
  const int layer = 0, numLayers = 1;
  for (const Case &k : cases) {
    const AttentionCase &c = k.shape;
    const std::string what =
        std::string(k.dtype == KVCacheDtype::kBf16     ? "bf16"
                    : k.dtype == KVCacheDtype::kF8E5M2 ? "e5m2"
                                                       : "e4m3") +
        " " + describe(c) + " " + describe(k.scores);
    const PagedBatch b = makePagedBatch(
        c.seqs, k.dtype,
        cacheGeometry(numLayers, c.kvHeads, c.headDim, c.blockSize),
        cpuAttentionParams(layer, c.heads, c.kvHeads, c.headDim, c.window,
                           k.scores),
        /*spareBlocks=*/2, /*bf16Queries=*/true);
    const AttentionDims a =
        attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window, k.scores);
    AttentionDims uncapped = a;
    uncapped.logitSoftcap = 0.0f;
    const CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
    ASSERT_TRUE(cuda::prefillAttentionSm90Supports(a, dims, k.dtype)) << what;
    DevicePool pool(b, k.dtype);
    const int64_t width = int64_t(c.heads) * c.headDim;
    const std::vector<float> want = rowsOfSequences(b.ref, b.qsl, width, false);
    for (QueryType type : kQueryTypes) {
      const std::vector<float> got = rowsOfSequences(
          run(type, b, pool.pool, dims, a, nullptr), b.qsl, width, false);
      const double err = relError(got, want);
      std::cout << "[ kernel   ] sm90_prefill " << nameOf(type) << " " << what
                << " max rel err " << err << "\n";
      EXPECT_LT(err, kBf16Tol + outputTolerance(type))
          << nameOf(type) << " " << what;
    }
    const double uncappedErr =
        relError(rowsOfSequences(run(QueryType::kF32, b, pool.pool, dims,
                                     uncapped, nullptr),
                                 b.qsl, width, false),
                 want);
    std::cout << "[ kernel   ] sm90_prefill " << what
              << " without the cap: max rel err " << uncappedErr << "\n";
    EXPECT_GT(uncappedErr, 0.1) << what;
  }
}

TEST_F(PrefillAttentionSm90Test, PersistentCtasTakeEveryItemOnce) {
  // A persistent launch's CTAs work through several (row tile, kv head)
  // items each, the K/V ring, the consumers' ping-pong and the next item's
  // Q rows going on from one item to the next: with 1, 3 or 7 CTAs (many
  // items a CTA, decode sequences' items skipped on the way) and with more
  // CTAs than items, with and without a workspace for the tile map (the
  // prompts' tiles alone as items), every result is bitwise the
  // one-CTA-per-item launch's and within tolerance of the CPU kernel.
  struct Case {
    KVCacheDtype dtype;
    AttentionCase shape;
  };
  // Prompts among many decode rows, as chunked prefill batches them.
  std::vector<std::pair<int, int>> mixed;
  for (int i = 0; i < 90; ++i)
    mixed.push_back(i == 20   ? std::pair<int, int>{0, 200}
                    : i == 61 ? std::pair<int, int>{33, 70}
                    : i == 89 ? std::pair<int, int>{0, 5}
                              : std::pair<int, int>{10 + i, 1});
  const size_t workspaceBytes = cuda::splitKVWorkspaceBytes(128);
  auto workspace = DeviceArray<float>::poisoned(workspaceBytes / sizeof(float));
  const cuda::SplitKVWorkspace ws{workspace.get(), workspaceBytes};
  const Case cases[] = {
      {KVCacheDtype::kBf16, {32, 8, 128, 0, 16, mixed}},
      {KVCacheDtype::kF8E4M3, {16, 4, 64, 0, 16, mixed}},
      {KVCacheDtype::kBf16,
       {32, 8, 128, 0, 16, {{0, 300}, {40, 1}, {150, 77}, {9, 2}}}},
      {KVCacheDtype::kBf16, {10, 2, 128, 0, 16, {{2000, 10}, {0, 260}}}},
      {KVCacheDtype::kBf16, {4, 1, 64, 50, 16, {{0, 190}, {120, 33}, {9, 1}}}},
      {KVCacheDtype::kF8E4M3, {32, 8, 128, 0, 16, {{100, 300}, {7, 1}}}},
      {KVCacheDtype::kF8E5M2, {8, 4, 64, 0, 32, {{500, 130}, {3, 40}}}},
  };
  const int layer = 0, numLayers = 1;
  for (const Case &k : cases) {
    const AttentionCase &c = k.shape;
    const PagedBatch b = makePagedBatch(
        c.seqs, k.dtype,
        cacheGeometry(numLayers, c.kvHeads, c.headDim, c.blockSize),
        cpuAttentionParams(layer, c.heads, c.kvHeads, c.headDim, c.window),
        /*spareBlocks=*/2, /*bf16Queries=*/true);
    const AttentionDims a =
        attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window);
    const CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
    ASSERT_TRUE(cuda::prefillAttentionSm90Supports(a, dims, k.dtype))
        << describe(c);
    DevicePool pool(b, k.dtype);
    const int64_t width = int64_t(c.heads) * c.headDim;
    const std::vector<float> want = rowsOfSequences(b.ref, b.qsl, width, false);
    cuda::setPrefillAttentionSm90Ctas(0);
    const std::vector<float> single =
        rowsOfSequences(run(QueryType::kBf16, b, pool.pool, dims, a, nullptr),
                        b.qsl, width, false);
    EXPECT_LT(relError(single, want),
              kBf16Tol + outputTolerance(QueryType::kBf16))
        << describe(c);
    for (int ctas : {1, 3, 7, 100000}) {
      cuda::setPrefillAttentionSm90Ctas(ctas);
      for (QueryType type : kQueryTypes) {
        const std::vector<float> got = rowsOfSequences(
            run(type, b, pool.pool, dims, a, nullptr), b.qsl, width, false);
        std::cout << "[ kernel   ] sm90_prefill " << ctas << " ctas "
                  << nameOf(type) << " " << describe(c) << " max rel err "
                  << relError(got, want) << "\n";
        EXPECT_LT(relError(got, want), kBf16Tol + outputTolerance(type))
            << ctas << " ctas " << nameOf(type) << " " << describe(c);
        if (type == QueryType::kBf16)
          EXPECT_EQ(relError(got, single), 0.0)
              << ctas << " ctas " << describe(c);
      }
      const std::vector<float> mapped = rowsOfSequences(
          run(QueryType::kBf16, b, pool.pool, dims, a, nullptr, ws), b.qsl,
          width, false);
      EXPECT_EQ(relError(mapped, single), 0.0)
          << ctas << " ctas, tile map " << describe(c);
    }
    cuda::setPrefillAttentionSm90Ctas(-1);
  }
}

TEST_F(PrefillAttentionSm90Test, CapturedGraphReplaysTheEagerResult) {
  const AttentionCase c{16, 4, 128, 0, 16, {{20, 90}, {50, 1}, {0, 300}}};
  const int layer = 0, numLayers = 1;
  const PagedBatch b = makePagedBatch(
      c.seqs, KVCacheDtype::kBf16,
      cacheGeometry(numLayers, c.kvHeads, c.headDim, c.blockSize),
      cpuAttentionParams(layer, c.heads, c.kvHeads, c.headDim, c.window),
      /*spareBlocks=*/3, /*bf16Queries=*/true);
  const AttentionDims a =
      attentionDims(layer, c.heads, c.kvHeads, c.headDim, c.window);
  const CacheDims dims{numLayers, c.kvHeads, c.headDim, c.blockSize};
  DeviceArray<__nv_bfloat16> pool(b.bf16);
  const std::vector<float> eager =
      run(QueryType::kBf16, b, cuda::KVCachePool(pool.get()), dims, a, nullptr);

  DeviceArray<__nv_bfloat16> q(toBf16(b.q));
  DeviceArray<int32_t> tables(b.tables), context(b.contextLens), qsl(b.qsl);
  auto replayed = DeviceArray<__nv_bfloat16>::poisoned(b.q.size());
  cudaStream_t stream = nullptr;
  // With the tile map: its kernel is captured too.
  const size_t workspaceBytes = cuda::splitKVWorkspaceBytes(128);
  auto workspace = DeviceArray<float>::poisoned(workspaceBytes / sizeof(float));
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  const cudaError_t launched = cuda::launchPrefillAttentionSm90(
      q.get(), cuda::KVCachePool(pool.get()), dims, a, tables.get(),
      b.maxBlocks, context.get(), qsl.get(), c.seqs.size(), b.t, replayed.get(),
      stream, cuda::SplitKVWorkspace{workspace.get(), workspaceBytes});
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(launched, cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);

  const int64_t width = int64_t(c.heads) * c.headDim;
  const std::vector<float> got =
      rowsOfSequences(fromBf16(replayed.download()), b.qsl, width, false);
  const std::vector<float> want = rowsOfSequences(eager, b.qsl, width, false);
  EXPECT_EQ(relError(got, want), 0.0);
  EXPECT_LT(relError(want, rowsOfSequences(b.ref, b.qsl, width, false)),
            kBf16Tol + outputTolerance(QueryType::kBf16));
}

} // namespace
} // namespace infer::testing
