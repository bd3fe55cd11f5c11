// RUN: infer-opt %s --split-input-file --infer-fuse-residual | FileCheck %s --check-prefix=STYLED
// RUN: infer-opt %s --split-input-file --infer-shard-tensor-parallel="tp=1" --infer-fuse-residual | FileCheck %s --check-prefix=TP1
// RUN: infer-opt %s --split-input-file --infer-fuse-residual --infer-shard-tensor-parallel="tp=1" --infer-fuse-residual | FileCheck %s --check-prefix=TP1
// RUN: infer-opt %s --split-input-file --infer-shard-tensor-parallel="tp=2" --infer-fuse-residual | FileCheck %s --check-prefix=TP2
// RUN: infer-opt %s --split-input-file --infer-fuse-residual --infer-shard-tensor-parallel="tp=2" | FileCheck %s --check-prefix=TP2

// infer-fuse-residual and the importer's parallel styles, in every order
// against infer-shard-tensor-parallel. A styled linear may yet be split, so
// fusion alone leaves it alone (prefix STYLED). Sharding consumes every
// style, also at tp=1, so fusing after it gives each o_proj/down_proj its
// residual at tp=1 (prefix TP1, the order of infer-deploy-pipeline) and none
// at tp=2, where the partial sums meet the residual after infer.all_reduce
// (prefix TP2). Fusing once more before sharding changes neither.

// An MLP block: up is column-parallel, down row-parallel.
// STYLED-LABEL: func.func @mlp
// STYLED:         %[[U:.+]] = infer.linear %{{[^ ]+}}, %{{[^ ]+}} {parallel = #infer.parallel<column>}
// STYLED:         %[[D:.+]] = infer.linear %[[U]], %{{[^ ]+}} {parallel = #infer.parallel<row>}
// STYLED-NEXT:    infer.add_rms_norm %{{.+}}, %[[D]]
// STYLED-NOT:     residual(

// TP1-NOT:      #infer.parallel
// TP1-LABEL:    func.func @mlp
// TP1-SAME:       (%[[X:[^:]+]]: tensor<?x64xf32>)
// TP1:            %[[WU:.+]] = infer.weight "mlp.up_proj.weight" : tensor<128x64xf32>
// TP1-NEXT:       %[[U:.+]] = infer.linear %[[X]], %[[WU]] : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
// TP1:            %[[WD:.+]] = infer.weight "mlp.down_proj.weight" : tensor<64x128xf32>
// TP1:            %[[H:.+]] = infer.linear %[[U]], %[[WD]] residual(%[[X]]) : tensor<?x128xf32>, tensor<64x128xf32> -> tensor<?x64xf32>
// TP1-NEXT:       %[[N:.+]] = infer.rms_norm %[[H]]
// TP1-NOT:        infer.add_rms_norm
// TP1-NOT:        #infer.parallel
// TP1:            return %[[H]], %[[N]]

// TP2-LABEL:    module attributes
// TP2-SAME:       infer.tp = 2
// TP2-LABEL:    func.func @mlp
// TP2-SAME:       (%[[X:[^:]+]]: tensor<?x64xf32>)
// TP2-NOT:        residual(
// TP2:            infer.weight "mlp.up_proj.weight" {shard = #infer.shard<dim = 0, shards = 2>} : tensor<64x64xf32>
// TP2:            infer.weight "mlp.down_proj.weight" {shard = #infer.shard<dim = 1, shards = 2>} : tensor<64x64xf32>
// TP2:            %[[D:.+]] = infer.linear %{{[^ ]+}}, %{{[^ ]+}} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
// TP2-NEXT:       %[[S:.+]] = infer.all_reduce %[[D]]
// TP2-NEXT:       infer.add_rms_norm %[[X]], %[[S]]
// TP2-NOT:        residual(
// TP2-NOT:        #infer.parallel
module {
func.func @mlp(%x: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %wu = infer.weight "mlp.up_proj.weight" : tensor<128x64xf32>
  %u = infer.linear %x, %wu {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
  %wd = infer.weight "mlp.down_proj.weight" : tensor<64x128xf32>
  %wn = infer.weight "norm.weight" : tensor<64xf32>
  %d = infer.linear %u, %wd {parallel = #infer.parallel<row>} : tensor<?x128xf32>, tensor<64x128xf32> -> tensor<?x64xf32>
  %h, %n = infer.add_rms_norm %x, %d, %wn {epsilon = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>, tensor<?x64xf32>
  return %h, %n : tensor<?x64xf32>, tensor<?x64xf32>
}
}

// -----

// A replicated linear (no style) takes its residual before sharding too, and
// sharding keeps it whole.
// STYLED-LABEL: func.func @replicated
// STYLED:         infer.linear %{{[^ ]+}}, %{{[^ ]+}} residual(

// TP1-LABEL:    func.func @replicated
// TP1:            infer.linear %{{[^ ]+}}, %{{[^ ]+}} residual(

// TP2-LABEL:    func.func @replicated
// TP2:            %[[W:.+]] = infer.weight "proj.weight" : tensor<64x64xf32>
// TP2:            infer.linear %{{[^ ]+}}, %[[W]] residual(%{{[^ ]+}}) : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
// TP2-NOT:        infer.all_reduce
module {
func.func @replicated(%x: tensor<?x64xf32>, %res: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %w = infer.weight "proj.weight" : tensor<64x64xf32>
  %p = infer.linear %x, %w : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %h = infer.add %res, %p : tensor<?x64xf32>
  return %h : tensor<?x64xf32>
}
}
