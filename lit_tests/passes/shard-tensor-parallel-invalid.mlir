// RUN: infer-opt %s --split-input-file --verify-diagnostics --infer-shard-tensor-parallel="tp=4"

// Models that cannot be split over four ranks, one per diagnostic.

module attributes {infer.model = {architecture = "LlamaForCausalLM"}} {
func.func @heads_not_divisible(%q: tensor<?x48xf32>, %k: tensor<?x16xf32>, %qsl: tensor<?xi32>) -> tensor<?x48xf32> {
  // expected-error @+1 {{'infer.attention' op cannot be split over tp = 4 ranks: num_heads (6) is not divisible by tp}}
  %o = infer.attention %q, %k, %k, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sliding_window = 0 : i64} : tensor<?x48xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?xi32> -> tensor<?x48xf32>
  return %o : tensor<?x48xf32>
}
}

// -----

module attributes {infer.model = {architecture = "LlamaForCausalLM"}} {
func.func @more_ranks_than_heads(%q: tensor<?x16xf32>, %qsl: tensor<?xi32>) -> tensor<?x16xf32> {
  // expected-error @+1 {{'infer.attention' op cannot be split over tp = 4 ranks: it has only 2 heads}}
  %o = infer.attention %q, %q, %q, %qsl {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sliding_window = 0 : i64} : tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?xi32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}
}

// -----

module attributes {infer.model = {architecture = "LlamaForCausalLM"}} {
func.func @kv_heads(%q: tensor<?x96xf32>, %k: tensor<?x24xf32>, %qsl: tensor<?xi32>) -> tensor<?x96xf32> {
  // expected-error @+1 {{'infer.attention' op cannot be split over tp = 4 ranks: num_kv_heads (3) neither divides nor is divisible by tp}}
  %o = infer.attention %q, %k, %k, %qsl {layer = 0 : i64, num_heads = 12 : i64, num_kv_heads = 3 : i64, head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sliding_window = 0 : i64} : tensor<?x96xf32>, tensor<?x24xf32>, tensor<?x24xf32>, tensor<?xi32> -> tensor<?x96xf32>
  return %o : tensor<?x96xf32>
}
}

// -----

module attributes {infer.model = {architecture = "LlamaForCausalLM"}} {
func.func @uneven_weight(%x: tensor<?x64xf32>) -> tensor<?x6xf32> {
  // expected-error @+1 {{'infer.weight' op cannot be split into 4 slices along dimension 0 of size 6}}
  %w = infer.weight "model.layers.0.mlp.up_proj.weight" : tensor<6x64xf32>
  %y = infer.linear %x, %w {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<6x64xf32> -> tensor<?x6xf32>
  return %y : tensor<?x6xf32>
}
}

// -----

// A query projection without #infer.parallel stays whole on every rank.
module {
func.func @query_not_split(%x: tensor<?x64xf32>, %k: tensor<?x16xf32>, %qsl: tensor<?xi32>) -> tensor<?x64xf32> {
  %w = infer.weight "q.weight" : tensor<64x64xf32>
  %q = infer.linear %x, %w : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  // expected-error @+1 {{'infer.attention' op reads queries that are not split by head over tp = 4 ranks (its query projection needs #infer.parallel<column>)}}
  %o = infer.attention %q, %k, %k, %qsl {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, scale = 0.35355339059327373 : f64, sliding_window = 0 : i64} : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?xi32> -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}
}

// -----

module {
func.func @uneven_part(%x: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x6xf32>) {
  %w = infer.weight "gate_up.weight" : tensor<70x64xf32>
  // expected-error @+1 {{'infer.linear' op cannot split its part of 6 rows into 4 slices}}
  %y = infer.linear %x, %w {parallel = #infer.parallel<column, parts = [64, 6], kv_parts = [false, false]>} : tensor<?x64xf32>, tensor<70x64xf32> -> tensor<?x70xf32>
  %a, %b = infer.split %y : tensor<?x70xf32> -> tensor<?x64xf32>, tensor<?x6xf32>
  return %a, %b : tensor<?x64xf32>, tensor<?x6xf32>
}
}

// -----

module {
func.func @parts_not_split(%x: tensor<?x64xf32>) -> tensor<?x128xf32> {
  %w = infer.weight "gate_up.weight" : tensor<128x64xf32>
  // expected-error @+1 {{'infer.linear' op with parallel parts must be read only by an infer.split into those parts}}
  %y = infer.linear %x, %w {parallel = #infer.parallel<column, parts = [64, 64], kv_parts = [false, false]>} : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}
}

// -----

// expected-error @+1 {{infer-shard-tensor-parallel: the module is already split ('infer.tp')}}
module attributes {infer.model = {architecture = "LlamaForCausalLM"}, infer.tp = 2 : i64} {
}
