// RUN: infer-opt %s --split-input-file --verify-diagnostics

// The verifiers of the attributes the model families add.

func.func @longrope_no_factors(%x: tensor<?x128xf32>, %positions: tensor<?xi32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{'longrope' rope scaling needs short_factor and long_factor}}
  %y = infer.rope %x, %positions {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = longrope, original_max_position_embeddings = 64>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @longrope_lengths(%x: tensor<?x128xf32>, %positions: tensor<?xi32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{'longrope' short_factor has 2 entries, long_factor 1}}
  %y = infer.rope %x, %positions {head_dim = 16 : i64, rotary_dim = 4 : i64, rope = #infer.rope<theta = 1.0e+04, kind = longrope, original_max_position_embeddings = 64, short_factor = [1.0, 1.0], long_factor = [2.0]>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @longrope_rotary_dim(%x: tensor<?x128xf32>, %positions: tensor<?xi32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{'infer.rope' op expects longrope short_factor and long_factor of rotary_dim / 2 = 8 entries, got 2}}
  %y = infer.rope %x, %positions {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = longrope, original_max_position_embeddings = 64, short_factor = [1.0, 1.0], long_factor = [2.0, 2.0]>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @longrope_factor_sign(%x: tensor<?x128xf32>, %positions: tensor<?xi32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{'longrope' short_factor and long_factor entries must be positive, got 0.000000e+00}}
  %y = infer.rope %x, %positions {head_dim = 16 : i64, rotary_dim = 4 : i64, rope = #infer.rope<theta = 1.0e+04, kind = longrope, original_max_position_embeddings = 64, short_factor = [1.0, 0.0], long_factor = [2.0, 2.0]>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @factors_on_yarn(%x: tensor<?x128xf32>, %positions: tensor<?xi32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{short_factor and long_factor belong to 'longrope' rope scaling, not 'yarn'}}
  %y = infer.rope %x, %positions {head_dim = 16 : i64, rotary_dim = 4 : i64, rope = #infer.rope<theta = 1.0e+04, kind = yarn, factor = 4.0, original_max_position_embeddings = 64, short_factor = [1.0, 1.0]>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @yarn_original(%x: tensor<?x128xf32>, %positions: tensor<?xi32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{'yarn' rope scaling needs a positive original_max_position_embeddings, got 0}}
  %y = infer.rope %x, %positions {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = yarn, factor = 4.0>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @yarn_beta(%x: tensor<?x128xf32>, %positions: tensor<?xi32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{'yarn' rope scaling needs positive beta_fast and beta_slow, got 3.200000e+01 and 0.000000e+00}}
  %y = infer.rope %x, %positions {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = yarn, factor = 4.0, original_max_position_embeddings = 1024, beta_slow = 0.0>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @head_norm_weight(%x: tensor<?x128xf32>, %w: tensor<128xf32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{'infer.rms_norm' op expects weight of shape [32] (head_dim), got 'tensor<128xf32>'}}
  %y = infer.rms_norm %x, %w {epsilon = 1.0e-06 : f64, head_dim = 32 : i64} : tensor<?x128xf32>, tensor<128xf32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @head_norm_divides(%x: tensor<?x128xf32>, %w: tensor<48xf32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{'infer.rms_norm' op expects a positive head_dim that divides the input features (128), got 48}}
  %y = infer.rms_norm %x, %w {epsilon = 1.0e-06 : f64, head_dim = 48 : i64} : tensor<?x128xf32>, tensor<48xf32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @dynamic_original(%x: tensor<?x128xf32>, %positions: tensor<?xi32>, %qsl: tensor<?xi32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{'dynamic' rope scaling needs a positive original_max_position_embeddings, got 0}}
  %y = infer.rope %x, %positions, %qsl {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0>} : tensor<?x128xf32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @dynamic_no_lengths(%x: tensor<?x128xf32>, %positions: tensor<?xi32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{'infer.rope' op expects a query_start_loc operand with a 'dynamic' rope (its frequencies depend on each sequence's length)}}
  %y = infer.rope %x, %positions {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 16>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @lengths_not_dynamic(%x: tensor<?x128xf32>, %positions: tensor<?xi32>, %qsl: tensor<?xi32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{'infer.rope' op expects no query_start_loc operand with a 'linear' rope}}
  %y = infer.rope %x, %positions, %qsl {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = linear, factor = 2.0>} : tensor<?x128xf32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @dynamic_rotary_dim(%x: tensor<?x128xf32>, %positions: tensor<?xi32>, %qsl: tensor<?xi32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{'infer.rope' op expects a rotary_dim above 2 with a 'dynamic' rope (its base grows by a power of rotary_dim / (rotary_dim - 2)), got 2}}
  %y = infer.rope %x, %positions, %qsl {head_dim = 16 : i64, rotary_dim = 2 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 16>} : tensor<?x128xf32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @dynamic_key_rope(%q: tensor<?x128xf32>, %cache: !infer.kv_cache<num_layers = 1, num_kv_heads = 8, block_size = 16, head_dim = 16, element_type = f32>, %tables: tensor<?x?xi32>, %lens: tensor<?xi32>, %qsl: tensor<?xi32>) -> tensor<?x128xf32> {
  // expected-error @+1 {{'infer.paged_attention' op cannot rotate keys at their cache index with a 'dynamic' key_rope (its frequencies depend on the sequence's length)}}
  %y = infer.paged_attention %q, %cache, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 8 : i64, head_dim = 16 : i64, scale = 0.25 : f64, sliding_window = 0 : i64, key_rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 16>, key_rotary_dim = 16 : i64} : tensor<?x128xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 8, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @parallel_parts_sum(%x: tensor<?x128xf32>, %w: tensor<192x128xbf16>) -> tensor<?x192xf32> {
  // expected-error @+1 {{'infer.linear' op expects parallel parts adding up to the weight rows (192), got 160}}
  %y = infer.linear %x, %w {parallel = #infer.parallel<column, parts = [128, 16, 16], kv_parts = [false, true, true]>} : tensor<?x128xf32>, tensor<192x128xbf16> -> tensor<?x192xf32>
  return %y : tensor<?x192xf32>
}

// -----

func.func @parallel_parts_on_row(%x: tensor<?x128xf32>, %w: tensor<128x128xbf16>) -> tensor<?x128xf32> {
  // expected-error @+1 {{parallel parts belong to 'column' linears, not 'row'}}
  %y = infer.linear %x, %w {parallel = #infer.parallel<row, parts = [64, 64], kv_parts = [false, false]>} : tensor<?x128xf32>, tensor<128x128xbf16> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @parallel_kv_parts(%x: tensor<?x128xf32>, %w: tensor<128x128xbf16>) -> tensor<?x128xf32> {
  // expected-error @+1 {{parallel parts and kv_parts need one entry per part, got 2 and 1}}
  %y = infer.linear %x, %w {parallel = #infer.parallel<column, parts = [64, 64], kv_parts = [false]>} : tensor<?x128xf32>, tensor<128x128xbf16> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @parallel_part_width(%x: tensor<?x128xf32>, %w: tensor<128x128xbf16>) -> tensor<?x128xf32> {
  // expected-error @+1 {{parallel parts must be positive, got 0}}
  %y = infer.linear %x, %w {parallel = #infer.parallel<column, parts = [128, 0], kv_parts = [false, false]>} : tensor<?x128xf32>, tensor<128x128xbf16> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

func.func @shard_offset_without_size() -> tensor<16x128xbf16> {
  // expected-error @+1 {{shard offset 128 needs the size of the split part}}
  %w = infer.weight "qkv" {shard = #infer.shard<dim = 0, shards = 2, offset = 128>} : tensor<16x128xbf16>
  return %w : tensor<16x128xbf16>
}
