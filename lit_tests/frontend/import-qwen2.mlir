// RUN: infer import %S/../../tests/fixtures/qwen2-bias-tied | FileCheck %s --check-prefix=BIAS
// RUN: infer import %S/../../tests/fixtures/qwen2-swa | FileCheck %s --check-prefix=SWA

// Qwen2 always has q/k/v biases (o_proj and the MLP have none); this
// checkpoint ties its embeddings and has no EOS id.

// BIAS:       architecture = "Qwen2ForCausalLM", eos_token_ids = []
// BIAS-LABEL: func.func @forward(
// BIAS:       %[[EMBED_W:.+]] = infer.weight "model.embed_tokens.weight" : tensor<512x128xbf16>
// BIAS:       %[[Q_W:.+]] = infer.weight "model.layers.0.self_attn.q_proj.weight" : tensor<128x128xbf16>
// BIAS-NEXT:  %[[Q_B:.+]] = infer.weight "model.layers.0.self_attn.q_proj.bias" : tensor<128xbf16>
// BIAS-NEXT:  infer.linear %{{.+}}, %[[Q_W]], %[[Q_B]] {parallel = #infer.parallel<column>} : tensor<?x128xf32>, tensor<128x128xbf16>, tensor<128xbf16> -> tensor<?x128xf32>
// BIAS:       infer.weight "model.layers.0.self_attn.k_proj.bias" : tensor<32xbf16>
// BIAS:       infer.weight "model.layers.0.self_attn.v_proj.bias" : tensor<32xbf16>
// BIAS-NOT:   o_proj.bias
// BIAS:       %[[O_W:.+]] = infer.weight "model.layers.0.self_attn.o_proj.weight"
// BIAS-NEXT:  infer.linear %{{.+}}, %[[O_W]] {parallel = #infer.parallel<row>} : tensor<?x128xf32>, tensor<128x128xbf16> -> tensor<?x128xf32>
// BIAS-NOT:   lm_head
// BIAS:       infer.logits %{{.+}}, %[[EMBED_W]]

// Per-layer windows from `layer_types` (full, sliding, sliding), window 8,
// like HF's Qwen2Attention.

// SWA-LABEL: func.func @forward(
// SWA:       infer.attention {{.*}}layer = 0 : i64{{.*}}sliding_window = 0 : i64
// SWA:       infer.attention {{.*}}layer = 1 : i64{{.*}}sliding_window = 8 : i64
// SWA:       infer.attention {{.*}}layer = 2 : i64{{.*}}sliding_window = 8 : i64
