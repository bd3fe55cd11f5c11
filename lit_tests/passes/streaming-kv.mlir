// RUN: infer-opt %s --split-input-file --infer-page-kv-cache="block-size=8" --infer-streaming-kv="sink-tokens=4 window=32" | FileCheck %s
// RUN: infer-opt %s --split-input-file --infer-page-kv-cache --infer-streaming-kv | FileCheck %s --check-prefix=DEFAULT
// RUN: infer-opt %s --split-input-file --infer-page-kv-cache="block-size=8" --infer-streaming-kv="sink-tokens=4 window=32" --infer-fuse | FileCheck %s --check-prefix=FUSE
// RUN: infer-opt %s --split-input-file --infer-page-kv-cache="block-size=8" --infer-fuse | FileCheck %s --check-prefix=NOSTREAM

// One layer whose keys and queries are rotated. The keys' rope moves into
// paged attention (key_rope, key_rotary_dim): the cache stores unrotated keys.
// The queries keep theirs, at the positions the runtime feeds (in-cache).

// CHECK: module attributes {infer.streaming = #infer.streaming<sink_tokens = 4, window = 32>}
// CHECK-LABEL: func.func @one_layer
// CHECK-SAME: %[[POS:[^:]+]]: tensor<?xi32> {infer.input = "positions"}
// CHECK-SAME: %[[SLOTS:[^:]+]]: tensor<?xi64> {infer.input = "slot_mapping"}
// CHECK-SAME: %[[Q:[^:]+]]: tensor<?x384xf32>, %[[K:[^:]+]]: tensor<?x128xf32>, %[[V:[^:]+]]: tensor<?x128xf32>
// CHECK-SAME: %[[CACHE:[^:]+]]: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 8, head_dim = 64, element_type = f32> {infer.input = "kv_cache"}
// CHECK: %[[QR:.+]] = infer.rope %[[Q]], %[[POS]]
// CHECK-NOT: = infer.rope
// CHECK: %[[C:.+]] = infer.kv_cache_write %[[CACHE]], %[[K]], %[[V]], %[[SLOTS]] {layer = 0 : i64}
// CHECK: infer.paged_attention %[[QR]], %[[C]]
// CHECK-SAME: key_rope = #infer.rope<theta = 1.000000e+04, kind = default>, key_rotary_dim = 32 : i64
// CHECK-SAME: sliding_window = 0 : i64

// DEFAULT: module attributes {infer.streaming = #infer.streaming<sink_tokens = 4, window = 1024>}
// DEFAULT-LABEL: func.func @one_layer
// DEFAULT: key_rope = #infer.rope

// infer-fuse finds no rotated keys to fuse into the cache write.
// FUSE-LABEL: func.func @one_layer
// FUSE-NOT: infer.rope_kv_cache_write
// FUSE: infer.kv_cache_write
// FUSE-NOT: infer.rope_kv_cache_write
// FUSE: infer.paged_attention {{.*}}key_rope

// Without streaming, the keys' rope fuses into the cache write as before.
// NOSTREAM-NOT: infer.streaming
// NOSTREAM-LABEL: func.func @one_layer
// NOSTREAM: infer.rope_kv_cache_write
// NOSTREAM-NOT: key_rope
func.func @one_layer(%pos: tensor<?xi32> {infer.input = "positions"},
                     %qsl: tensor<?xi32> {infer.input = "query_start_loc"},
                     %lens: tensor<?xi32> {infer.input = "context_lens"},
                     %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                     %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                     %q: tensor<?x384xf32>, %k: tensor<?x128xf32>,
                     %v: tensor<?x128xf32>) -> tensor<?x384xf32> {
  %qr = infer.rope %q, %pos {head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  %kr = infer.rope %k, %pos {head_dim = 64 : i64, rotary_dim = 32 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  %o = infer.attention %qr, %kr, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %o : tensor<?x384xf32>
}

// -----

// Rotated keys that something else also reads keep their rope for it; the
// cache still gets the unrotated keys.

// CHECK-LABEL: func.func @keys_read_twice
// CHECK-SAME: %[[K:[^:]+]]: tensor<?x128xf32>, %[[V:[^:]+]]: tensor<?x128xf32>
// CHECK: %[[KR:.+]] = infer.rope %[[K]]
// CHECK: infer.kv_cache_write %{{.+}}, %[[K]], %[[V]]
// CHECK: infer.paged_attention {{.*}}key_rope
// CHECK: return %{{.+}}, %[[KR]]
func.func @keys_read_twice(%pos: tensor<?xi32> {infer.input = "positions"},
                           %qsl: tensor<?xi32> {infer.input = "query_start_loc"},
                           %lens: tensor<?xi32> {infer.input = "context_lens"},
                           %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                           %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                           %q: tensor<?x384xf32>, %k: tensor<?x128xf32>,
                           %v: tensor<?x128xf32>) -> (tensor<?x384xf32>, tensor<?x128xf32>) {
  %kr = infer.rope %k, %pos {head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  %o = infer.attention %q, %kr, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %o, %kr : tensor<?x384xf32>, tensor<?x128xf32>
}
