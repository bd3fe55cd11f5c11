//===- HFConfig.h - config.json as a typed model config ---------*- C++ -*-===//
//
// The importer's view of a Hugging Face model directory's config.json (and
// generation_config.json): the handful of numbers and switches that decide the
// shape of the forward function. Parsing reports a missing key, a value of the
// wrong type or an unsupported setting as an MLIR error located at the key's
// line in config.json.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_FRONTEND_HFCONFIG_H
#define INFER_FRONTEND_HFCONFIG_H

#include "frontend/Architectures.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace infer::frontend {

enum class RopeKind { kDefault, kLinear, kLlama3, kYarn, kLongRope, kDynamic };

/// Rotary embedding parameters, after merging the transformers 5.x
/// `rope_parameters` spelling and the older `rope_theta` + `rope_scaling`.
struct RopeConfig {
  double theta = 10000.0;
  RopeKind kind = RopeKind::kDefault;
  double factor = 1.0;
  double lowFreqFactor = 1.0;
  double highFreqFactor = 4.0;
  int64_t originalMaxPositionEmbeddings = 0;
  /// yarn.
  double betaFast = 32.0;
  double betaSlow = 1.0;
  /// longrope: one divisor per inverse frequency.
  std::vector<double> shortFactor, longFactor;
  /// `partial_rotary_factor`: the rotated share of each head.
  double partialRotaryFactor = 1.0;
  /// yarn and longrope: HF multiplies the cosines and sines by this (the
  /// importer folds its square into the attention scale).
  double attentionFactor = 1.0;
};

enum class Activation { kSilu, kGeluExact, kGeluTanh };

struct ModelConfig {
  const Architecture *architecture = nullptr;
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t intermediateSize = 0;
  int64_t numLayers = 0;
  int64_t numHeads = 0;
  int64_t numKVHeads = 0;
  int64_t headDim = 0;
  /// The rotated features of each head: head_dim * partial_rotary_factor.
  int64_t rotaryDim = 0;
  int64_t maxPositionEmbeddings = 0;
  double rmsNormEps = 1e-6;
  Activation hiddenAct = Activation::kSilu;
  bool tieWordEmbeddings = false;
  /// Bias on the q/k/v projections, on o_proj, and on the MLP projections.
  bool qkvBias = false;
  bool outputBias = false;
  bool mlpBias = false;
  /// Per layer: 0 for full attention, else the window (HF semantics).
  std::vector<int64_t> slidingWindows;
  RopeConfig rope;
  /// The rope of the sliding-window layers where it differs (Gemma 3).
  std::optional<RopeConfig> slidingRope;
  /// Gemma (Architecture::gemma): 0 where unset.
  double queryPreAttnScalar = 0.0;
  double attnLogitSoftcap = 0.0;
  double finalLogitSoftcap = 0.0;
  std::optional<int64_t> bosTokenId;
  std::vector<int64_t> eosTokenIds;
  std::optional<int64_t> padTokenId;
};

/// Parses `<modelDir>/config.json` and, if present,
/// `<modelDir>/generation_config.json` (its eos ids are merged in; its bos and
/// pad fill in what config.json leaves unset). Errors are emitted on `context`.
std::optional<ModelConfig> parseModelConfig(llvm::StringRef modelDir,
                                            mlir::MLIRContext &context);

} // namespace infer::frontend

#endif // INFER_FRONTEND_HFCONFIG_H
