// RUN: rm -rf %t && %python %S/../../tests/fixtures/make_llama_row_bias.py %t
// RUN: infer import %t | FileCheck %s

// Llama with attention_bias and mlp_bias (config.json): every projection
// reads its bias, o_proj and down_proj included.

// CHECK-LABEL: func.func @forward(
// CHECK:       %[[Q_W:.+]] = infer.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xbf16>
// CHECK-NEXT:  %[[Q_B:.+]] = infer.weight "model.layers.0.self_attn.q_proj.bias" : tensor<64xbf16>
// CHECK-NEXT:  infer.linear %{{.+}}, %[[Q_W]], %[[Q_B]] {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<64x64xbf16>, tensor<64xbf16> -> tensor<?x64xf32>
// CHECK:       infer.weight "model.layers.0.self_attn.k_proj.bias" : tensor<32xbf16>
// CHECK:       infer.weight "model.layers.0.self_attn.v_proj.bias" : tensor<32xbf16>
// CHECK:       %[[O_W:.+]] = infer.weight "model.layers.0.self_attn.o_proj.weight" : tensor<64x64xbf16>
// CHECK-NEXT:  %[[O_B:.+]] = infer.weight "model.layers.0.self_attn.o_proj.bias" : tensor<64xbf16>
// CHECK-NEXT:  infer.linear %{{.+}}, %[[O_W]], %[[O_B]] {parallel = #infer.parallel<row>} : tensor<?x64xf32>, tensor<64x64xbf16>, tensor<64xbf16> -> tensor<?x64xf32>
// CHECK:       infer.weight "model.layers.0.mlp.gate_proj.bias" : tensor<128xbf16>
// CHECK:       infer.weight "model.layers.0.mlp.up_proj.bias" : tensor<128xbf16>
// CHECK:       %[[DOWN_W:.+]] = infer.weight "model.layers.0.mlp.down_proj.weight" : tensor<64x128xbf16>
// CHECK-NEXT:  %[[DOWN_B:.+]] = infer.weight "model.layers.0.mlp.down_proj.bias" : tensor<64xbf16>
// CHECK-NEXT:  infer.linear %{{.+}}, %[[DOWN_W]], %[[DOWN_B]] {parallel = #infer.parallel<row>} : tensor<?x128xf32>, tensor<64x128xbf16>, tensor<64xbf16> -> tensor<?x64xf32>
