//===- InferTypes.h - infer dialect types -----------------------*- C++ -*-===//
//
// Declares the types of the infer dialect.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_IR_INFERTYPES_H
#define INFER_IR_INFERTYPES_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Types.h"

#define GET_TYPEDEF_CLASSES
#include "ir/InferTypes.h.inc"

#endif // INFER_IR_INFERTYPES_H
