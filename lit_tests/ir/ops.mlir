// RUN: infer-opt %s | infer-opt | FileCheck %s
// RUN: infer-opt %s --mlir-print-op-generic | infer-opt | FileCheck %s

// Every op, type and attribute of the infer dialect survives printing and
// parsing, in custom and generic form.

// CHECK: module attributes {infer.model = {architecture = "LlamaForCausalLM"
// CHECK-SAME: eos_token_ids = [2]
// CHECK-SAME: infer.tp = 2 : i64
module attributes {infer.model = {architecture = "LlamaForCausalLM",
                                  vocab_size = 4096 : i64,
                                  hidden_size = 384 : i64,
                                  num_layers = 1 : i64, num_heads = 6 : i64,
                                  num_kv_heads = 2 : i64, head_dim = 64 : i64,
                                  max_position_embeddings = 2048 : i64,
                                  bos_token_id = 1 : i64,
                                  eos_token_ids = [2]},
                   infer.tp = 2 : i64} {

// CHECK-LABEL: func.func @contract
// CHECK-SAME: {infer.input = "token_ids"}
// CHECK-SAME: {infer.input = "positions"}
// CHECK-SAME: {infer.input = "query_start_loc"}
// CHECK-SAME: {infer.input = "context_lens"}
// CHECK-SAME: {infer.input = "block_tables"}
// CHECK-SAME: {infer.input = "slot_mapping"}
// CHECK-SAME: {infer.input = "logits_indices"}
// CHECK-SAME: !infer.kv_cache<num_layers = 8, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32> {infer.input = "kv_cache"}
func.func @contract(%token_ids: tensor<?xi32> {infer.input = "token_ids"},
                    %positions: tensor<?xi32> {infer.input = "positions"},
                    %query_start_loc: tensor<?xi32> {infer.input = "query_start_loc"},
                    %context_lens: tensor<?xi32> {infer.input = "context_lens"},
                    %block_tables: tensor<?x?xi32> {infer.input = "block_tables"},
                    %slot_mapping: tensor<?xi64> {infer.input = "slot_mapping"},
                    %logits_indices: tensor<?xi32> {infer.input = "logits_indices"},
                    %kv_cache: !infer.kv_cache<num_layers = 8, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32> {infer.input = "kv_cache"}) {
  return
}

// CHECK-LABEL: func.func @weight
func.func @weight() -> tensor<4096x384xbf16> {
  // CHECK: %[[W:.+]] = infer.weight "model.embed_tokens.weight" : tensor<4096x384xbf16>
  %w = infer.weight "model.embed_tokens.weight" : tensor<4096x384xbf16>
  // CHECK: return %[[W]]
  return %w : tensor<4096x384xbf16>
}

// CHECK-LABEL: func.func @weight_shard
func.func @weight_shard() -> tensor<16x128xf32> {
  // CHECK: infer.weight "model.layers.0.self_attn.q_proj.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<64x128xf32>
  %q = infer.weight "model.layers.0.self_attn.q_proj.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<64x128xf32>
  // CHECK: infer.weight "model.layers.0.self_attn.k_proj.weight" {shard = #infer.shard<dim = 0, shards = 2, replication = 2>} : tensor<16x128xf32>
  %k = infer.weight "model.layers.0.self_attn.k_proj.weight" {shard = #infer.shard<dim = 0, shards = 2, replication = 2>} : tensor<16x128xf32>
  return %k : tensor<16x128xf32>
}

// CHECK-LABEL: func.func @embedding
// CHECK-SAME: (%[[TABLE:.+]]: tensor<4096x384xbf16>, %[[IDS:.+]]: tensor<?xi32>)
func.func @embedding(%table: tensor<4096x384xbf16>, %ids: tensor<?xi32>) -> tensor<?x384xf32> {
  // CHECK: infer.embedding %[[TABLE]][%[[IDS]]] : tensor<4096x384xbf16>, tensor<?xi32> -> tensor<?x384xf32>
  %h = infer.embedding %table[%ids] : tensor<4096x384xbf16>, tensor<?xi32> -> tensor<?x384xf32>
  return %h : tensor<?x384xf32>
}

// CHECK-LABEL: func.func @embedding_vocab_shards
func.func @embedding_vocab_shards(%table: tensor<2048x384xbf16>, %ids: tensor<?xi32>) -> tensor<?x384xf32> {
  // CHECK: infer.embedding %{{.+}}[%{{.+}}] {vocab_shards = 2 : i64} : tensor<2048x384xbf16>, tensor<?xi32> -> tensor<?x384xf32>
  %h = infer.embedding %table[%ids] {vocab_shards = 2 : i64} : tensor<2048x384xbf16>, tensor<?xi32> -> tensor<?x384xf32>
  return %h : tensor<?x384xf32>
}

// CHECK-LABEL: func.func @gather_rows
// CHECK-SAME: (%[[X:.+]]: tensor<?x384xf32>, %[[IDX:.+]]: tensor<?xi32>)
func.func @gather_rows(%x: tensor<?x384xf32>, %logits_indices: tensor<?xi32>) -> tensor<?x384xf32> {
  // CHECK: infer.gather_rows %[[X]][%[[IDX]]] : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  %s = infer.gather_rows %x[%logits_indices] : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %s : tensor<?x384xf32>
}

// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.+]]: tensor<?x384xf32>, %[[W:.+]]: tensor<128x384xbf16>, %[[B:.+]]: tensor<128xbf16>)
func.func @linear(%x: tensor<?x384xf32>, %w: tensor<128x384xbf16>, %b: tensor<128xbf16>) -> (tensor<?x128xf32>, tensor<?x128xf32>) {
  // CHECK: infer.linear %[[X]], %[[W]] : tensor<?x384xf32>, tensor<128x384xbf16> -> tensor<?x128xf32>
  %y = infer.linear %x, %w : tensor<?x384xf32>, tensor<128x384xbf16> -> tensor<?x128xf32>
  // CHECK: infer.linear %[[X]], %[[W]], %[[B]] : tensor<?x384xf32>, tensor<128x384xbf16>, tensor<128xbf16> -> tensor<?x128xf32>
  %z = infer.linear %x, %w, %b : tensor<?x384xf32>, tensor<128x384xbf16>, tensor<128xbf16> -> tensor<?x128xf32>
  return %y, %z : tensor<?x128xf32>, tensor<?x128xf32>
}

// CHECK-LABEL: func.func @linear_residual
// CHECK-SAME: (%[[X:.+]]: tensor<?x384xbf16>, %[[W:.+]]: tensor<128x384xbf16>, %[[B:.+]]: tensor<128xbf16>, %[[R:.+]]: tensor<?x128xbf16>)
func.func @linear_residual(%x: tensor<?x384xbf16>, %w: tensor<128x384xbf16>, %b: tensor<128xbf16>, %r: tensor<?x128xbf16>) -> (tensor<?x128xbf16>, tensor<?x128xbf16>) {
  // CHECK: %[[Y:.+]] = infer.linear %[[X]], %[[W]] residual(%[[R]]) : tensor<?x384xbf16>, tensor<128x384xbf16> -> tensor<?x128xbf16>
  %y = infer.linear %x, %w residual(%r) : tensor<?x384xbf16>, tensor<128x384xbf16> -> tensor<?x128xbf16>
  // CHECK: infer.linear %[[X]], %[[W]], %[[B]] residual(%[[Y]]) : tensor<?x384xbf16>, tensor<128x384xbf16>, tensor<128xbf16> -> tensor<?x128xbf16>
  %z = infer.linear %x, %w, %b residual(%y) : tensor<?x384xbf16>, tensor<128x384xbf16>, tensor<128xbf16> -> tensor<?x128xbf16>
  return %y, %z : tensor<?x128xbf16>, tensor<?x128xbf16>
}

// CHECK-LABEL: func.func @logits
// CHECK-SAME: (%[[X:.+]]: tensor<?x384xf32>, %[[W:.+]]: tensor<4096x384xbf16>)
func.func @logits(%x: tensor<?x384xf32>, %w: tensor<4096x384xbf16>) -> tensor<?x4096xf32> {
  // CHECK: infer.logits %[[X]], %[[W]] : tensor<?x384xf32>, tensor<4096x384xbf16> -> tensor<?x4096xf32>
  %l = infer.logits %x, %w : tensor<?x384xf32>, tensor<4096x384xbf16> -> tensor<?x4096xf32>
  return %l : tensor<?x4096xf32>
}

// CHECK-LABEL: func.func @rms_norm
// CHECK-SAME: (%[[X:.+]]: tensor<?x384xf32>, %[[W:.+]]: tensor<384xbf16>)
func.func @rms_norm(%x: tensor<?x384xf32>, %w: tensor<384xbf16>) -> tensor<?x384xf32> {
  // CHECK: infer.rms_norm %[[X]], %[[W]] {epsilon = 1.000000e-05 : f64} : tensor<?x384xf32>, tensor<384xbf16> -> tensor<?x384xf32>
  %y = infer.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : tensor<?x384xf32>, tensor<384xbf16> -> tensor<?x384xf32>
  return %y : tensor<?x384xf32>
}

// CHECK-LABEL: func.func @rope
// CHECK-SAME: (%[[X:.+]]: tensor<?x384xf32>, %[[POS:.+]]: tensor<?xi32>)
func.func @rope(%x: tensor<?x384xf32>, %positions: tensor<?xi32>) -> (tensor<?x384xf32>, tensor<?x384xf32>, tensor<?x384xf32>) {
  // CHECK: infer.rope %[[X]], %[[POS]]
  // CHECK-SAME: head_dim = 64 : i64
  // CHECK-SAME: rope = #infer.rope<theta = 1.000000e+04, kind = default>
  // CHECK-SAME: rotary_dim = 64 : i64
  // CHECK-SAME: : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  %a = infer.rope %x, %positions {head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  // CHECK: infer.rope %[[X]], %[[POS]]
  // CHECK-SAME: rope = #infer.rope<theta = 1.000000e+04, kind = linear, factor = 2.000000e+00>
  // CHECK-SAME: rotary_dim = 32 : i64
  %b = infer.rope %x, %positions {head_dim = 64 : i64, rotary_dim = 32 : i64, rope = #infer.rope<theta = 1.0e+04, kind = linear, factor = 2.0>} : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  // Parameters holding their defaults (low_freq_factor = 1.0,
  // high_freq_factor = 4.0) are not printed.
  // CHECK: infer.rope %[[X]], %[[POS]]
  // CHECK-SAME: rope = #infer.rope<theta = 5.000000e+05, kind = llama3, factor = 8.000000e+00, original_max_position_embeddings = 8192>
  %c = infer.rope %x, %positions {head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 5.0e+05, kind = llama3, factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 8192>} : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %a, %b, %c : tensor<?x384xf32>, tensor<?x384xf32>, tensor<?x384xf32>
}

// CHECK-LABEL: func.func @elementwise
// CHECK-SAME: (%[[A:.+]]: tensor<?x1024xf32>, %[[B:.+]]: tensor<?x1024xf32>)
func.func @elementwise(%a: tensor<?x1024xf32>, %b: tensor<?x1024xf32>) -> tensor<?x1024xf32> {
  // CHECK: %[[ADD:.+]] = infer.add %[[A]], %[[B]] : tensor<?x1024xf32>
  %0 = infer.add %a, %b : tensor<?x1024xf32>
  // CHECK: %[[GELU_TANH:.+]] = infer.gelu %[[ADD]] {approximate = "tanh"} : tensor<?x1024xf32>
  %1 = infer.gelu %0 {approximate = "tanh"} : tensor<?x1024xf32>
  // CHECK: %[[GELU:.+]] = infer.gelu %[[GELU_TANH]] : tensor<?x1024xf32>
  %2 = infer.gelu %1 : tensor<?x1024xf32>
  // CHECK: %[[MUL:.+]] = infer.mul %[[GELU]], %[[B]] : tensor<?x1024xf32>
  %3 = infer.mul %2, %b : tensor<?x1024xf32>
  // CHECK: infer.silu %[[MUL]] : tensor<?x1024xf32>
  %4 = infer.silu %3 : tensor<?x1024xf32>
  return %4 : tensor<?x1024xf32>
}

// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<?x384xf32>, %[[K:[^:]+]]: tensor<?x128xf32>, %[[V:[^:]+]]: tensor<?x128xf32>, %[[QSL:[^:]+]]: tensor<?xi32>)
func.func @attention(%q: tensor<?x384xf32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>, %query_start_loc: tensor<?xi32>) -> tensor<?x384xf32> {
  // CHECK: infer.attention %[[Q]], %[[K]], %[[V]], %[[QSL]]
  // CHECK-SAME: {head_dim = 64 : i64, layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, scale = 1.250000e-01 : f64, sliding_window = 4096 : i64}
  // CHECK-SAME: : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  %o = infer.attention %q, %k, %v, %query_start_loc {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 4096 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %o : tensor<?x384xf32>
}

// CHECK-LABEL: func.func @paged_attention
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<?x384xbf16>, %[[K:[^:]+]]: tensor<?x128xbf16>, %[[V:[^:]+]]: tensor<?x128xbf16>, %[[QSL:[^:]+]]: tensor<?xi32>, %[[LENS:[^:]+]]: tensor<?xi32>, %[[TABLES:[^:]+]]: tensor<?x?xi32>, %[[SLOTS:[^:]+]]: tensor<?xi64>, %[[CACHE:[^:]+]]: !infer.kv_cache
func.func @paged_attention(%q: tensor<?x384xbf16>, %k: tensor<?x128xbf16>, %v: tensor<?x128xbf16>,
                           %query_start_loc: tensor<?xi32>, %context_lens: tensor<?xi32>,
                           %block_tables: tensor<?x?xi32>, %slot_mapping: tensor<?xi64>,
                           %c0: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = bf16>) -> tensor<?x384xbf16> {
  // CHECK: %[[C1:.+]] = infer.kv_cache_write %[[CACHE]], %[[K]], %[[V]], %[[SLOTS]] {layer = 1 : i64}
  // CHECK-SAME: : !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = bf16>, tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<?xi64>
  // CHECK-SAME: -> !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = bf16>
  %c1 = infer.kv_cache_write %c0, %k, %v, %slot_mapping {layer = 1 : i64} : !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = bf16>, tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<?xi64> -> !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = bf16>
  // CHECK: infer.paged_attention %[[Q]], %[[C1]], %[[TABLES]], %[[LENS]], %[[QSL]]
  // CHECK-SAME: {head_dim = 64 : i64, layer = 1 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64}
  // CHECK-SAME: : tensor<?x384xbf16>, !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = bf16>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xbf16>
  %o = infer.paged_attention %q, %c1, %block_tables, %context_lens, %query_start_loc {layer = 1 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xbf16>, !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = bf16>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xbf16>
  return %o : tensor<?x384xbf16>
}

// CHECK-LABEL: func.func @all_gather
// CHECK-SAME: (%[[X:.+]]: tensor<?x2048xf32>)
func.func @all_gather(%x: tensor<?x2048xf32>) -> tensor<?x4096xf32> {
  // CHECK: infer.all_gather %[[X]] {dim = 1 : i64} : tensor<?x2048xf32> -> tensor<?x4096xf32>
  %y = infer.all_gather %x {dim = 1 : i64} : tensor<?x2048xf32> -> tensor<?x4096xf32>
  return %y : tensor<?x4096xf32>
}

// CHECK-LABEL: func.func @all_reduce
// CHECK-SAME: (%[[X:.+]]: tensor<?x384xf32>)
func.func @all_reduce(%x: tensor<?x384xf32>) -> tensor<?x384xf32> {
  // CHECK: infer.all_reduce %[[X]] : tensor<?x384xf32>
  %y = infer.all_reduce %x : tensor<?x384xf32>
  return %y : tensor<?x384xf32>
}

// CHECK-LABEL: func.func @bias_add
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x384xf32>, %[[B:[^:]+]]: tensor<384xbf16>)
func.func @bias_add(%x: tensor<?x384xf32>, %b: tensor<384xbf16>) -> tensor<?x384xf32> {
  // CHECK: infer.bias_add %[[X]], %[[B]] : tensor<?x384xf32>, tensor<384xbf16>
  %y = infer.bias_add %x, %b : tensor<?x384xf32>, tensor<384xbf16>
  return %y : tensor<?x384xf32>
}

// CHECK-LABEL: func.func @fused_ops
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x128xf32>, %[[R:[^:]+]]: tensor<?x128xf32>, %[[POS:[^:]+]]: tensor<?xi32>, %[[SLOTS:[^:]+]]: tensor<?xi64>, %[[C0:[^:]+]]: !infer.kv_cache
func.func @fused_ops(%x: tensor<?x128xf32>, %r: tensor<?x128xf32>, %pos: tensor<?xi32>, %slots: tensor<?xi64>,
                     %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>)
    -> (tensor<?x128xf32>, tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %wq = infer.weight "q.weight" : tensor<64x128xbf16>
  %wk = infer.weight "k.weight" : tensor<32x128xbf16>
  %wv = infer.weight "v.weight" : tensor<32x128xbf16>
  // CHECK: %[[W:.+]] = infer.concat_weights %{{.+}}, %{{.+}}, %{{.+}} : tensor<64x128xbf16>, tensor<32x128xbf16>, tensor<32x128xbf16> -> tensor<128x128xbf16>
  %w = infer.concat_weights %wq, %wk, %wv : tensor<64x128xbf16>, tensor<32x128xbf16>, tensor<32x128xbf16> -> tensor<128x128xbf16>
  %qkv = infer.linear %x, %w : tensor<?x128xf32>, tensor<128x128xbf16> -> tensor<?x128xf32>
  // CHECK: %[[QKV:.+]]:3 = infer.split %{{.+}} : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  // CHECK: infer.rope_kv_cache_write %[[C0]], %[[QKV]]#1, %[[QKV]]#2, %[[SLOTS]], %[[POS]] {head_dim = 16 : i64, layer = 0 : i64, rope = #infer.rope<theta = 1.000000e+04, kind = default>, rotary_dim = 16 : i64}
  %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %n = infer.weight "norm.weight" : tensor<128xbf16>
  // CHECK: %[[SUM:.+]], %[[Y:.+]] = infer.add_rms_norm %[[X]], %[[R]], %{{.+}} {epsilon = 1.000000e-05 : f64} : tensor<?x128xf32>, tensor<?x128xf32>, tensor<128xbf16> -> tensor<?x128xf32>, tensor<?x128xf32>
  %sum, %y = infer.add_rms_norm %x, %r, %n {epsilon = 1.0e-05 : f64} : tensor<?x128xf32>, tensor<?x128xf32>, tensor<128xbf16> -> tensor<?x128xf32>, tensor<?x128xf32>
  // CHECK: infer.silu_mul %[[SUM]], %[[Y]] : tensor<?x128xf32>
  %g = infer.silu_mul %sum, %y : tensor<?x128xf32>
  // CHECK: infer.linear_swiglu %[[X]], %[[W]] : tensor<?x128xf32>, tensor<128x128xbf16> -> tensor<?x64xf32>
  %sw = infer.linear_swiglu %x, %w : tensor<?x128xf32>, tensor<128x128xbf16> -> tensor<?x64xf32>
  // CHECK: infer.fused ins(%{{.+}}, %[[QKV]]#0 : tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32> {
  // CHECK-NEXT: ^bb0(%[[A:[^:]+]]: tensor<?x64xf32>, %[[B:[^:]+]]: tensor<?x64xf32>):
  // CHECK-NEXT: %[[M:.+]] = infer.mul %[[A]], %[[B]] : tensor<?x64xf32>
  // CHECK-NEXT: %[[S:.+]] = infer.silu %[[M]] : tensor<?x64xf32>
  // CHECK-NEXT: infer.yield %[[S]] : tensor<?x64xf32>
  %f = infer.fused ins(%q, %q : tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32> {
  ^bb0(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>):
    %m = infer.mul %a, %b : tensor<?x64xf32>
    %s = infer.silu %m : tensor<?x64xf32>
    infer.yield %s : tensor<?x64xf32>
  }
  return %g, %f, %c1 : tensor<?x128xf32>, tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// Queries and keys rotated by one rope, keys and values into the cache;
// a dynamic rope's query_start_loc.
// CHECK-LABEL: func.func @rope_qkv_cache_write
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<?x64xf32>, %[[K:[^:]+]]: tensor<?x32xf32>, %[[V:[^:]+]]: tensor<?x32xf32>, %[[POS:[^:]+]]: tensor<?xi32>, %[[QSL:[^:]+]]: tensor<?xi32>, %[[SLOTS:[^:]+]]: tensor<?xi64>, %[[C0:[^:]+]]: !infer.kv_cache
func.func @rope_qkv_cache_write(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %pos: tensor<?xi32>, %qsl: tensor<?xi32>, %slots: tensor<?xi64>,
                                %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>)
    -> (tensor<?x64xf32>, tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  // CHECK: %[[QR:.+]], %[[C1:.+]] = infer.rope_qkv_cache_write %[[C0]], %[[Q]], %[[K]], %[[V]], %[[SLOTS]], %[[POS]] {head_dim = 16 : i64, layer = 0 : i64, rope = #infer.rope<theta = 1.000000e+04, kind = default>, rotary_dim = 8 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %qr, %c1 = infer.rope_qkv_cache_write %c0, %q, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  // CHECK: %[[QD:.+]], %[[C2:.+]] = infer.rope_qkv_cache_write %[[C1]], %[[Q]], %[[K]], %[[V]], %[[SLOTS]], %[[POS]], %[[QSL]] {{.*}}kind = dynamic{{.*}} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %qd, %c2 = infer.rope_qkv_cache_write %c1, %q, %k, %v, %slots, %pos, %qsl {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 16>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  // CHECK: return %[[QR]], %[[QD]], %[[C2]]
  return %qr, %qd, %c2 : tensor<?x64xf32>, tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// FP8 projection weights (infer-quantize-fp8) and fp8 KV caches.
// CHECK-LABEL: func.func @fp8
func.func @fp8(%x: tensor<?x64xf32>,
               %c5: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f8E5M2>,
               %c4: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f8E4M3FN>)
    -> (tensor<?x96xf32>, tensor<?x100xf32>) {
  // CHECK: %[[Q:.+]] = infer.weight "q" {quant = #infer.fp8<granularity = per_tensor>} : tensor<64x64xf8E4M3FN>
  %q = infer.weight "q" {quant = #infer.fp8<granularity = per_tensor>} : tensor<64x64xf8E4M3FN>
  // CHECK: %[[K:.+]] = infer.weight "k" {quant = #infer.fp8<granularity = per_tensor>, shard = #infer.shard<dim = 0, shards = 2>} : tensor<32x64xf8E4M3FN>
  %k = infer.weight "k" {quant = #infer.fp8<granularity = per_tensor>, shard = #infer.shard<dim = 0, shards = 2>} : tensor<32x64xf8E4M3FN>
  // CHECK: %[[W:.+]] = infer.concat_weights %[[Q]], %[[K]] : tensor<64x64xf8E4M3FN>, tensor<32x64xf8E4M3FN> -> tensor<96x64xf8E4M3FN>
  %w = infer.concat_weights %q, %k : tensor<64x64xf8E4M3FN>, tensor<32x64xf8E4M3FN> -> tensor<96x64xf8E4M3FN>
  // CHECK: infer.linear %{{.+}}, %[[W]] : tensor<?x64xf32>, tensor<96x64xf8E4M3FN> -> tensor<?x96xf32>
  %y = infer.linear %x, %w : tensor<?x64xf32>, tensor<96x64xf8E4M3FN> -> tensor<?x96xf32>
  // CHECK: %[[H:.+]] = infer.weight "head" {quant = #infer.fp8<granularity = per_channel>} : tensor<100x64xf8E4M3FN>
  %h = infer.weight "head" {quant = #infer.fp8<granularity = per_channel>} : tensor<100x64xf8E4M3FN>
  // CHECK: infer.logits %{{.+}}, %[[H]] : tensor<?x64xf32>, tensor<100x64xf8E4M3FN> -> tensor<?x100xf32>
  %l = infer.logits %x, %h : tensor<?x64xf32>, tensor<100x64xf8E4M3FN> -> tensor<?x100xf32>
  return %y, %l : tensor<?x96xf32>, tensor<?x100xf32>
}

// bf16 activations (infer-assign-precision): explicit casts, a fused region
// computing in f32 between bf16 inputs and results, bf16 keys quantized into
// an fp8 cache, f32 logits of bf16 hidden states.
// CHECK-LABEL: func.func @bf16
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x64xf32>, %[[U:[^:]+]]: tensor<?x64xbf16>, %[[SLOTS:[^:]+]]: tensor<?xi64>, %[[C0:[^:]+]]: !infer.kv_cache
func.func @bf16(%x: tensor<?x64xf32>, %u: tensor<?x64xbf16>, %slots: tensor<?xi64>,
                %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 32, element_type = f8E5M2>)
    -> (tensor<?x64xf16>, tensor<?x100xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 32, element_type = f8E5M2>) {
  // CHECK: %[[XB:.+]] = infer.cast %[[X]] : tensor<?x64xf32> -> tensor<?x64xbf16>
  %xb = infer.cast %x : tensor<?x64xf32> -> tensor<?x64xbf16>
  // CHECK: %[[G:.+]] = infer.fused ins(%[[XB]], %[[U]] : tensor<?x64xbf16>, tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  // CHECK-NEXT: ^bb0(%[[A:[^:]+]]: tensor<?x64xf32>, %[[B:[^:]+]]: tensor<?x64xf32>):
  // CHECK-NEXT: %[[M:.+]] = infer.silu_mul %[[A]], %[[B]] : tensor<?x64xf32>
  // CHECK-NEXT: infer.yield %[[M]] : tensor<?x64xf32>
  %g = infer.fused ins(%xb, %u : tensor<?x64xbf16>, tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  ^bb0(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>):
    %m = infer.silu_mul %a, %b : tensor<?x64xf32>
    infer.yield %m : tensor<?x64xf32>
  }
  // CHECK: infer.kv_cache_write %[[C0]], %[[G]], %[[U]], %[[SLOTS]] {layer = 0 : i64}
  // CHECK-SAME: tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?xi64>
  %c1 = infer.kv_cache_write %c0, %g, %u, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 32, element_type = f8E5M2>, tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 32, element_type = f8E5M2>
  // CHECK: infer.cast %[[G]] : tensor<?x64xbf16> -> tensor<?x64xf16>
  %h = infer.cast %g : tensor<?x64xbf16> -> tensor<?x64xf16>
  %w = infer.weight "head" : tensor<100x64xbf16>
  // CHECK: infer.logits %[[G]], %{{.+}} : tensor<?x64xbf16>, tensor<100x64xbf16> -> tensor<?x100xf32>
  %l = infer.logits %g, %w : tensor<?x64xbf16>, tensor<100x64xbf16> -> tensor<?x100xf32>
  return %h, %l, %c1 : tensor<?x64xf16>, tensor<?x100xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 32, element_type = f8E5M2>
}

}
