// RUN: infer-opt %s --split-input-file --allow-unregistered-dialect --infer-page-kv-cache --verify-diagnostics

// Inputs infer-page-kv-cache rejects: one case per diagnostic.

// expected-error @+1 {{'func.func' op has infer.attention ops but no argument marked {infer.input = "slot_mapping"}}}
func.func @missing_slot_mapping(%qsl: tensor<?xi32>,
                                %lens: tensor<?xi32> {infer.input = "context_lens"},
                                %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                                %q: tensor<?x384xf32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>) -> tensor<?x384xf32> {
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %o : tensor<?x384xf32>
}

// -----

// expected-error @+1 {{'func.func' op has infer.attention ops but no argument marked {infer.input = "block_tables"}}}
func.func @missing_block_tables(%qsl: tensor<?xi32>,
                                %lens: tensor<?xi32> {infer.input = "context_lens"},
                                %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                                %q: tensor<?x384xf32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>) -> tensor<?x384xf32> {
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %o : tensor<?x384xf32>
}

// -----

// expected-error @+1 {{'func.func' op has infer.attention ops but no argument marked {infer.input = "context_lens"}}}
func.func @missing_context_lens(%qsl: tensor<?xi32>,
                                %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                                %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                                %q: tensor<?x384xf32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>) -> tensor<?x384xf32> {
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %o : tensor<?x384xf32>
}

// -----

func.func @inconsistent_layers(%qsl: tensor<?xi32>,
                               %lens: tensor<?xi32> {infer.input = "context_lens"},
                               %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                               %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                               %q: tensor<?x384xf32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>) -> tensor<?x384xf32> {
  // expected-note @+1 {{layer 0}}
  %o0 = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  // expected-error @+1 {{'infer.attention' op cannot share a KV cache with layer 0: (num_kv_heads, head_dim, key element type) = (1, 128, 'f32') vs (2, 64, 'f32')}}
  %o1 = infer.attention %o0, %k, %v, %qsl {layer = 1 : i64, num_heads = 3 : i64, num_kv_heads = 1 : i64, head_dim = 128 : i64, scale = 0.088388347648318447 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %o1 : tensor<?x384xf32>
}

// -----

func.func @reused_layer(%qsl: tensor<?xi32>,
                        %lens: tensor<?xi32> {infer.input = "context_lens"},
                        %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                        %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                        %q: tensor<?x384xf32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>) -> tensor<?x384xf32> {
  // expected-note @+1 {{first use of the layer}}
  %o0 = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  // expected-error @+1 {{'infer.attention' op reuses KV-cache layer 0}}
  %o1 = infer.attention %o0, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
  return %o1 : tensor<?x384xf32>
}

// -----

func.func @nested_attention(%qsl: tensor<?xi32>,
                            %lens: tensor<?xi32> {infer.input = "context_lens"},
                            %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                            %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                            %q: tensor<?x384xf32>, %k: tensor<?x128xf32>, %v: tensor<?x128xf32>) {
  "test.region"() ({
    // expected-error @+1 {{'infer.attention' op must be in the entry block of its function to be paged}}
    %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 1.250000e-01 : f64, sliding_window = 0 : i64} : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi32> -> tensor<?x384xf32>
    "test.yield"() : () -> ()
  }) : () -> ()
  return
}
