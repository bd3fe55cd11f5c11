// RUN: infer-opt %s --split-input-file --infer-quantize-fp8 | FileCheck %s --check-prefix=DEFAULT
// RUN: infer-opt %s --split-input-file --infer-quantize-fp8="weights=e4m3 granularity=per-channel" | FileCheck %s --check-prefix=CHANNEL
// RUN: infer-opt %s --split-input-file --infer-quantize-fp8="weights=none" | FileCheck %s --check-prefix=NONE
// RUN: infer-opt %s --split-input-file --infer-page-kv-cache --infer-quantize-fp8="weights=none kv-cache=e5m2" | FileCheck %s --check-prefix=E5M2
// RUN: infer-opt %s --split-input-file --infer-page-kv-cache --infer-quantize-fp8="kv-cache=e4m3" | FileCheck %s --check-prefix=E4M3
// RUN: infer-opt %s --split-input-file --infer-page-kv-cache --infer-quantize-fp8="kv-cache=none" | FileCheck %s --check-prefix=KVNONE
// RUN: infer-opt %s --split-input-file --infer-quantize-fp8 --infer-fuse | FileCheck %s --check-prefix=FUSE
// RUN: infer-opt %s --split-input-file --infer-quantize-fp8 | infer-opt --split-input-file | FileCheck %s --check-prefix=DEFAULT

// Projection weights become f8E4M3FN with #infer.fp8 scales (per-tensor by
// default); the embedding table and the norm weight keep their type. The
// LM head ties the embedding: it reads a quantized copy of the table.

// DEFAULT-LABEL: func.func @projections
// DEFAULT:       %[[TABLE:.+]] = infer.weight "embed" : tensor<100x64xbf16>
// DEFAULT-NEXT:  %[[HEAD:.+]] = infer.weight "embed" {quant = #infer.fp8<granularity = per_tensor>} : tensor<100x64xf8E4M3FN>
// DEFAULT-NEXT:  infer.embedding %[[TABLE]]
// DEFAULT-NEXT:  %[[NORM:.+]] = infer.weight "norm" : tensor<64xbf16>
// DEFAULT-NEXT:  infer.rms_norm %{{.+}}, %[[NORM]]
// DEFAULT-NEXT:  %[[W:.+]] = infer.weight "w" {quant = #infer.fp8<granularity = per_tensor>} : tensor<32x64xf8E4M3FN>
// DEFAULT-NEXT:  %[[B:.+]] = infer.weight "b" : tensor<32xbf16>
// DEFAULT-NEXT:  infer.linear %{{.+}}, %[[W]], %[[B]] : tensor<?x64xf32>, tensor<32x64xf8E4M3FN>, tensor<32xbf16> -> tensor<?x32xf32>
// DEFAULT-NEXT:  infer.logits %{{.+}}, %[[HEAD]] : tensor<?x64xf32>, tensor<100x64xf8E4M3FN> -> tensor<?x100xf32>

// CHANNEL-LABEL: func.func @projections
// CHANNEL:       infer.weight "embed" : tensor<100x64xbf16>
// CHANNEL:       infer.weight "embed" {quant = #infer.fp8<granularity = per_channel>} : tensor<100x64xf8E4M3FN>
// CHANNEL:       infer.weight "w" {quant = #infer.fp8<granularity = per_channel>} : tensor<32x64xf8E4M3FN>

// NONE-LABEL: func.func @projections
// NONE-NOT:   f8E4M3FN
// NONE-NOT:   #infer.fp8
func.func @projections(%x: tensor<?x64xf32>, %ids: tensor<?xi32>) -> (tensor<?x32xf32>, tensor<?x100xf32>) {
  %t = infer.weight "embed" : tensor<100x64xbf16>
  %e = infer.embedding %t[%ids] : tensor<100x64xbf16>, tensor<?xi32> -> tensor<?x64xf32>
  %n = infer.weight "norm" : tensor<64xbf16>
  %h = infer.rms_norm %e, %n {epsilon = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xbf16> -> tensor<?x64xf32>
  %w = infer.weight "w" : tensor<32x64xbf16>
  %b = infer.weight "b" : tensor<32xbf16>
  %y = infer.linear %h, %w, %b : tensor<?x64xf32>, tensor<32x64xbf16>, tensor<32xbf16> -> tensor<?x32xf32>
  %l = infer.logits %x, %t : tensor<?x64xf32>, tensor<100x64xbf16> -> tensor<?x100xf32>
  return %y, %l : tensor<?x32xf32>, tensor<?x100xf32>
}

// -----

// A tensor-parallel shard keeps its #infer.shard: the runtime slices the
// checkpoint tensor, then computes the rank's scales on the slice.

// DEFAULT-LABEL: func.func @shard
// DEFAULT:       infer.weight "o" {quant = #infer.fp8<granularity = per_tensor>, shard = #infer.shard<dim = 1, shards = 2>} : tensor<64x32xf8E4M3FN>
// CHANNEL-LABEL: func.func @shard
// CHANNEL:       infer.weight "o" {quant = #infer.fp8<granularity = per_channel>, shard = #infer.shard<dim = 1, shards = 2>} : tensor<64x32xf8E4M3FN>
func.func @shard(%x: tensor<?x32xf32>) -> tensor<?x64xf32> {
  %w = infer.weight "o" {shard = #infer.shard<dim = 1, shards = 2>} : tensor<64x32xbf16>
  %y = infer.linear %x, %w : tensor<?x32xf32>, tensor<64x32xbf16> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// A rank's slices of a stacked projection (Phi-3's qkv_proj after
// infer-shard-tensor-parallel) are quantized part by part.

// DEFAULT-LABEL: func.func @stacked_parts
// DEFAULT:       %[[Q:.+]] = infer.weight "qkv" {quant = #infer.fp8<granularity = per_tensor>, shard = #infer.shard<dim = 0, shards = 2, size = 64>} : tensor<32x64xf8E4M3FN>
// DEFAULT-NEXT:  %[[K:.+]] = infer.weight "qkv" {quant = #infer.fp8<granularity = per_tensor>, shard = #infer.shard<dim = 0, shards = 2, offset = 64, size = 16>} : tensor<8x64xf8E4M3FN>
// DEFAULT-NEXT:  %[[W:.+]] = infer.concat_weights %[[Q]], %[[K]] : tensor<32x64xf8E4M3FN>, tensor<8x64xf8E4M3FN> -> tensor<40x64xf8E4M3FN>
// DEFAULT-NEXT:  infer.linear %{{.+}}, %[[W]] : tensor<?x64xf32>, tensor<40x64xf8E4M3FN> -> tensor<?x40xf32>
func.func @stacked_parts(%x: tensor<?x64xf32>) -> tensor<?x40xf32> {
  %wq = infer.weight "qkv" {shard = #infer.shard<dim = 0, shards = 2, size = 64>} : tensor<32x64xbf16>
  %wk = infer.weight "qkv" {shard = #infer.shard<dim = 0, shards = 2, offset = 64, size = 16>} : tensor<8x64xbf16>
  %w = infer.concat_weights %wq, %wk : tensor<32x64xbf16>, tensor<8x64xbf16> -> tensor<40x64xbf16>
  %y = infer.linear %x, %w : tensor<?x64xf32>, tensor<40x64xbf16> -> tensor<?x40xf32>
  return %y : tensor<?x40xf32>
}

// -----

// infer-fuse after quantization merges q/k/v into one GEMM over the
// concatenation of the fp8 weights.

// FUSE-LABEL: func.func @qkv
// FUSE-DAG:   %[[WQ:.+]] = infer.weight "q" {quant = #infer.fp8<granularity = per_tensor>} : tensor<64x64xf8E4M3FN>
// FUSE-DAG:   %[[WK:.+]] = infer.weight "k" {quant = #infer.fp8<granularity = per_tensor>} : tensor<16x64xf8E4M3FN>
// FUSE-DAG:   %[[WV:.+]] = infer.weight "v" {quant = #infer.fp8<granularity = per_tensor>} : tensor<16x64xf8E4M3FN>
// FUSE:       %[[W:.+]] = infer.concat_weights %[[WQ]], %[[WK]], %[[WV]] : tensor<64x64xf8E4M3FN>, tensor<16x64xf8E4M3FN>, tensor<16x64xf8E4M3FN> -> tensor<96x64xf8E4M3FN>
// FUSE-NEXT:  %[[QKV:.+]] = infer.linear %{{.+}}, %[[W]] : tensor<?x64xf32>, tensor<96x64xf8E4M3FN> -> tensor<?x96xf32>
// FUSE-NEXT:  infer.split %[[QKV]] : tensor<?x96xf32> -> tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>
// FUSE-NOT:   infer.linear
// FUSE:       return
func.func @qkv(%x: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>) {
  %wq = infer.weight "q" : tensor<64x64xbf16>
  %q = infer.linear %x, %wq : tensor<?x64xf32>, tensor<64x64xbf16> -> tensor<?x64xf32>
  %wk = infer.weight "k" : tensor<16x64xbf16>
  %k = infer.linear %x, %wk : tensor<?x64xf32>, tensor<16x64xbf16> -> tensor<?x16xf32>
  %wv = infer.weight "v" : tensor<16x64xbf16>
  %v = infer.linear %x, %wv : tensor<?x64xf32>, tensor<16x64xbf16> -> tensor<?x16xf32>
  return %q, %k, %v : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>
}

// -----

// The paged KV cache: the argument and every cache value threaded through
// the layers change element type; attention reads the fp8 cache.

// E5M2-LABEL: func.func @kv_cache
// E5M2-SAME:  %{{.+}}: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f8E5M2> {infer.input = "kv_cache"}
// E5M2:       infer.kv_cache_write {{.*}} -> !infer.kv_cache<{{.*}}element_type = f8E5M2>
// E5M2:       infer.paged_attention {{.*}}!infer.kv_cache<{{.*}}element_type = f8E5M2>
// E5M2:       infer.kv_cache_write {{.*}} -> !infer.kv_cache<{{.*}}element_type = f8E5M2>
// E5M2-NOT:   element_type = f32
// E5M2:       infer.weight "o" : tensor<32x32xbf16>

// E4M3-LABEL: func.func @kv_cache
// E4M3-SAME:  element_type = f8E4M3FN> {infer.input = "kv_cache"}
// E4M3-NOT:   element_type = f32
// E4M3:       infer.weight "o" {quant = #infer.fp8<granularity = per_tensor>} : tensor<32x32xf8E4M3FN>

// KVNONE-LABEL: func.func @kv_cache
// KVNONE-SAME:  element_type = f32> {infer.input = "kv_cache"}
// KVNONE-NOT:   f8E
// KVNONE:       infer.weight "o" {quant = #infer.fp8<granularity = per_tensor>} : tensor<32x32xf8E4M3FN>

// DEFAULT-LABEL: func.func @kv_cache
// DEFAULT-NOT:   kv_cache<
// DEFAULT:       infer.attention
func.func @kv_cache(%qsl: tensor<?xi32> {infer.input = "query_start_loc"},
                    %lens: tensor<?xi32> {infer.input = "context_lens"},
                    %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                    %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                    %q: tensor<?x32xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>) -> tensor<?x32xf32> {
  %a0 = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x32xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  %a1 = infer.attention %a0, %k, %v, %qsl {layer = 1 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x32xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  %wo = infer.weight "o" : tensor<32x32xbf16>
  %o = infer.linear %a1, %wo : tensor<?x32xf32>, tensor<32x32xbf16> -> tensor<?x32xf32>
  return %o : tensor<?x32xf32>
}
