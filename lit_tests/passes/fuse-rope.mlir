// RUN: infer-opt %s --split-input-file --infer-fuse-rope | FileCheck %s
// RUN: infer-opt %s --split-input-file --infer-fuse | FileCheck %s

// The rope patterns of infer-fuse, alone and in infer-fuse: a layer's
// query rope joins its cache write when both rotate by one rope at the same
// positions; every mismatch leaves them apart.

// A Llama layer after paging: the query rope and the cache write of the
// keys and values become one op, whose rotated queries attention reads.

// CHECK-LABEL: func.func @llama_layer
// CHECK-SAME: (%[[QKV:[^:]+]]: tensor<?x128xf32>, %[[POS:[^:]+]]: tensor<?xi32>, %[[POS2:[^:]+]]: tensor<?xi32>, %[[QSL:[^:]+]]: tensor<?xi32>, %[[LENS:[^:]+]]: tensor<?xi32>, %[[TABLES:[^:]+]]: tensor<?x?xi32>, %[[SLOTS:[^:]+]]: tensor<?xi64>, %[[C0:[^:]+]]: !infer.kv_cache
// CHECK: %[[Q:.+]]:3 = infer.split %[[QKV]]
// CHECK-NOT: infer.rope %
// CHECK: %[[QR:.+]], %[[C1:.+]] = infer.rope_qkv_cache_write %[[C0]], %[[Q]]#0, %[[Q]]#1, %[[Q]]#2, %[[SLOTS]], %[[POS]] {head_dim = 16 : i64, layer = 0 : i64, rope = #infer.rope<theta = 1.000000e+04, kind = default>, rotary_dim = 16 : i64} : !infer.kv_cache<{{.*}}>, tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> tensor<?x64xf32>, !infer.kv_cache<{{.*}}>
// CHECK-NOT: infer.rope_kv_cache_write
// CHECK-NEXT: %[[O:.+]] = infer.paged_attention %[[QR]], %[[C1]], %[[TABLES]], %[[LENS]], %[[QSL]]
// CHECK-NEXT: return %[[O]], %[[C1]]

func.func @llama_layer(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %pos2: tensor<?xi32>, %qsl: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = infer.rope %q, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// Before infer-fuse formed the key's rope_kv_cache_write: both patterns
// apply, in either order of the ropes.

// CHECK-LABEL: func.func @unfused_keys
// CHECK-NOT: infer.rope %
// CHECK: %[[QR:.+]], %[[C1:.+]] = infer.rope_qkv_cache_write
// CHECK-NEXT: infer.paged_attention %[[QR]], %[[C1]]

func.func @unfused_keys(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %pos2: tensor<?xi32>, %qsl: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %kr = infer.rope %k, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  %qr = infer.rope %q, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %c1 = infer.kv_cache_write %c0, %kr, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// The cache write before the query rope: the fused op takes the rope's
// place, where all its operands are defined.

// CHECK-LABEL: func.func @write_before_query_rope
// CHECK-NOT: infer.rope_kv_cache_write
// CHECK: %[[QR:.+]], %[[C1:.+]] = infer.rope_qkv_cache_write
// CHECK-NEXT: infer.paged_attention %[[QR]], %[[C1]]

func.func @write_before_query_rope(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %pos2: tensor<?xi32>, %qsl: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %qr = infer.rope %q, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// A dynamic NTK rope: one query_start_loc for both.

// CHECK-LABEL: func.func @dynamic_rope
// CHECK-SAME: (%[[QKV:[^:]+]]: tensor<?x128xf32>, %[[POS:[^:]+]]: tensor<?xi32>, %[[POS2:[^:]+]]: tensor<?xi32>, %[[QSL:[^:]+]]: tensor<?xi32>, %[[LENS:[^:]+]]: tensor<?xi32>, %[[TABLES:[^:]+]]: tensor<?x?xi32>, %[[SLOTS:[^:]+]]: tensor<?xi64>, %[[C0:[^:]+]]: !infer.kv_cache
// CHECK: infer.rope_qkv_cache_write %[[C0]], %{{.+}}#0, %{{.+}}#1, %{{.+}}#2, %[[SLOTS]], %[[POS]], %[[QSL]] {{{.*}}kind = dynamic

func.func @dynamic_rope(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %pos2: tensor<?xi32>, %qsl: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = infer.rope %q, %pos, %qsl {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 16>} : tensor<?x64xf32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos, %qsl {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 16>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// Per-head q/k norms (Qwen3, Gemma 3) between the split and the ropes: the
// fused op reads the normalized queries and keys.

// CHECK-LABEL: func.func @qk_norm
// CHECK: %[[QN:.+]] = infer.rms_norm %{{.+}}#0
// CHECK: %[[KN:.+]] = infer.rms_norm %{{.+}}#1
// CHECK-NOT: infer.rope %
// CHECK: %[[QR:.+]], %[[C1:.+]] = infer.rope_qkv_cache_write %{{.+}}, %[[QN]], %[[KN]], %{{.+}}#2,
// CHECK-NEXT: infer.paged_attention %[[QR]], %[[C1]]

func.func @qk_norm(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %pos2: tensor<?xi32>, %qsl: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %wq = infer.weight "q_norm.weight" : tensor<16xf32>
  %qn = infer.rms_norm %q, %wq {epsilon = 1.0e-06 : f64, head_dim = 16 : i64} : tensor<?x64xf32>, tensor<16xf32> -> tensor<?x64xf32>
  %wk = infer.weight "k_norm.weight" : tensor<16xf32>
  %kn = infer.rms_norm %k, %wk {epsilon = 1.0e-06 : f64, head_dim = 16 : i64} : tensor<?x32xf32>, tensor<16xf32> -> tensor<?x32xf32>
  %qr = infer.rope %qn, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %c1 = infer.rope_kv_cache_write %c0, %kn, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// Queries rotated at other positions than the keys: left apart.

// CHECK-LABEL: func.func @other_positions
// CHECK: infer.rope %{{.+}}, %[[POS2:[^ ]+]]
// CHECK: infer.rope_kv_cache_write
// CHECK-NOT: infer.rope_qkv_cache_write

func.func @other_positions(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %pos2: tensor<?xi32>, %qsl: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = infer.rope %q, %pos2 {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// Queries rotated in heads of another head_dim than the keys (the same
// rotary_dim): left apart.

// CHECK-LABEL: func.func @other_head_dim
// CHECK: infer.rope {{.*}}head_dim = 32
// CHECK: infer.rope_kv_cache_write {{.*}}head_dim = 16
// CHECK-NOT: infer.rope_qkv_cache_write

func.func @other_head_dim(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %pos2: tensor<?xi32>, %qsl: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = infer.rope %q, %pos {head_dim = 32 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// Queries with another partial rotary dim than the keys: left apart.

// CHECK-LABEL: func.func @other_rotary_dim
// CHECK: infer.rope {{.*}}rotary_dim = 8
// CHECK: infer.rope_kv_cache_write {{.*}}rotary_dim = 16
// CHECK-NOT: infer.rope_qkv_cache_write

func.func @other_rotary_dim(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %pos2: tensor<?xi32>, %qsl: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = infer.rope %q, %pos {head_dim = 16 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// Queries with another rope (theta) than the keys: left apart.

// CHECK-LABEL: func.func @other_rope
// CHECK: infer.rope {{.*}}theta = 5.000000e+05
// CHECK: infer.rope_kv_cache_write
// CHECK-NOT: infer.rope_qkv_cache_write

func.func @other_rope(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %pos2: tensor<?xi32>, %qsl: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = infer.rope %q, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 5.0e+05, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// Rotated queries that no attention reads with this cache are not the
// layer's: left apart.

// CHECK-LABEL: func.func @no_attention
// CHECK: infer.rope %
// CHECK: infer.rope_kv_cache_write
// CHECK-NOT: infer.rope_qkv_cache_write

func.func @no_attention(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %pos2: tensor<?xi32>, %qsl: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = infer.rope %q, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  return %qr, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// A user of the rotated queries before the cache write: one op at the
// write would come after it, so they stay apart.

// CHECK-LABEL: func.func @query_used_before_write
// CHECK: infer.rope %
// CHECK: infer.add
// CHECK: infer.rope_kv_cache_write
// CHECK-NOT: infer.rope_qkv_cache_write

func.func @query_used_before_write(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %pos2: tensor<?xi32>, %qsl: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = infer.rope %q, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %s = infer.add %qr, %qr : tensor<?x64xf32>
  %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %s : tensor<?x64xf32>, tensor<?x64xf32>
}

// -----

// A streaming plan (infer-streaming-kv): the cache holds unrotated keys,
// which attention rotates at their cache index; nothing to fuse.

// CHECK-LABEL: func.func @streaming
// CHECK: infer.rope %
// CHECK: infer.kv_cache_write
// CHECK-NOT: infer.rope_qkv_cache_write

func.func @streaming(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %pos2: tensor<?xi32>, %qsl: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = infer.rope %q, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %c1 = infer.kv_cache_write %c0, %k, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64, key_rope = #infer.rope<theta = 1.0e+04, kind = default>, key_rotary_dim = 16 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// A dynamic NTK rope whose queries take another query_start_loc than the
// keys (each sequence's base comes from its own extent in the batch): left
// apart, the queries still rotated on their own.

// CHECK-LABEL: func.func @other_query_start_loc
// CHECK-SAME: (%[[QKV:[^:]+]]: tensor<?x128xf32>, %[[POS:[^:]+]]: tensor<?xi32>, %[[QSL:[^:]+]]: tensor<?xi32>, %[[QSL2:[^:]+]]: tensor<?xi32>, %[[LENS:[^:]+]]: tensor<?xi32>, %[[TABLES:[^:]+]]: tensor<?x?xi32>, %[[SLOTS:[^:]+]]: tensor<?xi64>, %[[C0:[^:]+]]: !infer.kv_cache
// CHECK: %[[Q:.+]]:3 = infer.split %[[QKV]]
// CHECK-NEXT: %[[QR:.+]] = infer.rope %[[Q]]#0, %[[POS]], %[[QSL2]] {{{.*}}kind = dynamic
// CHECK-NEXT: %[[C1:.+]] = infer.rope_kv_cache_write %[[C0]], %[[Q]]#1, %[[Q]]#2, %[[SLOTS]], %[[POS]], %[[QSL]] {{{.*}}kind = dynamic
// CHECK-NEXT: infer.paged_attention %[[QR]], %[[C1]], %[[TABLES]], %[[LENS]], %[[QSL]]
// CHECK-NOT: infer.rope_qkv_cache_write

func.func @other_query_start_loc(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %qsl: tensor<?xi32>, %qsl2: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = infer.rope %q, %pos, %qsl2 {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 16>} : tensor<?x64xf32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos, %qsl {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 16>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// Before the key's rope_kv_cache_write is formed: the key rope joins its
// cache write at the keys' positions, and the queries, rotated at others,
// stay apart.

// CHECK-LABEL: func.func @unfused_keys_other_positions
// CHECK-SAME: (%[[QKV:[^:]+]]: tensor<?x128xf32>, %[[POS:[^:]+]]: tensor<?xi32>, %[[POS2:[^:]+]]: tensor<?xi32>, %[[QSL:[^:]+]]: tensor<?xi32>, %[[LENS:[^:]+]]: tensor<?xi32>, %[[TABLES:[^:]+]]: tensor<?x?xi32>, %[[SLOTS:[^:]+]]: tensor<?xi64>, %[[C0:[^:]+]]: !infer.kv_cache
// CHECK-DAG: %[[QR:.+]] = infer.rope %{{.+}}#0, %[[POS2]] {
// CHECK-DAG: %[[C1:.+]] = infer.rope_kv_cache_write %[[C0]], %{{.+}}#1, %{{.+}}#2, %[[SLOTS]], %[[POS]] {
// CHECK: infer.paged_attention %[[QR]], %[[C1]]
// CHECK-NOT: infer.rope_qkv_cache_write

func.func @unfused_keys_other_positions(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %pos2: tensor<?xi32>, %qsl: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = infer.rope %q, %pos2 {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %kr = infer.rope %k, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  %c1 = infer.kv_cache_write %c0, %kr, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// The same with a dynamic NTK rope whose queries take another
// query_start_loc than the keys.

// CHECK-LABEL: func.func @unfused_keys_other_query_start_loc
// CHECK-SAME: (%[[QKV:[^:]+]]: tensor<?x128xf32>, %[[POS:[^:]+]]: tensor<?xi32>, %[[QSL:[^:]+]]: tensor<?xi32>, %[[QSL2:[^:]+]]: tensor<?xi32>, %[[LENS:[^:]+]]: tensor<?xi32>, %[[TABLES:[^:]+]]: tensor<?x?xi32>, %[[SLOTS:[^:]+]]: tensor<?xi64>, %[[C0:[^:]+]]: !infer.kv_cache
// CHECK-DAG: %[[QR:.+]] = infer.rope %{{.+}}#0, %[[POS]], %[[QSL2]] {
// CHECK-DAG: %[[C1:.+]] = infer.rope_kv_cache_write %[[C0]], %{{.+}}#1, %{{.+}}#2, %[[SLOTS]], %[[POS]], %[[QSL]] {
// CHECK: infer.paged_attention %[[QR]], %[[C1]]
// CHECK-NOT: infer.rope_qkv_cache_write

func.func @unfused_keys_other_query_start_loc(%qkv: tensor<?x128xf32>, %pos: tensor<?xi32>, %qsl: tensor<?xi32>, %qsl2: tensor<?xi32>, %lens: tensor<?xi32>, %tables: tensor<?x?xi32>, %slots: tensor<?xi64>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %q, %k, %v = infer.split %qkv : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %kr = infer.rope %k, %pos, %qsl {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 16>} : tensor<?x32xf32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x32xf32>
  %qr = infer.rope %q, %pos, %qsl2 {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 16>} : tensor<?x64xf32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  %c1 = infer.kv_cache_write %c0, %kr, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o, %c1 : tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}
