//===- TestPrintPlan.cpp - prints the kernel plan of a module ---*- C++ -*-===//
//
// `test-infer-print-plan` lowers the module's `@forward` to the runtime's
// plan format, as `infer compile` does, and prints its plan.json, so lit
// tests check the lowering of small functions (value dtypes, steps, workspace
// offsets) without a checkpoint: every `infer.weight` is taken to live in
// model.safetensors.
//
//===----------------------------------------------------------------------===//

#include "codegen/PlanLowering.h"
#include "passes/test/TestPasses.h"

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::infer;

namespace {

struct TestPrintPlanPass
    : PassWrapper<TestPrintPlanPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestPrintPlanPass)

  StringRef getArgument() const final { return "test-infer-print-plan"; }
  StringRef getDescription() const final {
    return "Prints the kernel plan (plan.json) of the module's @forward";
  }

  void runOnOperation() override {
    ::infer::compiler::TensorFileMap tensorFiles;
    getOperation().walk([&](WeightOp weight) {
      tensorFiles[weight.getName().str()] = "model.safetensors";
    });
    FailureOr<::infer::plan::Plan> plan =
        ::infer::compiler::lowerToPlan(getOperation(), tensorFiles);
    if (failed(plan))
      return signalPassFailure();
    llvm::outs() << ::infer::plan::planToJson(*plan);
  }
};

} // namespace

void mlir::infer::registerTestPrintPlanPass() {
  PassRegistration<TestPrintPlanPass>();
}
