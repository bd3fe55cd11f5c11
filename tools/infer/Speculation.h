//===- Speculation.h - Speculative decoding options of the CLI --*- C++ -*-===//
//
// --draft MODEL | --ngram-speculation [--ngram-max N] [--ngram-min N],
// --num-speculative-tokens K and --adaptive-speculation, shared by
// `infer generate` and `infer bench`.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_TOOLS_INFER_SPECULATION_H
#define INFER_TOOLS_INFER_SPECULATION_H

#include "runtime/engine/Artifact.h"
#include "runtime/spec/DraftModelProposer.h"
#include "runtime/spec/Speculator.h"
#include "tools/infer/Args.h"

#include <memory>

namespace infer::tool {

/// The options createSpeculator reads.
std::vector<OptionSpec> speculationOptions();

struct Speculation {
  /// Null when neither --draft nor --ngram-speculation was given.
  std::unique_ptr<spec::Speculator> speculator;
  /// K: the engine's numSpeculativeTokens.
  int64_t numSpeculativeTokens = 0;
};

/// The speculator the options ask for. A draft model runs on `backendName`
/// with `numBlocks` KV blocks and must share the target's vocabulary.
StatusOr<Speculation> createSpeculation(const ParsedArgs &args,
                                        const Artifact &target,
                                        const std::vector<int32_t> &eosTokenIds,
                                        const std::string &backendName,
                                        int64_t numBlocks, int numThreads);

/// What of each sequence the draft model caches: the target's streaming
/// policy (sinks and window), the window narrowed to the draft's own
/// context where the target's is longer.
spec::DraftContextPolicy draftContextPolicy(const Artifact &target,
                                            const Artifact &draft);

} // namespace infer::tool

#endif // INFER_TOOLS_INFER_SPECULATION_H
