//===- InferOps.h - infer dialect operations --------------------*- C++ -*-===//
//
// Declares the operations of the infer dialect.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_IR_INFEROPS_H
#define INFER_IR_INFEROPS_H

#include "ir/InferAttrs.h"
#include "ir/InferDialect.h"
#include "ir/InferTypes.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "ir/InferOps.h.inc"

#endif // INFER_IR_INFEROPS_H
