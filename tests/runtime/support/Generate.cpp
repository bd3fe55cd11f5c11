//===- Generate.cpp - Running a fixed set of requests to completion -------===//

#include "tests/runtime/support/Generate.h"

#include <algorithm>
#include <map>

namespace infer::testing {

StatusOr<std::vector<RequestOutput>>
runToCompletion(Engine &engine, const std::vector<PromptRequest> &requests) {
  std::vector<RequestId> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    StatusOr<RequestId> id =
        engine.addRequest(requests[i].promptTokenIds, requests[i].sampling);
    if (!id.isOk())
      return id.status().withContext("request " + std::to_string(i));
    ids.push_back(*id);
  }
  std::map<RequestId, RequestOutput> finished;
  while (engine.hasUnfinished()) {
    INFER_ASSIGN_OR_RETURN(std::vector<RequestOutput> outputs, engine.step());
    for (RequestOutput &out : outputs)
      if (out.finished)
        finished[out.id] = std::move(out);
  }
  std::vector<RequestOutput> results;
  for (RequestId id : ids)
    results.push_back(finished.at(id));
  return results;
}

StatusOr<std::vector<RequestOutput>>
generate(Backend &backend, const EngineConfig &config,
         const std::vector<PromptRequest> &requests) {
  Engine engine(backend, config);
  return runToCompletion(engine, requests);
}

int64_t blocksForAll(const std::vector<PromptRequest> &requests,
                     const EngineConfig &config) {
  int64_t blocks = 0;
  for (const PromptRequest &r : requests) {
    int64_t tokens =
        static_cast<int64_t>(r.promptTokenIds.size()) + r.sampling.maxNewTokens;
    if (config.maxModelLen > 0)
      tokens = std::min(tokens, config.maxModelLen);
    blocks += (std::max<int64_t>(tokens, 1) + config.blockSize - 1) /
              config.blockSize;
  }
  return blocks;
}

} // namespace infer::testing
