//===- AttentionTestSupport.h - GPU attention test support ------*- C++ -*-===//
//
// What the GPU attention tests (KernelsTest, PrefillAttentionTest,
// PrefillAttentionSm90Test, SplitKVDecodeTest, KeyRopeAttentionTest,
// Fp8KVCacheTest) share: a fixture that skips without a GPU, block tables
// handed out from a shuffled pool, random paged batches with the CPU
// kernel's output as the reference, their device copies, runs with fp32 or
// bf16 queries and outputs, and the relative error the tests bound.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_TESTS_RUNTIME_CUDA_ATTENTIONTESTSUPPORT_H
#define INFER_TESTS_RUNTIME_CUDA_ATTENTIONTESTSUPPORT_H

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/Kernels.h"
#include "tests/runtime/cuda/DeviceArray.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

namespace infer::testing {

/// Sequences as (cached tokens, new tokens).
using SeqShape = std::vector<std::pair<int, int>>;

/// An attention shape and the sequences of one batch.
struct AttentionCase {
  int heads, kvHeads, headDim, window, blockSize;
  SeqShape seqs;
};

/// "h=.. kvh=.. d=.. window=.. bs=.. seqs cached+new ...".
std::string describe(const AttentionCase &c);

/// max |actual - expected| / max(max |expected|, floor); NaN in `actual` (an
/// unwritten output or a read of a slot no sequence owns) fails. A floor
/// above 0 keeps a tiny reference (a single element near a zero of the
/// function) from turning rounding noise into a large relative error.
double relError(const std::vector<float> &actual,
                const std::vector<float> &expected, double floor = 0.0);

/// The pool geometry on the CPU side; cuda::CacheDims is the GPU's.
cpu::CacheGeometry cacheGeometry(int numLayers, int kvHeads, int headDim,
                                 int blockSize);

/// The scores of an attention: scale spread / sqrt(head_dim), so that the
/// scaled scores of normal(0, 1) q and k have standard deviation `spread`,
/// and the logit soft-cap (0: none). The soft-cap tests take spread 4 and
/// caps of a few units, so most scores land where tanh bends.
struct ScoreOptions {
  double spread = 1.0;
  double softcap = 0.0;
};

/// Attention of `layer` with `scores` (by default scale 1/sqrt(head_dim), no
/// soft-cap), on the CPU and the GPU.
cpu::AttentionParams cpuAttentionParams(int layer, int heads, int kvHeads,
                                        int headDim, int window,
                                        ScoreOptions scores = {});
cuda::AttentionDims attentionDims(int layer, int heads, int kvHeads,
                                  int headDim, int window,
                                  ScoreOptions scores = {});

/// "softcap C spread S" for reports.
std::string describe(const ScoreOptions &scores);

/// The block tables of a batch over a pool of numBlocks blocks, handed out
/// from a shuffled free list (so a sequence's blocks are not contiguous):
///
///   tables [numSeqs][maxBlocks]   seq 0: 7 2 5 -1   (-1: past its blocks)
///                                 seq 1: 0 6 -1 -1
///   slot of token p of seq s = tables[s][p / blockSize] * blockSize
///                              + p % blockSize
///
/// contextLens[s] = cached + new tokens; qsl (query_start_loc) = the
/// running sum of the new tokens, numSeqs + 1 entries from 0.
struct BlockTables {
  int64_t numBlocks = 0;
  int64_t maxBlocks = 0;
  int blockSize = 0;
  std::vector<int32_t> tables, contextLens, qsl;

  int64_t slot(int64_t seq, int pos) const {
    return int64_t(tables[seq * maxBlocks + pos / blockSize]) * blockSize +
           pos % blockSize;
  }
};

/// Tables of `seqs` over a pool of their blocks (maxBlocks a sequence) and
/// `spareBlocks` more, shuffled by `rng`.
BlockTables shuffledBlockTables(const SeqShape &seqs, int blockSize,
                                int64_t spareBlocks, std::mt19937 &rng);

/// The slots of `t` tokens written in one call: distinct slots of a pool of
/// `numBlocks` blocks in shuffled order, the middle token's -1 (skipped).
std::vector<int64_t> shuffledSlots(int64_t numBlocks, int blockSize, int t,
                                   std::mt19937 &rng);

/// A batch over a pool of `dtype`: bf16 values, or fp8 codes and scales
/// (cpu::KVPool's layout); slots no sequence owns hold NaN (code 0x7F in
/// both fp8 formats). `ref` is the CPU kernel's output for `q`.
struct PagedBatch : BlockTables {
  int64_t t = 0; ///< New tokens of all sequences.
  std::vector<float> q, ref;
  std::vector<__nv_bfloat16> bf16;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

/// The device copies of a batch's pool.
struct DevicePool {
  DeviceArray<__nv_bfloat16> bf16;
  DeviceArray<uint8_t> codes;
  DeviceArray<float> scales;
  cuda::KVCachePool pool;

  DevicePool(const PagedBatch &b, cuda::KVCacheDtype dtype);
};

/// The element type of q and out of an attention launch.
enum class QueryType { kF32, kBf16 };

inline const char *nameOf(QueryType type) {
  return type == QueryType::kF32 ? "q/out fp32" : "q/out bf16";
}

/// What rounding the output to bf16 adds to a kernel's relative error
/// (half an ulp of the largest output, and some).
inline double outputTolerance(QueryType type) {
  return type == QueryType::kBf16 ? 1.0 / 256 : 0.0;
}

std::vector<__nv_bfloat16> toBf16(const std::vector<float> &x);
std::vector<float> fromBf16(const std::vector<__nv_bfloat16> &x);

/// Runs launch(q, out) on device copies of `q` and a poisoned `out` of the
/// same size, both of `type` (bf16: q must hold bf16 values already), and
/// returns out as fp32. `launch` takes (const T *, T *) for T float and
/// __nv_bfloat16 and returns the launch's cudaError_t.
template <typename Launch>
std::vector<float> runWithQueries(QueryType type, const std::vector<float> &q,
                                  Launch &&launch) {
  if (type == QueryType::kF32) {
    DeviceArray<float> dq(q);
    auto out = DeviceArray<float>::poisoned(q.size());
    EXPECT_EQ(launch(static_cast<const float *>(dq.get()), out.get()),
              cudaSuccess);
    return out.download();
  }
  DeviceArray<__nv_bfloat16> dq(toBf16(q));
  auto out = DeviceArray<__nv_bfloat16>::poisoned(q.size());
  EXPECT_EQ(launch(static_cast<const __nv_bfloat16 *>(dq.get()), out.get()),
            cudaSuccess);
  return fromBf16(out.download());
}

/// FreshKV's rows (runtime/cuda/Kernels.h) of a call whose token r was
/// written to slot slots[r] of `layer` in `pool` (geometry `g`): the bf16 of
/// each element as cpu::KVPool decodes it (code x scale for E4M3); the rows
/// of tokens whose slot is -1 hold NaN.
std::vector<__nv_bfloat16> freshRowsOfPool(const cpu::KVPool &pool,
                                           const cpu::CacheGeometry &g,
                                           int layer,
                                           const std::vector<int64_t> &slots);

/// The rows [token, width] of `rows` that belong to the sequences with one
/// new token (`decode`) or with more, in order (qsl: query_start_loc).
std::vector<float> rowsOfSequences(const std::vector<float> &rows,
                                   const std::vector<int32_t> &qsl,
                                   int64_t width, bool decode);

/// The fixture of the attention tests: skips without a GPU; normal(0, 1)
/// values from a random seed and the CPU reference's threads.
class GpuAttentionTest : public ::testing::Test {
protected:
  explicit GpuAttentionTest(int threads = 4) : threads_(threads) {}
  void SetUp() override;

  float normal() { return dist_(rng_); }

  /// A batch of `seqs` over a pool of their blocks and `spareBlocks` more,
  /// geometry `g`: random keys and values (rounded to bf16, so a bf16 pool
  /// holds what the CPU's fp32 pool does) of every token written by the CPU
  /// one token at a time, then random queries of the new tokens (rounded to
  /// bf16 with bf16Queries, so both QueryTypes run the same queries) and
  /// the CPU's paged attention `p` over the pool.
  PagedBatch makePagedBatch(const SeqShape &seqs, cuda::KVCacheDtype dtype,
                            const cpu::CacheGeometry &g,
                            const cpu::AttentionParams &p, int64_t spareBlocks,
                            bool bf16Queries = false);

  std::mt19937 rng_{std::random_device{}()};
  std::normal_distribution<float> dist_{0.0f, 1.0f};
  cpu::ThreadPool threads_;
};

} // namespace infer::testing

#endif // INFER_TESTS_RUNTIME_CUDA_ATTENTIONTESTSUPPORT_H
