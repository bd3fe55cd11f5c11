// RUN: infer-opt %s --infer-deploy-pipeline="block-size=8 sink-tokens=2 window=24" | FileCheck %s
// RUN: infer-opt %s --infer-deploy-pipeline="block-size=8 sink-tokens=2 window=0" | FileCheck %s --check-prefix=OFF
// RUN: infer-opt %s --infer-deploy-pipeline="block-size=8" | FileCheck %s --check-prefix=OFF

// window > 0 runs infer-streaming-kv between paging and fusion: keys reach
// the cache unrotated and attention rotates them at their cache index.
// CHECK: module attributes {infer.streaming = #infer.streaming<sink_tokens = 2, window = 24>}
// CHECK-LABEL: func.func @forward
// CHECK-NOT: infer.rope_kv_cache_write
// CHECK-NOT: infer.rope_qkv_cache_write
// CHECK: infer.rope
// CHECK: infer.kv_cache_write
// CHECK: infer.paged_attention {{.*}}key_rope = #infer.rope<theta = 1.000000e+04, kind = default>, key_rotary_dim = 16 : i64

// window = 0 (the default) leaves the program as without streaming.
// OFF-NOT: infer.streaming
// OFF-LABEL: func.func @forward
// OFF: infer.rope_qkv_cache_write
// OFF-NOT: key_rope
func.func @forward(%pos: tensor<?xi32> {infer.input = "positions"},
                   %qsl: tensor<?xi32> {infer.input = "query_start_loc"},
                   %lens: tensor<?xi32> {infer.input = "context_lens"},
                   %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                   %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                   %q: tensor<?x64xf32>, %k: tensor<?x32xf32>,
                   %v: tensor<?x32xf32>) -> tensor<?x64xf32> {
  %qr = infer.rope %q, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %kr = infer.rope %k, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  %o = infer.attention %qr, %kr, %v, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}
