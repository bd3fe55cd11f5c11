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

/// Rotary embedding of `rope` and `rope_kv_cache_write` steps and of the
/// key rope of a streaming `paged_attention`.
struct RopeConfig {
  int64_t headDim = 0;
  int64_t rotaryDim = 0;
  double theta = 10000.0;
  std::string scaling = "default"; ///< "default" | "linear" | "llama3"
  double factor = 1.0;
  double lowFreqFactor = 1.0;
  double highFreqFactor = 4.0;
  int64_t originalMaxPositionEmbeddings = 0;

  Status validate() const;
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
/// _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters
/// and _compute_llama3_parameters.
std::vector<float> ropeInverseFrequencies(const RopeConfig &config);

/// A `paged_attention` step.
struct AttentionAttrs {
  int64_t layer = 0;
  int64_t numHeads = 0;
  int64_t numKVHeads = 0;
  int64_t headDim = 0;
  double scale = 1.0;
  /// 0: none; else a query at position p sees keys in (p - window, p].
  int64_t slidingWindow = 0;
  /// Streaming: the cache holds unrotated keys, and key j of a sequence is
  /// rotated at position j, its index in the sequence's cache.
  std::optional<RopeConfig> keyRope;
};

/// A step with its attributes decoded; only the fields of its op are set.
struct DecodedStep {
  StepOp op = StepOp::kEmbedding;
  std::vector<int> operands;
  std::vector<int> results;
  /// kv_cache_write, rope_kv_cache_write, paged_attention.
  int64_t layer = 0;
  /// rms_norm, add_rms_norm.
  double epsilon = 0.0;
  /// embedding: the table's first vocabulary id and the full vocabulary
  /// (vocabulary-parallel; 0 means the table is all of it).
  int64_t vocabOffset = 0;
  int64_t vocabSize = 0;
  /// split: columns of each result.
  std::vector<int64_t> splitSizes;
  /// all_gather: the dimension concatenated (0 rows, 1 columns).
  int64_t gatherDim = 0;
  /// rope, rope_kv_cache_write.
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
