// RUN: infer-opt %s --infer-deploy-pipeline="dtype=bf16" | FileCheck %s --check-prefix=BF16
// RUN: infer-opt %s --infer-deploy-pipeline | FileCheck %s --check-prefix=F32
// RUN: infer-opt %s --infer-deploy-pipeline="dtype=bf16 quant=fp8 kv-cache-dtype=fp8_e5m2" | FileCheck %s --check-prefix=FP8
// RUN: infer-opt %s --infer-deploy-pipeline="dtype=f16 window=32 sink-tokens=4" | FileCheck %s --check-prefix=F16
// RUN: not infer-opt %s --infer-deploy-pipeline="dtype=fp8" 2>&1 | FileCheck %s --check-prefix=BADDTYPE

// infer-assign-precision runs after paging and streaming (it types the paged
// cache) and before quantization (fp8 replaces the chosen weight type) and
// fusion (regions keep their inputs' type and compute in f32). The memory
// plan then counts each activation's element size. The default, dtype=f32,
// is the CPU reference's: bf16 checkpoint weights become f32 params.

// BF16-LABEL: func.func @forward(
// BF16-SAME:    !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 8, element_type = bf16> {infer.input = "kv_cache"}
// BF16-SAME:    -> tensor<?x128xf32>
// BF16-SAME:    attributes {infer.workspace_bytes_per_row = {{[0-9]+}} : i64}
// BF16:         infer.embedding {{.*}} : tensor<128x64xbf16>, tensor<?xi32> -> tensor<?x64xbf16>
// BF16:         infer.concat_weights {{.*}} -> tensor<96x64xbf16>
// BF16:         infer.linear {{.*}} : tensor<?x64xbf16>, tensor<96x64xbf16> -> tensor<?x96xbf16>
// BF16:         infer.rope_qkv_cache_write {{.*}} -> tensor<?x64x{{.+}}>, !infer.kv_cache<{{.*}}element_type = bf16>
// BF16:         infer.paged_attention {{.*}} -> tensor<?x64xbf16>
// BF16:         infer.fused ins({{.*}} : tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>) {infer.workspace_offsets = array<i64: {{[0-9]+}}>} -> tensor<?x64xbf16> {
// BF16-NEXT:    ^bb0(%{{.+}}: tensor<?x64xf32>, %{{.+}}: tensor<?x64xf32>, %{{.+}}: tensor<?x64xf32>):
// BF16:         infer.logits {{.*}} : tensor<?x64xbf16>, tensor<128x64xbf16> -> tensor<?x128xf32>
// BF16-NOT:     infer.cast

// F32-LABEL: func.func @forward(
// F32-SAME:    element_type = f32> {infer.input = "kv_cache"}
// F32:         infer.embedding {{.*}} : tensor<128x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
// F32-NOT:     bf16

// FP8-LABEL: func.func @forward(
// FP8-SAME:    element_type = f8E5M2> {infer.input = "kv_cache"}
// FP8:         infer.embedding {{.*}} : tensor<128x64xbf16>, tensor<?xi32> -> tensor<?x64xbf16>
// FP8:         infer.linear {{.*}} : tensor<?x64xbf16>, tensor<96x64xf8E4M3FN> -> tensor<?x96xbf16>
// FP8:         infer.rope_qkv_cache_write {{.*}}, tensor<?x64xbf16>, tensor<?x16xbf16>, tensor<?x16xbf16>, {{.*}} -> tensor<?x64xbf16>, !infer.kv_cache<{{.*}}element_type = f8E5M2>
// FP8:         infer.logits {{.*}} : tensor<?x64xbf16>, tensor<128x64xf8E4M3FN> -> tensor<?x128xf32>

// F16-LABEL: module attributes {{.*}}infer.streaming = #infer.streaming<sink_tokens = 4, window = 32>
// F16:         element_type = f16> {infer.input = "kv_cache"}
// F16:         infer.kv_cache_write {{.*}} : !infer.kv_cache<{{.*}}element_type = f16>, tensor<?x16xf16>, tensor<?x16xf16>, tensor<?xi64>
// F16:         infer.paged_attention {{.*}}key_rope = {{.*}} : tensor<?x64xf16>,

// BADDTYPE: for the --dtype option: Cannot find option named 'fp8'!
module attributes {infer.model = {architecture = "LlamaForCausalLM"}} {
func.func @forward(%ids: tensor<?xi32> {infer.input = "token_ids"},
                   %pos: tensor<?xi32> {infer.input = "positions"},
                   %qsl: tensor<?xi32> {infer.input = "query_start_loc"},
                   %lens: tensor<?xi32> {infer.input = "context_lens"},
                   %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                   %slots: tensor<?xi64> {infer.input = "slot_mapping"}) -> tensor<?x128xf32> {
  %t = infer.weight "model.embed_tokens.weight" : tensor<128x64xbf16>
  %x = infer.embedding %t[%ids] : tensor<128x64xbf16>, tensor<?xi32> -> tensor<?x64xf32>
  %q_w = infer.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xbf16>
  %q = infer.linear %x, %q_w : tensor<?x64xf32>, tensor<64x64xbf16> -> tensor<?x64xf32>
  %k_w = infer.weight "model.layers.0.self_attn.k_proj.weight" : tensor<16x64xbf16>
  %k = infer.linear %x, %k_w : tensor<?x64xf32>, tensor<16x64xbf16> -> tensor<?x16xf32>
  %v_w = infer.weight "model.layers.0.self_attn.v_proj.weight" : tensor<16x64xbf16>
  %v = infer.linear %x, %v_w : tensor<?x64xf32>, tensor<16x64xbf16> -> tensor<?x16xf32>
  %qr = infer.rope %q, %pos {head_dim = 8 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %kr = infer.rope %k, %pos {head_dim = 8 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x16xf32>, tensor<?xi32> -> tensor<?x16xf32>
  %a = infer.attention %qr, %kr, %v, %qsl {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %g = infer.gelu %a {approximate = "tanh"} : tensor<?x64xf32>
  %m = infer.mul %g, %q : tensor<?x64xf32>
  %s = infer.add %m, %x : tensor<?x64xf32>
  %l = infer.logits %s, %t : tensor<?x64xf32>, tensor<128x64xbf16> -> tensor<?x128xf32>
  return %l : tensor<?x128xf32>
}
}
