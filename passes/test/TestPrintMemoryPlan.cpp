//===- TestPrintMemoryPlan.cpp - prints the memory plan ---------*- C++ -*-===//
//
// `test-infer-print-memory-plan` prints, per function, the workspace peak
// and each activation's bytes per token row, offset and live range:
//
//   memory plan @forward: peak 1024 bytes per token row
//     %1: 512 bytes/row at 0, steps [1, 3]
//
//===----------------------------------------------------------------------===//

#include "passes/MemoryPlan.h"
#include "passes/test/TestPasses.h"

#include "mlir/IR/AsmState.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::infer;

namespace {

struct TestPrintMemoryPlanPass
    : PassWrapper<TestPrintMemoryPlanPass, OperationPass<func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestPrintMemoryPlanPass)

  StringRef getArgument() const final { return "test-infer-print-memory-plan"; }
  StringRef getDescription() const final {
    return "Prints the workspace placement of a function's activations";
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    MemoryPlan plan = computeMemoryPlan(func);
    AsmState state(func);
    llvm::raw_ostream &os = llvm::outs();
    os << "memory plan @" << func.getSymName() << ": peak "
       << plan.peakBytesPerRow << " bytes per token row\n";
    for (const BufferPlacement &buffer : plan.buffers) {
      os << "  ";
      buffer.value.printAsOperand(os, state);
      os << ": " << buffer.bytesPerRow << " bytes/row at " << buffer.offset
         << ", steps [" << buffer.firstStep << ", " << buffer.lastStep << "]\n";
    }
  }
};

} // namespace

void mlir::infer::registerTestPrintMemoryPlanPass() {
  PassRegistration<TestPrintMemoryPlanPass>();
}
