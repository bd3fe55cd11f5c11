// RUN: infer-opt %s | infer-opt | FileCheck %s
// RUN: infer-opt %s --mlir-print-op-generic | infer-opt | FileCheck %s

// The attributes the model families add (YaRN, LongRoPE and dynamic NTK rope
// scaling, per-head and offset RMSNorm, exact GELU, tensor-parallel styles)
// survive printing and parsing, in custom and generic form.

// CHECK-LABEL: func.func @rope_variants
func.func @rope_variants(%x: tensor<?x128xf32>, %positions: tensor<?xi32>) -> (tensor<?x128xf32>, tensor<?x128xf32>, tensor<?x128xf32>) {
  // CHECK: infer.rope
  // CHECK-SAME: rope = #infer.rope<theta = 1.000000e+04, kind = yarn, factor = 4.000000e+00, original_max_position_embeddings = 1024>
  %a = infer.rope %x, %positions {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = yarn, factor = 4.0, original_max_position_embeddings = 1024>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  // CHECK: infer.rope
  // CHECK-SAME: rope = #infer.rope<theta = 1.000000e+04, kind = yarn, factor = 8.000000e+00, original_max_position_embeddings = 4096, beta_fast = 1.600000e+01, beta_slow = 2.000000e+00>
  %b = infer.rope %x, %positions {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = yarn, factor = 8.0, original_max_position_embeddings = 4096, beta_fast = 16.0, beta_slow = 2.0>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  // CHECK: infer.rope
  // CHECK-SAME: rope = #infer.rope<theta = 1.000000e+04, kind = longrope, original_max_position_embeddings = 64, short_factor = [1.000000e+00, 1.100000e+00, 1.300000e+00, 1.600000e+00], long_factor = [1.000000e+00, 1.500000e+00, 2.200000e+00, 3.000000e+00]>, rotary_dim = 8 : i64
  %c = infer.rope %x, %positions {head_dim = 16 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = longrope, original_max_position_embeddings = 64, short_factor = [1.0, 1.1, 1.3, 1.6], long_factor = [1.0, 1.5, 2.2, 3.0]>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  return %a, %b, %c : tensor<?x128xf32>, tensor<?x128xf32>, tensor<?x128xf32>
}

// A dynamic NTK rope reads query_start_loc, in the rope and in the cache
// write that rotates keys.
// CHECK-LABEL: func.func @dynamic_rope
func.func @dynamic_rope(%x: tensor<?x128xf32>, %positions: tensor<?xi32>, %query_start_loc: tensor<?xi32>, %cache: !infer.kv_cache<num_layers = 1, num_kv_heads = 8, block_size = 16, head_dim = 16, element_type = f32>, %slots: tensor<?xi64>) -> (tensor<?x128xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 8, block_size = 16, head_dim = 16, element_type = f32>) {
  // CHECK: infer.rope %{{.*}}, %{{.*}}, %{{.*}} {head_dim = 16 : i64, rope = #infer.rope<theta = 1.000000e+04, kind = dynamic, factor = 2.000000e+00, original_max_position_embeddings = 2048>, rotary_dim = 16 : i64} : tensor<?x128xf32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x128xf32>
  %a = infer.rope %x, %positions, %query_start_loc {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 2048>} : tensor<?x128xf32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x128xf32>
  // CHECK: infer.rope_kv_cache_write %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {{{.*}}kind = dynamic{{.*}}} : {{.*}}, tensor<?xi64>, tensor<?xi32>, tensor<?xi32> -> !infer.kv_cache
  %c = infer.rope_kv_cache_write %cache, %x, %x, %slots, %positions, %query_start_loc {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 2048>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 8, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi64>, tensor<?xi32>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 8, block_size = 16, head_dim = 16, element_type = f32>
  return %a, %c : tensor<?x128xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 8, block_size = 16, head_dim = 16, element_type = f32>
}

// CHECK-LABEL: func.func @norms_and_gelu
func.func @norms_and_gelu(%x: tensor<?x128xf32>, %r: tensor<?x128xf32>, %w: tensor<128xbf16>, %wh: tensor<32xbf16>) -> (tensor<?x128xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?x128xf32>) {
  // CHECK: infer.rms_norm {{.*}} {epsilon = 9.9999999999999995E-7 : f64, head_dim = 32 : i64} : tensor<?x128xf32>, tensor<32xbf16> -> tensor<?x128xf32>
  %a = infer.rms_norm %x, %wh {epsilon = 1.0e-06 : f64, head_dim = 32 : i64} : tensor<?x128xf32>, tensor<32xbf16> -> tensor<?x128xf32>
  // CHECK: infer.rms_norm {{.*}} {epsilon = 9.9999999999999995E-7 : f64, weight_offset = 1.000000e+00 : f64}
  %b = infer.rms_norm %x, %w {epsilon = 1.0e-06 : f64, weight_offset = 1.0 : f64} : tensor<?x128xf32>, tensor<128xbf16> -> tensor<?x128xf32>
  // CHECK: infer.add_rms_norm {{.*}} {epsilon = 9.9999999999999995E-7 : f64, weight_offset = 1.000000e+00 : f64}
  %s, %c = infer.add_rms_norm %x, %r, %w {epsilon = 1.0e-06 : f64, weight_offset = 1.0 : f64} : tensor<?x128xf32>, tensor<?x128xf32>, tensor<128xbf16> -> tensor<?x128xf32>, tensor<?x128xf32>
  // The exact GELU is the default: its attribute is not printed.
  // CHECK: infer.gelu %{{.*}} : tensor<?x128xf32>
  %d = infer.gelu %x {approximate = "none"} : tensor<?x128xf32>
  return %a, %b, %c, %d : tensor<?x128xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?x128xf32>
}

// How each linear splits over tensor-parallel ranks (#infer.parallel), and a
// rank's slice of one part of a stacked checkpoint tensor (#infer.shard with
// offset and size).
// CHECK-LABEL: func.func @parallel_styles
func.func @parallel_styles(%x: tensor<?x128xf32>) -> (tensor<?x128xf32>, tensor<?x32xf32>, tensor<?x128xf32>, tensor<?x192xf32>, tensor<?x16xf32>) {
  %w = infer.weight "w" : tensor<128x128xbf16>
  %wk = infer.weight "k" : tensor<32x128xbf16>
  %wqkv = infer.weight "qkv" : tensor<192x128xbf16>
  // CHECK: infer.weight "qkv" {shard = #infer.shard<dim = 0, shards = 2, replication = 2, offset = 128, size = 32>} : tensor<16x128xbf16>
  %wpart = infer.weight "qkv" {shard = #infer.shard<dim = 0, shards = 2, replication = 2, offset = 128, size = 32>} : tensor<16x128xbf16>
  // CHECK: infer.linear {{.*}} {parallel = #infer.parallel<column>}
  %a = infer.linear %x, %w {parallel = #infer.parallel<column>} : tensor<?x128xf32>, tensor<128x128xbf16> -> tensor<?x128xf32>
  // CHECK: infer.linear {{.*}} {parallel = #infer.parallel<kv_column>}
  %b = infer.linear %x, %wk {parallel = #infer.parallel<kv_column>} : tensor<?x128xf32>, tensor<32x128xbf16> -> tensor<?x32xf32>
  // CHECK: infer.linear {{.*}} {parallel = #infer.parallel<row>}
  %c = infer.linear %x, %w {parallel = #infer.parallel<row>} : tensor<?x128xf32>, tensor<128x128xbf16> -> tensor<?x128xf32>
  // CHECK: infer.linear {{.*}} {parallel = #infer.parallel<column, parts = [128, 32, 32], kv_parts = [false, true, true]>}
  %d = infer.linear %x, %wqkv {parallel = #infer.parallel<column, parts = [128, 32, 32], kv_parts = [false, true, true]>} : tensor<?x128xf32>, tensor<192x128xbf16> -> tensor<?x192xf32>
  %e = infer.linear %x, %wpart : tensor<?x128xf32>, tensor<16x128xbf16> -> tensor<?x16xf32>
  return %a, %b, %c, %d, %e : tensor<?x128xf32>, tensor<?x32xf32>, tensor<?x128xf32>, tensor<?x192xf32>, tensor<?x16xf32>
}
