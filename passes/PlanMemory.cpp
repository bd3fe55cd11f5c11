//===- PlanMemory.cpp - the infer-plan-memory pass --------------*- C++ -*-===//
//
// Implements `infer-plan-memory`: records the memory plan of each forward
// function (passes/MemoryPlan.h) as attributes codegen copies into the
// kernel plan.
//
//===----------------------------------------------------------------------===//

#include "passes/MemoryPlan.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir::infer {
#define GEN_PASS_DEF_PLANMEMORYPASS
#include "passes/Passes.h.inc"
} // namespace mlir::infer

using namespace mlir;
using namespace mlir::infer;

namespace {

struct PlanMemoryPass : infer::impl::PlanMemoryPassBase<PlanMemoryPass> {
  using Base::Base;

  void runOnOperation() override;
};

} // namespace

void PlanMemoryPass::runOnOperation() {
  func::FuncOp func = getOperation();
  // A declaration has no body to place.
  if (func.isExternal())
    return;
  MemoryPlan plan = computeMemoryPlan(func);
  llvm::DenseMap<Value, int64_t> offsetOf;
  for (const BufferPlacement &buffer : plan.buffers)
    offsetOf[buffer.value] = buffer.offset;

  Builder builder(&getContext());
  for (Operation &op : func.getBody().front()) {
    SmallVector<int64_t> offsets;
    for (Value result : op.getResults()) {
      auto it = offsetOf.find(result);
      offsets.push_back(it == offsetOf.end() ? -1 : it->second);
    }
    if (llvm::any_of(offsets, [](int64_t offset) { return offset >= 0; }))
      op.setAttr(kWorkspaceOffsetsAttrName,
                 builder.getDenseI64ArrayAttr(offsets));
  }
  func->setAttr(kWorkspaceBytesPerRowAttrName,
                builder.getI64IntegerAttr(plan.peakBytesPerRow));
}
