//===- InferTypes.cpp - infer dialect types ---------------------*- C++ -*-===//
//
// Implements the types of the infer dialect.
//
//===----------------------------------------------------------------------===//

#include "ir/InferTypes.h"

#include "ir/InferDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::infer;

#define GET_TYPEDEF_CLASSES
#include "ir/InferTypes.cpp.inc"

void InferDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "ir/InferTypes.cpp.inc"
      >();
}

LogicalResult
KVCacheType::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                    int64_t numLayers, int64_t numKVHeads, int64_t blockSize,
                    int64_t headDim, Type elementType) {
  if (numLayers <= 0 || numKVHeads <= 0 || blockSize <= 0 || headDim <= 0)
    return emitError() << "kv_cache needs positive num_layers, num_kv_heads, "
                          "block_size and head_dim, got "
                       << numLayers << ", " << numKVHeads << ", " << blockSize
                       << ", " << headDim;
  if (!llvm::isa<FloatType>(elementType))
    return emitError() << "kv_cache element type must be a float type, got "
                       << elementType;
  if (elementType.getIntOrFloatBitWidth() == 8 && !elementType.isFloat8E5M2() &&
      !elementType.isFloat8E4M3FN())
    return emitError() << "kv_cache element type of 8 bits must be f8E5M2 or "
                          "f8E4M3FN, got "
                       << elementType;
  return success();
}
