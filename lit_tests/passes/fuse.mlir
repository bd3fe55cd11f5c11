// RUN: infer-opt %s --split-input-file --infer-fuse | FileCheck %s

// q/k/v projections of one input, with biases (Qwen2): one GEMM over the
// concatenated weights and biases, split back into q, k and v.

// CHECK-LABEL: func.func @qkv_with_bias
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x128xf32>)
// CHECK-DAG: %[[WQ:.+]] = infer.weight "q.weight" : tensor<128x128xbf16>
// CHECK-DAG: %[[BQ:.+]] = infer.weight "q.bias" : tensor<128xbf16>
// CHECK-DAG: %[[WK:.+]] = infer.weight "k.weight" : tensor<32x128xbf16>
// CHECK-DAG: %[[BK:.+]] = infer.weight "k.bias" : tensor<32xbf16>
// CHECK-DAG: %[[WV:.+]] = infer.weight "v.weight" : tensor<32x128xbf16>
// CHECK-DAG: %[[BV:.+]] = infer.weight "v.bias" : tensor<32xbf16>
// CHECK: %[[W:.+]] = infer.concat_weights %[[WQ]], %[[WK]], %[[WV]] : tensor<128x128xbf16>, tensor<32x128xbf16>, tensor<32x128xbf16> -> tensor<192x128xbf16>
// CHECK-NEXT: %[[B:.+]] = infer.concat_weights %[[BQ]], %[[BK]], %[[BV]] : tensor<128xbf16>, tensor<32xbf16>, tensor<32xbf16> -> tensor<192xbf16>
// CHECK-NEXT: %[[QKV:.+]] = infer.linear %[[X]], %[[W]], %[[B]] : tensor<?x128xf32>, tensor<192x128xbf16>, tensor<192xbf16> -> tensor<?x192xf32>
// CHECK-NEXT: %[[Q:.+]]:3 = infer.split %[[QKV]] : tensor<?x192xf32> -> tensor<?x128xf32>, tensor<?x32xf32>, tensor<?x32xf32>
// CHECK-NOT: infer.linear
// CHECK: return %[[Q]]#0, %[[Q]]#1, %[[Q]]#2
func.func @qkv_with_bias(%x: tensor<?x128xf32>) -> (tensor<?x128xf32>, tensor<?x32xf32>, tensor<?x32xf32>) {
  %wq = infer.weight "q.weight" : tensor<128x128xbf16>
  %bq = infer.weight "q.bias" : tensor<128xbf16>
  %q = infer.linear %x, %wq, %bq : tensor<?x128xf32>, tensor<128x128xbf16>, tensor<128xbf16> -> tensor<?x128xf32>
  %wk = infer.weight "k.weight" : tensor<32x128xbf16>
  %bk = infer.weight "k.bias" : tensor<32xbf16>
  %k = infer.linear %x, %wk, %bk : tensor<?x128xf32>, tensor<32x128xbf16>, tensor<32xbf16> -> tensor<?x32xf32>
  %wv = infer.weight "v.weight" : tensor<32x128xbf16>
  %bv = infer.weight "v.bias" : tensor<32xbf16>
  %v = infer.linear %x, %wv, %bv : tensor<?x128xf32>, tensor<32x128xbf16>, tensor<32xbf16> -> tensor<?x32xf32>
  return %q, %k, %v : tensor<?x128xf32>, tensor<?x32xf32>, tensor<?x32xf32>
}

// -----

// The Llama MLP: gate/up merge into one GEMM, silu(gate) * up into
// infer.silu_mul, and the GEMM, its split and the silu_mul into one
// infer.linear_swiglu of the concatenated weight; the down projection reads
// another input and stays alone.

// CHECK-LABEL: func.func @gate_up_mlp
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x128xf32>)
// CHECK-NEXT: %[[WG:.+]] = infer.weight "gate.weight"
// CHECK-NEXT: %[[WU:.+]] = infer.weight "up.weight"
// CHECK-NEXT: %[[W:.+]] = infer.concat_weights %[[WG]], %[[WU]] : tensor<256x128xbf16>, tensor<256x128xbf16> -> tensor<512x128xbf16>
// CHECK-NEXT: %[[H:.+]] = infer.linear_swiglu %[[X]], %[[W]] : tensor<?x128xf32>, tensor<512x128xbf16> -> tensor<?x256xf32>
// CHECK-NEXT: %[[WD:.+]] = infer.weight "down.weight"
// CHECK-NEXT: %[[Y:.+]] = infer.linear %[[H]], %[[WD]] : tensor<?x256xf32>, tensor<128x256xbf16> -> tensor<?x128xf32>
// CHECK-NEXT: return %[[Y]]
func.func @gate_up_mlp(%x: tensor<?x128xf32>) -> tensor<?x128xf32> {
  %wg = infer.weight "gate.weight" : tensor<256x128xbf16>
  %g = infer.linear %x, %wg : tensor<?x128xf32>, tensor<256x128xbf16> -> tensor<?x256xf32>
  %wu = infer.weight "up.weight" : tensor<256x128xbf16>
  %u = infer.linear %x, %wu : tensor<?x128xf32>, tensor<256x128xbf16> -> tensor<?x256xf32>
  %s = infer.silu %g : tensor<?x256xf32>
  %h = infer.mul %s, %u : tensor<?x256xf32>
  %wd = infer.weight "down.weight" : tensor<128x256xbf16>
  %y = infer.linear %h, %wd : tensor<?x256xf32>, tensor<128x256xbf16> -> tensor<?x128xf32>
  return %y : tensor<?x128xf32>
}

// -----

// What stays linear, split and silu_mul: a half read elsewhere, a bias, an
// fp8 weight, halves in the other order, a residual.

// CHECK-LABEL: func.func @swiglu_that_stays_apart
// CHECK-NOT: infer.linear_swiglu
// CHECK: infer.silu_mul %{{.+}}#0, %{{.+}}#1
// CHECK: infer.silu_mul %{{.+}}#0, %{{.+}}#1
// CHECK: infer.silu_mul %{{.+}}#0, %{{.+}}#1
// CHECK: infer.silu_mul %{{.+}}#1, %{{.+}}#0
// CHECK: infer.linear %{{.+}}, %{{.+}} residual(%{{.+}})
// CHECK: infer.silu_mul %{{.+}}#0, %{{.+}}#1
// CHECK-NOT: infer.linear_swiglu
// CHECK: return
func.func @swiglu_that_stays_apart(%x: tensor<?x128xf32>, %w: tensor<512x128xbf16>, %b: tensor<512xbf16>, %w8: tensor<512x128xf8E4M3FN>, %r: tensor<?x512xf32>) -> (tensor<?x256xf32>, tensor<?x256xf32>, tensor<?x256xf32>, tensor<?x256xf32>, tensor<?x256xf32>, tensor<?x256xf32>) {
  %gu0 = infer.linear %x, %w : tensor<?x128xf32>, tensor<512x128xbf16> -> tensor<?x512xf32>
  %p0:2 = infer.split %gu0 : tensor<?x512xf32> -> tensor<?x256xf32>, tensor<?x256xf32>
  %y0 = infer.silu_mul %p0#0, %p0#1 : tensor<?x256xf32>
  %gu1 = infer.linear %x, %w, %b : tensor<?x128xf32>, tensor<512x128xbf16>, tensor<512xbf16> -> tensor<?x512xf32>
  %p1:2 = infer.split %gu1 : tensor<?x512xf32> -> tensor<?x256xf32>, tensor<?x256xf32>
  %y1 = infer.silu_mul %p1#0, %p1#1 : tensor<?x256xf32>
  %gu2 = infer.linear %x, %w8 : tensor<?x128xf32>, tensor<512x128xf8E4M3FN> -> tensor<?x512xf32>
  %p2:2 = infer.split %gu2 : tensor<?x512xf32> -> tensor<?x256xf32>, tensor<?x256xf32>
  %y2 = infer.silu_mul %p2#0, %p2#1 : tensor<?x256xf32>
  %gu3 = infer.linear %x, %w : tensor<?x128xf32>, tensor<512x128xbf16> -> tensor<?x512xf32>
  %p3:2 = infer.split %gu3 : tensor<?x512xf32> -> tensor<?x256xf32>, tensor<?x256xf32>
  %y3 = infer.silu_mul %p3#1, %p3#0 : tensor<?x256xf32>
  %gu4 = infer.linear %x, %w residual(%r) : tensor<?x128xf32>, tensor<512x128xbf16> -> tensor<?x512xf32>
  %p4:2 = infer.split %gu4 : tensor<?x512xf32> -> tensor<?x256xf32>, tensor<?x256xf32>
  %y4 = infer.silu_mul %p4#0, %p4#1 : tensor<?x256xf32>
  return %y0, %p0#1, %y1, %y2, %y3, %y4 : tensor<?x256xf32>, tensor<?x256xf32>, tensor<?x256xf32>, tensor<?x256xf32>, tensor<?x256xf32>, tensor<?x256xf32>
}

// -----

// Nothing merges: %a has a bias and %d none; %b's weight is not a
// checkpoint tensor (it cannot be concatenated at load); %c reads another
// input than %d.

// CHECK-LABEL: func.func @linears_that_stay_apart
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x128xf32>, %[[Z:[^:]+]]: tensor<?x128xf32>, %[[W:[^:]+]]: tensor<64x128xf32>)
// CHECK-NOT: infer.concat_weights
// CHECK: infer.linear %[[X]], %{{.+}}, %{{.+}} :
// CHECK-NEXT: infer.linear %[[X]], %[[W]] :
// CHECK-NEXT: infer.weight "c.weight"
// CHECK-NEXT: infer.linear %[[Z]], %{{.+}} :
// CHECK-NEXT: infer.weight "d.weight"
// CHECK-NEXT: infer.linear %[[X]], %{{.+}} :
// CHECK-NOT: infer.split
// CHECK: return
func.func @linears_that_stay_apart(%x: tensor<?x128xf32>, %z: tensor<?x128xf32>, %w: tensor<64x128xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) {
  %wa = infer.weight "a.weight" : tensor<64x128xf32>
  %ba = infer.weight "a.bias" : tensor<64xf32>
  %a = infer.linear %x, %wa, %ba : tensor<?x128xf32>, tensor<64x128xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %b = infer.linear %x, %w : tensor<?x128xf32>, tensor<64x128xf32> -> tensor<?x64xf32>
  %wc = infer.weight "c.weight" : tensor<64x128xf32>
  %c = infer.linear %z, %wc : tensor<?x128xf32>, tensor<64x128xf32> -> tensor<?x64xf32>
  %wd = infer.weight "d.weight" : tensor<64x128xf32>
  %d = infer.linear %x, %wd : tensor<?x128xf32>, tensor<64x128xf32> -> tensor<?x64xf32>
  return %a, %b, %c, %d : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>
}

// -----

// Residual add + RMS norm: one op returning the sum (for the next residual
// add) and the normalized value.

// CHECK-LABEL: func.func @add_rms_norm
// CHECK-SAME: (%[[R:[^:]+]]: tensor<?x128xf32>, %[[X:[^:]+]]: tensor<?x128xf32>)
// CHECK-NOT: infer.add %
// CHECK: %[[W:.+]] = infer.weight "norm.weight"
// CHECK-NEXT: %[[SUM:.+]], %[[NORMED:.+]] = infer.add_rms_norm %[[R]], %[[X]], %[[W]] {epsilon = 9.9999999999999995E-7 : f64} : tensor<?x128xf32>, tensor<?x128xf32>, tensor<128xbf16> -> tensor<?x128xf32>, tensor<?x128xf32>
// CHECK-NEXT: return %[[SUM]], %[[NORMED]]
func.func @add_rms_norm(%r: tensor<?x128xf32>, %x: tensor<?x128xf32>) -> (tensor<?x128xf32>, tensor<?x128xf32>) {
  %sum = infer.add %r, %x : tensor<?x128xf32>
  %w = infer.weight "norm.weight" : tensor<128xbf16>
  %y = infer.rms_norm %sum, %w {epsilon = 9.9999999999999995E-7 : f64} : tensor<?x128xf32>, tensor<128xbf16> -> tensor<?x128xf32>
  return %sum, %y : tensor<?x128xf32>, tensor<?x128xf32>
}

// -----

// The sum is needed before the normalization (by the silu): the fused op,
// which takes the norm's place, could not provide it, so nothing fuses.

// CHECK-LABEL: func.func @sum_used_before_norm
// CHECK: %[[SUM:.+]] = infer.add
// CHECK: infer.silu %[[SUM]]
// CHECK: infer.rms_norm %[[SUM]]
// CHECK-NOT: infer.add_rms_norm
func.func @sum_used_before_norm(%r: tensor<?x128xf32>, %x: tensor<?x128xf32>) -> (tensor<?x128xf32>, tensor<?x128xf32>) {
  %sum = infer.add %r, %x : tensor<?x128xf32>
  %s = infer.silu %sum : tensor<?x128xf32>
  %w = infer.weight "norm.weight" : tensor<128xbf16>
  %y = infer.rms_norm %sum, %w {epsilon = 1.0e-05 : f64} : tensor<?x128xf32>, tensor<128xbf16> -> tensor<?x128xf32>
  return %s, %y : tensor<?x128xf32>, tensor<?x128xf32>
}

// -----

// silu(gate) is returned as well: fusing it into silu_mul would compute it
// twice, so it stays; the multiplication still joins it in no region either,
// since the silu has a user outside.

// CHECK-LABEL: func.func @silu_used_elsewhere
// CHECK-SAME: (%[[G:[^:]+]]: tensor<?x256xf32>, %[[U:[^:]+]]: tensor<?x256xf32>)
// CHECK: %[[S:.+]] = infer.silu %[[G]]
// CHECK: %[[M:.+]] = infer.mul %[[S]], %[[U]]
// CHECK-NOT: infer.silu_mul
// CHECK-NOT: infer.fused
// CHECK: return %[[M]], %[[S]]
func.func @silu_used_elsewhere(%g: tensor<?x256xf32>, %u: tensor<?x256xf32>) -> (tensor<?x256xf32>, tensor<?x256xf32>) {
  %s = infer.silu %g : tensor<?x256xf32>
  %m = infer.mul %s, %u : tensor<?x256xf32>
  return %m, %s : tensor<?x256xf32>, tensor<?x256xf32>
}

// -----

// up * silu(gate), operands swapped, fuses too.

// CHECK-LABEL: func.func @silu_on_the_right
// CHECK-SAME: (%[[G:[^:]+]]: tensor<?x256xf32>, %[[U:[^:]+]]: tensor<?x256xf32>)
// CHECK-NOT: infer.silu %
// CHECK: %[[M:.+]] = infer.silu_mul %[[G]], %[[U]] : tensor<?x256xf32>
// CHECK-NEXT: return %[[M]]
func.func @silu_on_the_right(%g: tensor<?x256xf32>, %u: tensor<?x256xf32>) -> tensor<?x256xf32> {
  %s = infer.silu %g : tensor<?x256xf32>
  %m = infer.mul %u, %s : tensor<?x256xf32>
  return %m : tensor<?x256xf32>
}

// -----

// Rope on the keys goes into the cache write; rope on the queries, read by
// attention, stays.

// CHECK-LABEL: func.func @rope_into_cache_write
// CHECK-SAME: (%[[POS:[^:]+]]: tensor<?xi32>, %[[SLOTS:[^:]+]]: tensor<?xi64>, %[[K:[^:]+]]: tensor<?x32xf32>, %[[V:[^:]+]]: tensor<?x32xf32>, %[[Q:[^:]+]]: tensor<?x128xf32>, %[[C0:[^:]+]]: !infer.kv_cache
// CHECK: %[[QR:.+]] = infer.rope %[[Q]], %[[POS]]
// CHECK-NOT: infer.rope %
// CHECK: %[[C1:.+]] = infer.rope_kv_cache_write %[[C0]], %[[K]], %[[V]], %[[SLOTS]], %[[POS]] {head_dim = 16 : i64, layer = 0 : i64, rope = #infer.rope<theta = 1.000000e+04, kind = default>, rotary_dim = 16 : i64}
// CHECK-NEXT: return %[[QR]], %[[C1]]
func.func @rope_into_cache_write(%pos: tensor<?xi32>, %slots: tensor<?xi64>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %q: tensor<?x128xf32>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x128xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %qr = infer.rope %q, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
  %kr = infer.rope %k, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  %c1 = infer.kv_cache_write %c0, %kr, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  return %qr, %c1 : tensor<?x128xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// A dynamic NTK rope takes its query_start_loc into the cache write.

// CHECK-LABEL: func.func @dynamic_rope_into_cache_write
// CHECK-SAME: (%[[POS:[^:]+]]: tensor<?xi32>, %[[QSL:[^:]+]]: tensor<?xi32>, %[[SLOTS:[^:]+]]: tensor<?xi64>, %[[K:[^:]+]]: tensor<?x32xf32>, %[[V:[^:]+]]: tensor<?x32xf32>, %[[C0:[^:]+]]: !infer.kv_cache
// CHECK: infer.rope_kv_cache_write %[[C0]], %[[K]], %[[V]], %[[SLOTS]], %[[POS]], %[[QSL]] {head_dim = 16 : i64, layer = 0 : i64, rope = #infer.rope<theta = 1.000000e+04, kind = dynamic, factor = 2.000000e+00, original_max_position_embeddings = 16>, rotary_dim = 16 : i64}
func.func @dynamic_rope_into_cache_write(%pos: tensor<?xi32>, %qsl: tensor<?xi32>, %slots: tensor<?xi64>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32> {
  %kr = infer.rope %k, %pos, %qsl {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0, original_max_position_embeddings = 16>} : tensor<?x32xf32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x32xf32>
  %c1 = infer.kv_cache_write %c0, %kr, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  return %c1 : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// The rotated keys are also returned: the rope stays, and so does the plain
// cache write.

// CHECK-LABEL: func.func @rotated_keys_used_elsewhere
// CHECK: %[[KR:.+]] = infer.rope
// CHECK: infer.kv_cache_write %{{.+}}, %[[KR]],
// CHECK-NOT: infer.rope_kv_cache_write
func.func @rotated_keys_used_elsewhere(%pos: tensor<?xi32>, %slots: tensor<?xi64>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %c0: !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) -> (tensor<?x32xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>) {
  %kr = infer.rope %k, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64, rope = #infer.rope<theta = 1.0e+04, kind = default>} : tensor<?x32xf32>, tensor<?xi32> -> tensor<?x32xf32>
  %c1 = infer.kv_cache_write %c0, %kr, %v, %slots {layer = 0 : i64} : !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi64> -> !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
  return %kr, %c1 : tensor<?x32xf32>, !infer.kv_cache<num_layers = 1, num_kv_heads = 2, block_size = 16, head_dim = 16, element_type = f32>
}

// -----

// gelu(gate) * up + residual: one region, one result.

// CHECK-LABEL: func.func @elementwise_chain
// CHECK-SAME: (%[[G:[^:]+]]: tensor<?x256xf32>, %[[U:[^:]+]]: tensor<?x256xf32>, %[[R:[^:]+]]: tensor<?x256xf32>)
// CHECK: %[[Y:.+]] = infer.fused ins(%[[G]], %[[U]], %[[R]] : tensor<?x256xf32>, tensor<?x256xf32>, tensor<?x256xf32>) -> tensor<?x256xf32> {
// CHECK-NEXT: ^bb0(%[[BG:[^:]+]]: tensor<?x256xf32>, %[[BU:[^:]+]]: tensor<?x256xf32>, %[[BR:[^:]+]]: tensor<?x256xf32>):
// CHECK-NEXT:   %[[A:.+]] = infer.gelu %[[BG]] {approximate = "tanh"} : tensor<?x256xf32>
// CHECK-NEXT:   %[[M:.+]] = infer.mul %[[A]], %[[BU]] : tensor<?x256xf32>
// CHECK-NEXT:   %[[S:.+]] = infer.add %[[M]], %[[BR]] : tensor<?x256xf32>
// CHECK-NEXT:   infer.yield %[[S]] : tensor<?x256xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[Y]]
func.func @elementwise_chain(%g: tensor<?x256xf32>, %u: tensor<?x256xf32>, %r: tensor<?x256xf32>) -> tensor<?x256xf32> {
  %a = infer.gelu %g {approximate = "tanh"} : tensor<?x256xf32>
  %m = infer.mul %a, %u : tensor<?x256xf32>
  %s = infer.add %m, %r : tensor<?x256xf32>
  return %s : tensor<?x256xf32>
}

// -----

// bf16 activations: the region's inputs and result stay bf16, its body
// computes in f32 (block arguments are the inputs in f32), so gelu(g) * u is
// never rounded on its own.

// CHECK-LABEL: func.func @bf16_chain
// CHECK: %[[Y:.+]] = infer.fused ins(%{{.+}}, %{{.+}}, %{{.+}} : tensor<?x256xbf16>, tensor<?x256xbf16>, tensor<?x256xbf16>) -> tensor<?x256xbf16> {
// CHECK-NEXT: ^bb0(%[[BG:[^:]+]]: tensor<?x256xf32>, %[[BU:[^:]+]]: tensor<?x256xf32>, %[[BR:[^:]+]]: tensor<?x256xf32>):
// CHECK-NEXT:   %[[A:.+]] = infer.gelu %[[BG]] {approximate = "tanh"} : tensor<?x256xf32>
// CHECK-NEXT:   %[[M:.+]] = infer.mul %[[A]], %[[BU]] : tensor<?x256xf32>
// CHECK-NEXT:   %[[S:.+]] = infer.add %[[M]], %[[BR]] : tensor<?x256xf32>
// CHECK-NEXT:   infer.yield %[[S]] : tensor<?x256xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[Y]] : tensor<?x256xbf16>
func.func @bf16_chain(%g: tensor<?x256xbf16>, %u: tensor<?x256xbf16>, %r: tensor<?x256xbf16>) -> tensor<?x256xbf16> {
  %a = infer.gelu %g {approximate = "tanh"} : tensor<?x256xbf16>
  %m = infer.mul %a, %u : tensor<?x256xbf16>
  %s = infer.add %m, %r : tensor<?x256xbf16>
  return %s : tensor<?x256xbf16>
}

// -----

// The product is returned too, so it cannot be folded into the add's region
// without computing it twice: the gelu and mul form one region, the add
// stays alone (a single elementwise op is no chain).

// CHECK-LABEL: func.func @chain_with_escaping_value
// CHECK: %[[M:.+]] = infer.fused ins(
// CHECK: infer.gelu
// CHECK: infer.mul
// CHECK: infer.yield
// CHECK: %[[S:.+]] = infer.add %[[M]], %{{.+}} : tensor<?x256xf32>
// CHECK: return %[[S]], %[[M]]
func.func @chain_with_escaping_value(%g: tensor<?x256xf32>, %u: tensor<?x256xf32>, %r: tensor<?x256xf32>) -> (tensor<?x256xf32>, tensor<?x256xf32>) {
  %a = infer.gelu %g {approximate = "tanh"} : tensor<?x256xf32>
  %m = infer.mul %a, %u : tensor<?x256xf32>
  %s = infer.add %m, %r : tensor<?x256xf32>
  return %s, %m : tensor<?x256xf32>, tensor<?x256xf32>
}

// -----

// A lone elementwise op is left as it is.

// CHECK-LABEL: func.func @single_elementwise
// CHECK: infer.add
// CHECK-NOT: infer.fused
func.func @single_elementwise(%a: tensor<?x128xf32>, %b: tensor<?x128xf32>) -> tensor<?x128xf32> {
  %s = infer.add %a, %b : tensor<?x128xf32>
  return %s : tensor<?x128xf32>
}
