//===- RopeQKVCacheWriteStepTest.cpp - The fused rope step on the GPU -----===//
//
// A Llama plan whose layers rotate q and write rotated k and v with one
// rope_qkv_cache_write step gives the logits of the same plan with a rope
// of q and a rope_kv_cache_write (what infer-fuse made before), bit for bit
// on the CUDA backend: the fused kernel stores the bytes of the two it
// replaces. A prefill and decode steps that read the cached keys back, in a
// bf16 pool and an fp8 E4M3 one, for the repository's Llama fixtures.
//
// With an fp8 pool every cache write step also writes FreshKV (runtime/
// cuda/Kernels.h) in calls with prompt rows, which the Hopper prefill reads
// for prompts with nothing cached, and whose context rows it fills for
// long chunks after cached keys: tiny-pycode-target (head_dim 64, which
// that kernel takes) gives the same logits bit for bit with those reads on
// and off, with kv_cache_write, rope_kv_cache_write or rope_qkv_cache_write,
// over a call of two fresh prompts, a long and a short chunk after cached
// keys and a decode row, and the decode call after it.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/Kernels.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;

/// The repository's Llama fixtures: llama3 frequency scaling with GQA, and
/// head_dim 32 with one key/value head.
const char *const kModels[] = {"llama3-rope-scaling", "llama-headdim32-mqa"};

Batch sequenceBatch(const std::vector<int32_t> &tokens, int32_t cached) {
  Batch b;
  b.tokenIds = tokens;
  const auto n = static_cast<int32_t>(tokens.size());
  b.queryStartLoc = {0, n};
  b.contextLens = {cached + n};
  b.maxBlocksPerSeq = 4;
  b.blockTables = {2, 0, 3, 1};
  for (int32_t i = 0; i < n; ++i) {
    const int32_t p = cached + i;
    b.positions.push_back(p);
    b.slotMapping.push_back(int64_t(b.blockTables[p / 16]) * 16 + p % 16);
  }
  b.logitsIndices = {n - 1};
  return b;
}

TEST(CudaRopeQKVCacheWriteStep, SameLogitsAsRopeAndRopeKVCacheWrite) {
  std::string why;
  if (!cuda::cudaDeviceAvailable(&why))
    GTEST_SKIP() << "CUDA backend tests need a GPU: " << why;
  for (const char *name : kModels) {
    const std::string model =
        std::string(INFER_PROJECT_FIXTURES_DIR) + "/" + name;
    ASSERT_TRUE(fs::exists(model + "/config.json")) << model;
    StatusOr<Artifact> artifact =
        buildLlamaArtifact(model, 16, plan::DType::kBF16);
    ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
    StatusOr<ParamTable> params = loadParams(*artifact, 0, model);
    ASSERT_TRUE(params.isOk()) << params.status().message();
    for (plan::DType pool : {plan::DType::kBF16, plan::DType::kF8E4M3}) {
      plan::Plan base = artifact->plan;
      base.kvCache.dtype = pool;
      auto backend = [&](bool queries) {
        cuda::CudaBackendOptions options;
        options.numBlocks = 4;
        return cuda::createCudaBackend(withFusedRopes(base, queries), 0,
                                       *params, options);
      };
      StatusOr<std::unique_ptr<Backend>> unfused = backend(false),
                                         fused = backend(true);
      ASSERT_TRUE(unfused.isOk()) << unfused.status().message();
      ASSERT_TRUE(fused.isOk()) << fused.status().message();
      const std::vector<Batch> batches = {
          sequenceBatch({7, 3, 11, 5, 2, 9, 4, 1, 6, 10, 12, 13, 14, 15, 16, 17,
                         18, 19, 20},
                        0),
          sequenceBatch({8}, 19), sequenceBatch({21}, 20)};
      for (const Batch &batch : batches) {
        StatusOr<Logits> a = (*unfused)->forward(batch),
                         b = (*fused)->forward(batch);
        ASSERT_TRUE(a.isOk()) << a.status().message();
        ASSERT_TRUE(b.isOk()) << b.status().message();
        ASSERT_EQ(a->data.size(), b->data.size());
        EXPECT_EQ(std::memcmp(a->data.data(), b->data.data(),
                              a->data.size() * sizeof(float)),
                  0)
            << name << ", " << plan::dtypeName(pool) << " pool, "
            << batch.tokenIds.size() << " new tokens after "
            << batch.contextLens[0] - batch.tokenIds.size();
      }
    }
  }
}

TEST(CudaRopeQKVCacheWriteStep, FreshKVReadsGiveTheSameLogits) {
  std::string why;
  if (!cuda::cudaDeviceAvailable(&why))
    GTEST_SKIP() << "CUDA backend tests need a GPU: " << why;
  const std::string model =
      std::string(INFER_FIXTURES_DIR) + "/models/tiny-pycode-target";
  if (!fs::exists(model + "/config.json"))
    GTEST_SKIP() << "tiny-pycode fixtures not found";
  StatusOr<Artifact> artifact =
      buildLlamaArtifact(model, 16, plan::DType::kBF16);
  ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
  StatusOr<ParamTable> params = loadParams(*artifact, 0, model);
  ASSERT_TRUE(params.isOk()) << params.status().message();
  // Sequence s owns blocks [16 s, 16 s + 16). Each call's shape is (cached,
  // new tokens) a sequence: first the cached keys of sequences 2 to 4 (and
  // a token of 0 and 1, which the next call writes again), then the mixed
  // call (two prompts with nothing cached, a chunk of 540 query rows after
  // 30 cached keys, which takes FreshKV context rows, a decode row, and a
  // chunk of 180 rows, which reads the pool), then a decode row of each.
  constexpr int32_t kBlocks = 16;
  auto batchOf = [&](const std::vector<std::pair<int32_t, int32_t>> &shape) {
    Batch b;
    b.maxBlocksPerSeq = kBlocks;
    b.queryStartLoc = {0};
    int32_t token = 1;
    for (size_t s = 0; s < shape.size(); ++s) {
      const auto [cached, fresh] = shape[s];
      for (int32_t i = 0; i < fresh; ++i) {
        const int32_t p = cached + i;
        b.tokenIds.push_back(token++ % 200 + 1);
        b.positions.push_back(p);
        b.slotMapping.push_back(int64_t(s * kBlocks + p / 16) * 16 + p % 16);
      }
      b.queryStartLoc.push_back(b.queryStartLoc.back() + fresh);
      b.contextLens.push_back(cached + fresh);
      for (int32_t j = 0; j < kBlocks; ++j)
        b.blockTables.push_back(static_cast<int32_t>(s) * kBlocks + j);
      b.logitsIndices.push_back(b.queryStartLoc.back() - 1);
    }
    return b;
  };
  const std::vector<Batch> calls = {
      batchOf({{0, 1}, {0, 1}, {0, 30}, {0, 70}, {0, 20}}),
      batchOf({{0, 40}, {0, 120}, {30, 180}, {70, 1}, {20, 60}}),
      batchOf({{40, 1}, {120, 1}, {210, 1}, {71, 1}, {80, 1}})};
  // tiny-pycode's 6 query heads over 2 kv heads: the long chunk's context
  // (210 keys) alone takes context rows.
  ASSERT_EQ(cuda::freshContextRows(calls[1].queryStartLoc.data(),
                                   calls[1].contextLens.data(),
                                   calls[1].numSeqs(), /*group=*/3),
            210);
  // The plan as built (rope, kv_cache_write), with rope_kv_cache_write, and
  // with rope_qkv_cache_write: each cache write writes FreshKV.
  for (int fusion = 0; fusion < 3; ++fusion)
    for (plan::DType pool : {plan::DType::kF8E4M3, plan::DType::kF8E5M2}) {
      plan::Plan fused = fusion == 0
                             ? artifact->plan
                             : withFusedRopes(artifact->plan, fusion == 2);
      fused.kvCache.dtype = pool;
      std::vector<std::vector<float>> logits[2];
      for (int reads : {0, 1}) {
        cuda::setFreshKVReads(reads);
        cuda::CudaBackendOptions options;
        options.numBlocks = 5 * kBlocks;
        StatusOr<std::unique_ptr<Backend>> backend =
            cuda::createCudaBackend(fused, 0, *params, options);
        ASSERT_TRUE(backend.isOk()) << backend.status().message();
        for (const Batch &call : calls) {
          StatusOr<Logits> out = (*backend)->forward(call);
          ASSERT_TRUE(out.isOk()) << out.status().message();
          logits[reads].push_back(out->data);
        }
      }
      cuda::setFreshKVReads(-1);
      for (size_t c = 0; c < calls.size(); ++c) {
        ASSERT_EQ(logits[0][c].size(), logits[1][c].size());
        EXPECT_EQ(std::memcmp(logits[0][c].data(), logits[1][c].data(),
                              logits[0][c].size() * sizeof(float)),
                  0)
            << plan::dtypeName(pool) << " pool, call " << c << ", plan "
            << (fusion == 0   ? "as built"
                : fusion == 1 ? "with rope_kv_cache_write"
                              : "with rope_qkv_cache_write");
      }
    }
}

} // namespace
} // namespace infer::testing
