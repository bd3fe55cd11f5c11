// RUN: infer-opt %s --split-input-file --test-infer-print-memory-plan 2>&1 | FileCheck %s --check-prefix=PLAN
// RUN: infer-opt %s --split-input-file --infer-plan-memory | FileCheck %s

// A chain: each activation dies when the next one is computed, so the
// workspace holds two at a time and the third reuses the first's space.
// Sizes are bytes per token row (T is dynamic); the returned value is the
// caller's and stays out.

// PLAN-LABEL: memory plan @chain: peak 1024 bytes per token row
// PLAN-NEXT:    %[[A:.+]]: 512 bytes/row at 0, steps [0, 1]
// PLAN-NEXT:    %[[B:.+]]: 512 bytes/row at 512, steps [1, 2]
// PLAN-NEXT:    %[[C:.+]]: 512 bytes/row at 0, steps [2, 3]
// PLAN-NOT:     %{{.+}}: 512 bytes/row

// CHECK-LABEL: func.func @chain
// CHECK-SAME: attributes {infer.workspace_bytes_per_row = 1024 : i64}
// CHECK: infer.silu %{{.+}} {infer.workspace_offsets = array<i64: 0>}
// CHECK: infer.silu %{{.+}} {infer.workspace_offsets = array<i64: 512>}
// CHECK: infer.silu %{{.+}} {infer.workspace_offsets = array<i64: 0>}
// CHECK: %[[D:.+]] = infer.silu %{{.+}} : tensor<?x128xf32>
// CHECK-NEXT: return %[[D]]
func.func @chain(%x: tensor<?x128xf32>) -> tensor<?x128xf32> {
  %a = infer.silu %x : tensor<?x128xf32>
  %b = infer.silu %a : tensor<?x128xf32>
  %c = infer.silu %b : tensor<?x128xf32>
  %d = infer.silu %c : tensor<?x128xf32>
  return %d : tensor<?x128xf32>
}

// -----

// A residual stream stays alive across the block while shorter-lived values
// come and go beside it; a value alive at the same step as another never
// shares its bytes. Weights are not activations; results of several
// (split) each get their own place.

// Largest first: %h at 0, the projection %p beside it at 512; the split
// halves fill 512..1024 before %p exists, and %m, alive with all of them,
// goes on top.

// PLAN-LABEL: memory plan @residual: peak 1280 bytes per token row
// PLAN-NEXT:    %[[H:.+]]: 512 bytes/row at 0, steps [1, 5]
// PLAN-NEXT:    %[[S:.+]]#0: 256 bytes/row at 512, steps [2, 3]
// PLAN-NEXT:    %[[S]]#1: 256 bytes/row at 768, steps [2, 3]
// PLAN-NEXT:    %[[M:.+]]: 256 bytes/row at 1024, steps [3, 4]
// PLAN-NEXT:    %[[P:.+]]: 512 bytes/row at 512, steps [4, 5]

// CHECK-LABEL: func.func @residual
// CHECK-SAME: attributes {infer.workspace_bytes_per_row = 1280 : i64}
// CHECK-NEXT: infer.weight "w" : tensor<128x64xf32>
// CHECK-NEXT: infer.silu %{{.+}} {infer.workspace_offsets = array<i64: 0>}
// CHECK-NEXT: infer.split %{{.+}} {infer.workspace_offsets = array<i64: 512, 768>}
// CHECK-NEXT: infer.mul %{{.+}} {infer.workspace_offsets = array<i64: 1024>}
// CHECK-NEXT: infer.linear %{{.+}} {infer.workspace_offsets = array<i64: 512>}
// CHECK-NEXT: infer.add %{{.+}}, %{{.+}} : tensor<?x128xf32>
func.func @residual(%x: tensor<?x128xf32>) -> tensor<?x128xf32> {
  %w = infer.weight "w" : tensor<128x64xf32>
  %h = infer.silu %x : tensor<?x128xf32>
  %s:2 = infer.split %h : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x64xf32>
  %m = infer.mul %s#0, %s#1 : tensor<?x64xf32>
  %p = infer.linear %m, %w : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
  %y = infer.add %h, %p : tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

// Bytes per row follow each activation's element type: a bf16 row of 128
// features takes 256 bytes, its f32 cast 512, and offsets are in bytes.

// PLAN-LABEL: memory plan @mixed_precision: peak 768 bytes per token row
// PLAN-NEXT:    %[[X:.+]]: 256 bytes/row at 512, steps [0, 1]
// PLAN-NEXT:    %[[F:.+]]: 512 bytes/row at 0, steps [1, 2]

// CHECK-LABEL: func.func @mixed_precision
// CHECK-SAME: attributes {infer.workspace_bytes_per_row = 768 : i64}
// CHECK: infer.silu %{{.+}} {infer.workspace_offsets = array<i64: 512>} : tensor<?x128xbf16>
// CHECK: infer.cast %{{.+}} {infer.workspace_offsets = array<i64: 0>} : tensor<?x128xbf16> -> tensor<?x128xf32>
func.func @mixed_precision(%x: tensor<?x128xbf16>) -> tensor<?x128xf32> {
  %a = infer.silu %x : tensor<?x128xbf16>
  %f = infer.cast %a : tensor<?x128xbf16> -> tensor<?x128xf32>
  %y = infer.silu %f : tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

// A declaration has no body to plan and is left as it is (infer-fuzz-infer-opt
// found the pass reading the missing body's first block).
// PLAN-LABEL: memory plan @callee: peak 0 bytes per token row
// CHECK-LABEL: func.func private @callee
// CHECK-NOT: infer.workspace_bytes_per_row
func.func private @callee(tensor<?x8xf32>) -> tensor<?x8xf32>

// -----

// A linear reads its residual while it writes its result: the residual,
// whose last use it is, stays alive at that step and the sum goes elsewhere
// (the GEMM's C and D never alias).

// PLAN-LABEL: memory plan @linear_residual: peak 1024 bytes per token row
// PLAN-NEXT:    %{{.+}}: 512 bytes/row at 0, steps [1, 2]
// PLAN-NEXT:    %{{.+}}: 512 bytes/row at 512, steps [2, 3]

// CHECK-LABEL: func.func @linear_residual
// CHECK-SAME: attributes {infer.workspace_bytes_per_row = 1024 : i64}
// CHECK: %[[R:.+]] = infer.silu %{{.+}} {infer.workspace_offsets = array<i64: 0>}
// CHECK: infer.linear %{{.+}}, %{{.+}} residual(%[[R]]) {infer.workspace_offsets = array<i64: 512>}
func.func @linear_residual(%x: tensor<?x128xf32>, %a: tensor<?x128xf32>) -> tensor<?x128xf32> {
  %w = infer.weight "o_proj.weight" : tensor<128x128xf32>
  %r = infer.silu %x : tensor<?x128xf32>
  %s = infer.linear %a, %w residual(%r) : tensor<?x128xf32>, tensor<128x128xf32> -> tensor<?x128xf32>
  %y = infer.silu %s : tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}
