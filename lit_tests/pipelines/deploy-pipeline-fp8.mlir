// RUN: infer-opt %s --infer-deploy-pipeline="quant=fp8 kv-cache-dtype=fp8_e4m3" | FileCheck %s --check-prefix=FP8
// RUN: infer-opt %s --infer-deploy-pipeline="quant=fp8 quant-granularity=per-channel kv-cache-dtype=fp8_e5m2 tp=2" | FileCheck %s --check-prefix=TP2
// RUN: infer-opt %s --infer-deploy-pipeline="kv-cache-dtype=fp8_e5m2" | FileCheck %s --check-prefix=KVONLY
// RUN: infer-opt %s --infer-deploy-pipeline | FileCheck %s --check-prefix=AUTO
// RUN: not infer-opt %s --infer-deploy-pipeline="quant=int4" 2>&1 | FileCheck %s --check-prefix=BADQUANT
// RUN: not infer-opt %s --infer-deploy-pipeline="kv-cache-dtype=fp8" 2>&1 | FileCheck %s --check-prefix=BADKV

// infer-quantize-fp8 runs after paging (it retypes the paged cache) and
// before fusion (q/k/v merge into one GEMM over the fp8 weights, each part
// with its own scale). With tp=2 each rank quantizes its shard.

// FP8-LABEL: func.func @forward(
// FP8-SAME:    !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 8, element_type = f8E4M3FN> {infer.input = "kv_cache"}
// FP8:         %[[W:.+]] = infer.concat_weights {{.*}} : tensor<64x64xf8E4M3FN>, tensor<16x64xf8E4M3FN>, tensor<16x64xf8E4M3FN> -> tensor<96x64xf8E4M3FN>
// FP8:         infer.linear %{{.+}}, %[[W]] {{.*}}: tensor<?x64xf32>, tensor<96x64xf8E4M3FN> -> tensor<?x96xf32>
// FP8:         infer.rope_qkv_cache_write {{.*}} -> tensor<?x64x{{.+}}>, !infer.kv_cache<{{.*}}element_type = f8E4M3FN>
// FP8:         infer.paged_attention
// FP8:         infer.weight "model.layers.0.self_attn.o_proj.weight" {quant = #infer.fp8<granularity = per_tensor>} : tensor<64x64xf8E4M3FN>

// TP2-LABEL: func.func @forward(
// TP2-SAME:    element_type = f8E5M2> {infer.input = "kv_cache"}
// TP2:         infer.weight "model.layers.0.self_attn.k_proj.weight" {quant = #infer.fp8<granularity = per_channel>, shard = #infer.shard<dim = 0, shards = 2>} : tensor<8x64xf8E4M3FN>
// TP2:         infer.weight "model.layers.0.self_attn.o_proj.weight" {quant = #infer.fp8<granularity = per_channel>, shard = #infer.shard<dim = 1, shards = 2>} : tensor<64x32xf8E4M3FN>
// TP2-NEXT:    infer.linear
// TP2-NEXT:    infer.all_reduce

// KVONLY-LABEL: func.func @forward(
// KVONLY-SAME:    element_type = f8E5M2> {infer.input = "kv_cache"}
// KVONLY-NOT:     f8E4M3FN

// AUTO-LABEL: func.func @forward(
// AUTO-SAME:    element_type = f32> {infer.input = "kv_cache"}
// AUTO-NOT:     f8E

// BADQUANT: for the --quant option: Cannot find option named 'int4'!
// BADKV: for the --kv-cache-dtype option: Cannot find option named 'fp8'!
module attributes {infer.model = {architecture = "LlamaForCausalLM"}} {
func.func @forward(%x: tensor<?x64xf32>, %pos: tensor<?xi32> {infer.input = "positions"},
                   %qsl: tensor<?xi32> {infer.input = "query_start_loc"},
                   %lens: tensor<?xi32> {infer.input = "context_lens"},
                   %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                   %slots: tensor<?xi64> {infer.input = "slot_mapping"}) -> tensor<?x64xf32> {
  %q_w = infer.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xbf16>
  %q = infer.linear %x, %q_w {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<64x64xbf16> -> tensor<?x64xf32>
  %k_w = infer.weight "model.layers.0.self_attn.k_proj.weight" : tensor<16x64xbf16>
  %k = infer.linear %x, %k_w {parallel = #infer.parallel<kv_column>} : tensor<?x64xf32>, tensor<16x64xbf16> -> tensor<?x16xf32>
  %v_w = infer.weight "model.layers.0.self_attn.v_proj.weight" : tensor<16x64xbf16>
  %v = infer.linear %x, %v_w {parallel = #infer.parallel<kv_column>} : tensor<?x64xf32>, tensor<16x64xbf16> -> tensor<?x16xf32>
  %qr = infer.rope %q, %pos {head_dim = 8 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %kr = infer.rope %k, %pos {head_dim = 8 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x16xf32>, tensor<?xi32> -> tensor<?x16xf32>
  %a = infer.attention %qr, %kr, %v, %qsl {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %o_w = infer.weight "model.layers.0.self_attn.o_proj.weight" : tensor<64x64xbf16>
  %o = infer.linear %a, %o_w {parallel = #infer.parallel<row>} : tensor<?x64xf32>, tensor<64x64xbf16> -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}
}
