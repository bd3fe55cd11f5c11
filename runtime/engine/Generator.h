//===- Generator.h - Batched generation for a fixed set of requests -*- C++
//-*-===//
//
// The walking skeleton's driver: every request's prompt is prefilled in one
// batch, then all live sequences decode one token per step in one batch.
// A sequence holds ceil(tokens / block_size) blocks of the pool:
//
//   tokens   t0 .. t15 | t16 .. t31 | t32 t33
//   blocks   [   b4    |    b9      |   b2   ]   slot(p) = block[p/16]*16 +
//   p%16
//
// The scheduler of the full engine (preemption, admission by free blocks,
// chunked prefill of long prompts) replaces this later.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_ENGINE_GENERATOR_H
#define INFER_RUNTIME_ENGINE_GENERATOR_H

#include "runtime/backend/Backend.h"
#include "runtime/engine/Sampler.h"

#include <cstdint>
#include <vector>

namespace infer {

struct GenerationRequest {
  std::vector<int32_t> promptTokenIds;
  SamplingParams sampling;
};

enum class FinishReason { kStop, kLength };

struct GenerationResult {
  std::vector<int32_t> outputTokenIds;
  FinishReason finishReason = FinishReason::kLength;
};

/// What generation needs to know about the model and its cache.
struct GenerationConfig {
  int64_t blockSize = 16;
  int64_t maxPositionEmbeddings = 0;
  std::vector<int32_t> eosTokenIds;
};

/// KV blocks that let every request run to completion at the same time.
int64_t blocksNeeded(const std::vector<GenerationRequest> &requests,
                     const GenerationConfig &config);

/// Runs all requests to completion (EOS unless ignore_eos, max_new_tokens,
/// or the end of the position range) and returns their outputs in order.
StatusOr<std::vector<GenerationResult>>
generate(Backend &backend, const GenerationConfig &config,
         const std::vector<GenerationRequest> &requests);

/// Logits [T, vocab] of every position of `tokens`, in one forward call.
StatusOr<Logits> promptLogits(Backend &backend, const GenerationConfig &config,
                              const std::vector<int32_t> &tokens);

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_GENERATOR_H
