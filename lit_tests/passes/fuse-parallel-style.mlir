// RUN: infer-opt %s --infer-fuse | FileCheck %s --check-prefix=STYLED
// RUN: infer-opt %s --infer-shard-tensor-parallel="tp=1" --infer-fuse | FileCheck %s --check-prefix=TP1

// infer-fuse's sibling merge and the importer's parallel styles. A styled
// gate/up may yet be split, so fusion before sharding leaves the two apart
// with their styles (STYLED) instead of merging them into a linear with no
// style (nor into an infer.linear_swiglu, which has none); after sharding at
// tp=1 they merge, and with the silu_mul become one infer.linear_swiglu of
// the merged weight (TP1, the order of infer-deploy-pipeline). (infer-fuse
// as a whole still belongs after sharding: the sharding pass splits silu and
// mul, not a silu_mul.)

// STYLED-LABEL: func.func @mlp
// STYLED-NOT:     infer.concat_weights
// STYLED-NOT:     infer.linear_swiglu
// STYLED:         infer.linear %{{.+}} {parallel = #infer.parallel<column>}
// STYLED:         infer.linear %{{.+}} {parallel = #infer.parallel<column>}
// STYLED:         infer.silu_mul
// STYLED:         infer.linear %{{.+}} {parallel = #infer.parallel<row>}
// STYLED-NOT:     infer.concat_weights
// STYLED-NOT:     infer.linear_swiglu

// TP1-LABEL:    func.func @mlp
// TP1:            %[[W:.+]] = infer.concat_weights %{{.+}} -> tensor<256x64xf32>
// TP1-NEXT:       %[[H:.+]] = infer.linear_swiglu %{{[^ ]+}}, %[[W]] : tensor<?x64xf32>, tensor<256x64xf32> -> tensor<?x128xf32>
// TP1-NEXT:       %[[WD:.+]] = infer.weight "mlp.down_proj.weight" : tensor<64x128xf32>
// TP1-NEXT:       infer.linear %[[H]], %[[WD]] : tensor<?x128xf32>, tensor<64x128xf32> -> tensor<?x64xf32>
// TP1-NOT:        #infer.parallel
// TP1-NOT:        infer.all_reduce

module {
func.func @mlp(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %wg = infer.weight "mlp.gate_proj.weight" : tensor<128x64xf32>
  %g = infer.linear %x, %wg {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
  %wu = infer.weight "mlp.up_proj.weight" : tensor<128x64xf32>
  %u = infer.linear %x, %wu {parallel = #infer.parallel<column>} : tensor<?x64xf32>, tensor<128x64xf32> -> tensor<?x128xf32>
  %s = infer.silu %g : tensor<?x128xf32>
  %h = infer.mul %s, %u : tensor<?x128xf32>
  %wd = infer.weight "mlp.down_proj.weight" : tensor<64x128xf32>
  %y = infer.linear %h, %wd {parallel = #infer.parallel<row>} : tensor<?x128xf32>, tensor<64x128xf32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
}
