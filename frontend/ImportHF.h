//===- ImportHF.h - Hugging Face model directory -> infer -------*- C++ -*-===//
//
// Imports a Hugging Face model directory (config.json, *.safetensors headers,
// generation_config.json) as a model-level `infer` module: one
// `func.func @forward` over the flat-batch contract, with logical
// `infer.attention` (no KV cache yet) and an `infer.weight` per checkpoint
// tensor. No weight data is read, only safetensors headers, whose names,
// dtypes and shapes are checked against the config.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_FRONTEND_IMPORTHF_H
#define INFER_FRONTEND_IMPORTHF_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

namespace infer::frontend {

/// Imports `modelDir`. On failure, returns null after emitting diagnostics on
/// `context` (located in config.json where a key is at fault).
mlir::OwningOpRef<mlir::ModuleOp> importHFModel(llvm::StringRef modelDir,
                                                mlir::MLIRContext &context);

} // namespace infer::frontend

#endif // INFER_FRONTEND_IMPORTHF_H
