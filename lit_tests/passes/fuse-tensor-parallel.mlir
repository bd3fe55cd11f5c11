// RUN: infer-opt %s --split-input-file --infer-fuse | FileCheck %s

// Column-parallel q/k/v of a tp = 2 program with 2 key/value heads of 16
// (replicated: both ranks hold all of k and v) and biases: one GEMM over the
// concatenated shards, each part keeping its own #infer.shard.

// CHECK-LABEL: func.func @sharded_qkv_with_bias
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x128xf32>)
// CHECK-DAG: %[[WQ:.+]] = infer.weight "q.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<64x128xf32>
// CHECK-DAG: %[[BQ:.+]] = infer.weight "q.bias" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<64xf32>
// CHECK-DAG: %[[WK:.+]] = infer.weight "k.weight" {shard = #infer.shard<dim = 0, shards = 1, replication = 2>} : tensor<32x128xf32>
// CHECK-DAG: %[[BK:.+]] = infer.weight "k.bias" {shard = #infer.shard<dim = 0, shards = 1, replication = 2>} : tensor<32xf32>
// CHECK-DAG: %[[WV:.+]] = infer.weight "v.weight" {shard = #infer.shard<dim = 0, shards = 1, replication = 2>} : tensor<32x128xf32>
// CHECK-DAG: %[[BV:.+]] = infer.weight "v.bias" {shard = #infer.shard<dim = 0, shards = 1, replication = 2>} : tensor<32xf32>
// CHECK: %[[W:.+]] = infer.concat_weights %[[WQ]], %[[WK]], %[[WV]] : tensor<64x128xf32>, tensor<32x128xf32>, tensor<32x128xf32> -> tensor<128x128xf32>
// CHECK-NEXT: %[[B:.+]] = infer.concat_weights %[[BQ]], %[[BK]], %[[BV]] : tensor<64xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<128xf32>
// CHECK-NEXT: %[[QKV:.+]] = infer.linear %[[X]], %[[W]], %[[B]] : tensor<?x128xf32>, tensor<128x128xf32>, tensor<128xf32> -> tensor<?x128xf32>
// CHECK-NEXT: %[[PARTS:.+]]:3 = infer.split %[[QKV]] : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
// CHECK-NOT: infer.linear
// CHECK: return %[[PARTS]]#0, %[[PARTS]]#1, %[[PARTS]]#2
func.func @sharded_qkv_with_bias(%x: tensor<?x128xf32>) -> (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>) {
  %wq = infer.weight "q.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<64x128xf32>
  %bq = infer.weight "q.bias" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<64xf32>
  %q = infer.linear %x, %wq, %bq : tensor<?x128xf32>, tensor<64x128xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %wk = infer.weight "k.weight" {shard = #infer.shard<dim = 0, shards = 1, replication = 2>} : tensor<32x128xf32>
  %bk = infer.weight "k.bias" {shard = #infer.shard<dim = 0, shards = 1, replication = 2>} : tensor<32xf32>
  %k = infer.linear %x, %wk, %bk : tensor<?x128xf32>, tensor<32x128xf32>, tensor<32xf32> -> tensor<?x32xf32>
  %wv = infer.weight "v.weight" {shard = #infer.shard<dim = 0, shards = 1, replication = 2>} : tensor<32x128xf32>
  %bv = infer.weight "v.bias" {shard = #infer.shard<dim = 0, shards = 1, replication = 2>} : tensor<32xf32>
  %v = infer.linear %x, %wv, %bv : tensor<?x128xf32>, tensor<32x128xf32>, tensor<32xf32> -> tensor<?x32xf32>
  return %q, %k, %v : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
}

// -----

// The column-parallel MLP of a tp = 2 program: the gate/up shards merge and,
// with silu(gate) * up, become one infer.linear_swiglu of the merged weight
// (each rank's [gate shard; up shard], halves of its rows); the row-parallel
// down projection stays alone.

// CHECK-LABEL: func.func @sharded_gate_up
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x128xf32>)
// CHECK-NEXT: %[[WG:.+]] = infer.weight "gate.weight" {shard = #infer.shard<dim = 0, shards = 2>}
// CHECK-NEXT: %[[WU:.+]] = infer.weight "up.weight" {shard = #infer.shard<dim = 0, shards = 2>}
// CHECK-NEXT: %[[W:.+]] = infer.concat_weights %[[WG]], %[[WU]] : tensor<128x128xf32>, tensor<128x128xf32> -> tensor<256x128xf32>
// CHECK-NEXT: %[[H:.+]] = infer.linear_swiglu %[[X]], %[[W]] : tensor<?x128xf32>, tensor<256x128xf32> -> tensor<?x128xf32>
// CHECK-NEXT: %[[WD:.+]] = infer.weight "down.weight" {shard = #infer.shard<dim = 1, shards = 2>}
// CHECK-NEXT: %[[Y:.+]] = infer.linear %[[H]], %[[WD]] : tensor<?x128xf32>, tensor<128x128xf32> -> tensor<?x128xf32>
// CHECK-NEXT: %[[SUM:.+]] = infer.all_reduce %[[Y]]
// CHECK-NEXT: return %[[SUM]]
func.func @sharded_gate_up(%x: tensor<?x128xf32>) -> tensor<?x128xf32> {
  %wg = infer.weight "gate.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<128x128xf32>
  %g = infer.linear %x, %wg : tensor<?x128xf32>, tensor<128x128xf32> -> tensor<?x128xf32>
  %wu = infer.weight "up.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<128x128xf32>
  %u = infer.linear %x, %wu : tensor<?x128xf32>, tensor<128x128xf32> -> tensor<?x128xf32>
  %s = infer.silu %g : tensor<?x128xf32>
  %h = infer.mul %s, %u : tensor<?x128xf32>
  %wd = infer.weight "down.weight" {shard = #infer.shard<dim = 1, shards = 2>} : tensor<128x128xf32>
  %y = infer.linear %h, %wd : tensor<?x128xf32>, tensor<128x128xf32> -> tensor<?x128xf32>
  %r = infer.all_reduce %y : tensor<?x128xf32>
  return %r : tensor<?x128xf32>
}

// -----

// FP8 shards (infer-quantize-fp8 runs before infer-fuse) merge too; the
// plan lowering gives each part its own per-tensor scale.

// CHECK-LABEL: func.func @sharded_fp8_qkv
// CHECK: %[[W:.+]] = infer.concat_weights %{{.+}}, %{{.+}}, %{{.+}} : tensor<64x128xf8E4M3FN>, tensor<16x128xf8E4M3FN>, tensor<16x128xf8E4M3FN> -> tensor<96x128xf8E4M3FN>
// CHECK-NEXT: infer.linear %{{.+}}, %[[W]] : tensor<?x128xf32>, tensor<96x128xf8E4M3FN> -> tensor<?x96xf32>
// CHECK-NEXT: infer.split
// CHECK-NOT: infer.linear
func.func @sharded_fp8_qkv(%x: tensor<?x128xf32>) -> (tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>) {
  %wq = infer.weight "q.weight" {quant = #infer.fp8<granularity = per_tensor>, shard = #infer.shard<dim = 0, shards = 2>} : tensor<64x128xf8E4M3FN>
  %q = infer.linear %x, %wq : tensor<?x128xf32>, tensor<64x128xf8E4M3FN> -> tensor<?x64xf32>
  %wk = infer.weight "k.weight" {quant = #infer.fp8<granularity = per_tensor>, shard = #infer.shard<dim = 0, shards = 2>} : tensor<16x128xf8E4M3FN>
  %k = infer.linear %x, %wk : tensor<?x128xf32>, tensor<16x128xf8E4M3FN> -> tensor<?x16xf32>
  %wv = infer.weight "v.weight" {quant = #infer.fp8<granularity = per_tensor>, shard = #infer.shard<dim = 0, shards = 2>} : tensor<16x128xf8E4M3FN>
  %v = infer.linear %x, %wv : tensor<?x128xf32>, tensor<16x128xf8E4M3FN> -> tensor<?x16xf32>
  return %q, %k, %v : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>
}

// -----

// Parts sharded differently stay apart: %a is split for 2 ranks and %b for
// 4; %c is whole; %d and %e are row-parallel (dim 1) shards, whose outputs
// are partial sums.

// CHECK-LABEL: func.func @shards_that_stay_apart
// CHECK-NOT: infer.concat_weights
// CHECK-NOT: infer.split
// CHECK: return
func.func @shards_that_stay_apart(%x: tensor<?x128xf32>, %y: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x64xf32>, tensor<?x128xf32>, tensor<?x128xf32>) {
  %wa = infer.weight "a.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<64x128xf32>
  %a = infer.linear %x, %wa : tensor<?x128xf32>, tensor<64x128xf32> -> tensor<?x64xf32>
  %wb = infer.weight "b.weight" {shard = #infer.shard<dim = 0, shards = 4>} : tensor<32x128xf32>
  %b = infer.linear %x, %wb : tensor<?x128xf32>, tensor<32x128xf32> -> tensor<?x32xf32>
  %wc = infer.weight "c.weight" : tensor<64x128xf32>
  %c = infer.linear %x, %wc : tensor<?x128xf32>, tensor<64x128xf32> -> tensor<?x64xf32>
  %wd = infer.weight "d.weight" {shard = #infer.shard<dim = 1, shards = 2>} : tensor<128x64xf32>
  %d = infer.linear %y, %wd : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
  %we = infer.weight "e.weight" {shard = #infer.shard<dim = 1, shards = 2>} : tensor<128x64xf32>
  %e = infer.linear %y, %we : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
  return %a, %b, %c, %d, %e : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x64xf32>, tensor<?x128xf32>, tensor<?x128xf32>
}
