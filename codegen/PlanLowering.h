//===- PlanLowering.h - Final infer IR -> kernel plan -----------*- C++ -*-===//
//
// Lowers the paged, deployable form of a model (the output of
// `infer-deploy-pipeline`) to the runtime's plan format: one plan value per
// SSA value, one step per op, in program order.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_CODEGEN_PLANLOWERING_H
#define INFER_CODEGEN_PLANLOWERING_H

#include "ir/InferOps.h"
#include "runtime/plan/FusedBody.h"
#include "runtime/plan/Plan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <map>
#include <optional>
#include <string>

namespace infer::compiler {

/// Checkpoint tensor name -> safetensors file holding it (relative to the
/// weights directory), as `safetensors::listModelTensors` returns it.
using TensorFileMap = std::map<std::string, std::string>;

/// Lowers `@forward` of `module` to a plan of `infer.tp` ranks (one when the
/// module is not split). Emits a diagnostic on
/// the offending op and fails on anything the plan format cannot express
/// (notably `infer.attention`: the paging pass has not run).
mlir::FailureOr<plan::Plan> lowerToPlan(mlir::ModuleOp module,
                                        const TensorFileMap &tensorFiles);

/// The plan dtype of an element type (f32, f16, bf16, i32, i64, f8E4M3FN,
/// f8E5M2), or nothing.
std::optional<plan::DType> planDTypeOf(mlir::Type elementType);

/// The register program of an `infer.fused` region, as a `fused` step
/// carries it; an error on an op the plan format has no elementwise op for.
mlir::FailureOr<plan::FusedBody> fusedBodyOf(mlir::infer::FusedOp op);

} // namespace infer::compiler

#endif // INFER_CODEGEN_PLANLOWERING_H
