//===- MemoryPlan.h - activation buffers in one workspace -------*- C++ -*-===//
//
// The memory plan of a forward function: every activation its entry block
// computes gets a byte offset in one workspace, reused once the activation
// is dead. The number of tokens T is only known per call, so the plan is
// made per token row: an activation of shape [T or S, d0, d1, ...] needs
// d0*d1*...*sizeof(element) bytes per row, and with T rows in the batch
// (S <= T), offset * T and size * T place it in a workspace of
// peak * T bytes.
//
//   step:      0    1    2    3    4          bytes per row
//   %a         [=========]                    512 @ 0
//   %b              [====]                    512 @ 512
//   %c                   [=========]          512 @ 0   (reuses %a)
//
// Not in the workspace: function results (the caller owns them), weights,
// the KV cache and values without a per-row shape.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_PASSES_MEMORYPLAN_H
#define INFER_PASSES_MEMORYPLAN_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::infer {

struct BufferPlacement {
  Value value;
  int64_t bytesPerRow = 0;
  int64_t offset = 0;
  /// Indices, in the entry block, of the defining op and the last user.
  int64_t firstStep = 0;
  int64_t lastStep = 0;
};

struct MemoryPlan {
  SmallVector<BufferPlacement> buffers;
  int64_t peakBytesPerRow = 0;
};

/// Liveness of the activations of `func`'s entry block and their placement.
MemoryPlan computeMemoryPlan(func::FuncOp func);

/// Attribute names the `infer-plan-memory` pass sets.
inline constexpr llvm::StringLiteral kWorkspaceOffsetsAttrName =
    "infer.workspace_offsets";
inline constexpr llvm::StringLiteral kWorkspaceBytesPerRowAttrName =
    "infer.workspace_bytes_per_row";

} // namespace mlir::infer

#endif // INFER_PASSES_MEMORYPLAN_H
