//===- StepAttrs.h - Decoded, checked attributes of plan steps --*- C++ -*-===//
//
// A step's attributes are a string-keyed map in plan.json; every backend
// needs them typed and checked. decodeStep does that once, for any step the
// registry knows (StepOps.def), so that the CPU and CUDA backends read the
// same values with the same checks and the verifier (verifyPlan) rejects a
// plan whose attributes a backend could not run:
//
//   {"op": "rope", "attrs": {"head_dim": 64, "theta": 1e4, ...}}
//        --decodeStep-->  DecodedStep{op = kRope, rope = RopeConfig{...}}
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_PLAN_STEPATTRS_H
#define INFER_RUNTIME_PLAN_STEPATTRS_H

#include "runtime/plan/FusedBody.h"
#include "runtime/plan/Plan.h"

#include <optional>
#include <string>
#include <vector>

namespace infer::plan {

/// Rotary embedding of `rope`, `rope_kv_cache_write` and
/// `rope_qkv_cache_write` steps and of the key rope of a streaming
/// `paged_attention`.
struct RopeConfig {
  int64_t headDim = 0;
  int64_t rotaryDim = 0;
  double theta = 10000.0;
  /// "default" | "linear" | "llama3" | "yarn" | "longrope" | "dynamic"
  std::string scaling = "default";
  double factor = 1.0;
  double lowFreqFactor = 1.0;
  double highFreqFactor = 4.0;
  int64_t originalMaxPositionEmbeddings = 0;
  /// yarn: the rotation counts bounding the interpolation ramp.
  double betaFast = 32.0;
  double betaSlow = 1.0;
  /// longrope: one divisor per inverse frequency (rotary_dim / 2 each).
  std::vector<double> shortFactor, longFactor;

  Status validate() const;

  /// longrope: a token at a position >= this uses the long factors (HF
  /// switches when the sequence grows past original_max_position_embeddings);
  /// 0 for the other scalings, which have one table.
  int64_t longFrom() const {
    return scaling == "longrope" ? originalMaxPositionEmbeddings : 0;
  }
};

/// The validated RopeConfig of a step carrying the rope attributes (rope,
/// rope_kv_cache_write).
StatusOr<RopeConfig> decodeRope(const Step &step);

/// The key rope of a streaming paged_attention step (the cache holds
/// unrotated keys, each rotated at its cache index): the step's rope
/// attributes with rotary_dim = key_rotary_dim and head_dim the step's,
/// validated; nothing for a step without key_rotary_dim. A key rope with a
/// sliding_window is an error.
StatusOr<std::optional<RopeConfig>> decodeKeyRope(const Step &step);

/// The rotary_dim / 2 inverse frequencies, computed in fp32 like HF's
/// _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
/// _compute_llama3_parameters, _compute_yarn_parameters and
/// _compute_longrope_parameters; for longrope two tables, the short factors'
/// then the long factors' (rotary_dim entries), chosen per token by
/// RopeConfig::longFrom. (YaRN's and LongRoPE's attention factor is not
/// applied here: the compiler folds it into the attention scale.)
std::vector<float> ropeInverseFrequencies(const RopeConfig &config);

/// Dynamic NTK (HF _compute_dynamic_ntk_parameters, in fp32): the base of a
/// sequence of `seqLen` tokens, theta up to original_max_position_embeddings
/// and theta * (factor * seqLen / original - (factor - 1))^(d / (d - 2))
/// past it.
float dynamicRopeBase(const RopeConfig &config, int64_t seqLen);

/// The rotary_dim / 2 inverse frequencies of a dynamic rope for a sequence
/// of `seqLen` tokens (ropeInverseFrequencies gives those of a short one).
std::vector<float> dynamicRopeInverseFrequencies(const RopeConfig &config,
                                                 int64_t seqLen);

/// A `paged_attention` step.
struct AttentionAttrs {
  int64_t layer = 0;
  int64_t numHeads = 0;
  int64_t numKVHeads = 0;
  int64_t headDim = 0;
  double scale = 1.0;
  /// 0: none; else a query at position p sees keys in (p - window, p].
  int64_t slidingWindow = 0;
  /// 0: none; else each scaled score s becomes c * tanh(s / c) (Gemma 2).
  double logitSoftcap = 0.0;
  /// Streaming: the cache holds unrotated keys, and key j of a sequence is
  /// rotated at position j, its index in the sequence's cache.
  std::optional<RopeConfig> keyRope;
};

/// A step with its attributes decoded; only the fields of its op are set.
struct DecodedStep {
  StepOp op = StepOp::kEmbedding;
  std::vector<int> operands;
  std::vector<int> results;
  /// kv_cache_write, rope_kv_cache_write, rope_qkv_cache_write,
  /// paged_attention.
  int64_t layer = 0;
  /// rms_norm, add_rms_norm: epsilon and the offset added to the weight
  /// (Gemma: 1); rms_norm: 0, or the width of the groups normalized on
  /// their own (per-head q/k norms).
  double epsilon = 0.0;
  double weightOffset = 0.0;
  int64_t normHeadDim = 0;
  /// embedding: the table's first vocabulary id and the full vocabulary
  /// (vocabulary-parallel; 0 means the table is all of it).
  int64_t vocabOffset = 0;
  int64_t vocabSize = 0;
  /// embedding: the factor of every row (Gemma), 1 for none.
  double embeddingScale = 1.0;
  /// logits: 0, or the cap c of c * tanh(logit / c) (Gemma 2).
  double logitSoftcap = 0.0;
  /// split: columns of each result.
  std::vector<int64_t> splitSizes;
  /// all_gather: the dimension concatenated (0 rows, 1 columns).
  int64_t gatherDim = 0;
  /// rope, rope_kv_cache_write, rope_qkv_cache_write.
  RopeConfig rope;
  /// paged_attention.
  AttentionAttrs attention;
  /// fused: the body, and the artifact's generated kernel ("" for none).
  FusedBody fused;
  std::string kernel;
};

/// Decodes and checks `step` against the registry: a known op, the operand
/// and result counts of its line, every attribute listed with its type and
/// none unlisted, and each op's own rules (positive sizes, rope scaling
/// parameters, a fused body that matches the operands, ...). Errors name
/// the attribute; callers add where the step is.
StatusOr<DecodedStep> decodeStep(const Step &step);

} // namespace infer::plan

#endif // INFER_RUNTIME_PLAN_STEPATTRS_H
