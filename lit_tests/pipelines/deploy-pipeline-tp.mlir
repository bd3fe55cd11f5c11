// RUN: infer-opt %s --infer-deploy-pipeline="tp=2 block-size=16" | FileCheck %s --check-prefix=TP2
// RUN: infer-opt %s --infer-deploy-pipeline | FileCheck %s --check-prefix=TP1

// Sharding runs before paging, so each rank's KV cache holds only its own
// key/value heads.

// TP2-LABEL: module attributes
// TP2-SAME:    infer.tp = 2 : i64
// TP2-LABEL: func.func @forward(
// TP2-SAME:    !infer.kv_cache<num_layers = 1, num_kv_heads = 1, block_size = 16, head_dim = 8, element_type = f32> {infer.input = "kv_cache"}
// TP2:       infer.weight "model.layers.0.self_attn.k_proj.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<8x64xf32>
// TP2:       infer.kv_cache_write {{.*}} : !infer.kv_cache<num_layers = 1, num_kv_heads = 1
// TP2-NEXT:  infer.paged_attention {{.*}}num_heads = 4 : i64, num_kv_heads = 1 : i64
// TP2:       infer.linear
// TP2-NEXT:  infer.all_reduce

// TP1-LABEL: module attributes
// TP1-NOT:   infer.tp
// TP1:       !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 8, element_type = f32>
// TP1-NOT:   infer.all_reduce
module attributes {infer.model = {architecture = "LlamaForCausalLM"}} {
func.func @forward(%x: tensor<?x64xf32>, %qsl: tensor<?xi32> {infer.input = "query_start_loc"},
                   %lens: tensor<?xi32> {infer.input = "context_lens"},
                   %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                   %slots: tensor<?xi64> {infer.input = "slot_mapping"}) -> tensor<?x64xf32> {
  %q_w = infer.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
  %q = infer.linear %x, %q_w {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %k_w = infer.weight "model.layers.0.self_attn.k_proj.weight" : tensor<16x64xf32>
  %k = infer.linear %x, %k_w {parallel = #infer.parallel<kv_column>} : tensor<?x64xf32>, tensor<16x64xf32> -> tensor<?x16xf32>
  %v_w = infer.weight "model.layers.0.self_attn.v_proj.weight" : tensor<16x64xf32>
  %v = infer.linear %x, %v_w {parallel = #infer.parallel<kv_column>} : tensor<?x64xf32>, tensor<16x64xf32> -> tensor<?x16xf32>
  %a = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %o_w = infer.weight "model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
  %o = infer.linear %a, %o_w {parallel = #infer.parallel<row>} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}
}
