// RUN: infer-opt %s --infer-plan-memory --test-infer-print-plan -o /dev/null | FileCheck %s

// An infer.linear with a bias and a residual lowers to one linear_residual
// step whose operands are (x, w, residual, bias): the registry keeps the
// optional bias last, where the op prints it before `residual(...)`.

// CHECK:      "op": "embedding",
// CHECK:      "results": [
// CHECK-NEXT:   [[H:[0-9]+]]
// CHECK-NEXT: ]
// CHECK:      "op": "silu",
// CHECK:      "results": [
// CHECK-NEXT:   [[X:[0-9]+]]
// CHECK-NEXT: ]
// CHECK:      "op": "linear_residual",
// CHECK-NEXT: "operands": [
// CHECK-NEXT:   [[X]],
// CHECK-NEXT:   [[W:[0-9]+]],
// CHECK-NEXT:   [[H]],
// CHECK-NEXT:   [[B:[0-9]+]]
// CHECK-NEXT: ],
// CHECK-NEXT: "results": [
// CHECK-NEXT:   [[S:[0-9]+]]
// CHECK-NEXT: ]
// CHECK:      "op": "gather_rows",
// CHECK-NEXT: "operands": [
// CHECK-NEXT:   [[S]],

// CHECK:      "id": [[W]],
// CHECK-NEXT: "kind": "param",
// CHECK-NEXT: "name": "o_proj.weight",
// CHECK:      "id": [[B]],
// CHECK-NEXT: "kind": "param",
// CHECK-NEXT: "name": "o_proj.bias",
func.func @forward(%ids: tensor<?xi32> {infer.input = "token_ids"},
                   %rows: tensor<?xi32> {infer.input = "logits_indices"}) -> tensor<?x64xf32> {
  %t = infer.weight "embed" : tensor<64x32xf32>
  %h = infer.embedding %t[%ids] : tensor<64x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  %x = infer.silu %h : tensor<?x32xf32>
  %w = infer.weight "o_proj.weight" : tensor<32x32xf32>
  %b = infer.weight "o_proj.bias" : tensor<32xf32>
  %s = infer.linear %x, %w, %b residual(%h) : tensor<?x32xf32>, tensor<32x32xf32>, tensor<32xf32> -> tensor<?x32xf32>
  %g = infer.gather_rows %s[%rows] : tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  %l = infer.logits %g, %t : tensor<?x32xf32>, tensor<64x32xf32> -> tensor<?x64xf32>
  return %l : tensor<?x64xf32>
}
