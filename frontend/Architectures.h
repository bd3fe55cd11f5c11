//===- Architectures.h - Supported Hugging Face architectures ---*- C++ -*-===//
//
// One row per `architectures[0]` value of config.json: what the importer
// needs to know about a family beyond config.json's numbers. The layer
// structure (pre-norm decoder, rotary attention, gated MLP) is shared; the
// rows say where biases sit, how sliding-window attention is configured, how
// the checkpoint stores the projections and which extra norms a layer has.
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
  /// `layer_types` lists "sliding_attention" per layer; older configs: the
  /// even layers slide (Gemma 2).
  kGemma2,
  /// `layer_types`; older configs: every layer but each
  /// `sliding_window_pattern`-th slides (Gemma 3).
  kGemma3,
};

struct Architecture {
  llvm::StringLiteral name;
  /// q/k/v projections always carry a bias (Qwen2).
  bool alwaysQKVBias;
  /// config.json's `attention_bias` (q/k/v/o) and `mlp_bias` are honoured.
  bool configurableBias;
  SlidingWindowRule slidingWindow;
  /// q, k and v are one `self_attn.qkv_proj` and gate and up one
  /// `mlp.gate_up_proj` in the checkpoint, split at load (Phi-3).
  bool fusedProjections = false;
  /// `self_attn.q_norm` and `self_attn.k_norm`: an RMSNorm of each query and
  /// key head before the rotary embedding (Qwen3, Gemma 3).
  bool qkNorm = false;
  /// Gemma: RMSNorm scales by 1 + weight, the embeddings are multiplied by
  /// sqrt(hidden_size), each block's output is normalized before the
  /// residual add (post_attention_layernorm, post_feedforward_layernorm;
  /// pre_feedforward_layernorm feeds the MLP), the activation is
  /// `hidden_activation`, and config.json may set query_pre_attn_scalar and
  /// attention / final logit soft-capping.
  bool gemma = false;
  /// Sliding-window layers have their own rope (Gemma 3:
  /// rope_parameters.sliding_attention, or rope_local_base_freq).
  bool slidingLayerRope = false;
};

/// All supported architectures, in a stable order.
llvm::ArrayRef<Architecture> supportedArchitectures();

/// The row for `name`, or null.
const Architecture *lookupArchitecture(llvm::StringRef name);

/// "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM".
std::string supportedArchitectureList();

} // namespace infer::frontend

#endif // INFER_FRONTEND_ARCHITECTURES_H
