// RUN: infer-opt %s --split-input-file --infer-assign-precision --verify-diagnostics
// RUN: not infer-opt %s --infer-assign-precision="activation-type=f8E4M3FN" 2>&1 | FileCheck %s --check-prefix=TYPE

// Options infer-assign-precision rejects, and inputs it cannot type.

// TYPE: for the --activation-type option: Cannot find option named 'f8E4M3FN'!

// The pass walks one block in program order.

// expected-error @+1 {{infer-assign-precision expects a function of one block}}
func.func @two_blocks(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  return %x : tensor<?x8xf32>
^bb1:
  return %x : tensor<?x8xf32>
}

// -----

// An op without a precision rule: the pass cannot tell what its results are.

func.func private @callee(tensor<?x8xf32>) -> tensor<?x8xf32>

func.func @unknown_op(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'func.call' op has no precision rule in infer-assign-precision}}
  %y = func.call @callee(%x) : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
