// RUN: infer-opt %s --split-input-file --verify-diagnostics --infer-streaming-kv="sink-tokens=4 window=32"
// RUN: not infer-opt %s --split-input-file --infer-streaming-kv="window=0" 2>&1 | FileCheck %s --check-prefix=WINDOW
// RUN: not infer-opt %s --split-input-file --infer-streaming-kv="sink-tokens=-1 window=8" 2>&1 | FileCheck %s --check-prefix=SINKS

// WINDOW: infer-streaming-kv: sink-tokens must be >= 0 and window > 0, got sink-tokens=4 window=0
// SINKS: infer-streaming-kv: sink-tokens must be >= 0 and window > 0, got sink-tokens=-1 window=8

// Sliding-window attention is not combined with attention sinks.
func.func @sliding_window(%pos: tensor<?xi32>, %qsl: tensor<?xi32>,
                          %lens: tensor<?xi32>, %tables: tensor<?x?xi32>,
                          %slots: tensor<?xi64>, %q: tensor<?x384xf32>,
                          %k: tensor<?x128xf32>, %v: tensor<?x128xf32>,
                          %cache: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>) -> tensor<?x384xf32> {
  %kr = infer.rope %k, %pos {head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  %c = infer.kv_cache_write %cache, %kr, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>
  // expected-error @+1 {{has a sliding window of 4096 tokens: attention sinks (infer-streaming-kv) are not combined with sliding-window attention}}
  %o = infer.paged_attention %q, %c, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 4096 : i64} : tensor<?x384xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xf32>
  return %o : tensor<?x384xf32>
}

// -----

// Keys without rotary embedding have no position to shift.
func.func @no_rope(%qsl: tensor<?xi32>, %lens: tensor<?xi32>,
                   %tables: tensor<?x?xi32>, %slots: tensor<?xi64>,
                   %q: tensor<?x384xf32>, %k: tensor<?x128xf32>,
                   %v: tensor<?x128xf32>,
                   %cache: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>) -> tensor<?x384xf32> {
  // expected-error @+1 {{stores keys that no infer.rope rotates: StreamingLLM's position shift needs rotary position embeddings}}
  %c = infer.kv_cache_write %cache, %k, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>
  %o = infer.paged_attention %q, %c, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xf32>
  return %o : tensor<?x384xf32>
}

// -----

// The cache must be paged first.
func.func @not_paged(%qsl: tensor<?xi32>, %q: tensor<?x384xf32>,
                     %k: tensor<?x128xf32>, %v: tensor<?x128xf32>) -> tensor<?x384xf32> {
  // expected-error @+1 {{is not paged: run infer-page-kv-cache before infer-streaming-kv}}
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %o : tensor<?x384xf32>
}

// -----

// Keys already rotated into the cache by infer-fuse.
func.func @fused_already(%pos: tensor<?xi32>, %slots: tensor<?xi64>,
                         %k: tensor<?x128xf32>, %v: tensor<?x128xf32>,
                         %cache: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>) -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32> {
  // expected-error @+1 {{has rotated keys on their way into the cache: run infer-streaming-kv before infer-fuse}}
  %c = infer.rope_kv_cache_write %cache, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi64>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>
  return %c : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>
}

// -----

// Queries and keys already rotated by one op of infer-fuse.
func.func @fused_with_queries(%pos: tensor<?xi32>, %slots: tensor<?xi64>, %q: tensor<?x384xf32>,
                              %k: tensor<?x128xf32>, %v: tensor<?x128xf32>,
                              %cache: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>) -> (tensor<?x384xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>) {
  // expected-error @+1 {{has rotated keys on their way into the cache: run infer-streaming-kv before infer-fuse}}
  %qr, %c = infer.rope_qkv_cache_write %cache, %q, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi64>, tensor<?xi32> -> tensor<?x384xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>
  return %qr, %c : tensor<?x384xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>
}

// -----

// A dynamic NTK rope's frequencies follow the sequence's length.
func.func @dynamic_rope(%pos: tensor<?xi32>, %qsl: tensor<?xi32>,
                        %lens: tensor<?xi32>, %tables: tensor<?x?xi32>,
                        %slots: tensor<?xi64>, %q: tensor<?x384xf32>,
                        %k: tensor<?x128xf32>, %v: tensor<?x128xf32>,
                        %cache: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>) -> tensor<?x384xf32> {
  // expected-error @+1 {{uses 'dynamic' rope scaling, whose frequencies depend on the sequence's length: StreamingLLM's position shift does not apply to it}}
  %kr = infer.rope %k, %pos, %qsl {head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 16>} : tensor<?x128xf32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x128xf32>
  %c = infer.kv_cache_write %cache, %kr, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>
  %o = infer.paged_attention %q, %c, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xf32>
  return %o : tensor<?x384xf32>
}
