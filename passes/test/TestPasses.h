//===- TestPasses.h - test-only passes of infer-opt -------------*- C++ -*-===//
//
// Passes that print analyses for lit tests (`test-infer-*`); registered by
// infer-opt only.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_PASSES_TEST_TESTPASSES_H
#define INFER_PASSES_TEST_TESTPASSES_H

namespace mlir::infer {

/// Registers `test-infer-print-memory-plan`.
void registerTestPrintMemoryPlanPass();

/// Registers `test-infer-emit-cuda`.
void registerTestEmitCudaPass();

/// Registers `test-infer-print-plan`.
void registerTestPrintPlanPass();

} // namespace mlir::infer

#endif // INFER_PASSES_TEST_TESTPASSES_H
