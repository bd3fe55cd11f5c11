// RUN: infer-opt %s --split-input-file --verify-diagnostics

// One case per diagnostic of the infer dialect's verifiers, in the order of
// the dialect's files: dialect attributes, attributes, types, then ops as
// InferOps.td groups them.

//===----------------------------------------------------------------------===//
// Dialect attributes
//===----------------------------------------------------------------------===//

// expected-error @+1 {{'infer.input' of argument 0 must be one of "token_ids", "positions", "query_start_loc", "context_lens", "block_tables", "slot_mapping", "logits_indices", "kv_cache", got "tokens"}}
func.func @unknown_input(%ids: tensor<?xi32> {infer.input = "tokens"}) {
  return
}

// -----

// expected-error @+1 {{'infer.model' must be a dictionary attribute of a module}}
func.func @model_not_on_module() attributes {infer.model = {num_layers = 2 : i64}} {
  return
}

// -----

// expected-error @+1 {{'infer.model' must be a dictionary attribute of a module}}
module attributes {infer.model = "llama"} {
}

// -----

// expected-error @+1 {{'infer.tp' must be a positive integer attribute of a module}}
module attributes {infer.tp = 0 : i64} {
}

// -----

// expected-error @+1 {{'infer.streaming' must be an #infer.streaming attribute of a module}}
module attributes {infer.streaming = 4 : i64} {
}

// -----

// expected-error @+1 {{streaming sink_tokens must be non-negative, got -1}}
module attributes {infer.streaming = #infer.streaming<sink_tokens = -1, window = 32>} {
}

// -----

// expected-error @+1 {{streaming window must be positive, got 0}}
module attributes {infer.streaming = #infer.streaming<sink_tokens = 4, window = 0>} {
}

// -----

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

func.func @rope_theta(%x: tensor<?x384xf32>, %positions: tensor<?xi32>) -> tensor<?x384xf32> {
  // expected-error @+1 {{rope theta must be positive, got 0.000000e+00}}
  %y = infer.rope %x, %positions {head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 0.0, kind = default>} : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %y : tensor<?x384xf32>
}

// -----

func.func @rope_linear_factor(%x: tensor<?x384xf32>, %positions: tensor<?xi32>) -> tensor<?x384xf32> {
  // expected-error @+1 {{'linear' rope scaling needs a positive factor, got 0.000000e+00}}
  %y = infer.rope %x, %positions {head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 1.0e+04, kind = linear, factor = 0.0>} : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %y : tensor<?x384xf32>
}

// -----

func.func @rope_llama3_factor(%x: tensor<?x384xf32>, %positions: tensor<?xi32>) -> tensor<?x384xf32> {
  // expected-error @+1 {{'llama3' rope scaling needs a positive factor, got -1.000000e+00}}
  %y = infer.rope %x, %positions {head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 5.0e+05, kind = llama3, factor = -1.0, original_max_position_embeddings = 8192>} : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %y : tensor<?x384xf32>
}

// -----

func.func @rope_llama3_freq_factors(%x: tensor<?x384xf32>, %positions: tensor<?xi32>) -> tensor<?x384xf32> {
  // expected-error @+1 {{'llama3' rope scaling needs high_freq_factor (1.000000e+00) > low_freq_factor (4.000000e+00)}}
  %y = infer.rope %x, %positions {head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 5.0e+05, kind = llama3, factor = 8.0, low_freq_factor = 4.0, high_freq_factor = 1.0, original_max_position_embeddings = 8192>} : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %y : tensor<?x384xf32>
}

// -----

func.func @rope_llama3_context(%x: tensor<?x384xf32>, %positions: tensor<?xi32>) -> tensor<?x384xf32> {
  // expected-error @+1 {{'llama3' rope scaling needs a positive original_max_position_embeddings, got 0}}
  %y = infer.rope %x, %positions {head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 5.0e+05, kind = llama3, factor = 8.0>} : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %y : tensor<?x384xf32>
}

// -----

func.func @shard_dim() {
  // expected-error @+1 {{shard dim must be non-negative, got -1}}
  %w = infer.weight "w" {shard = #infer.shard<dim = -1, shards = 2>} : tensor<8x8xbf16>
  return
}

// -----

func.func @shard_shards() {
  // expected-error @+1 {{shard shards and replication must be positive, got 2 and 0}}
  %w = infer.weight "w" {shard = #infer.shard<dim = 0, shards = 2, replication = 0>} : tensor<8x8xbf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

// expected-error @+1 {{kv_cache needs positive num_layers, num_kv_heads, block_size and head_dim, got 2, 2, 0, 64}}
func.func @kv_cache_block_size(%c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 0, head_dim = 64, element_type = f32>) {
  return
}

// -----

// expected-error @+1 {{kv_cache element type must be a float type, got 'i8'}}
func.func @kv_cache_element_type(%c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = i8>) {
  return
}

// -----

// expected-error @+1 {{kv_cache element type of 8 bits must be f8E5M2 or f8E4M3FN, got 'f8E4M3FNUZ'}}
func.func @kv_cache_fp8_format(%c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f8E4M3FNUZ>) {
  return
}

// -----

func.func @weight_quant_element_type() {
  // expected-error @+1 {{'infer.weight' op expects f8E4M3FN elements with a 'quant' attribute, got 'bf16'}}
  %w = infer.weight "w" {quant = #infer.fp8<granularity = per_tensor>} : tensor<32x64xbf16>
  return
}

// -----

func.func @weight_fp8_without_quant() {
  // expected-error @+1 {{'infer.weight' op expects a 'quant' attribute (#infer.fp8) on a weight of fp8 elements}}
  %w = infer.weight "w" : tensor<32x64xf8E4M3FN>
  return
}

// -----

func.func @linear_fp8_format(%x: tensor<?x64xf32>, %w: tensor<32x64xf8E5M2>) {
  // expected-error @+1 {{'infer.linear' op expects an fp8 weight of f8E4M3FN elements (E4M3 with scales), got 'tensor<32x64xf8E5M2>'}}
  %y = infer.linear %x, %w : tensor<?x64xf32>, tensor<32x64xf8E5M2> -> tensor<?x32xf32>
  return
}

// -----

func.func @linear_fp8_bias(%x: tensor<?x64xf32>, %w: tensor<32x64xf8E4M3FN>, %b: tensor<32xf8E4M3FN>) {
  // expected-error @+1 {{'infer.linear' op expects a bias of at least 16-bit floats (only projection weights may be fp8), got 'tensor<32xf8E4M3FN>'}}
  %y = infer.linear %x, %w, %b : tensor<?x64xf32>, tensor<32x64xf8E4M3FN>, tensor<32xf8E4M3FN> -> tensor<?x32xf32>
  return
}

// -----

func.func @embedding_fp8(%t: tensor<100x64xf8E4M3FN>, %ids: tensor<?xi32>) {
  // expected-error @+1 {{'infer.embedding' op expects a table of at least 16-bit floats (only projection weights may be fp8), got 'tensor<100x64xf8E4M3FN>'}}
  %e = infer.embedding %t[%ids] : tensor<100x64xf8E4M3FN>, tensor<?xi32> -> tensor<?x64xf32>
  return
}

// -----

func.func @rms_norm_fp8(%x: tensor<?x64xf32>, %w: tensor<64xf8E4M3FN>) {
  // expected-error @+1 {{'infer.rms_norm' op expects a weight of at least 16-bit floats (only projection weights may be fp8), got 'tensor<64xf8E4M3FN>'}}
  %y = infer.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf8E4M3FN> -> tensor<?x64xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

func.func @weight_name() {
  // expected-error @+1 {{'infer.weight' op expects a non-empty checkpoint tensor name}}
  %w = infer.weight "" : tensor<8x8xbf16>
  return
}

// -----

func.func @weight_dynamic() {
  // expected-error @+1 {{'infer.weight' op expects a statically shaped result, got 'tensor<?x8xbf16>'}}
  %w = infer.weight "w" : tensor<?x8xbf16>
  return
}

// -----

func.func @weight_element_type() {
  // expected-error @+1 {{'infer.weight' op expects a float element type, got 'i8'}}
  %w = infer.weight "w" : tensor<8x8xi8>
  return
}

// -----

func.func @weight_shard_dim() {
  // expected-error @+1 {{'infer.weight' op expects shard dim 2 to be a dimension of 'tensor<8x8xbf16>'}}
  %w = infer.weight "w" {shard = #infer.shard<dim = 2, shards = 2>} : tensor<8x8xbf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Embedding and projections
//===----------------------------------------------------------------------===//

func.func @embedding_vocab_shards(%table: tensor<2048x384xbf16>, %ids: tensor<?xi32>) {
  // expected-error @+1 {{'infer.embedding' op expects a positive vocab_shards, got 0}}
  %h = infer.embedding %table[%ids] {vocab_shards = 0 : i64} : tensor<2048x384xbf16>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @embedding_result(%table: tensor<4096x384xbf16>, %ids: tensor<?xi32>) {
  // expected-error @+1 {{'infer.embedding' op expects result shape [?, 384] (ids rows, table columns), got 'tensor<?x128xf32>'}}
  %h = infer.embedding %table[%ids] : tensor<4096x384xbf16>, tensor<?xi32> -> tensor<?x128xf32>
  return
}

// -----

func.func @embedding_ids(%table: tensor<4096x384xbf16>, %ids: tensor<?xf32>) {
  // expected-error @+1 {{'infer.embedding' op operand #1 must be 1D tensor of signless integer values, but got 'tensor<?xf32>'}}
  %h = infer.embedding %table[%ids] : tensor<4096x384xbf16>, tensor<?xf32> -> tensor<?x384xf32>
  return
}

// -----

func.func @gather_rows_result(%x: tensor<?x384xf32>, %indices: tensor<4xi32>) {
  // expected-error @+1 {{'infer.gather_rows' op expects result shape [4, 384] (indices rows, input columns), got 'tensor<5x384xf32>'}}
  %s = infer.gather_rows %x[%indices] : tensor<?x384xf32>, tensor<4xi32> -> tensor<5x384xf32>
  return
}

// -----

func.func @linear_weight(%x: tensor<?x384xf32>, %w: tensor<128x256xbf16>) {
  // expected-error @+1 {{'infer.linear' op expects weight of shape [N, 384] to match the input features, got 'tensor<128x256xbf16>'}}
  %y = infer.linear %x, %w : tensor<?x384xf32>, tensor<128x256xbf16> -> tensor<?x128xf32>
  return
}

// -----

func.func @linear_bias(%x: tensor<?x384xf32>, %w: tensor<128x384xbf16>, %b: tensor<384xbf16>) {
  // expected-error @+1 {{'infer.linear' op expects bias of shape [128] to match the weight rows, got 'tensor<384xbf16>'}}
  %y = infer.linear %x, %w, %b : tensor<?x384xf32>, tensor<128x384xbf16>, tensor<384xbf16> -> tensor<?x128xf32>
  return
}

// -----

func.func @linear_result(%x: tensor<?x384xf32>, %w: tensor<128x384xbf16>) {
  // expected-error @+1 {{'infer.linear' op expects result shape [?, 128] (input rows, weight rows), got 'tensor<?x384xf32>'}}
  %y = infer.linear %x, %w : tensor<?x384xf32>, tensor<128x384xbf16> -> tensor<?x384xf32>
  return
}

// -----

func.func @linear_swiglu_result(%x: tensor<?x384xbf16>, %w: tensor<128x384xbf16>) {
  // expected-error @+1 {{'infer.linear_swiglu' op expects result shape [?, 64] (input rows, half the weight rows), got 'tensor<?x128xbf16>'}}
  %y = infer.linear_swiglu %x, %w : tensor<?x384xbf16>, tensor<128x384xbf16> -> tensor<?x128xbf16>
  return
}

// -----

func.func @linear_swiglu_odd_rows(%x: tensor<?x384xbf16>, %w: tensor<127x384xbf16>) {
  // expected-error @+1 {{'infer.linear_swiglu' op expects an even number of weight rows (gate rows, then as many up rows), got 127}}
  %y = infer.linear_swiglu %x, %w : tensor<?x384xbf16>, tensor<127x384xbf16> -> tensor<?x63xbf16>
  return
}

// -----

func.func @linear_swiglu_weight(%x: tensor<?x384xbf16>, %w: tensor<128x256xbf16>) {
  // expected-error @+1 {{'infer.linear_swiglu' op expects weight of shape [N, 384] to match the input features, got 'tensor<128x256xbf16>'}}
  %y = infer.linear_swiglu %x, %w : tensor<?x384xbf16>, tensor<128x256xbf16> -> tensor<?x64xbf16>
  return
}

// -----

func.func @linear_swiglu_type(%x: tensor<?x384xbf16>, %w: tensor<128x384xbf16>) {
  // expected-error @+1 {{'infer.linear_swiglu' op expects the result to have the input's element type 'bf16' (convert with infer.cast), got 'f32'}}
  %y = infer.linear_swiglu %x, %w : tensor<?x384xbf16>, tensor<128x384xbf16> -> tensor<?x64xf32>
  return
}

// -----

func.func @linear_residual_type(%x: tensor<?x384xbf16>, %w: tensor<128x384xbf16>, %r: tensor<?x128xf32>) {
  // expected-error @+1 {{'infer.linear' op failed to verify that residual has the result's type}}
  %y = "infer.linear"(%x, %w, %r) <{operandSegmentSizes = array<i32: 1, 1, 0, 1>}> : (tensor<?x384xbf16>, tensor<128x384xbf16>, tensor<?x128xf32>) -> tensor<?x128xbf16>
  return
}

// -----

func.func @linear_residual_shape(%x: tensor<?x384xbf16>, %w: tensor<128x384xbf16>, %r: tensor<?x384xbf16>) {
  // expected-error @+1 {{'infer.linear' op failed to verify that residual has the result's type}}
  %y = "infer.linear"(%x, %w, %r) <{operandSegmentSizes = array<i32: 1, 1, 0, 1>}> : (tensor<?x384xbf16>, tensor<128x384xbf16>, tensor<?x384xbf16>) -> tensor<?x128xbf16>
  return
}

// -----

func.func @linear_residual_parallel(%x: tensor<?x384xbf16>, %w: tensor<128x384xbf16>, %r: tensor<?x128xbf16>) {
  // expected-error @+1 {{'infer.linear' op expects no parallel attribute with a residual (a row-parallel rank would add it to its partial sum): fuse after sharding}}
  %y = infer.linear %x, %w residual(%r) {parallel = #infer.parallel<row>} : tensor<?x384xbf16>, tensor<128x384xbf16> -> tensor<?x128xbf16>
  return
}

// -----

func.func @logits_weight(%x: tensor<?x384xf32>, %w: tensor<4096x256xbf16>) {
  // expected-error @+1 {{'infer.logits' op expects weight of shape [N, 384] to match the input features, got 'tensor<4096x256xbf16>'}}
  %l = infer.logits %x, %w : tensor<?x384xf32>, tensor<4096x256xbf16> -> tensor<?x4096xf32>
  return
}

// -----

func.func @logits_result(%x: tensor<?x384xf32>, %w: tensor<4096x384xbf16>) {
  // expected-error @+1 {{'infer.logits' op expects result shape [?, 4096] (input rows, vocabulary size), got 'tensor<?x4000xf32>'}}
  %l = infer.logits %x, %w : tensor<?x384xf32>, tensor<4096x384xbf16> -> tensor<?x4000xf32>
  return
}

// -----

func.func @logits_element_type(%x: tensor<?x384xf32>, %w: tensor<4096x384xbf16>) {
  // expected-error @+1 {{'infer.logits' op result #0 must be 2D tensor of 32-bit float values, but got 'tensor<?x4096xbf16>'}}
  %l = infer.logits %x, %w : tensor<?x384xf32>, tensor<4096x384xbf16> -> tensor<?x4096xbf16>
  return
}

// -----

func.func @gather_rows_element_type(%x: tensor<?x384xbf16>, %rows: tensor<?xi32>) {
  // expected-error @+1 {{'infer.gather_rows' op expects the result to have the input's element type 'bf16' (convert with infer.cast), got 'f32'}}
  %y = infer.gather_rows %x[%rows] : tensor<?x384xbf16>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @linear_element_type(%x: tensor<?x384xbf16>, %w: tensor<128x384xbf16>) {
  // expected-error @+1 {{'infer.linear' op expects the result to have the input's element type 'bf16' (convert with infer.cast), got 'f32'}}
  %y = infer.linear %x, %w : tensor<?x384xbf16>, tensor<128x384xbf16> -> tensor<?x128xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Normalization and positions
//===----------------------------------------------------------------------===//

func.func @rms_norm_weight(%x: tensor<?x384xf32>, %w: tensor<128xbf16>) {
  // expected-error @+1 {{'infer.rms_norm' op expects weight of shape [384] to match the input features, got 'tensor<128xbf16>'}}
  %y = infer.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : tensor<?x384xf32>, tensor<128xbf16> -> tensor<?x384xf32>
  return
}

// -----

func.func @rms_norm_epsilon(%x: tensor<?x384xf32>, %w: tensor<384xbf16>) {
  // expected-error @+1 {{'infer.rms_norm' op expects a positive epsilon, got 0.000000e+00}}
  %y = infer.rms_norm %x, %w {epsilon = 0.0 : f64} : tensor<?x384xf32>, tensor<384xbf16> -> tensor<?x384xf32>
  return
}

// -----

func.func @rms_norm_result(%x: tensor<?x384xf32>, %w: tensor<384xbf16>) {
  // expected-error @+1 {{'infer.rms_norm' op expects result shape to match input shape [?, 384], got 'tensor<4x384xf32>'}}
  %y = infer.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : tensor<?x384xf32>, tensor<384xbf16> -> tensor<4x384xf32>
  return
}

// -----

func.func @rms_norm_element_type(%x: tensor<?x384xf32>, %w: tensor<384xbf16>) {
  // expected-error @+1 {{'infer.rms_norm' op expects the result to have the input's element type 'f32' (convert with infer.cast), got 'bf16'}}
  %y = infer.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : tensor<?x384xf32>, tensor<384xbf16> -> tensor<?x384xbf16>
  return
}

// -----

func.func @rope_head_dim(%x: tensor<?x384xf32>, %positions: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope' op expects a positive head_dim, got 0}}
  %y = infer.rope %x, %positions {head_dim = 0 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @rope_features(%x: tensor<?x384xf32>, %positions: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope' op expects input features (384) to be a multiple of head_dim (100)}}
  %y = infer.rope %x, %positions {head_dim = 100 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @rope_rotary_dim(%x: tensor<?x384xf32>, %positions: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope' op expects an even rotary_dim in (0, head_dim = 64], got 63}}
  %y = infer.rope %x, %positions {head_dim = 64 : i64, rotary_dim = 63 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @rope_result(%x: tensor<?x384xf32>, %positions: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope' op expects result type to match input type 'tensor<?x384xf32>', got 'tensor<?x384xf16>'}}
  %y = infer.rope %x, %positions {head_dim = 64 : i64, rotary_dim = 64 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

func.func @cast_same_type(%x: tensor<?x384xbf16>) {
  // expected-error @+1 {{'infer.cast' op expects a result element type other than the input's ('bf16')}}
  %y = infer.cast %x : tensor<?x384xbf16> -> tensor<?x384xbf16>
  return
}

// -----

func.func @cast_shape(%x: tensor<?x384xf32>) {
  // expected-error @+1 {{'infer.cast' op requires the same shape for all operands and results}}
  %y = infer.cast %x : tensor<?x384xf32> -> tensor<?x128xbf16>
  return
}

// -----

func.func @cast_fp8(%x: tensor<?x384xf32>) {
  // expected-error @+1 {{'infer.cast' op result #0 must be ranked tensor of 16-bit float or bfloat16 type or 32-bit float values, but got 'tensor<?x384xf8E4M3FN>'}}
  %y = infer.cast %x : tensor<?x384xf32> -> tensor<?x384xf8E4M3FN>
  return
}

// -----

func.func @gelu_approximate(%x: tensor<?x384xf32>) {
  // expected-error @+1 {{'infer.gelu' op expects approximate to be "none" or "tanh", got "erf"}}
  %y = infer.gelu %x {approximate = "erf"} : tensor<?x384xf32>
  return
}

// -----

func.func @add_types(%a: tensor<?x384xf32>, %b: tensor<?x128xf32>) {
  // expected-error @+1 {{'infer.add' op requires the same type for all operands and results}}
  %y = "infer.add"(%a, %b) : (tensor<?x384xf32>, tensor<?x128xf32>) -> tensor<?x384xf32>
  return
}

// -----

func.func @bias_add_shape(%x: tensor<?x384xf32>, %b: tensor<128xbf16>) {
  // expected-error @+1 {{'infer.bias_add' op expects bias of shape [384] to match the input features, got 'tensor<128xbf16>'}}
  %y = infer.bias_add %x, %b : tensor<?x384xf32>, tensor<128xbf16>
  return
}

// -----

func.func @bias_add_fp8(%x: tensor<?x384xf32>, %b: tensor<384xf8E4M3FN>) {
  // expected-error @+1 {{'infer.bias_add' op expects a bias of at least 16-bit floats (only projection weights may be fp8), got 'tensor<384xf8E4M3FN>'}}
  %y = infer.bias_add %x, %b : tensor<?x384xf32>, tensor<384xf8E4M3FN>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

func.func @attention_heads(%q: tensor<?x384xf32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.attention' op expects positive num_heads, num_kv_heads and head_dim, got 6, 0, 64}}
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 0 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @attention_groups(%q: tensor<?x384xf32>, %k: tensor<?x256xf32>, %v: tensor<?x256xf32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.attention' op expects num_heads (6) to be a multiple of num_kv_heads (4)}}
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 4 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x256xf32>, tensor<?x256xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @attention_query(%q: tensor<?x384xf32>, %k: tensor<?x64xf32>, %v: tensor<?x64xf32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.attention' op expects query features (384) to equal num_heads * head_dim (256)}}
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 2 : i64, head_dim = 32 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @attention_scale(%q: tensor<?x384xf32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.attention' op expects a positive scale, got -1.250000e-01}}
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = -1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @attention_window(%q: tensor<?x384xf32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.attention' op expects a non-negative sliding_window, got -1}}
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = -1 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @attention_layer(%q: tensor<?x384xf32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.attention' op expects a non-negative layer, got -1}}
  %o = infer.attention %q, %k, %v, %qsl {layer = -1 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @attention_result(%q: tensor<?x384xf32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.attention' op expects result type to match query type 'tensor<?x384xf32>', got 'tensor<4x384xf32>'}}
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<4x384xf32>
  return
}

// -----

func.func @attention_key(%q: tensor<?x384xf32>, %k: tensor<?x64xf32>, %v: tensor<?x128xf32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.attention' op expects key features (64) to equal num_kv_heads * head_dim (128)}}
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x64xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @attention_value(%q: tensor<?x384xf32>, %k: tensor<?x128xf32>, %v: tensor<?x64xf32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.attention' op expects value features (64) to equal num_kv_heads * head_dim (128)}}
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x64xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @kv_cache_write_layer(%c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>, %slots: tensor<?xi64>) {
  // expected-error @+1 {{'infer.kv_cache_write' op expects layer in [0, num_layers = 2), got 2}}
  %c1 = infer.kv_cache_write %c, %k, %v, %slots {layer = 2 : i64} : !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>
  return
}

// -----

func.func @kv_cache_write_key(%c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, %k: tensor<?x256xf32>, %v: tensor<?x128xf32>, %slots: tensor<?xi64>) {
  // expected-error @+1 {{'infer.kv_cache_write' op expects key features (256) to equal num_kv_heads * head_dim (128)}}
  %c1 = infer.kv_cache_write %c, %k, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x256xf32>, tensor<?x128xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>
  return
}

// -----

func.func @kv_cache_write_value(%c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, %k: tensor<?x128xf32>, %v: tensor<?x256xf32>, %slots: tensor<?xi64>) {
  // expected-error @+1 {{'infer.kv_cache_write' op expects value features (256) to equal num_kv_heads * head_dim (128)}}
  %c1 = infer.kv_cache_write %c, %k, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x128xf32>, tensor<?x256xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>
  return
}

// -----

func.func @kv_cache_write_result(%c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>, %slots: tensor<?xi64>) {
  // expected-error @+1 {{'infer.kv_cache_write' op expects result type to match cache type '!infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>', got '!infer.kv_cache<num_layers = 3, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>'}}
  %c1 = infer.kv_cache_write %c, %k, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 3, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>
  return
}

// -----

func.func @paged_attention_common(%q: tensor<?x384xf32>, %c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, %tables: tensor<?x?xi32>, %lens: tensor<?xi32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.paged_attention' op expects a positive scale, got 0.000000e+00}}
  %o = infer.paged_attention %q, %c, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 0.0 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @paged_attention_cache_shape(%q: tensor<?x384xf32>, %c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, %tables: tensor<?x?xi32>, %lens: tensor<?xi32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.paged_attention' op expects num_kv_heads and head_dim (3, 64) to match the cache's (2, 64)}}
  %o = infer.paged_attention %q, %c, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 3 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @paged_attention_key_rope_alone(%q: tensor<?x384xf32>, %c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, %tables: tensor<?x?xi32>, %lens: tensor<?xi32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.paged_attention' op expects key_rope and key_rotary_dim together}}
  %o = infer.paged_attention %q, %c, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64, key_rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x384xf32>, !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @paged_attention_key_rotary_dim_odd(%q: tensor<?x384xf32>, %c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, %tables: tensor<?x?xi32>, %lens: tensor<?xi32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.paged_attention' op expects an even key_rotary_dim in (0, head_dim = 64], got 63}}
  %o = infer.paged_attention %q, %c, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64, key_rope = #infer.rope<theta = 1.0e+04, kind = default>, key_rotary_dim = 63 : i64} : tensor<?x384xf32>, !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @paged_attention_key_rope_window(%q: tensor<?x384xf32>, %c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, %tables: tensor<?x?xi32>, %lens: tensor<?xi32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.paged_attention' op cannot rotate keys at their cache index (key_rope) with a sliding_window}}
  %o = infer.paged_attention %q, %c, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 128 : i64, key_rope = #infer.rope<theta = 1.0e+04, kind = default>, key_rotary_dim = 64 : i64} : tensor<?x384xf32>, !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @paged_attention_layer(%q: tensor<?x384xf32>, %c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, %tables: tensor<?x?xi32>, %lens: tensor<?xi32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.paged_attention' op expects layer in [0, num_layers = 2), got 2}}
  %o = infer.paged_attention %q, %c, %tables, %lens, %qsl {layer = 2 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

func.func @attention_key_type(%q: tensor<?x384xbf16>, %k: tensor<?x128xf32>, %v: tensor<?x128xbf16>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.attention' op expects the keys to have the query's element type 'bf16' (convert with infer.cast), got 'f32'}}
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xbf16>, tensor<?x128xf32>, tensor<?x128xbf16>, tensor<?xi32> -> tensor<?x384xbf16>
  return
}

// -----

func.func @attention_value_type(%q: tensor<?x384xbf16>, %k: tensor<?x128xbf16>, %v: tensor<?x128xf16>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.attention' op expects the values to have the query's element type 'bf16' (convert with infer.cast), got 'f16'}}
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xbf16>, tensor<?x128xbf16>, tensor<?x128xf16>, tensor<?xi32> -> tensor<?x384xbf16>
  return
}

// -----

func.func @kv_cache_write_key_type(%c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = bf16>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>, %slots: tensor<?xi64>) {
  // expected-error @+1 {{'infer.kv_cache_write' op expects the keys to have the cache's element type 'bf16' (convert with infer.cast), got 'f32'}}
  %c1 = infer.kv_cache_write %c0, %k, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = bf16>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = bf16>
  return
}

// -----

// An fp8 cache takes keys of any float type, but keys and values agree.
func.func @kv_cache_write_value_type(%c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f8E5M2>, %k: tensor<?x128xbf16>, %v: tensor<?x128xf32>, %slots: tensor<?xi64>) {
  // expected-error @+1 {{'infer.kv_cache_write' op expects the values to have the keys' element type 'bf16' (convert with infer.cast), got 'f32'}}
  %c1 = infer.kv_cache_write %c0, %k, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f8E5M2>, tensor<?x128xbf16>, tensor<?x128xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = f8E5M2>
  return
}

// -----

func.func @paged_attention_query_type(%q: tensor<?x384xf32>, %c: !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = bf16>, %tables: tensor<?x?xi32>, %lens: tensor<?xi32>, %qsl: tensor<?xi32>) {
  // expected-error @+1 {{'infer.paged_attention' op expects the query to have the cache's element type 'bf16' (convert with infer.cast), got 'f32'}}
  %o = infer.paged_attention %q, %c, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16, head_dim = 64, element_type = bf16>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

func.func @all_gather_dim(%x: tensor<?x2048xf32>) {
  // expected-error @+1 {{'infer.all_gather' op expects dim in [0, 2), got 2}}
  %y = infer.all_gather %x {dim = 2 : i64} : tensor<?x2048xf32> -> tensor<?x4096xf32>
  return
}

// -----

func.func @all_gather_rank(%x: tensor<?x2048xf32>) {
  // expected-error @+1 {{'infer.all_gather' op expects a result of the input's rank and element type, got 'tensor<?x4096xf16>'}}
  %y = infer.all_gather %x {dim = 1 : i64} : tensor<?x2048xf32> -> tensor<?x4096xf16>
  return
}

// -----

func.func @all_gather_other_dim(%x: tensor<8x2048xf32>) {
  // expected-error @+1 {{'infer.all_gather' op expects result dimension 0 to equal the input's (8), got 16}}
  %y = infer.all_gather %x {dim = 1 : i64} : tensor<8x2048xf32> -> tensor<16x4096xf32>
  return
}

// -----

func.func @all_gather_multiple(%x: tensor<?x2048xf32>) {
  // expected-error @+1 {{'infer.all_gather' op expects result dimension 1 to be a multiple of the input's (2048), got 3000}}
  %y = infer.all_gather %x {dim = 1 : i64} : tensor<?x2048xf32> -> tensor<?x3000xf32>
  return
}

//===----------------------------------------------------------------------===//
// Operations infer-fuse creates
//===----------------------------------------------------------------------===//

// -----

func.func @concat_rows_mismatch() -> tensor<100x8xf32> {
  %a = infer.weight "a" : tensor<64x8xf32>
  %b = infer.weight "b" : tensor<32x8xf32>
  // expected-error @+1 {{expects 96 result rows (the sum of the inputs'), got 'tensor<100x8xf32>'}}
  %w = infer.concat_weights %a, %b : tensor<64x8xf32>, tensor<32x8xf32> -> tensor<100x8xf32>
  return %w : tensor<100x8xf32>
}

// -----

func.func @concat_columns_mismatch() -> tensor<96x8xf32> {
  %a = infer.weight "a" : tensor<64x8xf32>
  %b = infer.weight "b" : tensor<32x4xf32>
  // expected-error @+1 {{expects input #1 to match the result in element type and all dimensions but the first, got 'tensor<32x4xf32>' for 'tensor<96x8xf32>'}}
  %w = infer.concat_weights %a, %b : tensor<64x8xf32>, tensor<32x4xf32> -> tensor<96x8xf32>
  return %w : tensor<96x8xf32>
}

// -----

func.func @split_widths(%x: tensor<?x96xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{expects the results' feature widths to add up to the input's (96), got 128}}
  %a, %b = infer.split %x : tensor<?x96xf32> -> tensor<?x64xf32>, tensor<?x64xf32>
  return %a : tensor<?x64xf32>
}

// -----

func.func @add_rms_norm_operands(%a: tensor<?x8xf32>, %b: tensor<?x8xf16>, %w: tensor<8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expects operands of one type, got 'tensor<?x8xf32>' and 'tensor<?x8xf16>'}}
  %s, %y = infer.add_rms_norm %a, %b, %w {epsilon = 1.0e-05 : f64} : tensor<?x8xf32>, tensor<?x8xf16>, tensor<8xf32> -> tensor<?x8xf32>, tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @add_rms_norm_element_type(%a: tensor<?x8xbf16>, %b: tensor<?x8xbf16>, %w: tensor<8xbf16>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'infer.add_rms_norm' op expects the result to have the operands' element type 'bf16' (convert with infer.cast), got 'f32'}}
  %s, %y = infer.add_rms_norm %a, %b, %w {epsilon = 1.0e-05 : f64} : tensor<?x8xbf16>, tensor<?x8xbf16>, tensor<8xbf16> -> tensor<?x8xbf16>, tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @rope_cache_write_key_type(%c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %slots: tensor<?xi64>, %pos: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope_kv_cache_write' op expects the keys to have the cache's element type 'bf16' (convert with infer.cast), got 'f32'}}
  %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>
  return
}

// -----

func.func @rope_cache_write_head_dim(%c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %slots: tensor<?xi64>, %pos: tensor<?xi32>) {
  // expected-error @+1 {{expects head_dim (8) to match the cache's (16)}}
  %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 8 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  return
}

// -----

func.func @rope_qkv_cache_write_layer(%c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, %q: tensor<?x64xbf16>, %k: tensor<?x32xbf16>, %v: tensor<?x32xbf16>, %slots: tensor<?xi64>, %pos: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope_qkv_cache_write' op expects layer in [0, num_layers = 1), got 1}}
  %qr, %c1 = infer.rope_qkv_cache_write %c0, %q, %k, %v, %slots, %pos {layer = 1 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?xi64>, tensor<?xi32> -> tensor<?x64xbf16>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>
  return
}

// -----

func.func @rope_qkv_cache_write_head_dim(%c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, %q: tensor<?x64xbf16>, %k: tensor<?x32xbf16>, %v: tensor<?x32xbf16>, %slots: tensor<?xi64>, %pos: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope_qkv_cache_write' op expects head_dim (8) to match the cache's (16)}}
  %qr, %c1 = infer.rope_qkv_cache_write %c0, %q, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 8 : i64, rotary_dim = 8 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?xi64>, tensor<?xi32> -> tensor<?x64xbf16>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>
  return
}

// -----

func.func @rope_qkv_cache_write_rotary_dim(%c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, %q: tensor<?x64xbf16>, %k: tensor<?x32xbf16>, %v: tensor<?x32xbf16>, %slots: tensor<?xi64>, %pos: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope_qkv_cache_write' op expects an even rotary_dim in (0, head_dim = 16], got 18}}
  %qr, %c1 = infer.rope_qkv_cache_write %c0, %q, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 18 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?xi64>, tensor<?xi32> -> tensor<?x64xbf16>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>
  return
}

// -----

func.func @rope_qkv_cache_write_dynamic_lengths(%c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, %q: tensor<?x64xbf16>, %k: tensor<?x32xbf16>, %v: tensor<?x32xbf16>, %slots: tensor<?xi64>, %pos: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope_qkv_cache_write' op expects a query_start_loc operand with a 'dynamic' rope}}
  %qr, %c1 = infer.rope_qkv_cache_write %c0, %q, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 16>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?xi64>, tensor<?xi32> -> tensor<?x64xbf16>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>
  return
}

// -----

func.func @rope_qkv_cache_write_key_features(%c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, %q: tensor<?x64xbf16>, %k: tensor<?x48xbf16>, %v: tensor<?x48xbf16>, %slots: tensor<?xi64>, %pos: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope_qkv_cache_write' op expects key features (48) to equal num_kv_heads * head_dim (32)}}
  %qr, %c1 = infer.rope_qkv_cache_write %c0, %q, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, tensor<?x64xbf16>, tensor<?x48xbf16>, tensor<?x48xbf16>, tensor<?xi64>, tensor<?xi32> -> tensor<?x64xbf16>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>
  return
}

// -----

func.func @rope_qkv_cache_write_query_features(%c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, %q: tensor<?x40xbf16>, %k: tensor<?x32xbf16>, %v: tensor<?x32xbf16>, %slots: tensor<?xi64>, %pos: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope_qkv_cache_write' op expects query features (40) to be a multiple of head_dim (16)}}
  %qr, %c1 = infer.rope_qkv_cache_write %c0, %q, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, tensor<?x40xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?xi64>, tensor<?xi32> -> tensor<?x40xbf16>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>
  return
}

// -----

func.func @rope_qkv_cache_write_query_type(%c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, %q: tensor<?x64xf32>, %k: tensor<?x32xbf16>, %v: tensor<?x32xbf16>, %slots: tensor<?xi64>, %pos: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope_qkv_cache_write' op expects the query to have the keys' element type 'bf16' (convert with infer.cast), got 'f32'}}
  %qr, %c1 = infer.rope_qkv_cache_write %c0, %q, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, tensor<?x64xf32>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?xi64>, tensor<?xi32> -> tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>
  return
}

// -----

func.func @rope_qkv_cache_write_key_type(%c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, %q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %slots: tensor<?xi64>, %pos: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope_qkv_cache_write' op expects the keys to have the cache's element type 'bf16' (convert with infer.cast), got 'f32'}}
  %qr, %c1 = infer.rope_qkv_cache_write %c0, %q, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> tensor<?x64xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>
  return
}

// -----

func.func @rope_qkv_cache_write_result_type(%c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, %q: tensor<?x64xbf16>, %k: tensor<?x32xbf16>, %v: tensor<?x32xbf16>, %slots: tensor<?xi64>, %pos: tensor<?xi32>) {
  // expected-error @+1 {{'infer.rope_qkv_cache_write' op expects result type to match query type 'tensor<?x64xbf16>', got 'tensor<?x32xbf16>'}}
  %qr, %c1 = infer.rope_qkv_cache_write %c0, %q, %k, %v, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?xi64>, tensor<?xi32> -> tensor<?x32xbf16>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>
  return
}

// -----

func.func @fused_non_elementwise(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %y = infer.fused ins(%x : tensor<?x8xf32>) -> tensor<?x8xf32> {
  ^bb0(%a: tensor<?x8xf32>):
    // expected-error @+1 {{'infer.all_reduce' op is not an elementwise operation an 'infer.fused' body may hold}}
    %r = infer.all_reduce %a : tensor<?x8xf32>
    infer.yield %r : tensor<?x8xf32>
  }
  return %y : tensor<?x8xf32>
}

// -----

func.func @fused_shapes(%x: tensor<?x8xf32>, %z: tensor<?x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expects every input and result to have shape [?, 8], got 'tensor<?x4xf32>'}}
  %y = infer.fused ins(%x, %z : tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?x8xf32> {
  ^bb0(%a: tensor<?x8xf32>, %b: tensor<?x4xf32>):
    infer.yield %a : tensor<?x8xf32>
  }
  return %y : tensor<?x8xf32>
}

// -----

func.func @fused_block_arguments(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expects one block argument per input (1), got 2}}
  %y = infer.fused ins(%x : tensor<?x8xf32>) -> tensor<?x8xf32> {
  ^bb0(%a: tensor<?x8xf32>, %b: tensor<?x8xf32>):
    infer.yield %a : tensor<?x8xf32>
  }
  return %y : tensor<?x8xf32>
}

// -----

// The body computes in f32: a bf16 input is an f32 block argument.
func.func @fused_argument_type(%x: tensor<?x8xbf16>) -> tensor<?x8xbf16> {
  // expected-error @+1 {{expects block argument #0 to be the input in f32, 'tensor<?x8xf32>', got 'tensor<?x8xbf16>'}}
  %y = infer.fused ins(%x : tensor<?x8xbf16>) -> tensor<?x8xbf16> {
  ^bb0(%a: tensor<?x8xbf16>):
    %s = infer.silu %a : tensor<?x8xbf16>
    infer.yield %s : tensor<?x8xbf16>
  }
  return %y : tensor<?x8xbf16>
}

// -----

func.func @fused_yield_count(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %y = infer.fused ins(%x : tensor<?x8xf32>) -> tensor<?x8xf32> {
  ^bb0(%a: tensor<?x8xf32>):
    %s = infer.silu %a : tensor<?x8xf32>
    // expected-error @+1 {{'infer.yield' op expects one value per result of the enclosing 'infer.fused' (1), got 2}}
    infer.yield %s, %a : tensor<?x8xf32>, tensor<?x8xf32>
  }
  return %y : tensor<?x8xf32>
}

// -----

// Each yielded f32 value is rounded to its result's type by the region.
func.func @fused_yield_type(%x: tensor<?x8xbf16>) -> tensor<?x8xbf16> {
  %y = infer.fused ins(%x : tensor<?x8xbf16>) -> tensor<?x8xbf16> {
  ^bb0(%a: tensor<?x8xf32>):
    %s = infer.silu %a : tensor<?x8xf32>
    %b = infer.cast %s : tensor<?x8xf32> -> tensor<?x8xbf16>
    // expected-error @+1 {{'infer.yield' op expects value #0 to be result #0 of the enclosing 'infer.fused' in f32, 'tensor<?x8xf32>', got 'tensor<?x8xbf16>'}}
    infer.yield %b : tensor<?x8xbf16>
  }
  return %y : tensor<?x8xbf16>
}
