// The model families and rope / activation variants of
// tests/fixtures/families import as the decoder of their architecture.

// RUN: infer import %S/../../tests/fixtures/families/llama-yarn | FileCheck %s --check-prefix=YARN
// YaRN: the interpolated frequencies in the rope, its attention factor
// (0.1 ln 4 + 1)^2 folded into the scale: 1.2964 / sqrt(16).
// YARN: infer.rope {{.*}}rope = #infer.rope<theta = 1.000000e+04, kind = yarn, factor = 4.000000e+00, original_max_position_embeddings = 1024>
// YARN: infer.attention {{.*}}scale = 0.32411{{[0-9]*}} : f64

// RUN: infer import %S/../../tests/fixtures/families/phi3-longrope | FileCheck %s --check-prefix=LONGROPE
// Phi-3: one qkv_proj and one gate_up_proj, each split; LongRoPE's factors
// and attention factor sqrt(1 + ln(256 / 64) / ln 64), squared: 4 / 3 / sqrt(16).
// LONGROPE: infer.weight "model.layers.0.self_attn.qkv_proj.weight" : tensor<192x128xbf16>
// LONGROPE: infer.split {{.*}} : tensor<?x192xf32> -> tensor<?x128xf32>, tensor<?x32xf32>, tensor<?x32xf32>
// LONGROPE: infer.rope {{.*}}rope = #infer.rope<theta = 1.000000e+04, kind = longrope, original_max_position_embeddings = 64, short_factor = [1.000000e+00, 1.100000e+00, 1.300000e+00, 1.600000e+00, 2.000000e+00, 2.500000e+00, 3.100000e+00, 3.800000e+00], long_factor = [1.000000e+00, 1.500000e+00, 2.200000e+00, 3.000000e+00, 4.000000e+00, 5.200000e+00, 6.600000e+00, 8.000000e+00]>, rotary_dim = 16 : i64}
// LONGROPE: infer.attention {{.*}}scale = 0.33333{{[0-9]*}} : f64
// LONGROPE: infer.weight "model.layers.0.mlp.gate_up_proj.weight" : tensor<512x128xbf16>
// LONGROPE: infer.split {{.*}} : tensor<?x512xf32> -> tensor<?x256xf32>, tensor<?x256xf32>

// RUN: infer import %S/../../tests/fixtures/families/llama-dynamic-ntk | FileCheck %s --check-prefix=DYNAMIC
// Dynamic NTK: max_position_embeddings is where the base starts to grow,
// not a limit of the artifact (0: none); both ropes read query_start_loc
// (the forward function's third input).
// DYNAMIC: module attributes {infer.model = {{{.*}}max_position_embeddings = 0 : i64
// DYNAMIC: func.func @forward(%{{.*}}: tensor<?xi32> {infer.input = "token_ids"}, %[[POS:.*]]: tensor<?xi32> {infer.input = "positions"}, %[[QSL:.*]]: tensor<?xi32> {infer.input = "query_start_loc"}
// DYNAMIC: infer.rope %{{.*}}, %[[POS]], %[[QSL]] {head_dim = 16 : i64, rope = #infer.rope<theta = 1.000000e+04, kind = dynamic, factor = 2.000000e+00, original_max_position_embeddings = 16>, rotary_dim = 16 : i64} : tensor<?x128xf32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x128xf32>
// DYNAMIC: infer.rope %{{.*}}, %[[POS]], %[[QSL]] {{.*}}kind = dynamic{{.*}} -> tensor<?x32xf32>
// DYNAMIC: infer.attention {{.*}}scale = 2.500000e-01 : f64

// RUN: infer import %S/../../tests/fixtures/families/phi3-partial-rotary | FileCheck %s --check-prefix=PARTIAL
// PARTIAL: infer.rope {{.*}}{head_dim = 16 : i64, rope = #infer.rope<theta = 1.000000e+04, kind = default>, rotary_dim = 8 : i64}

// RUN: infer import %S/../../tests/fixtures/families/llama-gelu-exact | FileCheck %s --check-prefix=GELU
// GELU: infer.gelu %{{[0-9]+}} : tensor<?x256xf32>
// GELU-NOT: tanh

// RUN: infer import %S/../../tests/fixtures/families/qwen3 | FileCheck %s --check-prefix=QWEN3
// Qwen3: per-head q/k RMSNorm before the rope.
// QWEN3: %[[Q:.*]] = infer.linear {{.*}} -> tensor<?x256xf32>
// QWEN3: %[[K:.*]] = infer.linear {{.*}} -> tensor<?x64xf32>
// QWEN3: %[[QN:.*]] = infer.rms_norm %[[Q]], {{.*}} {epsilon = 9.9999999999999995E-7 : f64, head_dim = 32 : i64} : tensor<?x256xf32>, tensor<32xbf16>
// QWEN3: %[[KN:.*]] = infer.rms_norm %[[K]], {{.*}} {epsilon = 9.9999999999999995E-7 : f64, head_dim = 32 : i64} : tensor<?x64xf32>, tensor<32xbf16>
// QWEN3: infer.rope %[[QN]]
// QWEN3: infer.rope %[[KN]]

// RUN: infer import %S/../../tests/fixtures/families/gemma2 | FileCheck %s --check-prefix=GEMMA2
// Gemma 2: scaled embeddings, (1 + w) norms, sandwich norms (the attention
// and MLP outputs normalized before their residual adds), gelu-tanh,
// query_pre_attn_scalar 24, soft-capping, sliding window on layers 0 and 2.
// GEMMA2: infer.embedding {{.*}} {scale = 11.31370{{[0-9]*}} : f64}
// GEMMA2: infer.rms_norm {{.*}}weight_offset = 1.000000e+00 : f64
// GEMMA2: infer.attention {{.*}}{head_dim = 32 : i64, layer = 0 : i64, logit_softcap = 5.000000e+01 : f64, num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 0.20412{{[0-9]*}} : f64, sliding_window = 8 : i64}
// GEMMA2: %[[O:.*]] = infer.linear
// GEMMA2: %[[ON:.*]] = infer.rms_norm %[[O]], {{.*}}weight_offset = 1.000000e+00 : f64
// GEMMA2: %[[H:.*]] = infer.add %{{.*}}, %[[ON]]
// GEMMA2: infer.rms_norm %[[H]], {{.*}}weight_offset = 1.000000e+00 : f64
// GEMMA2: infer.gelu {{.*}} {approximate = "tanh"}
// GEMMA2: %[[D:.*]] = infer.linear
// GEMMA2: %[[DN:.*]] = infer.rms_norm %[[D]], {{.*}}weight_offset = 1.000000e+00 : f64
// GEMMA2: infer.add %[[H]], %[[DN]]
// GEMMA2: infer.attention {{.*}}layer = 1 : i64{{.*}}sliding_window = 0 : i64
// GEMMA2: infer.attention {{.*}}layer = 2 : i64{{.*}}sliding_window = 8 : i64
// GEMMA2: infer.logits {{.*}} {softcap = 3.000000e+01 : f64}

// RUN: infer import %S/../../tests/fixtures/families/gemma3 | FileCheck %s --check-prefix=GEMMA3
// Gemma 3: per-head (1 + w) q/k norms; the sliding layers' rope base 1e4,
// the full layer's 1e6; no soft-capping.
// GEMMA3: infer.rms_norm {{.*}}{epsilon = 9.9999999999999995E-7 : f64, head_dim = 32 : i64, weight_offset = 1.000000e+00 : f64}
// GEMMA3: infer.rope {{.*}}rope = #infer.rope<theta = 1.000000e+04, kind = default>
// GEMMA3: infer.attention {{.*}}layer = 0 : i64
// GEMMA3: infer.rope {{.*}}rope = #infer.rope<theta = 1.000000e+06, kind = default>
// GEMMA3: infer.attention {{.*}}layer = 1 : i64
// GEMMA3: infer.rope {{.*}}rope = #infer.rope<theta = 1.000000e+04, kind = default>
// GEMMA3: infer.attention {{.*}}layer = 2 : i64
// GEMMA3-NOT: softcap
