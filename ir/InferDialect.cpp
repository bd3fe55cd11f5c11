//===- InferDialect.cpp - infer dialect -------------------------*- C++ -*-===//
//
// Registers the dialect's operations, types and attributes and verifies the
// `infer.*` attributes it lends to functions and modules.
//
//===----------------------------------------------------------------------===//

#include "ir/InferDialect.h"

#include "ir/InferAttrs.h"
#include "ir/InferOps.h"
#include "ir/InferTypes.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::infer;

#include "ir/InferOpsDialect.cpp.inc"

void InferDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ir/InferOps.cpp.inc"
      >();
  registerAttributes();
  registerTypes();
}

/// The inputs of the batch contract a forward function may bind with
/// `infer.input`.
static constexpr llvm::StringLiteral kContractInputs[] = {
    "token_ids",    "positions",    "query_start_loc", "context_lens",
    "block_tables", "slot_mapping", "logits_indices",  "kv_cache"};

LogicalResult InferDialect::verifyRegionArgAttribute(Operation *op,
                                                     unsigned regionIndex,
                                                     unsigned argIndex,
                                                     NamedAttribute attr) {
  if (attr.getName() != kInputAttrName)
    return success();
  auto input = dyn_cast<StringAttr>(attr.getValue());
  if (!input || !llvm::is_contained(kContractInputs, input.getValue())) {
    InFlightDiagnostic diag = op->emitError()
                              << "'" << kInputAttrName << "' of argument "
                              << argIndex << " must be one of ";
    llvm::interleaveComma(kContractInputs, diag, [&](StringRef name) {
      diag << "\"" << name << "\"";
    });
    return diag << ", got " << attr.getValue();
  }
  return success();
}

LogicalResult InferDialect::verifyOperationAttribute(Operation *op,
                                                     NamedAttribute attr) {
  if (attr.getName() == kTensorParallelAttrName) {
    auto ranks = dyn_cast<IntegerAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !ranks || ranks.getValue().getSExtValue() <= 0)
      return op->emitError() << "'" << kTensorParallelAttrName
                             << "' must be a positive integer attribute of a "
                                "module";
    return success();
  }
  if (attr.getName() == kStreamingAttrName) {
    if (!isa<ModuleOp>(op) || !isa<StreamingAttr>(attr.getValue()))
      return op->emitError() << "'" << kStreamingAttrName
                             << "' must be an #infer.streaming attribute of a "
                                "module";
    return success();
  }
  if (attr.getName() != kModelAttrName)
    return success();
  if (!isa<ModuleOp>(op) || !isa<DictionaryAttr>(attr.getValue()))
    return op->emitError() << "'" << kModelAttrName
                           << "' must be a dictionary attribute of a module";
  return success();
}
