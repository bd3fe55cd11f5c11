//===- infer-opt.cpp - mlir-opt driver for the infer dialect ----*- C++ -*-===//
//
// Parses, verifies and transforms infer IR: the lit tests' entry point.
//
//===----------------------------------------------------------------------===//

#include "ir/InferDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "passes/Passes.h"
#include "passes/test/TestPasses.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::arith::ArithDialect, mlir::func::FuncDialect,
                  mlir::infer::InferDialect, mlir::tensor::TensorDialect>();
  mlir::registerTransformsPasses();
  mlir::infer::registerInferPasses();
  mlir::infer::registerInferPipelines();
  mlir::infer::registerTestPrintMemoryPlanPass();
  mlir::infer::registerTestEmitCudaPass();
  mlir::infer::registerTestPrintPlanPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "infer optimizer driver\n", registry));
}
