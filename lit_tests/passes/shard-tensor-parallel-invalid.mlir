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
  %y = infer.linear %x, %w : tensor<?x64xf32>, tensor<6x64xf32> -> tensor<?x6xf32>
  return %y : tensor<?x6xf32>
}
}

// -----

// expected-error @+1 {{infer-shard-tensor-parallel: no sharding policy for architecture 'GPT2LMHeadModel'}}
module attributes {infer.model = {architecture = "GPT2LMHeadModel"}} {
}

// -----

// expected-error @+1 {{infer-shard-tensor-parallel: the module has no 'infer.model' architecture to choose a sharding policy}}
module {
}

// -----

// expected-error @+1 {{infer-shard-tensor-parallel: the module is already split ('infer.tp')}}
module attributes {infer.model = {architecture = "LlamaForCausalLM"}, infer.tp = 2 : i64} {
}
