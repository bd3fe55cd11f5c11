// RUN: infer-opt %s --infer-plan-memory --test-infer-print-plan -o /dev/null | FileCheck %s

// Every plan value carries its IR element type: a bf16 program lowers to
// bf16 params, KV cache and activations, an infer.cast to a `cast` step
// whose result value has the target dtype, and the logits stay f32. The
// workspace offsets are bytes: 64 per row of 32 bf16 features, 128 of f32.

// CHECK:      "kv_cache": {
// CHECK-NEXT:   "block_size": 16,
// CHECK-NEXT:   "dtype": "bf16",

// CHECK:      "op": "paged_attention",
// CHECK:      "op": "cast",
// CHECK-NEXT: "operands": [
// CHECK-NEXT:   [[ATTN:[0-9]+]]
// CHECK-NEXT: ],
// CHECK-NEXT: "results": [
// CHECK-NEXT:   [[CAST:[0-9]+]]
// CHECK-NEXT: ]
// CHECK:      "op": "logits",

// CHECK:      "dtype": "bf16",
// CHECK-NEXT: "id": 6,
// CHECK-NEXT: "kind": "kv_cache",
// CHECK:      "dtype": "bf16",
// CHECK-NEXT: "id": 7,
// CHECK-NEXT: "kind": "param",
// CHECK-NEXT: "name": "embed",
// CHECK:      "dtype": "bf16",
// CHECK-NEXT: "id": 8,
// CHECK-NEXT: "kind": "activation",
// CHECK:        "workspace_offset": 0
// CHECK:      "dtype": "bf16",
// CHECK-NEXT: "id": [[ATTN]],
// CHECK-NEXT: "kind": "activation",
// CHECK:        "workspace_offset": 128
// CHECK:      "dtype": "f32",
// CHECK-NEXT: "id": [[CAST]],
// CHECK-NEXT: "kind": "activation",
// CHECK:        "workspace_offset": 0
// CHECK:      "dtype": "f32",
// CHECK-NEXT: "id": 11,
// CHECK-NEXT: "kind": "activation",
// CHECK:        "workspace_offset": 128
// CHECK:      "dtype": "f32",
// CHECK-NEXT: "id": 12,
// CHECK-NEXT: "kind": "activation",
// CHECK-NEXT: "name": "%6",
// CHECK-NEXT: "shape": [
// CHECK-NEXT:   "S",
// CHECK-NEXT:   64
// CHECK-NEXT: ]
// CHECK-NEXT: }
// CHECK:      "workspace_bytes_per_row": 256
func.func @forward(%ids: tensor<?xi32> {infer.input = "token_ids"},
                   %qsl: tensor<?xi32> {infer.input = "query_start_loc"},
                   %lens: tensor<?xi32> {infer.input = "context_lens"},
                   %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                   %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                   %rows: tensor<?xi32> {infer.input = "logits_indices"},
                   %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16> {infer.input = "kv_cache"})
    -> tensor<?x64xf32> {
  %t = infer.weight "embed" : tensor<64x32xbf16>
  %h = infer.embedding %t[%ids] : tensor<64x32xbf16>, tensor<?xi32> -> tensor<?x32xbf16>
  %c1 = infer.kv_cache_write %c0, %h, %h, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>
  %o = infer.paged_attention %h, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x32xbf16>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x32xbf16>
  %f = infer.cast %o : tensor<?x32xbf16> -> tensor<?x32xf32>
  %g = infer.gather_rows %f[%rows] : tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  %l = infer.logits %g, %t : tensor<?x32xf32>, tensor<64x32xbf16> -> tensor<?x64xf32>
  return %l : tensor<?x64xf32>
}
