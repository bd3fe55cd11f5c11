// RUN: infer-opt %s --split-input-file --infer-page-kv-cache | FileCheck %s
// RUN: infer-opt %s --split-input-file --infer-page-kv-cache="block-size=32" | FileCheck %s --check-prefix=BS32
// RUN: infer-opt %s --split-input-file --infer-deploy-pipeline="block-size=32" | FileCheck %s --check-prefix=BS32

// Two GQA layers (6 query heads, 2 KV heads); layer 1 has a sliding window.
// The cache is threaded from layer 0's write to layer 1's write.

// CHECK-LABEL: func.func @two_layers
// CHECK-SAME: (%[[QSL:[^:]+]]: tensor<?xi32> {infer.input = "query_start_loc"}
// CHECK-SAME: %[[LENS:[^:]+]]: tensor<?xi32> {infer.input = "context_lens"}
// CHECK-SAME: %[[TABLES:[^:]+]]: tensor<?x?xi32> {infer.input = "block_tables"}
// CHECK-SAME: %[[SLOTS:[^:]+]]: tensor<?xi64> {infer.input = "slot_mapping"}
// CHECK-SAME: %[[Q:[^:]+]]: tensor<?x384xf32>, %[[K:[^:]+]]: tensor<?x128xf32>, %[[V:[^:]+]]: tensor<?x128xf32>
// CHECK-SAME: %[[CACHE:[^:]+]]: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32> {infer.input = "kv_cache"})
// CHECK-SAME: -> tensor<?x384xf32>
// CHECK-NOT: infer.attention
// CHECK: %[[C0:.+]] = infer.kv_cache_write %[[CACHE]], %[[K]], %[[V]], %[[SLOTS]] {layer = 0 : i64}
// CHECK: %[[O0:.+]] = infer.paged_attention %[[Q]], %[[C0]], %[[TABLES]], %[[LENS]], %[[QSL]]
// CHECK-SAME: {head_dim = 64 : i64, layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64}
// CHECK: %[[C1:.+]] = infer.kv_cache_write %[[C0]], %[[K]], %[[V]], %[[SLOTS]] {layer = 1 : i64}
// CHECK: %[[O1:.+]] = infer.paged_attention %[[O0]], %[[C1]], %[[TABLES]], %[[LENS]], %[[QSL]]
// CHECK-SAME: {head_dim = 64 : i64, layer = 1 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, scale = 1.250000e-01 : f64, sliding_window = 4096 : i64}
// CHECK-NOT: infer.attention
// CHECK: return %[[O1]]

// BS32-LABEL: func.func @two_layers
// BS32-SAME: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 32, head_dim = 64, element_type = f32> {infer.input = "kv_cache"}
// BS32-COUNT-2: infer.kv_cache_write {{.*}} : !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 32, head_dim = 64, element_type = f32>
func.func @two_layers(%qsl: tensor<?xi32> {infer.input = "query_start_loc"},
                      %lens: tensor<?xi32> {infer.input = "context_lens"},
                      %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                      %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                      %q: tensor<?x384xf32>, %k: tensor<?x128xf32>,
                      %v: tensor<?x128xf32>) -> tensor<?x384xf32> {
  %o0 = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  %o1 = infer.attention %o0, %k, %v, %qsl {layer = 1 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 4096 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %o1 : tensor<?x384xf32>
}

// -----

// The cache covers the highest layer index, and its element type is the
// keys' (bf16 here).

// CHECK-LABEL: func.func @sparse_layers
// CHECK-SAME: !infer.kv_cache<num_layers = 4, num_kv_heads = 1, block_size = 16, head_dim = 32, element_type = bf16> {infer.input = "kv_cache"}
// CHECK: infer.kv_cache_write {{.*}} {layer = 3 : i64}
// CHECK: infer.paged_attention {{.*}} layer = 3 : i64
// BS32-LABEL: func.func @sparse_layers
// BS32-SAME: block_size = 32
func.func @sparse_layers(%lens: tensor<?xi32> {infer.input = "context_lens"},
                         %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                         %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                         %qsl: tensor<?xi32>, %q: tensor<?x128xbf16>,
                         %k: tensor<?x32xbf16>, %v: tensor<?x32xbf16>) -> tensor<?x128xbf16> {
  %o = infer.attention %q, %k, %v, %qsl {layer = 3 : i64, num_heads = 4 : i64, num_kv_heads = 1 : i64, head_dim = 32 : i64, scale = 0.17677669529663687 : f64, sliding_window = 0 : i64} : tensor<?x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?xi32> -> tensor<?x128xbf16>
  return %o : tensor<?x128xbf16>
}

// -----

// Functions without attention keep their signature, contract or not.

// CHECK-LABEL: func.func @no_attention
// CHECK-SAME: (%{{.+}}: tensor<?x384xf32>) -> tensor<?x384xf32>
// CHECK-NOT: kv_cache
// CHECK: return
// BS32-LABEL: func.func @no_attention
// BS32-NOT: kv_cache
func.func @no_attention(%x: tensor<?x384xf32>) -> tensor<?x384xf32> {
  %y = infer.silu %x : tensor<?x384xf32>
  return %y : tensor<?x384xf32>
}
