//===- Architectures.h - Supported Hugging Face architectures ---*- C++ -*-===//
//
// One row per `architectures[0]` value of config.json. The rows differ only in
// where biases sit and how sliding-window attention is configured; the layer
// structure (pre-norm decoder, rotary attention, gated MLP) is shared.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_FRONTEND_ARCHITECTURES_H
#define INFER_FRONTEND_ARCHITECTURES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace infer::frontend {

/// How config.json says which layers use sliding-window attention.
enum class SlidingWindowRule {
  /// Never (Llama).
  kNone,
  /// `sliding_window` (null: off) applies to every layer (Mistral).
  kAllLayers,
  /// `use_sliding_window` switches it on for layers >= `max_window_layers`,
  /// or `layer_types` lists "sliding_attention" per layer (Qwen2).
  kQwen2,
};

struct Architecture {
  llvm::StringLiteral name;
  /// q/k/v projections always carry a bias (Qwen2).
  bool alwaysQKVBias;
  /// config.json's `attention_bias` (q/k/v/o) and `mlp_bias` are honoured.
  bool configurableBias;
  SlidingWindowRule slidingWindow;
};

/// All supported architectures, in a stable order.
llvm::ArrayRef<Architecture> supportedArchitectures();

/// The row for `name`, or null.
const Architecture *lookupArchitecture(llvm::StringRef name);

/// "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM".
std::string supportedArchitectureList();

} // namespace infer::frontend

#endif // INFER_FRONTEND_ARCHITECTURES_H
