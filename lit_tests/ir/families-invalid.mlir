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
