// RUN: infer import %fixtures/models/tiny-pycode-target | FileCheck %s

// bf16 checkpoint: weights keep their element type, activations are f32.
// Token ids come from config.json (bos 0, eos 1, pad 2).

// CHECK:       module attributes {infer.model = {architecture = "LlamaForCausalLM",
// CHECK-SAME:    bos_token_id = 0 : i64, eos_token_ids = [1], head_dim = 64 : i64,
// CHECK-SAME:    hidden_size = 384 : i64, max_position_embeddings = 2048 : i64,
// CHECK-SAME:    num_heads = 6 : i64, num_kv_heads = 2 : i64, num_layers = 8 : i64,
// CHECK-SAME:    pad_token_id = 2 : i64, vocab_size = 4096 : i64}}
// CHECK-LABEL: func.func @forward(
// CHECK-SAME:    -> tensor<?x4096xf32>
// CHECK:       %[[EMBED_W:.+]] = infer.weight "model.embed_tokens.weight" : tensor<4096x384xbf16>
// CHECK-NEXT:  infer.embedding %[[EMBED_W]][%{{.+}}] : tensor<4096x384xbf16>, tensor<?xi32> -> tensor<?x384xf32>
// CHECK:       infer.rms_norm {{.*}} {epsilon = 1.000000e-05 : f64} : tensor<?x384xf32>, tensor<384xbf16> -> tensor<?x384xf32>
// CHECK:       infer.linear {{.*}} : tensor<?x384xf32>, tensor<128x384xbf16> -> tensor<?x128xf32>
// CHECK:       infer.attention {{.*}}head_dim = 64 : i64, layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, scale = 1.250000e-01 : f64
// CHECK:       infer.attention {{.*}}layer = 7 : i64
// CHECK-NOT:   infer.attention
// CHECK:       %[[HEAD_W:.+]] = infer.weight "lm_head.weight" : tensor<4096x384xbf16>
// CHECK-NEXT:  infer.logits %{{.+}}, %[[HEAD_W]] : tensor<?x384xf32>, tensor<4096x384xbf16> -> tensor<?x4096xf32>
