// RUN: infer-opt %s --split-input-file --infer-assign-precision | FileCheck %s
// RUN: infer-opt %s --split-input-file --infer-assign-precision="activation-type=bf16" | FileCheck %s
// RUN: infer-opt %s --split-input-file --infer-assign-precision="activation-type=f16" | FileCheck %s --check-prefix=F16
// RUN: infer-opt %s --split-input-file --infer-assign-precision="activation-type=f32" | FileCheck %s --check-prefix=F32

// A paged decoder layer: activations, weights and the KV cache take the
// activation type (bf16 by default); batch-contract inputs keep theirs and
// the logits stay f32, so the function still returns f32.

// CHECK-LABEL: func.func @forward(
// CHECK-SAME:    %{{.+}}: tensor<?xi32> {infer.input = "token_ids"}
// CHECK-SAME:    %[[CACHE:[^:]+]]: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = bf16> {infer.input = "kv_cache"}
// CHECK-SAME:    -> tensor<?x64xf32>
// CHECK:      %[[T:.+]] = infer.weight "embed" : tensor<64x32xbf16>
// CHECK-NEXT: %[[H:.+]] = infer.embedding %[[T]][%{{.+}}] : tensor<64x32xbf16>, tensor<?xi32> -> tensor<?x32xbf16>
// CHECK-NEXT: %[[NW:.+]] = infer.weight "norm" : tensor<32xbf16>
// CHECK-NEXT: %[[X:.+]] = infer.rms_norm %[[H]], %[[NW]] {{.*}} : tensor<?x32xbf16>, tensor<32xbf16> -> tensor<?x32xbf16>
// CHECK-NEXT: %[[W:.+]] = infer.weight "proj" : tensor<32x32xbf16>
// CHECK-NEXT: %[[B:.+]] = infer.weight "bias" : tensor<32xbf16>
// CHECK-NEXT: %[[P:.+]] = infer.linear %[[X]], %[[W]], %[[B]] : tensor<?x32xbf16>, tensor<32x32xbf16>, tensor<32xbf16> -> tensor<?x32xbf16>
// CHECK-NEXT: %[[R:.+]] = infer.rope %[[P]], %{{.+}} {{.*}} : tensor<?x32xbf16>, tensor<?xi32> -> tensor<?x32xbf16>
// CHECK-NEXT: %[[C1:.+]] = infer.kv_cache_write %[[CACHE]], %[[R]], %[[P]], %{{.+}} {layer = 0 : i64} : !infer.kv_cache<{{.*}}element_type = bf16>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?xi64> -> !infer.kv_cache<{{.*}}element_type = bf16>
// CHECK-NEXT: %[[O:.+]] = infer.paged_attention %[[R]], %[[C1]], {{.*}} : tensor<?x32xbf16>, !infer.kv_cache<{{.*}}element_type = bf16>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x32xbf16>
// CHECK-NEXT: %[[S:.+]] = infer.add %[[H]], %[[O]] : tensor<?x32xbf16>
// CHECK-NEXT: %[[G:.+]] = infer.gather_rows %[[S]][%{{.+}}] : tensor<?x32xbf16>, tensor<?xi32> -> tensor<?x32xbf16>
// CHECK-NEXT: %[[L:.+]] = infer.logits %[[G]], %[[T]] : tensor<?x32xbf16>, tensor<64x32xbf16> -> tensor<?x64xf32>
// CHECK-NEXT: return %[[L]] : tensor<?x64xf32>
// CHECK-NOT:  infer.cast

// F16-LABEL: func.func @forward(
// F16-SAME:    element_type = f16> {infer.input = "kv_cache"}
// F16:         infer.weight "embed" : tensor<64x32xf16>
// F16:         infer.linear {{.*}} : tensor<?x32xf16>, tensor<32x32xf16>, tensor<32xf16> -> tensor<?x32xf16>
// F16:         infer.logits {{.*}} : tensor<?x32xf16>, tensor<64x32xf16> -> tensor<?x64xf32>

// bf16 weights of the checkpoint become f32 params (converted at load).
// F32-LABEL: func.func @forward(
// F32-SAME:    element_type = f32> {infer.input = "kv_cache"}
// F32:         infer.weight "embed" : tensor<64x32xf32>
// F32:         infer.embedding {{.*}} : tensor<64x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
// F32:         infer.weight "norm" : tensor<32xf32>
// F32:         infer.linear {{.*}} : tensor<?x32xf32>, tensor<32x32xf32>, tensor<32xf32> -> tensor<?x32xf32>
// F32:         infer.logits {{.*}} : tensor<?x32xf32>, tensor<64x32xf32> -> tensor<?x64xf32>
// F32-NOT:     bf16
func.func @forward(%ids: tensor<?xi32> {infer.input = "token_ids"},
                   %pos: tensor<?xi32> {infer.input = "positions"},
                   %qsl: tensor<?xi32> {infer.input = "query_start_loc"},
                   %lens: tensor<?xi32> {infer.input = "context_lens"},
                   %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                   %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                   %rows: tensor<?xi32> {infer.input = "logits_indices"},
                   %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32> {infer.input = "kv_cache"})
    -> tensor<?x64xf32> {
  %t = infer.weight "embed" : tensor<64x32xbf16>
  %h = infer.embedding %t[%ids] : tensor<64x32xbf16>, tensor<?xi32> -> tensor<?x32xf32>
  %nw = infer.weight "norm" : tensor<32xbf16>
  %x = infer.rms_norm %h, %nw {epsilon = 1.0e-05 : f64} : tensor<?x32xf32>, tensor<32xbf16> -> tensor<?x32xf32>
  %w = infer.weight "proj" : tensor<32x32xbf16>
  %b = infer.weight "bias" : tensor<32xbf16>
  %p = infer.linear %x, %w, %b : tensor<?x32xf32>, tensor<32x32xbf16>, tensor<32xbf16> -> tensor<?x32xf32>
  %r = infer.rope %p, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  %c1 = infer.kv_cache_write %c0, %r, %p, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  %o = infer.paged_attention %r, %c1, %tables, %lens, %qsl {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x32xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x32xf32>
  %s = infer.add %h, %o : tensor<?x32xf32>
  %g = infer.gather_rows %s[%rows] : tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  %l = infer.logits %g, %t : tensor<?x32xf32>, tensor<64x32xbf16> -> tensor<?x64xf32>
  return %l : tensor<?x64xf32>
}

// -----

// infer-quantize-fp8's types stay: fp8 weights (and their concatenation) and
// an fp8 KV cache; the keys written into it take the activation type.

// CHECK-LABEL: func.func @fp8(
// CHECK-SAME:    %[[X:[^:]+]]: tensor<?x32xbf16>
// CHECK-SAME:    element_type = f8E5M2>
// CHECK:       infer.weight "q" {quant = #infer.fp8<granularity = per_tensor>} : tensor<16x32xf8E4M3FN>
// CHECK:       infer.concat_weights {{.*}} -> tensor<32x32xf8E4M3FN>
// CHECK:       infer.linear %[[X]], %{{.+}} : tensor<?x32xbf16>, tensor<32x32xf8E4M3FN> -> tensor<?x32xbf16>
// CHECK:       infer.kv_cache_write {{.*}} : !infer.kv_cache<{{.*}}element_type = f8E5M2>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?xi64> -> !infer.kv_cache<{{.*}}element_type = f8E5M2>
// F32-LABEL: func.func @fp8(
// F32:         infer.linear {{.*}} : tensor<?x32xf32>, tensor<32x32xf8E4M3FN> -> tensor<?x32xf32>
func.func @fp8(%x: tensor<?x32xf32>, %slots: tensor<?xi64> {infer.input = "slot_mapping"},
               %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f8E5M2> {infer.input = "kv_cache"})
    -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f8E5M2> {
  %q = infer.weight "q" {quant = #infer.fp8<granularity = per_tensor>} : tensor<16x32xf8E4M3FN>
  %k = infer.weight "k" {quant = #infer.fp8<granularity = per_tensor>} : tensor<16x32xf8E4M3FN>
  %w = infer.concat_weights %q, %k : tensor<16x32xf8E4M3FN>, tensor<16x32xf8E4M3FN> -> tensor<32x32xf8E4M3FN>
  %y = infer.linear %x, %w : tensor<?x32xf32>, tensor<32x32xf8E4M3FN> -> tensor<?x32xf32>
  %c1 = infer.kv_cache_write %c0, %y, %y, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f8E5M2>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f8E5M2>
  return %c1 : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f8E5M2>
}

// -----

// Tensor parallelism: what moves the logits keeps their f32 (all_gather
// takes its operand's type), so no rounding comes between the LM head and
// sampling.

// CHECK-LABEL: func.func @vocab_parallel
// CHECK:       %[[L:.+]] = infer.logits {{.*}} : tensor<?x32xbf16>, tensor<32x32xbf16> -> tensor<?x32xf32>
// CHECK-NEXT:  %[[A:.+]] = infer.all_gather %[[L]] {dim = 1 : i64} : tensor<?x32xf32> -> tensor<?x64xf32>
// CHECK-NEXT:  return %[[A]] : tensor<?x64xf32>
func.func @vocab_parallel(%x: tensor<?x32xf32>) -> tensor<?x64xf32> {
  %w = infer.weight "lm_head" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<32x32xf32>
  %l = infer.logits %x, %w : tensor<?x32xf32>, tensor<32x32xf32> -> tensor<?x32xf32>
  %a = infer.all_gather %l {dim = 1 : i64} : tensor<?x32xf32> -> tensor<?x64xf32>
  return %a : tensor<?x64xf32>
}

// -----

// Casts where an op reads another type than its operand has: an op of the
// activation type reading the f32 logits gets them rounded; an elementwise
// op mixing the logits with a bf16 activation computes in f32 (promotion)
// and reads the bf16 one widened.

// CHECK-LABEL: func.func @casts
// CHECK:       %[[L:.+]] = infer.logits {{.*}} -> tensor<?x32xf32>
// CHECK-NEXT:  infer.weight "norm" : tensor<32xbf16>
// CHECK-NEXT:  %[[LB:.+]] = infer.cast %[[L]] : tensor<?x32xf32> -> tensor<?x32xbf16>
// CHECK-NEXT:  %[[N:.+]] = infer.rms_norm %[[LB]], %{{.+}} {{.*}} : tensor<?x32xbf16>, tensor<32xbf16> -> tensor<?x32xbf16>
// CHECK-NEXT:  %[[NF:.+]] = infer.cast %[[N]] : tensor<?x32xbf16> -> tensor<?x32xf32>
// CHECK-NEXT:  %[[S:.+]] = infer.add %[[L]], %[[NF]] : tensor<?x32xf32>
// CHECK-NEXT:  return %[[S]] : tensor<?x32xf32>
// F32-LABEL: func.func @casts
// F32-NOT:     infer.cast
func.func @casts(%x: tensor<?x32xf32>) -> tensor<?x32xf32> {
  %w = infer.weight "head" : tensor<32x32xf32>
  %l = infer.logits %x, %w : tensor<?x32xf32>, tensor<32x32xf32> -> tensor<?x32xf32>
  %nw = infer.weight "norm" : tensor<32xf32>
  %n = infer.rms_norm %l, %nw {epsilon = 1.0e-05 : f64} : tensor<?x32xf32>, tensor<32xf32> -> tensor<?x32xf32>
  %s = infer.add %l, %n : tensor<?x32xf32>
  return %s : tensor<?x32xf32>
}

// -----

// Existing casts keep their target type; one that the new types make an
// identity disappears.

// CHECK-LABEL: func.func @existing_casts
// CHECK-SAME:    (%[[X:.+]]: tensor<?x32xbf16>) -> (tensor<?x32xbf16>, tensor<?x32xf16>)
// CHECK-NEXT:  %[[S:.+]] = infer.silu %[[X]] : tensor<?x32xbf16>
// CHECK-NEXT:  %[[H:.+]] = infer.cast %[[S]] : tensor<?x32xbf16> -> tensor<?x32xf16>
// CHECK-NEXT:  return %[[S]], %[[H]]
// F32-LABEL: func.func @existing_casts
// F32-SAME:    (%[[X:.+]]: tensor<?x32xf32>) -> (tensor<?x32xbf16>, tensor<?x32xf16>)
// F32-NEXT:    %[[S:.+]] = infer.silu %[[X]] : tensor<?x32xf32>
// F32-NEXT:    %[[B:.+]] = infer.cast %[[S]] : tensor<?x32xf32> -> tensor<?x32xbf16>
// F32-NEXT:    %[[H:.+]] = infer.cast %[[S]] : tensor<?x32xf32> -> tensor<?x32xf16>
// F32-NEXT:    return %[[B]], %[[H]]
func.func @existing_casts(%x: tensor<?x32xf32>) -> (tensor<?x32xbf16>, tensor<?x32xf16>) {
  %s = infer.silu %x : tensor<?x32xf32>
  %b = infer.cast %s : tensor<?x32xf32> -> tensor<?x32xbf16>
  %h = infer.cast %s : tensor<?x32xf32> -> tensor<?x32xf16>
  return %b, %h : tensor<?x32xbf16>, tensor<?x32xf16>
}

// -----

// Promotion: operands of one type keep it; bf16 with f16 computes in f32,
// as PyTorch promotes them. (The f16 value is an existing cast's; the silu
// of the f16 argument turns bf16.)

// CHECK-LABEL: func.func @promotion
// CHECK-SAME:    (%[[A:[^:]+]]: tensor<?x32xbf16>, %[[B:[^:]+]]: tensor<?x32xbf16>)
// CHECK-NEXT:  %[[H:.+]] = infer.cast %[[B]] : tensor<?x32xbf16> -> tensor<?x32xf16>
// CHECK-NEXT:  %[[S:.+]] = infer.silu %[[A]] : tensor<?x32xbf16>
// CHECK-NEXT:  %[[HF:.+]] = infer.cast %[[H]] : tensor<?x32xf16> -> tensor<?x32xf32>
// CHECK-NEXT:  %[[SF:.+]] = infer.cast %[[S]] : tensor<?x32xbf16> -> tensor<?x32xf32>
// CHECK-NEXT:  %[[M:.+]] = infer.mul %[[HF]], %[[SF]] : tensor<?x32xf32>
// CHECK-NEXT:  return %[[M]] : tensor<?x32xf32>
// F16-LABEL: func.func @promotion
// F16-NOT:     infer.cast %{{.+}} : tensor<?x32xf16> -> tensor<?x32xf32>
// F16:         infer.mul %{{.+}}, %{{.+}} : tensor<?x32xf16>
func.func @promotion(%a: tensor<?x32xf16>, %b: tensor<?x32xf32>) -> tensor<?x32xf16> {
  %h = infer.cast %b : tensor<?x32xf32> -> tensor<?x32xf16>
  %s = infer.silu %a : tensor<?x32xf16>
  %m = infer.mul %h, %s : tensor<?x32xf16>
  return %m : tensor<?x32xf16>
}

// -----

// A fused region (infer-fuse ran first) takes its inputs' type for its
// results; its body stays f32.

// CHECK-LABEL: func.func @fused
// CHECK:       infer.fused ins(%{{.+}}, %{{.+}} : tensor<?x32xbf16>, tensor<?x32xbf16>) -> tensor<?x32xbf16> {
// CHECK-NEXT:  ^bb0(%{{.+}}: tensor<?x32xf32>, %{{.+}}: tensor<?x32xf32>):
// CHECK-NEXT:    infer.silu_mul {{.*}} : tensor<?x32xf32>
// CHECK-NEXT:    infer.mul {{.*}} : tensor<?x32xf32>
// CHECK-NEXT:    infer.yield {{.*}} : tensor<?x32xf32>
func.func @fused(%g: tensor<?x32xf32>, %u: tensor<?x32xf32>) -> tensor<?x32xf32> {
  %y = infer.fused ins(%g, %u : tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32> {
  ^bb0(%a: tensor<?x32xf32>, %b: tensor<?x32xf32>):
    %m = infer.silu_mul %a, %b : tensor<?x32xf32>
    %n = infer.mul %m, %b : tensor<?x32xf32>
    infer.yield %n : tensor<?x32xf32>
  }
  return %y : tensor<?x32xf32>
}

// -----

// Logical attention and the ops that make activations from whole rows.

// CHECK-LABEL: func.func @logical_attention
// CHECK:       infer.attention {{.*}} : tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?xi32> -> tensor<?x32xbf16>
// CHECK:       infer.add_rms_norm {{.*}} : tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<32xbf16> -> tensor<?x32xbf16>, tensor<?x32xbf16>
// CHECK:       infer.split {{.*}} : tensor<?x32xbf16> -> tensor<?x16xbf16>, tensor<?x16xbf16>
// CHECK:       infer.gelu {{.*}} : tensor<?x16xbf16>
// CHECK:       infer.bias_add {{.*}} : tensor<?x16xbf16>, tensor<16xbf16>
// CHECK:       infer.all_reduce {{.*}} : tensor<?x16xbf16>
func.func @logical_attention(%q: tensor<?x32xf32>, %qsl: tensor<?xi32> {infer.input = "query_start_loc"})
    -> tensor<?x16xf32> {
  %o = infer.attention %q, %q, %q, %qsl {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 2.500000e-01 : f64, sliding_window = 0 : i64} : tensor<?x32xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  %nw = infer.weight "norm" : tensor<32xf32>
  %s, %y = infer.add_rms_norm %q, %o, %nw {epsilon = 1.0e-05 : f64} : tensor<?x32xf32>, tensor<?x32xf32>, tensor<32xf32> -> tensor<?x32xf32>, tensor<?x32xf32>
  %a, %b = infer.split %y : tensor<?x32xf32> -> tensor<?x16xf32>, tensor<?x16xf32>
  %g = infer.gelu %a {approximate = "tanh"} : tensor<?x16xf32>
  %bias = infer.weight "bias" : tensor<16xf32>
  %c = infer.bias_add %g, %bias : tensor<?x16xf32>, tensor<16xf32>
  %r = infer.all_reduce %c : tensor<?x16xf32>
  return %r : tensor<?x16xf32>
}

// -----

// A fused rope_qkv_cache_write (infer-fuse before this pass) takes the
// activation type for the queries, keys and values it reads and the rotated
// queries it returns; the cache keeps its own element type.

// CHECK-LABEL: func.func @fused_rope(
// CHECK:       %[[Q:.+]], %[[C:.+]] = infer.rope_qkv_cache_write {{.*}} : !infer.kv_cache<{{.*}}element_type = f8E5M2>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?xi64>, tensor<?xi32> -> tensor<?x32xbf16>, !infer.kv_cache<{{.*}}element_type = f8E5M2>
// CHECK-NOT:   infer.cast
// F32-LABEL: func.func @fused_rope(
// F32:         infer.rope_qkv_cache_write {{.*}} -> tensor<?x32xf32>, !infer.kv_cache<{{.*}}element_type = f8E5M2>
func.func @fused_rope(%x: tensor<?x32xf32>, %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                      %pos: tensor<?xi32> {infer.input = "positions"},
                      %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f8E5M2> {infer.input = "kv_cache"})
    -> (tensor<?x32xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f8E5M2>) {
  %q, %c1 = infer.rope_qkv_cache_write %c0, %x, %x, %x, %slots, %pos {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f8E5M2>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64>, tensor<?xi32> -> tensor<?x32xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f8E5M2>
  return %q, %c1 : tensor<?x32xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f8E5M2>
}
