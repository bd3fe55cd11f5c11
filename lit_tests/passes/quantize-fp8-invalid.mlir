// RUN: infer-opt %s --split-input-file --infer-quantize-fp8="kv-cache=e5m2" --verify-diagnostics
// RUN: not infer-opt %s --infer-quantize-fp8="weights=int8" 2>&1 | FileCheck %s --check-prefix=WEIGHTS
// RUN: not infer-opt %s --infer-quantize-fp8="kv-cache=fp16" 2>&1 | FileCheck %s --check-prefix=KV
// RUN: not infer-opt %s --infer-quantize-fp8="granularity=per-block" 2>&1 | FileCheck %s --check-prefix=GRANULARITY

// Options infer-quantize-fp8 rejects, and inputs it cannot quantize.

// WEIGHTS: for the --weights option: Cannot find option named 'int8'!
// KV: for the --kv-cache option: Cannot find option named 'fp16'!
// GRANULARITY: for the --granularity option: Cannot find option named 'per-block'!

// A merged projection whose parts something else reads too (the concatenation
// of slices that infer-shard-tensor-parallel makes reads each part once) has
// no infer.weight of its own to quantize.
func.func @after_fuse(%x: tensor<?x64xf32>) -> (tensor<?x80xf32>, tensor<?x64xf32>) {
  %wq = infer.weight "q" : tensor<64x64xbf16>
  %wk = infer.weight "k" : tensor<16x64xbf16>
  %w = infer.concat_weights %wq, %wk : tensor<64x64xbf16>, tensor<16x64xbf16> -> tensor<80x64xbf16>
  // expected-error @+1 {{'infer.linear' op reads a weight that is not an infer.weight, which infer-quantize-fp8 cannot quantize (run it before infer-fuse)}}
  %y = infer.linear %x, %w : tensor<?x64xf32>, tensor<80x64xbf16> -> tensor<?x80xf32>
  %q = infer.linear %x, %wq : tensor<?x64xf32>, tensor<64x64xbf16> -> tensor<?x64xf32>
  return %y, %q : tensor<?x80xf32>, tensor<?x64xf32>
}

// -----

// An fp8 KV cache needs the paged cache of infer-page-kv-cache.
func.func @unpaged(%qsl: tensor<?xi32>, %q: tensor<?x32xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>) -> tensor<?x32xf32> {
  // expected-error @+1 {{'infer.attention' op has no paged KV cache to quantize (run infer-page-kv-cache before infer-quantize-fp8)}}
  %o = infer.attention %q, %k, %v, %qsl {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x32xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  return %o : tensor<?x32xf32>
}
