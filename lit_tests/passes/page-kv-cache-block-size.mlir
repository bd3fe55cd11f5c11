// RUN: infer-opt %s --infer-page-kv-cache="block-size=12" --verify-diagnostics
// RUN: not infer-opt %s --infer-page-kv-cache="block-size=0" 2>&1 | FileCheck %s --check-prefix=ZERO

// The block size must be a positive power of two.

// ZERO: error: infer-page-kv-cache: block-size must be a positive power of two, got 0
// expected-error @+1 {{infer-page-kv-cache: block-size must be a positive power of two, got 12}}
func.func @forward(%x: tensor<?x384xf32>) -> tensor<?x384xf32> {
  return %x : tensor<?x384xf32>
}
