//===- MemoryEstimate.h - Device memory needed by an artifact ---*- C++ -*-===//
//
// How many tokens an artifact can keep in its KV cache on a device of a given
// size, per rank:
//
//   device memory x utilization
//   ├── weights            every param of the rank's plan, as stored (fp8:
//   │                      1 byte per element + an fp32 scale per row)
//   ├── activations        workspace bytes per token row x batched tokens
//   │                      + fp32 logits of the running sequences
//   └── KV cache           what is left, in blocks of block_size tokens:
//                          layers x 2 x kv_heads x head_dim x kv element bytes
//                          (1 for fp8, + 4 per head for E4M3's scales)
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_ENGINE_MEMORYESTIMATE_H
#define INFER_RUNTIME_ENGINE_MEMORYESTIMATE_H

#include "runtime/plan/Plan.h"
#include "runtime/support/Status.h"

#include <cstdint>
#include <string>

namespace infer {

struct MemoryEstimateOptions {
  int64_t deviceMemoryBytes = int64_t(80) << 30;
  /// Fraction of the device the runtime may use (vLLM's
  /// gpu_memory_utilization).
  double utilization = 0.9;
  int64_t maxNumBatchedTokens = 8192;
  int64_t maxNumSeqs = 256;
  /// Bytes per cached key/value element of a cache that is not fp8: the
  /// CUDA backend stores bf16.
  int64_t kvElementBytes = 2;
};

struct MemoryEstimate {
  int64_t numRanks = 1;
  int64_t weightBytes = 0;     ///< per rank (the largest rank)
  int64_t activationBytes = 0; ///< per rank, logits included
  int64_t kvBytesPerToken = 0; ///< per rank
  /// Bytes per cached element (1 for an fp8 cache), and per head vector of
  /// scales (an fp8 E4M3 cache's fp32 scale).
  int64_t kvElementBytes = 0;
  int64_t kvScaleBytesPerHead = 0;
  int64_t usableBytes = 0;     ///< device memory x utilization
  int64_t kvCacheBytes = 0;    ///< what is left for the cache, >= 0
  int64_t maxCachedTokens = 0; ///< whole blocks only
  int64_t maxPositionEmbeddings = 0;
  /// Sequences of max_position_embeddings tokens that fit at once.
  int64_t maxFullContextSequences = 0;
};

StatusOr<MemoryEstimate> estimateMemory(const plan::Manifest &manifest,
                                        const plan::Plan &plan,
                                        const MemoryEstimateOptions &options);

/// A table for people, one quantity per line.
std::string formatMemoryEstimate(const MemoryEstimate &estimate,
                                 const MemoryEstimateOptions &options);

/// "80GiB", "80 GB", "512MiB", "1073741824" -> bytes.
StatusOr<int64_t> parseByteSize(const std::string &text);

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_MEMORYESTIMATE_H
