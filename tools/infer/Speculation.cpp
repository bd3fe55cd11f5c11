//===- Speculation.cpp - Speculative decoding options of the CLI ----------===//

#include "tools/infer/Speculation.h"
#include "runtime/spec/DraftModelProposer.h"
#include "runtime/spec/NgramProposer.h"
#include "tools/infer/Model.h"

namespace infer::tool {

std::vector<OptionSpec> speculationOptions() {
  return {{"--draft"},
          {"--num-speculative-tokens"},
          {"--ngram-speculation", false},
          {"--ngram-max"},
          {"--ngram-min"},
          {"--adaptive-speculation", false}};
}

/// Whether `target` rotates by a dynamic NTK rope: a verification step
/// writes its k + 1 tokens with the base of the step's end, which one-token
/// decoding does not, so speculation would not reproduce its greedy output.
static bool hasDynamicRope(const Artifact &target) {
  for (const plan::RankPlan &rank : target.plan.ranks)
    for (const plan::Step &step : rank.steps)
      if ((step.op == "rope" || step.op == "rope_kv_cache_write" ||
           step.op == "rope_qkv_cache_write") &&
          step.getString("scaling", "default") == "dynamic")
        return true;
  return false;
}

StatusOr<Speculation> createSpeculation(const ParsedArgs &args,
                                        const Artifact &target,
                                        const std::vector<int32_t> &eosTokenIds,
                                        const std::string &backendName,
                                        int64_t numBlocks, int numThreads) {
  Speculation out;
  const bool draft = args.has("--draft");
  const bool ngram = args.has("--ngram-speculation");
  if (draft && ngram)
    return invalidArgument(
        "--draft and --ngram-speculation are alternatives: give one");
  if (!draft && !ngram) {
    if (args.has("--num-speculative-tokens") || args.has("--ngram-max") ||
        args.has("--ngram-min") || args.has("--adaptive-speculation"))
      return invalidArgument("speculation options need --draft MODEL or "
                             "--ngram-speculation");
    return out;
  }
  if (hasDynamicRope(target))
    return invalidArgument(
        "speculative decoding of a model with a dynamic NTK rope: a "
        "verification step would rotate its tokens with the base of the "
        "step's end, not each token's own, and change the greedy output");
  INFER_ASSIGN_OR_RETURN(out.numSpeculativeTokens,
                         args.getInt("--num-speculative-tokens", 4));
  if (out.numSpeculativeTokens < 1 || out.numSpeculativeTokens > 64)
    return invalidArgument("--num-speculative-tokens must be in [1, 64]");

  std::unique_ptr<spec::Proposer> drafter;
  if (ngram) {
    INFER_ASSIGN_OR_RETURN(int64_t maxN, args.getInt("--ngram-max", 4));
    INFER_ASSIGN_OR_RETURN(int64_t minN, args.getInt("--ngram-min", 1));
    if (minN < 1 || maxN < minN)
      return invalidArgument("--ngram-min and --ngram-max need "
                             "1 <= min <= max");
    drafter = std::make_unique<spec::NgramProposer>(minN, maxN);
  } else {
    if (args.has("--ngram-max") || args.has("--ngram-min"))
      return invalidArgument("--ngram-max and --ngram-min go with "
                             "--ngram-speculation");
    INFER_ASSIGN_OR_RETURN(LoadedModel model, loadModel(*args.get("--draft")));
    if (model.artifact.manifest.model.vocabSize !=
        target.manifest.model.vocabSize)
      return invalidArgument(
          "the draft model's vocabulary (" +
          std::to_string(model.artifact.manifest.model.vocabSize) +
          ") differs from the target's (" +
          std::to_string(target.manifest.model.vocabSize) + ")");
    INFER_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                           createBackend(model.artifact, backendName,
                                         WeightLoadOptions{}, numBlocks,
                                         numThreads));
    drafter = std::make_unique<spec::DraftModelProposer>(
        std::move(backend), model.artifact.plan.kvCache.blockSize,
        draftContextPolicy(target, model.artifact));
  }
  std::optional<spec::AdaptiveOptions> adaptive;
  if (args.has("--adaptive-speculation")) {
    adaptive.emplace();
    adaptive->maxK = out.numSpeculativeTokens;
  }
  out.speculator = std::make_unique<spec::Speculator>(std::move(drafter),
                                                      eosTokenIds, adaptive);
  return out;
}

spec::DraftContextPolicy draftContextPolicy(const Artifact &target,
                                            const Artifact &draft) {
  spec::DraftContextPolicy policy;
  const plan::KVCacheLayout &kv = target.plan.kvCache;
  if (kv.isStreaming()) {
    policy.sinkTokens = kv.sinkTokens;
    policy.window = kv.window;
  }
  // The draft's positions stay inside its own context: the sinks, the
  // window and the chunk it slides by (window / 2), and 64 drafts.
  const int64_t draftMax = draft.manifest.model.maxPositionEmbeddings;
  const int64_t targetMax =
      kv.isStreaming() ? 0 : target.manifest.model.maxPositionEmbeddings;
  if (draftMax > 0 && (targetMax == 0 || targetMax > draftMax)) {
    const int64_t limit =
        std::max<int64_t>((draftMax - 64 - policy.sinkTokens) * 2 / 3, 1);
    if (policy.window == 0 || policy.window > limit)
      policy.window = limit;
  }
  return policy;
}

} // namespace infer::tool
