//===- TestEmitCuda.cpp - prints the CUDA C++ of infer.fused regions ------===//
//
// `test-infer-emit-cuda` prints the translation unit `infer compile --target
// cuda` would generate for the module's `infer.fused` regions, in program
// order (equal bodies share one kernel), so lit tests can FileCheck the
// emitted code from small functions instead of whole models.
//
//===----------------------------------------------------------------------===//

#include "codegen/PlanLowering.h"
#include "codegen/cuda/CudaEmitter.h"
#include "passes/test/TestPasses.h"

#include "mlir/IR/TypeUtilities.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

using namespace mlir;
using namespace mlir::infer;

namespace {

struct TestEmitCudaPass
    : PassWrapper<TestEmitCudaPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestEmitCudaPass)

  StringRef getArgument() const final { return "test-infer-emit-cuda"; }
  StringRef getDescription() const final {
    return "Prints the generated CUDA C++ of the module's infer.fused regions";
  }

  void runOnOperation() override {
    // Each region becomes a `fused` step of a one-rank plan, as plan lowering
    // makes it, over values of its inputs' and results' element types, so
    // the kernels are named, typed and shared as in an artifact.
    ::infer::plan::Plan plan;
    ::infer::plan::RankPlan &rank = plan.ranks.emplace_back();
    auto addValue = [&](Operation *op, Value value) -> std::optional<int> {
      std::optional<::infer::plan::DType> dtype =
          ::infer::compiler::planDTypeOf(getElementTypeOrSelf(value));
      if (!dtype) {
        op->emitError() << "element type of " << value.getType()
                        << " has no plan dtype";
        return std::nullopt;
      }
      ::infer::plan::Value planValue;
      planValue.id = static_cast<int>(rank.values.size());
      planValue.dtype = *dtype;
      rank.values.push_back(planValue);
      return planValue.id;
    };
    WalkResult walk = getOperation().walk([&](FusedOp op) {
      FailureOr<::infer::plan::FusedBody> body =
          ::infer::compiler::fusedBodyOf(op);
      if (failed(body))
        return WalkResult::interrupt();
      ::infer::plan::Step step;
      step.op = "fused";
      for (Value input : op.getInputs()) {
        std::optional<int> id = addValue(op, input);
        if (!id)
          return WalkResult::interrupt();
        step.operands.push_back(*id);
      }
      for (Value result : op.getResults()) {
        std::optional<int> id = addValue(op, result);
        if (!id)
          return WalkResult::interrupt();
        step.results.push_back(*id);
      }
      ::infer::plan::setFusedBody(*body, step);
      rank.steps.push_back(std::move(step));
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();
    ::infer::StatusOr<std::vector<::infer::compiler::FusedKernel>> kernels =
        ::infer::compiler::assignFusedKernels(plan);
    if (!kernels.isOk()) {
      getOperation().emitError() << kernels.status().message();
      return signalPassFailure();
    }
    llvm::outs() << ::infer::compiler::emitCudaUnit(*kernels);
  }
};

} // namespace

void mlir::infer::registerTestEmitCudaPass() {
  PassRegistration<TestEmitCudaPass>();
}
