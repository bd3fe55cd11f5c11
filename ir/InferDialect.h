//===- InferDialect.h - infer dialect declaration ---------------*- C++ -*-===//
//
// Declares the infer dialect. Include "ir/InferOps.h" for its operations,
// "ir/InferTypes.h" and "ir/InferAttrs.h" for its types and attributes.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_IR_INFERDIALECT_H
#define INFER_IR_INFERDIALECT_H

#include "mlir/IR/Dialect.h"

#include "ir/InferOpsDialect.h.inc"

#endif // INFER_IR_INFERDIALECT_H
