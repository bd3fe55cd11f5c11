//===- MemoryPlan.cpp - activation buffers in one workspace ---------------===//

#include "passes/MemoryPlan.h"

#include "ir/InferOps.h"
#include "passes/MemoryPlanner.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace mlir::infer;

/// Bytes per token row of an activation `[T, d0, d1, ...]` with a dynamic
/// first and static other dimensions, or nothing for any other value.
static std::optional<int64_t> bytesPerRow(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || type.getRank() < 1 || !ShapedType::isDynamic(type.getDimSize(0)))
    return std::nullopt;
  int64_t elements = 1;
  for (int64_t size : type.getShape().drop_front()) {
    if (ShapedType::isDynamic(size))
      return std::nullopt;
    elements *= size;
  }
  unsigned bits = type.getElementTypeBitWidth();
  return elements * ((bits + 7) / 8);
}

MemoryPlan mlir::infer::computeMemoryPlan(func::FuncOp func) {
  MemoryPlan plan;
  if (func.getBody().empty())
    return plan;
  Block &block = func.getBody().front();
  llvm::DenseMap<Operation *, int64_t> stepOf;
  for (auto [index, op] : llvm::enumerate(block))
    stepOf[&op] = static_cast<int64_t>(index);
  llvm::DenseSet<Value> results(block.getTerminator()->operand_begin(),
                                block.getTerminator()->operand_end());

  std::vector<::infer::memory::Buffer> buffers;
  for (Operation &op : block) {
    if (isa<WeightOp, ConcatWeightsOp>(op))
      continue;
    for (Value value : op.getResults()) {
      std::optional<int64_t> bytes = bytesPerRow(value);
      if (!bytes || results.contains(value))
        continue;
      int64_t first = stepOf[&op], last = first;
      for (Operation *user : value.getUsers())
        last =
            std::max(last, stepOf.lookup(block.findAncestorOpInBlock(*user)));
      plan.buffers.push_back({value, *bytes, 0, first, last});
      buffers.push_back({*bytes, first, last});
    }
  }
  ::infer::memory::Placement placement = ::infer::memory::placeBuffers(buffers);
  for (auto [buffer, offset] : llvm::zip_equal(plan.buffers, placement.offsets))
    buffer.offset = offset;
  plan.peakBytesPerRow = placement.peakBytes;
  return plan;
}
