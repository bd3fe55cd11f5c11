//===- Generate.h - Running requests to completion --------------*- C++ -*-===//

#ifndef INFER_TESTS_RUNTIME_SUPPORT_GENERATE_H
#define INFER_TESTS_RUNTIME_SUPPORT_GENERATE_H

#include "runtime/engine/Engine.h"

#include <vector>

namespace infer::testing {

struct PromptRequest {
  std::vector<int32_t> promptTokenIds;
  SamplingParams sampling;
};

/// Adds every request to `engine` at once and steps it until all finish;
/// the final outputs in request order.
StatusOr<std::vector<RequestOutput>>
runToCompletion(Engine &engine, const std::vector<PromptRequest> &requests);

/// The same through a fresh engine with `config` on `backend`.
StatusOr<std::vector<RequestOutput>>
generate(Backend &backend, const EngineConfig &config,
         const std::vector<PromptRequest> &requests);

/// KV blocks that let every request run to completion at the same time.
int64_t blocksForAll(const std::vector<PromptRequest> &requests,
                     const EngineConfig &config);

} // namespace infer::testing

#endif // INFER_TESTS_RUNTIME_SUPPORT_GENERATE_H
