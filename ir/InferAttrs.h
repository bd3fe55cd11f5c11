//===- InferAttrs.h - infer dialect attributes ------------------*- C++ -*-===//
//
// Declares the attributes and enumerations of the infer dialect.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_IR_INFERATTRS_H
#define INFER_IR_INFERATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"

#include "ir/InferEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/InferAttrs.h.inc"

#endif // INFER_IR_INFERATTRS_H
