// RUN: infer-opt %s --split-input-file --infer-shard-tensor-parallel="tp=2" | FileCheck %s --check-prefix=TP2
// RUN: infer-opt %s --split-input-file --infer-shard-tensor-parallel="tp=4" | FileCheck %s --check-prefix=TP4
// RUN: infer-opt %s --split-input-file --infer-shard-tensor-parallel="tp=1" | FileCheck %s --check-prefix=TP1

// A two-layer Llama with grouped-query attention: 8 query heads of head_dim
// 8 share 2 key/value heads; hidden 64, MLP 128, vocabulary 256.
//
// tp=2: every projection, the embedding and the LM head are split; each rank
// keeps 4 query heads and 1 key/value head.
// tp=4: 2 query heads per rank; the 2 key/value heads are fewer than the
// ranks, so ranks 0-1 hold head 0 and ranks 2-3 head 1 (replication = 2).
// tp=1: nothing is split; the parallel styles are consumed all the same.

// TP2-LABEL: module attributes
// TP2-SAME:    infer.tp = 2 : i64
// TP2-LABEL: func.func @forward(
// TP2-SAME:    %[[IDS:[^:]+]]: tensor<?xi32> {infer.input = "token_ids"}
// TP2-SAME:    -> tensor<?x256xf32>

// The embedding is vocabulary-parallel: each rank looks up its half of the
// vocabulary, and the sum over ranks completes the lookup.
// TP2:      %[[EMBED_W:.+]] = infer.weight "model.embed_tokens.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<128x64xf32>
// TP2-NEXT: %[[LOOKUP:.+]] = infer.embedding %[[EMBED_W]][%[[IDS]]] {vocab_shards = 2 : i64} : tensor<128x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
// TP2-NEXT: %[[H0:.+]] = infer.all_reduce %[[LOOKUP]] : tensor<?x64xf32>
// TP2-NEXT: infer.weight "model.layers.0.input_layernorm.weight" : tensor<64xf32>
// TP2-NEXT: %[[X:.+]] = infer.rms_norm %[[H0]]

// q/k/v are column-parallel: their weight rows are split.
// TP2-NEXT: %[[Q_W:.+]] = infer.weight "model.layers.0.self_attn.q_proj.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<32x64xf32>
// TP2-NEXT: %[[Q:.+]] = infer.linear %[[X]], %[[Q_W]] : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x32xf32>
// TP2-NEXT: %[[K_W:.+]] = infer.weight "model.layers.0.self_attn.k_proj.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<8x64xf32>
// TP2-NEXT: %[[K:.+]] = infer.linear %[[X]], %[[K_W]] : tensor<?x64xf32>, tensor<8x64xf32> -> tensor<?x8xf32>
// TP2-NEXT: infer.weight "model.layers.0.self_attn.v_proj.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<8x64xf32>
// TP2-NEXT: %[[V:.+]] = infer.linear
// TP2-NEXT: %[[Q_ROT:.+]] = infer.rope %[[Q]], {{.*}} : tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
// TP2-NEXT: %[[K_ROT:.+]] = infer.rope %[[K]], {{.*}} : tensor<?x8xf32>, tensor<?xi32> -> tensor<?x8xf32>
// TP2-NEXT: %[[ATTN:.+]] = infer.attention %[[Q_ROT]], %[[K_ROT]], %[[V]], {{.*}}num_heads = 4 : i64, num_kv_heads = 1 : i64
// TP2-SAME:   : tensor<?x32xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?xi32> -> tensor<?x32xf32>

// o_proj is row-parallel: each rank holds a partial sum until the reduce.
// TP2-NEXT: %[[O_W:.+]] = infer.weight "model.layers.0.self_attn.o_proj.weight" {shard = #infer.shard<dim = 1, shards = 2>} : tensor<64x32xf32>
// TP2-NEXT: %[[O:.+]] = infer.linear %[[ATTN]], %[[O_W]] : tensor<?x32xf32>, tensor<64x32xf32> -> tensor<?x64xf32>
// TP2-NEXT: %[[O_SUM:.+]] = infer.all_reduce %[[O]] : tensor<?x64xf32>
// TP2-NEXT: %[[H1:.+]] = infer.add %[[H0]], %[[O_SUM]] : tensor<?x64xf32>

// gate/up column-parallel, down row-parallel.
// TP2:      infer.weight "model.layers.0.mlp.gate_proj.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<64x64xf32>
// TP2:      infer.weight "model.layers.0.mlp.up_proj.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<64x64xf32>
// TP2:      %[[ACT:.+]] = infer.silu %{{.+}} : tensor<?x64xf32>
// TP2-NEXT: %[[GATED:.+]] = infer.mul %[[ACT]], %{{.+}} : tensor<?x64xf32>
// TP2-NEXT: %[[DOWN_W:.+]] = infer.weight "model.layers.0.mlp.down_proj.weight" {shard = #infer.shard<dim = 1, shards = 2>} : tensor<64x64xf32>
// TP2-NEXT: %[[DOWN:.+]] = infer.linear %[[GATED]], %[[DOWN_W]] : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
// TP2-NEXT: %[[DOWN_SUM:.+]] = infer.all_reduce %[[DOWN]] : tensor<?x64xf32>
// TP2-NEXT: infer.add %[[H1]], %[[DOWN_SUM]] : tensor<?x64xf32>

// Two reduces per layer: layer 1 has them too.
// TP2:      infer.attention {{.*}}layer = 1 : i64, num_heads = 4 : i64, num_kv_heads = 1 : i64
// TP2-COUNT-2: infer.all_reduce

// Norms stay replicated; the LM head yields the rank's half of the logits,
// gathered along the vocabulary.
// TP2:      infer.weight "model.norm.weight" : tensor<64xf32>
// TP2-NEXT: %[[NORMED:.+]] = infer.rms_norm
// TP2-NEXT: %[[HEAD_W:.+]] = infer.weight "lm_head.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<128x64xf32>
// TP2-NEXT: %[[PART:.+]] = infer.logits %[[NORMED]], %[[HEAD_W]] : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
// TP2-NEXT: %[[LOGITS:.+]] = infer.all_gather %[[PART]] {dim = 1 : i64} : tensor<?x128xf32> -> tensor<?x256xf32>
// TP2-NEXT: return %[[LOGITS]] : tensor<?x256xf32>

// TP4-LABEL: module attributes
// TP4-SAME:    infer.tp = 4 : i64
// TP4:      infer.weight "model.embed_tokens.weight" {shard = #infer.shard<dim = 0, shards = 4>} : tensor<64x64xf32>
// TP4:      infer.weight "model.layers.0.self_attn.q_proj.weight" {shard = #infer.shard<dim = 0, shards = 4>} : tensor<16x64xf32>
// TP4:      infer.weight "model.layers.0.self_attn.k_proj.weight" {shard = #infer.shard<dim = 0, shards = 2, replication = 2>} : tensor<8x64xf32>
// TP4:      infer.weight "model.layers.0.self_attn.v_proj.weight" {shard = #infer.shard<dim = 0, shards = 2, replication = 2>} : tensor<8x64xf32>
// TP4:      infer.attention {{.*}}num_heads = 2 : i64, num_kv_heads = 1 : i64
// TP4-SAME:   : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?xi32> -> tensor<?x16xf32>
// TP4:      infer.weight "model.layers.0.self_attn.o_proj.weight" {shard = #infer.shard<dim = 1, shards = 4>} : tensor<64x16xf32>
// TP4:      infer.weight "model.layers.0.mlp.down_proj.weight" {shard = #infer.shard<dim = 1, shards = 4>} : tensor<64x32xf32>
// TP4:      infer.logits {{.*}} -> tensor<?x64xf32>
// TP4-NEXT: infer.all_gather {{.*}} {dim = 1 : i64} : tensor<?x64xf32> -> tensor<?x256xf32>

// TP1-LABEL: module attributes
// TP1-NOT:   infer.tp
// TP1-NOT:   shard
// TP1-NOT:   infer.all_reduce
// TP1-NOT:   infer.all_gather
// TP1-NOT:   #infer.parallel
// TP1:       infer.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
// TP1-NEXT:  infer.linear %{{[^ ]+}}, %{{[^ ]+}} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
// TP1:       infer.attention {{.*}}num_heads = 8 : i64, num_kv_heads = 2 : i64
// TP1-NOT:   #infer.parallel

module attributes {infer.model = {architecture = "LlamaForCausalLM", hidden_size = 64 : i64, num_heads = 8 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, num_layers = 2 : i64, vocab_size = 256 : i64}} {
func.func @forward(%ids: tensor<?xi32> {infer.input = "token_ids"}, %positions: tensor<?xi32> {infer.input = "positions"}, %qsl: tensor<?xi32> {infer.input = "query_start_loc"}, %rows: tensor<?xi32> {infer.input = "logits_indices"}) -> tensor<?x256xf32> {
  %embed_w = infer.weight "model.embed_tokens.weight" : tensor<256x64xf32>
  %h0 = infer.embedding %embed_w[%ids] : tensor<256x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %ln0_w = infer.weight "model.layers.0.input_layernorm.weight" : tensor<64xf32>
  %x0 = infer.rms_norm %h0, %ln0_w {epsilon = 1.0e-06 : f64} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %q0_w = infer.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
  %q0 = infer.linear %x0, %q0_w {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %k0_w = infer.weight "model.layers.0.self_attn.k_proj.weight" : tensor<16x64xf32>
  %k0 = infer.linear %x0, %k0_w {parallel = #infer.parallel<kv_column>} : tensor<?x64xf32>, tensor<16x64xf32> -> tensor<?x16xf32>
  %v0_w = infer.weight "model.layers.0.self_attn.v_proj.weight" : tensor<16x64xf32>
  %v0 = infer.linear %x0, %v0_w {parallel = #infer.parallel<kv_column>} : tensor<?x64xf32>, tensor<16x64xf32> -> tensor<?x16xf32>
  %qr0 = infer.rope %q0, %positions {head_dim = 8 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %kr0 = infer.rope %k0, %positions {head_dim = 8 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x16xf32>, tensor<?xi32> -> tensor<?x16xf32>
  %a0 = infer.attention %qr0, %kr0, %v0, %qsl {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %o0_w = infer.weight "model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
  %o0 = infer.linear %a0, %o0_w {parallel = #infer.parallel<row>} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %r0 = infer.add %h0, %o0 : tensor<?x64xf32>
  %post0_w = infer.weight "model.layers.0.post_attention_layernorm.weight" : tensor<64xf32>
  %y0 = infer.rms_norm %r0, %post0_w {epsilon = 1.0e-06 : f64} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %gate0_w = infer.weight "model.layers.0.mlp.gate_proj.weight" : tensor<128x64xf32>
  %gate0 = infer.linear %y0, %gate0_w {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
  %up0_w = infer.weight "model.layers.0.mlp.up_proj.weight" : tensor<128x64xf32>
  %up0 = infer.linear %y0, %up0_w {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
  %act0 = infer.silu %gate0 : tensor<?x128xf32>
  %gated0 = infer.mul %act0, %up0 : tensor<?x128xf32>
  %down0_w = infer.weight "model.layers.0.mlp.down_proj.weight" : tensor<64x128xf32>
  %down0 = infer.linear %gated0, %down0_w {parallel = #infer.parallel<row>} : tensor<?x128xf32>, tensor<64x128xf32> -> tensor<?x64xf32>
  %h1 = infer.add %r0, %down0 : tensor<?x64xf32>
  %ln1_w = infer.weight "model.layers.1.input_layernorm.weight" : tensor<64xf32>
  %x1 = infer.rms_norm %h1, %ln1_w {epsilon = 1.0e-06 : f64} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %q1_w = infer.weight "model.layers.1.self_attn.q_proj.weight" : tensor<64x64xf32>
  %q1 = infer.linear %x1, %q1_w {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %k1_w = infer.weight "model.layers.1.self_attn.k_proj.weight" : tensor<16x64xf32>
  %k1 = infer.linear %x1, %k1_w {parallel = #infer.parallel<kv_column>} : tensor<?x64xf32>, tensor<16x64xf32> -> tensor<?x16xf32>
  %v1_w = infer.weight "model.layers.1.self_attn.v_proj.weight" : tensor<16x64xf32>
  %v1 = infer.linear %x1, %v1_w {parallel = #infer.parallel<kv_column>} : tensor<?x64xf32>, tensor<16x64xf32> -> tensor<?x16xf32>
  %qr1 = infer.rope %q1, %positions {head_dim = 8 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %kr1 = infer.rope %k1, %positions {head_dim = 8 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x16xf32>, tensor<?xi32> -> tensor<?x16xf32>
  %a1 = infer.attention %qr1, %kr1, %v1, %qsl {layer = 1 : i64, num_heads = 8 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %o1_w = infer.weight "model.layers.1.self_attn.o_proj.weight" : tensor<64x64xf32>
  %o1 = infer.linear %a1, %o1_w {parallel = #infer.parallel<row>} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %r1 = infer.add %h1, %o1 : tensor<?x64xf32>
  %post1_w = infer.weight "model.layers.1.post_attention_layernorm.weight" : tensor<64xf32>
  %y1 = infer.rms_norm %r1, %post1_w {epsilon = 1.0e-06 : f64} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %gate1_w = infer.weight "model.layers.1.mlp.gate_proj.weight" : tensor<128x64xf32>
  %gate1 = infer.linear %y1, %gate1_w {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
  %up1_w = infer.weight "model.layers.1.mlp.up_proj.weight" : tensor<128x64xf32>
  %up1 = infer.linear %y1, %up1_w {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
  %act1 = infer.silu %gate1 : tensor<?x128xf32>
  %gated1 = infer.mul %act1, %up1 : tensor<?x128xf32>
  %down1_w = infer.weight "model.layers.1.mlp.down_proj.weight" : tensor<64x128xf32>
  %down1 = infer.linear %gated1, %down1_w {parallel = #infer.parallel<row>} : tensor<?x128xf32>, tensor<64x128xf32> -> tensor<?x64xf32>
  %h2 = infer.add %r1, %down1 : tensor<?x64xf32>
  %last = infer.gather_rows %h2[%rows] : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %norm_w = infer.weight "model.norm.weight" : tensor<64xf32>
  %normed = infer.rms_norm %last, %norm_w {epsilon = 1.0e-06 : f64} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %head_w = infer.weight "lm_head.weight" : tensor<256x64xf32>
  %logits = infer.logits %normed, %head_w : tensor<?x64xf32>, tensor<256x64xf32> -> tensor<?x256xf32>
  return %logits : tensor<?x256xf32>
}
}

// -----

// Qwen2-style: q/k/v biases are split with their weights; the embedding is
// tied to the LM head, and the one table is split once. A vocabulary that
// does not divide by tp (250 rows for tp=4) stays replicated.

// TP2-LABEL: module attributes
// TP2:       %[[TABLE:.+]] = infer.weight "model.embed_tokens.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<125x64xf32>
// TP2:       infer.weight "model.layers.0.self_attn.k_proj.bias" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<8xf32>
// TP2:       infer.linear {{.*}} : tensor<?x64xf32>, tensor<8x64xf32>, tensor<8xf32> -> tensor<?x8xf32>
// TP2:       infer.logits %{{.+}}, %[[TABLE]] : tensor<?x64xf32>, tensor<125x64xf32> -> tensor<?x125xf32>
// TP2-NEXT:  infer.all_gather {{.*}} -> tensor<?x250xf32>

// TP4-LABEL: module attributes
// TP4:       infer.weight "model.embed_tokens.weight" : tensor<250x64xf32>
// TP4-NOT:   vocab_shards
// TP4:       infer.weight "model.layers.0.self_attn.k_proj.bias" {shard = #infer.shard<dim = 0, shards = 2, replication = 2>} : tensor<8xf32>
// TP4:       infer.logits {{.*}} -> tensor<?x250xf32>
// TP4-NOT:   infer.all_gather
module attributes {infer.model = {architecture = "Qwen2ForCausalLM"}} {
func.func @forward(%ids: tensor<?xi32> {infer.input = "token_ids"}, %qsl: tensor<?xi32> {infer.input = "query_start_loc"}) -> tensor<?x250xf32> {
  %table = infer.weight "model.embed_tokens.weight" : tensor<250x64xf32>
  %h = infer.embedding %table[%ids] : tensor<250x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %q_w = infer.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
  %q_b = infer.weight "model.layers.0.self_attn.q_proj.bias" : tensor<64xf32>
  %q = infer.linear %h, %q_w, %q_b {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %k_w = infer.weight "model.layers.0.self_attn.k_proj.weight" : tensor<16x64xf32>
  %k_b = infer.weight "model.layers.0.self_attn.k_proj.bias" : tensor<16xf32>
  %k = infer.linear %h, %k_w, %k_b {parallel = #infer.parallel<kv_column>} : tensor<?x64xf32>, tensor<16x64xf32>, tensor<16xf32> -> tensor<?x16xf32>
  %a = infer.attention %q, %k, %k, %qsl {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %o_w = infer.weight "model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
  %o = infer.linear %a, %o_w {parallel = #infer.parallel<row>} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %logits = infer.logits %o, %table : tensor<?x64xf32>, tensor<250x64xf32> -> tensor<?x250xf32>
  return %logits : tensor<?x250xf32>
}
}

// -----

// Llama with attention_bias and mlp_bias: the column-parallel biases (q, gate)
// are split with their weights; the row-parallel ones (o_proj, down_proj) are
// replicated and added once, after the all_reduce, not on every rank.

// TP2-LABEL: func.func @row_parallel_bias(
// TP2:       %[[Q_B:.+]] = infer.weight "model.layers.0.self_attn.q_proj.bias" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<32xf32>
// TP2:       infer.linear {{.*}}, %[[Q_B]] : tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<?x32xf32>
// TP2:       %[[O_W:.+]] = infer.weight "model.layers.0.self_attn.o_proj.weight" {shard = #infer.shard<dim = 1, shards = 2>} : tensor<64x32xf32>
// TP2-NEXT:  %[[O_B:.+]] = infer.weight "model.layers.0.self_attn.o_proj.bias" : tensor<64xf32>
// TP2-NEXT:  %[[O:.+]] = infer.linear %{{.+}}, %[[O_W]] : tensor<?x32xf32>, tensor<64x32xf32> -> tensor<?x64xf32>
// TP2-NEXT:  %[[O_SUM:.+]] = infer.all_reduce %[[O]] : tensor<?x64xf32>
// TP2-NEXT:  %[[O_OUT:.+]] = infer.bias_add %[[O_SUM]], %[[O_B]] : tensor<?x64xf32>, tensor<64xf32>
// TP2-NEXT:  %[[H1:.+]] = infer.add %{{.+}}, %[[O_OUT]] : tensor<?x64xf32>
// TP2:       %[[DOWN_W:.+]] = infer.weight "model.layers.0.mlp.down_proj.weight" {shard = #infer.shard<dim = 1, shards = 2>} : tensor<64x32xf32>
// TP2-NEXT:  %[[DOWN_B:.+]] = infer.weight "model.layers.0.mlp.down_proj.bias" : tensor<64xf32>
// TP2-NEXT:  %[[DOWN:.+]] = infer.linear %{{.+}}, %[[DOWN_W]] : tensor<?x32xf32>, tensor<64x32xf32> -> tensor<?x64xf32>
// TP2-NEXT:  %[[DOWN_SUM:.+]] = infer.all_reduce %[[DOWN]] : tensor<?x64xf32>
// TP2-NEXT:  %[[DOWN_OUT:.+]] = infer.bias_add %[[DOWN_SUM]], %[[DOWN_B]] : tensor<?x64xf32>, tensor<64xf32>
// TP2-NEXT:  %[[H2:.+]] = infer.add %[[H1]], %[[DOWN_OUT]] : tensor<?x64xf32>
// TP2-NEXT:  return %[[H2]]

// TP4-LABEL: func.func @row_parallel_bias(
// TP4:       infer.weight "model.layers.0.self_attn.o_proj.weight" {shard = #infer.shard<dim = 1, shards = 4>} : tensor<64x16xf32>
// TP4-NEXT:  %[[O_B:.+]] = infer.weight "model.layers.0.self_attn.o_proj.bias" : tensor<64xf32>
// TP4-NEXT:  %[[O:.+]] = infer.linear {{.*}} : tensor<?x16xf32>, tensor<64x16xf32> -> tensor<?x64xf32>
// TP4-NEXT:  %[[O_SUM:.+]] = infer.all_reduce %[[O]] : tensor<?x64xf32>
// TP4-NEXT:  infer.bias_add %[[O_SUM]], %[[O_B]] : tensor<?x64xf32>, tensor<64xf32>
// TP4:       infer.weight "model.layers.0.mlp.down_proj.weight" {shard = #infer.shard<dim = 1, shards = 4>} : tensor<64x16xf32>
// TP4-NEXT:  %[[DOWN_B:.+]] = infer.weight "model.layers.0.mlp.down_proj.bias" : tensor<64xf32>
// TP4-NEXT:  %[[DOWN:.+]] = infer.linear {{.*}} : tensor<?x16xf32>, tensor<64x16xf32> -> tensor<?x64xf32>
// TP4-NEXT:  %[[DOWN_SUM:.+]] = infer.all_reduce %[[DOWN]] : tensor<?x64xf32>
// TP4-NEXT:  infer.bias_add %[[DOWN_SUM]], %[[DOWN_B]] : tensor<?x64xf32>, tensor<64xf32>

// tp=1 keeps the biases on the linears.
// TP1-LABEL: func.func @row_parallel_bias(
// TP1:       infer.linear {{.*}} : tensor<?x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
// TP1:       infer.linear {{.*}} : tensor<?x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
// TP1-NOT:   infer.all_reduce
// TP1-NOT:   infer.bias_add
module attributes {infer.model = {architecture = "LlamaForCausalLM"}} {
func.func @row_parallel_bias(%h: tensor<?x64xf32>, %qsl: tensor<?xi32>) -> tensor<?x64xf32> {
  %q_w = infer.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
  %q_b = infer.weight "model.layers.0.self_attn.q_proj.bias" : tensor<64xf32>
  %q = infer.linear %h, %q_w, %q_b {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %a = infer.attention %q, %q, %q, %qsl {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 8 : i64, head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %o_w = infer.weight "model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
  %o_b = infer.weight "model.layers.0.self_attn.o_proj.bias" : tensor<64xf32>
  %o = infer.linear %a, %o_w, %o_b {parallel = #infer.parallel<row>} : tensor<?x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %h1 = infer.add %h, %o : tensor<?x64xf32>
  %up_w = infer.weight "model.layers.0.mlp.up_proj.weight" : tensor<64x64xf32>
  %up_b = infer.weight "model.layers.0.mlp.up_proj.bias" : tensor<64xf32>
  %up = infer.linear %h1, %up_w, %up_b {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %act = infer.silu %up : tensor<?x64xf32>
  %down_w = infer.weight "model.layers.0.mlp.down_proj.weight" : tensor<64x64xf32>
  %down_b = infer.weight "model.layers.0.mlp.down_proj.bias" : tensor<64xf32>
  %down = infer.linear %act, %down_w, %down_b {parallel = #infer.parallel<row>} : tensor<?x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %h2 = infer.add %h1, %down : tensor<?x64xf32>
  return %h2 : tensor<?x64xf32>
}
}

// -----

// Phi-3 stores q/k/v in one qkv_proj and gate/up in one gate_up_proj: the
// importer's parallel parts let each part be split on its own, the rank's
// slices concatenated at load, and the split takes the rank's widths. The
// same checkpoint tensor, one #infer.shard per part (offset, size).

// TP2-LABEL: func.func @fused_parts(
// TP2:       %[[Q:.+]] = infer.weight "model.layers.0.self_attn.qkv_proj.weight" {shard = #infer.shard<dim = 0, shards = 2, size = 64>} : tensor<32x64xf32>
// TP2-NEXT:  %[[K:.+]] = infer.weight "model.layers.0.self_attn.qkv_proj.weight" {shard = #infer.shard<dim = 0, shards = 2, offset = 64, size = 16>} : tensor<8x64xf32>
// TP2-NEXT:  %[[V:.+]] = infer.weight "model.layers.0.self_attn.qkv_proj.weight" {shard = #infer.shard<dim = 0, shards = 2, offset = 80, size = 16>} : tensor<8x64xf32>
// TP2-NEXT:  %[[QKV_W:.+]] = infer.concat_weights %[[Q]], %[[K]], %[[V]] : tensor<32x64xf32>, tensor<8x64xf32>, tensor<8x64xf32> -> tensor<48x64xf32>
// TP2-NEXT:  %[[QKV:.+]] = infer.linear %{{.+}}, %[[QKV_W]] : tensor<?x64xf32>, tensor<48x64xf32> -> tensor<?x48xf32>
// TP2-NEXT:  infer.split %[[QKV]] : tensor<?x48xf32> -> tensor<?x32xf32>, tensor<?x8xf32>, tensor<?x8xf32>
// TP2:       infer.attention {{.*}}num_heads = 4 : i64, num_kv_heads = 1 : i64
// TP2:       infer.weight "model.layers.0.mlp.gate_up_proj.weight" {shard = #infer.shard<dim = 0, shards = 2, size = 128>} : tensor<64x64xf32>
// TP2-NEXT:  infer.weight "model.layers.0.mlp.gate_up_proj.weight" {shard = #infer.shard<dim = 0, shards = 2, offset = 128, size = 128>} : tensor<64x64xf32>
// TP2-NEXT:  infer.concat_weights {{.*}} -> tensor<128x64xf32>
// TP2-NEXT:  %[[GU:.+]] = infer.linear {{.*}} -> tensor<?x128xf32>
// TP2-NEXT:  infer.split %[[GU]] : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x64xf32>
// TP2:       infer.weight "model.layers.0.mlp.down_proj.weight" {shard = #infer.shard<dim = 1, shards = 2>} : tensor<64x64xf32>

// tp=4: two key/value heads for four ranks, each held by two of them.
// TP4-LABEL: func.func @fused_parts(
// TP4:       infer.weight "model.layers.0.self_attn.qkv_proj.weight" {shard = #infer.shard<dim = 0, shards = 4, size = 64>} : tensor<16x64xf32>
// TP4-NEXT:  infer.weight "model.layers.0.self_attn.qkv_proj.weight" {shard = #infer.shard<dim = 0, shards = 2, replication = 2, offset = 64, size = 16>} : tensor<8x64xf32>
// TP4-NEXT:  infer.weight "model.layers.0.self_attn.qkv_proj.weight" {shard = #infer.shard<dim = 0, shards = 2, replication = 2, offset = 80, size = 16>} : tensor<8x64xf32>
// TP4:       infer.split {{.*}} : tensor<?x32xf32> -> tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>
// TP4:       infer.attention {{.*}}num_heads = 2 : i64, num_kv_heads = 1 : i64

// TP1-LABEL: func.func @fused_parts(
// TP1:       infer.linear %{{[^ ]+}}, %{{[^ ]+}} : tensor<?x64xf32>, tensor<96x64xf32> -> tensor<?x96xf32>
// TP1-NEXT:  infer.split {{.*}} : tensor<?x96xf32> -> tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>
// TP1-NOT:   shard
// TP1-NOT:   #infer.parallel
module {
func.func @fused_parts(%h: tensor<?x64xf32>, %positions: tensor<?xi32>, %qsl: tensor<?xi32>) -> tensor<?x64xf32> {
  %qkv_w = infer.weight "model.layers.0.self_attn.qkv_proj.weight" : tensor<96x64xf32>
  %qkv = infer.linear %h, %qkv_w {parallel = #infer.parallel<column, parts = [64, 16, 16], kv_parts = [false, true, true]>} : tensor<?x64xf32>, tensor<96x64xf32> -> tensor<?x96xf32>
  %q, %k, %v = infer.split %qkv : tensor<?x96xf32> -> tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>
  %qr = infer.rope %q, %positions {head_dim = 8 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %kr = infer.rope %k, %positions {head_dim = 8 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x16xf32>, tensor<?xi32> -> tensor<?x16xf32>
  %a = infer.attention %qr, %kr, %v, %qsl {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %o_w = infer.weight "model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
  %o = infer.linear %a, %o_w {parallel = #infer.parallel<row>} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %h1 = infer.add %h, %o : tensor<?x64xf32>
  %gu_w = infer.weight "model.layers.0.mlp.gate_up_proj.weight" : tensor<256x64xf32>
  %gu = infer.linear %h1, %gu_w {parallel = #infer.parallel<column, parts = [128, 128], kv_parts = [false, false]>} : tensor<?x64xf32>, tensor<256x64xf32> -> tensor<?x256xf32>
  %g, %u = infer.split %gu : tensor<?x256xf32> -> tensor<?x128xf32>, tensor<?x128xf32>
  %act = infer.silu %g : tensor<?x128xf32>
  %m = infer.mul %act, %u : tensor<?x128xf32>
  %down_w = infer.weight "model.layers.0.mlp.down_proj.weight" : tensor<64x128xf32>
  %down = infer.linear %m, %down_w {parallel = #infer.parallel<row>} : tensor<?x128xf32>, tensor<64x128xf32> -> tensor<?x64xf32>
  %h2 = infer.add %h1, %down : tensor<?x64xf32>
  return %h2 : tensor<?x64xf32>
}
}
