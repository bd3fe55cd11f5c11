// RUN: infer import %fixtures/rand/llama-mha-tied | FileCheck %s

// Multi-head attention (8 KV heads) with tied embeddings: the logits read the
// embedding table through the same infer.weight; there is no lm_head tensor.

// CHECK:       num_heads = 8 : i64, num_kv_heads = 8 : i64
// CHECK-LABEL: func.func @forward(
// CHECK:       %[[EMBED_W:.+]] = infer.weight "model.embed_tokens.weight" : tensor<512x128xf32>
// CHECK:       infer.weight "model.layers.0.self_attn.k_proj.weight" : tensor<128x128xf32>
// CHECK:       infer.rope {{.*}}rope = #infer.rope<theta = 5.000000e+05, kind = default>
// CHECK:       infer.attention {{.*}}num_heads = 8 : i64, num_kv_heads = 8 : i64
// CHECK-NOT:   lm_head
// CHECK:       %[[LOGITS:.+]] = infer.logits %{{.+}}, %[[EMBED_W]] : tensor<?x128xf32>, tensor<512x128xf32> -> tensor<?x512xf32>
// CHECK-NEXT:  return %[[LOGITS]]
