// RUN: infer-opt %s --split-input-file --allow-unregistered-dialect --infer-fuse-residual | FileCheck %s
// RUN: infer-opt %s --split-input-file --allow-unregistered-dialect --infer-fuse | FileCheck %s --check-prefix=FUSE

// o_proj feeding add+rmsnorm: the residual moves into the GEMM and the norm
// stays.
// CHECK-LABEL: func.func @add_rms_norm_rhs
// CHECK-SAME:    (%[[A:.+]]: tensor<?x64xbf16>, %[[RES:.+]]: tensor<?x64xbf16>)
// CHECK:         %[[WO:.+]] = infer.weight "o_proj.weight"
// CHECK:         %[[WN:.+]] = infer.weight "norm.weight"
// CHECK:         %[[H:.+]] = infer.linear %[[A]], %[[WO]] residual(%[[RES]]) : tensor<?x64xbf16>, tensor<64x64xbf16> -> tensor<?x64xbf16>
// CHECK-NEXT:    %[[N:.+]] = infer.rms_norm %[[H]], %[[WN]] {epsilon = 1.000000e-05 : f64, weight_offset = 1.000000e+00 : f64}
// CHECK-NOT:     infer.add_rms_norm
// CHECK:         return %[[H]], %[[N]]
// FUSE-LABEL: func.func @add_rms_norm_rhs
// FUSE:         infer.linear {{.*}} residual(
// FUSE-NEXT:    infer.rms_norm
// FUSE-NOT:     infer.add_rms_norm
func.func @add_rms_norm_rhs(%a: tensor<?x64xbf16>, %res: tensor<?x64xbf16>) -> (tensor<?x64xbf16>, tensor<?x64xbf16>) {
  %wo = infer.weight "o_proj.weight" : tensor<64x64xbf16>
  %wn = infer.weight "norm.weight" : tensor<64xbf16>
  %o = infer.linear %a, %wo : tensor<?x64xbf16>, tensor<64x64xbf16> -> tensor<?x64xbf16>
  %h, %n = infer.add_rms_norm %res, %o, %wn {epsilon = 1.0e-05 : f64, weight_offset = 1.0 : f64} : tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<64xbf16> -> tensor<?x64xbf16>, tensor<?x64xbf16>
  return %h, %n : tensor<?x64xbf16>, tensor<?x64xbf16>
}

// -----

// The linear on the left, with a bias; the residual is computed after the
// product, so the linear moves down to the add.
// CHECK-LABEL: func.func @add_rms_norm_lhs_bias
// CHECK-SAME:    (%[[A:[^:]+]]: tensor<?x64xf32>, %[[R:[^:]+]]: tensor<?x64xf32>)
// CHECK:         %[[WO:.+]] = infer.weight "o_proj.weight"
// CHECK:         %[[B:.+]] = infer.weight "o_proj.bias"
// CHECK:         %[[RES:.+]] = infer.silu %[[R]]
// CHECK-NEXT:    %[[H:.+]] = infer.linear %[[A]], %[[WO]], %[[B]] residual(%[[RES]]) : tensor<?x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
// CHECK-NEXT:    %[[N:.+]] = infer.rms_norm %[[H]], %{{.+}} {epsilon = {{.+}} : f64}
// CHECK:         return %[[H]], %[[N]]
func.func @add_rms_norm_lhs_bias(%a: tensor<?x64xf32>, %r: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %wo = infer.weight "o_proj.weight" : tensor<64x64xf32>
  %b = infer.weight "o_proj.bias" : tensor<64xf32>
  %wn = infer.weight "norm.weight" : tensor<64xf32>
  %o = infer.linear %a, %wo, %b : tensor<?x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %res = infer.silu %r : tensor<?x64xf32>
  %h, %n = infer.add_rms_norm %o, %res, %wn {epsilon = 1.0e-06 : f64} : tensor<?x64xf32>, tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>, tensor<?x64xf32>
  return %h, %n : tensor<?x64xf32>, tensor<?x64xf32>
}

// -----

// A plain residual add (no norm after it) of down_proj.
// CHECK-LABEL: func.func @add(
// CHECK-SAME:    %[[A:[^:]+]]: tensor<?x128xbf16>, %[[RES:[^:]+]]: tensor<?x64xbf16>)
// CHECK:         %[[H:.+]] = infer.linear %[[A]], %{{.+}} residual(%[[RES]])
// CHECK-NEXT:    infer.logits %[[H]]
// FUSE-LABEL: func.func @add(
// FUSE:         infer.linear {{.*}} residual(
// FUSE-NEXT:    infer.logits
func.func @add(%a: tensor<?x128xbf16>, %res: tensor<?x64xbf16>) -> tensor<?x32xf32> {
  %wd = infer.weight "down_proj.weight" : tensor<64x128xbf16>
  %wl = infer.weight "lm_head.weight" : tensor<32x64xbf16>
  %d = infer.linear %a, %wd : tensor<?x128xbf16>, tensor<64x128xbf16> -> tensor<?x64xbf16>
  %h = infer.add %res, %d : tensor<?x64xbf16>
  %l = infer.logits %h, %wl : tensor<?x64xbf16>, tensor<32x64xbf16> -> tensor<?x32xf32>
  return %l : tensor<?x32xf32>
}

// -----

// Parallel attention and MLP: both residual adds end in their GEMMs.
// CHECK-LABEL: func.func @chained_adds
// CHECK-SAME:    (%[[A:[^:]+]]: tensor<?x64xbf16>, %[[M:[^:]+]]: tensor<?x64xbf16>, %[[RES:[^:]+]]: tensor<?x64xbf16>)
// CHECK:         %[[O:.+]] = infer.linear %[[A]], %{{.+}} residual(%[[RES]])
// CHECK-NEXT:    %[[D:.+]] = infer.linear %[[M]], %{{.+}} residual(%[[O]])
// CHECK-NEXT:    return %[[D]]
func.func @chained_adds(%a: tensor<?x64xbf16>, %m: tensor<?x64xbf16>, %res: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  %wo = infer.weight "o_proj.weight" : tensor<64x64xbf16>
  %wd = infer.weight "down_proj.weight" : tensor<64x64xbf16>
  %o = infer.linear %a, %wo : tensor<?x64xbf16>, tensor<64x64xbf16> -> tensor<?x64xbf16>
  %d = infer.linear %m, %wd : tensor<?x64xbf16>, tensor<64x64xbf16> -> tensor<?x64xbf16>
  %s = infer.add %res, %o : tensor<?x64xbf16>
  %h = infer.add %s, %d : tensor<?x64xbf16>
  return %h : tensor<?x64xbf16>
}

// -----

// A linear read twice keeps its own result.
// CHECK-LABEL: func.func @multi_use_linear
// CHECK:         %[[O:.+]] = infer.linear %{{[^ ]+}}, %{{[^ ]+}} :
// CHECK:         infer.add_rms_norm %{{.+}}, %[[O]]
func.func @multi_use_linear(%a: tensor<?x64xbf16>, %res: tensor<?x64xbf16>) -> (tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>) {
  %wo = infer.weight "o_proj.weight" : tensor<64x64xbf16>
  %wn = infer.weight "norm.weight" : tensor<64xbf16>
  %o = infer.linear %a, %wo : tensor<?x64xbf16>, tensor<64x64xbf16> -> tensor<?x64xbf16>
  %h, %n = infer.add_rms_norm %res, %o, %wn {epsilon = 1.0e-05 : f64} : tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<64xbf16> -> tensor<?x64xbf16>, tensor<?x64xbf16>
  return %h, %n, %o : tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>
}

// -----

// A linear that adds a residual already takes no second one.
// CHECK-LABEL: func.func @residual_already
// CHECK-SAME:    (%[[A:[^:]+]]: tensor<?x64xbf16>, %[[R0:[^:]+]]: tensor<?x64xbf16>, %[[R1:[^:]+]]: tensor<?x64xbf16>)
// CHECK:         %[[O:.+]] = infer.linear %[[A]], %{{.+}} residual(%[[R0]])
// CHECK:         infer.add_rms_norm %[[R1]], %[[O]]
func.func @residual_already(%a: tensor<?x64xbf16>, %r0: tensor<?x64xbf16>, %r1: tensor<?x64xbf16>) -> (tensor<?x64xbf16>, tensor<?x64xbf16>) {
  %wo = infer.weight "o_proj.weight" : tensor<64x64xbf16>
  %wn = infer.weight "norm.weight" : tensor<64xbf16>
  %o = infer.linear %a, %wo residual(%r0) : tensor<?x64xbf16>, tensor<64x64xbf16> -> tensor<?x64xbf16>
  %h, %n = infer.add_rms_norm %r1, %o, %wn {epsilon = 1.0e-05 : f64} : tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<64xbf16> -> tensor<?x64xbf16>, tensor<?x64xbf16>
  return %h, %n : tensor<?x64xbf16>, tensor<?x64xbf16>
}

// -----

// Tensor parallelism: each rank's row-parallel product is a partial sum;
// the residual joins once, after infer.all_reduce (and the bias after it).
// CHECK-LABEL: func.func @tensor_parallel
// CHECK:         %[[O:.+]] = infer.linear %{{[^ ]+}}, %{{[^ ]+}} :
// CHECK-NEXT:    %[[S:.+]] = infer.all_reduce %[[O]]
// CHECK-NEXT:    infer.add_rms_norm %{{.+}}, %[[S]]
// CHECK:         %[[D:.+]] = infer.linear %{{[^ ]+}}, %{{[^ ]+}} :
// CHECK-NEXT:    %[[DS:.+]] = infer.all_reduce %[[D]]
// CHECK-NEXT:    %[[DB:.+]] = infer.bias_add %[[DS]]
// CHECK-NEXT:    infer.add %{{.+}}, %[[DB]]
func.func @tensor_parallel(%a: tensor<?x32xbf16>, %res: tensor<?x64xbf16>) -> (tensor<?x64xbf16>, tensor<?x64xbf16>) attributes {} {
  %wo = infer.weight "o_proj.weight" {shard = #infer.shard<dim = 1, shards = 2>} : tensor<64x32xbf16>
  %wd = infer.weight "down_proj.weight" {shard = #infer.shard<dim = 1, shards = 2>} : tensor<64x32xbf16>
  %bd = infer.weight "down_proj.bias" : tensor<64xbf16>
  %wn = infer.weight "norm.weight" : tensor<64xbf16>
  %o = infer.linear %a, %wo : tensor<?x32xbf16>, tensor<64x32xbf16> -> tensor<?x64xbf16>
  %os = infer.all_reduce %o : tensor<?x64xbf16>
  %h, %n = infer.add_rms_norm %res, %os, %wn {epsilon = 1.0e-05 : f64} : tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<64xbf16> -> tensor<?x64xbf16>, tensor<?x64xbf16>
  %d = infer.linear %a, %wd : tensor<?x32xbf16>, tensor<64x32xbf16> -> tensor<?x64xbf16>
  %ds = infer.all_reduce %d : tensor<?x64xbf16>
  %db = infer.bias_add %ds, %bd : tensor<?x64xbf16>, tensor<64xbf16>
  %y = infer.add %h, %db : tensor<?x64xbf16>
  return %y, %n : tensor<?x64xbf16>, tensor<?x64xbf16>
}

// -----

// A linear that still has a parallel style (the importer's output, before
// infer-shard-tensor-parallel) may yet be split: it keeps its style and takes
// no residual (fuse-residual-parallel-style.mlir runs it with the sharding
// pass, in both orders).
// CHECK-LABEL: func.func @parallel_style
// CHECK:         %[[O:.+]] = infer.linear %{{[^ ]+}}, %{{[^ ]+}} {parallel = #infer.parallel<row>} :
// CHECK-NOT:     residual(
// CHECK:         infer.add_rms_norm %{{.+}}, %[[O]]
// FUSE-LABEL: func.func @parallel_style
// FUSE:         %[[O:.+]] = infer.linear %{{[^ ]+}}, %{{[^ ]+}} {parallel = #infer.parallel<row>} :
// FUSE-NOT:     residual(
// FUSE:         infer.add_rms_norm %{{.+}}, %[[O]]
func.func @parallel_style(%a: tensor<?x64xbf16>, %res: tensor<?x64xbf16>) -> (tensor<?x64xbf16>, tensor<?x64xbf16>) {
  %wo = infer.weight "o_proj.weight" : tensor<64x64xbf16>
  %wn = infer.weight "norm.weight" : tensor<64xbf16>
  %o = infer.linear %a, %wo {parallel = #infer.parallel<row>} : tensor<?x64xbf16>, tensor<64x64xbf16> -> tensor<?x64xbf16>
  %h, %n = infer.add_rms_norm %res, %o, %wn {epsilon = 1.0e-05 : f64} : tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<64xbf16> -> tensor<?x64xbf16>, tensor<?x64xbf16>
  return %h, %n : tensor<?x64xbf16>, tensor<?x64xbf16>
}

// -----

// A column-parallel product read by a plain add keeps its style and takes
// no residual either.
// CHECK-LABEL: func.func @parallel_style_add
// CHECK:         %[[O:.+]] = infer.linear %{{[^ ]+}}, %{{[^ ]+}} {parallel = #infer.parallel<column>} :
// CHECK-NEXT:    infer.add %{{.+}}, %[[O]]
func.func @parallel_style_add(%a: tensor<?x64xbf16>, %res: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  %wo = infer.weight "o_proj.weight" : tensor<64x64xbf16>
  %o = infer.linear %a, %wo {parallel = #infer.parallel<column>} : tensor<?x64xbf16>, tensor<64x64xbf16> -> tensor<?x64xbf16>
  %h = infer.add %res, %o : tensor<?x64xbf16>
  return %h : tensor<?x64xbf16>
}

// -----

// An add whose only user is elementwise joins that user's infer.fused region
// (infer-fuse), which reads the product as cheaply as the epilogue would.
// CHECK-LABEL: func.func @add_into_region
// CHECK:         %[[O:.+]] = infer.linear %{{[^ ]+}}, %{{[^ ]+}} :
// CHECK-NEXT:    %[[S:.+]] = infer.add %{{.+}}, %[[O]]
// CHECK-NEXT:    infer.silu %[[S]]
// FUSE-LABEL: func.func @add_into_region
// FUSE:         %[[O:.+]] = infer.linear %{{[^ ]+}}, %{{[^ ]+}} :
// FUSE:         infer.fused ins(%{{.+}}, %[[O]] :
// FUSE:           infer.add
// FUSE-NEXT:      infer.silu
func.func @add_into_region(%a: tensor<?x64xbf16>, %res: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  %wo = infer.weight "o_proj.weight" : tensor<64x64xbf16>
  %o = infer.linear %a, %wo : tensor<?x64xbf16>, tensor<64x64xbf16> -> tensor<?x64xbf16>
  %s = infer.add %res, %o : tensor<?x64xbf16>
  %y = infer.silu %s : tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// An add whose other operand is an elementwise op used only there roots that
// op's region.
// CHECK-LABEL: func.func @add_roots_region
// CHECK:         %[[O:.+]] = infer.linear %{{[^ ]+}}, %{{[^ ]+}} :
// CHECK:         infer.add %{{.+}}, %[[O]]
func.func @add_roots_region(%a: tensor<?x64xbf16>, %g: tensor<?x64xbf16>, %u: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  %wo = infer.weight "o_proj.weight" : tensor<64x64xbf16>
  %o = infer.linear %a, %wo : tensor<?x64xbf16>, tensor<64x64xbf16> -> tensor<?x64xbf16>
  %m = infer.mul %g, %u : tensor<?x64xbf16>
  %s = infer.add %m, %o : tensor<?x64xbf16>
  return %s : tensor<?x64xbf16>
}

// -----

// The product is read in another block than the one it is computed in: the
// linear would have to move across the branch, so it keeps its own result.
// CHECK-LABEL: func.func @other_block
// CHECK:         %[[O:.+]] = infer.linear %{{[^ ]+}}, %{{[^ ]+}} :
// CHECK-NEXT:    "test.br"()[^[[BB:.+]]]
// CHECK:       ^[[BB]]:
// CHECK-NEXT:    infer.add_rms_norm %{{.+}}, %[[O]]
// CHECK-NOT:     residual(
// FUSE-LABEL: func.func @other_block
// FUSE-NOT:     residual(
// FUSE:         infer.add_rms_norm
func.func @other_block(%a: tensor<?x64xbf16>, %res: tensor<?x64xbf16>) -> (tensor<?x64xbf16>, tensor<?x64xbf16>) {
  %wo = infer.weight "o_proj.weight" : tensor<64x64xbf16>
  %wn = infer.weight "norm.weight" : tensor<64xbf16>
  %o = infer.linear %a, %wo : tensor<?x64xbf16>, tensor<64x64xbf16> -> tensor<?x64xbf16>
  "test.br"()[^bb1] : () -> ()
^bb1:
  %h, %n = infer.add_rms_norm %res, %o, %wn {epsilon = 1.0e-05 : f64} : tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<64xbf16> -> tensor<?x64xbf16>, tensor<?x64xbf16>
  return %h, %n : tensor<?x64xbf16>, tensor<?x64xbf16>
}

// -----

// The add is in a region nested in the linear's block: no residual either.
// CHECK-LABEL: func.func @add_in_region
// CHECK:         %[[O:.+]] = infer.linear %{{[^ ]+}}, %{{[^ ]+}} :
// CHECK-NEXT:    "test.region"() ({
// CHECK-NEXT:      %[[S:.+]] = infer.add %{{.+}}, %[[O]]
// CHECK-NEXT:      "test.yield"(%[[S]])
// CHECK-NOT:     residual(
// FUSE-LABEL: func.func @add_in_region
// FUSE-NOT:     residual(
// FUSE:         infer.add
func.func @add_in_region(%a: tensor<?x64xbf16>, %res: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  %wo = infer.weight "o_proj.weight" : tensor<64x64xbf16>
  %o = infer.linear %a, %wo : tensor<?x64xbf16>, tensor<64x64xbf16> -> tensor<?x64xbf16>
  %y = "test.region"() ({
    %s = infer.add %res, %o : tensor<?x64xbf16>
    "test.yield"(%s) : (tensor<?x64xbf16>) -> ()
  }) : () -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// A product read by two residual adds: neither takes it into the GEMM (the
// other would lose the bare product).
// CHECK-LABEL: func.func @two_adds
// CHECK-SAME:    (%[[A:[^:]+]]: tensor<?x64xbf16>, %[[R0:[^:]+]]: tensor<?x64xbf16>, %[[R1:[^:]+]]: tensor<?x64xbf16>)
// CHECK:         %[[O:.+]] = infer.linear %[[A]], %{{[^ ]+}} :
// CHECK-NEXT:    %[[H0:.+]] = infer.add %[[R0]], %[[O]]
// CHECK-NEXT:    %[[H1:.+]] = infer.add %[[R1]], %[[O]]
// CHECK-NEXT:    return %[[H0]], %[[H1]]
// FUSE-LABEL: func.func @two_adds
// FUSE-NOT:     residual(
// FUSE:         return
func.func @two_adds(%a: tensor<?x64xbf16>, %r0: tensor<?x64xbf16>, %r1: tensor<?x64xbf16>) -> (tensor<?x64xbf16>, tensor<?x64xbf16>) {
  %wo = infer.weight "o_proj.weight" : tensor<64x64xbf16>
  %o = infer.linear %a, %wo : tensor<?x64xbf16>, tensor<64x64xbf16> -> tensor<?x64xbf16>
  %h0 = infer.add %r0, %o : tensor<?x64xbf16>
  %h1 = infer.add %r1, %o : tensor<?x64xbf16>
  return %h0, %h1 : tensor<?x64xbf16>, tensor<?x64xbf16>
}

// -----

// A bias and a residual: the bias stays the third operand, the residual
// follows it in `residual(...)` (the plan's linear_residual step reorders
// them: plan-linear-residual.mlir).
// CHECK-LABEL: func.func @add_bias
// CHECK-SAME:    (%[[A:[^:]+]]: tensor<?x128xbf16>, %[[RES:[^:]+]]: tensor<?x64xbf16>)
// CHECK:         %[[WD:.+]] = infer.weight "down_proj.weight"
// CHECK-NEXT:    %[[BD:.+]] = infer.weight "down_proj.bias"
// CHECK-NEXT:    %[[H:.+]] = infer.linear %[[A]], %[[WD]], %[[BD]] residual(%[[RES]]) : tensor<?x128xbf16>, tensor<64x128xbf16>, tensor<64xbf16> -> tensor<?x64xbf16>
// CHECK-NEXT:    return %[[H]]
// FUSE-LABEL: func.func @add_bias
// FUSE:         infer.linear %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}} residual(
func.func @add_bias(%a: tensor<?x128xbf16>, %res: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  %wd = infer.weight "down_proj.weight" : tensor<64x128xbf16>
  %bd = infer.weight "down_proj.bias" : tensor<64xbf16>
  %d = infer.linear %a, %wd, %bd : tensor<?x128xbf16>, tensor<64x128xbf16>, tensor<64xbf16> -> tensor<?x64xbf16>
  %h = infer.add %res, %d : tensor<?x64xbf16>
  return %h : tensor<?x64xbf16>
}
