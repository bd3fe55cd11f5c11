// RUN: infer import %fixtures/rand/llama-gqa | FileCheck %s

// Llama with grouped-query attention: 8 query heads share 2 KV heads of
// head_dim 16, so k/v projections are 32 wide; fp32 weights, separate lm_head.

// CHECK:      module attributes {infer.model = {architecture = "LlamaForCausalLM",
// CHECK-SAME:   bos_token_id = 1 : i64, eos_token_ids = [2], head_dim = 16 : i64,
// CHECK-SAME:   hidden_size = 128 : i64, max_position_embeddings = 4096 : i64,
// CHECK-SAME:   num_heads = 8 : i64, num_kv_heads = 2 : i64, num_layers = 3 : i64,
// CHECK-SAME:   vocab_size = 512 : i64}}

// CHECK-LABEL: func.func @forward(
// CHECK-SAME:    %[[TOKENS:[^:]+]]: tensor<?xi32> {infer.input = "token_ids"},
// CHECK-SAME:    %[[POS:[^:]+]]: tensor<?xi32> {infer.input = "positions"},
// CHECK-SAME:    %[[QSL:[^:]+]]: tensor<?xi32> {infer.input = "query_start_loc"},
// CHECK-SAME:    %{{[^:]+}}: tensor<?xi32> {infer.input = "context_lens"},
// CHECK-SAME:    %{{[^:]+}}: tensor<?x?xi32> {infer.input = "block_tables"},
// CHECK-SAME:    %{{[^:]+}}: tensor<?xi64> {infer.input = "slot_mapping"},
// CHECK-SAME:    %[[ROWS:[^:]+]]: tensor<?xi32> {infer.input = "logits_indices"})
// CHECK-SAME:    -> tensor<?x512xf32>

// CHECK:      %[[EMBED_W:.+]] = infer.weight "model.embed_tokens.weight" : tensor<512x128xf32>
// CHECK-NEXT: %[[H0:.+]] = infer.embedding %[[EMBED_W]][%[[TOKENS]]] : tensor<512x128xf32>, tensor<?xi32> -> tensor<?x128xf32>

// CHECK-NEXT: %[[LN_W:.+]] = infer.weight "model.layers.0.input_layernorm.weight" : tensor<128xf32>
// CHECK-NEXT: %[[X:.+]] = infer.rms_norm %[[H0]], %[[LN_W]] {epsilon = 9.99{{[0-9]*}}E-7 : f64}
// CHECK-NEXT: %[[Q_W:.+]] = infer.weight "model.layers.0.self_attn.q_proj.weight" : tensor<128x128xf32>
// CHECK-NEXT: %[[Q:.+]] = infer.linear %[[X]], %[[Q_W]] {parallel = #infer.parallel<column>} : tensor<?x128xf32>, tensor<128x128xf32> -> tensor<?x128xf32>
// CHECK-NEXT: %[[K_W:.+]] = infer.weight "model.layers.0.self_attn.k_proj.weight" : tensor<32x128xf32>
// CHECK-NEXT: %[[K:.+]] = infer.linear %[[X]], %[[K_W]] {parallel = #infer.parallel<kv_column>} : tensor<?x128xf32>, tensor<32x128xf32> -> tensor<?x32xf32>
// CHECK-NEXT: %[[V_W:.+]] = infer.weight "model.layers.0.self_attn.v_proj.weight" : tensor<32x128xf32>
// CHECK-NEXT: %[[V:.+]] = infer.linear %[[X]], %[[V_W]] {parallel = #infer.parallel<kv_column>} : tensor<?x128xf32>, tensor<32x128xf32> -> tensor<?x32xf32>
// CHECK-NEXT: %[[Q_ROT:.+]] = infer.rope %[[Q]], %[[POS]] {head_dim = 16 : i64, rope = #infer.rope<theta = 1.000000e+04, kind = default>, rotary_dim = 16 : i64} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
// CHECK-NEXT: %[[K_ROT:.+]] = infer.rope %[[K]], %[[POS]] {{.*}} : tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
// CHECK-NEXT: %[[ATTN:.+]] = infer.attention %[[Q_ROT]], %[[K_ROT]], %[[V]], %[[QSL]]
// CHECK-SAME:   {head_dim = 16 : i64, layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64}
// CHECK-SAME:   : tensor<?x128xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi32> -> tensor<?x128xf32>
// CHECK-NEXT: %[[O_W:.+]] = infer.weight "model.layers.0.self_attn.o_proj.weight" : tensor<128x128xf32>
// CHECK-NEXT: %[[O:.+]] = infer.linear %[[ATTN]], %[[O_W]] {parallel = #infer.parallel<row>}
// CHECK-NEXT: %[[H1:.+]] = infer.add %[[H0]], %[[O]] : tensor<?x128xf32>

// CHECK-NEXT: %[[POST_W:.+]] = infer.weight "model.layers.0.post_attention_layernorm.weight" : tensor<128xf32>
// CHECK-NEXT: %[[Y:.+]] = infer.rms_norm %[[H1]], %[[POST_W]]
// CHECK-NEXT: %[[GATE_W:.+]] = infer.weight "model.layers.0.mlp.gate_proj.weight" : tensor<256x128xf32>
// CHECK-NEXT: %[[GATE:.+]] = infer.linear %[[Y]], %[[GATE_W]] {parallel = #infer.parallel<column>} : {{.*}} -> tensor<?x256xf32>
// CHECK-NEXT: %[[UP_W:.+]] = infer.weight "model.layers.0.mlp.up_proj.weight" : tensor<256x128xf32>
// CHECK-NEXT: %[[UP:.+]] = infer.linear %[[Y]], %[[UP_W]] {parallel = #infer.parallel<column>} : {{.*}} -> tensor<?x256xf32>
// CHECK-NEXT: %[[ACT:.+]] = infer.silu %[[GATE]] : tensor<?x256xf32>
// CHECK-NEXT: %[[GATED:.+]] = infer.mul %[[ACT]], %[[UP]] : tensor<?x256xf32>
// CHECK-NEXT: %[[DOWN_W:.+]] = infer.weight "model.layers.0.mlp.down_proj.weight" : tensor<128x256xf32>
// CHECK-NEXT: %[[DOWN:.+]] = infer.linear %[[GATED]], %[[DOWN_W]] {parallel = #infer.parallel<row>} : tensor<?x256xf32>, tensor<128x256xf32> -> tensor<?x128xf32>
// CHECK-NEXT: %{{.+}} = infer.add %[[H1]], %[[DOWN]] : tensor<?x128xf32>

// CHECK:      infer.attention {{.*}}layer = 1 : i64
// CHECK:      infer.attention {{.*}}layer = 2 : i64
// CHECK-NOT:  infer.attention
// CHECK:      infer.weight "model.layers.2.mlp.down_proj.weight"
// CHECK-NEXT: infer.linear
// CHECK-NEXT: %[[H_LAST:.+]] = infer.add

// The rows that produce logits are gathered before the final norm.
// CHECK-NEXT: %[[PICKED:.+]] = infer.gather_rows %[[H_LAST]][%[[ROWS]]] : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
// CHECK-NEXT: %[[NORM_W:.+]] = infer.weight "model.norm.weight" : tensor<128xf32>
// CHECK-NEXT: %[[NORMED:.+]] = infer.rms_norm %[[PICKED]], %[[NORM_W]]
// CHECK-NEXT: %[[HEAD_W:.+]] = infer.weight "lm_head.weight" : tensor<512x128xf32>
// CHECK-NEXT: %[[LOGITS:.+]] = infer.logits %[[NORMED]], %[[HEAD_W]] : tensor<?x128xf32>, tensor<512x128xf32> -> tensor<?x512xf32>
// CHECK-NEXT: return %[[LOGITS]] : tensor<?x512xf32>
