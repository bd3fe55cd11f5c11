// RUN: infer import %S/../../tests/fixtures/llama-headdim32-mqa | FileCheck %s

// head_dim 32 while hidden_size / num_attention_heads is 16, and a single KV
// head (MQA): q is 8 x 32 = 256 wide, k/v 32, o_proj maps 256 back to 128.

// CHECK:       head_dim = 32 : i64, hidden_size = 128 : i64
// CHECK-SAME:  num_heads = 8 : i64, num_kv_heads = 1 : i64
// CHECK-LABEL: func.func @forward(
// CHECK:       infer.linear {{.*}} : tensor<?x128xf32>, tensor<256x128xbf16> -> tensor<?x256xf32>
// CHECK:       infer.linear {{.*}} : tensor<?x128xf32>, tensor<32x128xbf16> -> tensor<?x32xf32>
// CHECK:       infer.linear {{.*}} : tensor<?x128xf32>, tensor<32x128xbf16> -> tensor<?x32xf32>
// CHECK:       infer.rope {{.*}}head_dim = 32 : i64{{.*}}rotary_dim = 32 : i64{{.*}} : tensor<?x256xf32>
// CHECK:       infer.attention {{.*}}head_dim = 32 : i64, layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 1 : i64, scale = 0.17677669529663687 : f64
// CHECK:       infer.linear {{.*}} : tensor<?x256xf32>, tensor<128x256xbf16> -> tensor<?x128xf32>
