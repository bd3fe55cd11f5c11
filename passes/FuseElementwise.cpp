//===- FuseElementwise.cpp - elementwise chains -> infer.fused --*- C++ -*-===//
//
// Groups connected elementwise operations into `infer.fused` regions, each of
// which code generation turns into one kernel. Groups grow from a consumer
// towards its producers, visiting the block bottom-up:
//
//   a = gelu(x)        region(x, u, r):
//   b = mul(a, u)  =>    a = gelu(x); b = mul(a, u); c = add(b, r)
//   c = add(b, r)        yield c
//
// A producer joins only if every user of its result is already in the group,
// so the region has one result and nothing is computed twice. The body
// computes in f32 whatever the activation type: its block arguments are the
// inputs in f32 and its operations are retyped to f32, so the region rounds
// only its result (to the root's type), never the values in between.
//
//===----------------------------------------------------------------------===//

#include "passes/FusePatterns.h"

#include "ir/InferOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace mlir::infer;

bool mlir::infer::isFusibleElementwise(Operation *op) {
  return isa<AddOp, GeluOp, MulOp, SiluOp, SiluMulOp>(op);
}

/// The group rooted at `root`: it and, transitively, every elementwise
/// producer in the same block whose users are all in the group.
static SmallVector<Operation *>
collectGroup(Operation *root, const DenseSet<Operation *> &grouped) {
  llvm::SetVector<Operation *> group;
  group.insert(root);
  bool grew = true;
  while (grew) {
    grew = false;
    for (size_t i = 0; i < group.size(); ++i) {
      for (Value operand : group[i]->getOperands()) {
        Operation *producer = operand.getDefiningOp();
        if (!producer || !isFusibleElementwise(producer) ||
            producer->getBlock() != root->getBlock() ||
            group.contains(producer) || grouped.contains(producer))
          continue;
        if (llvm::all_of(producer->getUsers(), [&](Operation *user) {
              return group.contains(user);
            })) {
          group.insert(producer);
          grew = true;
        }
      }
    }
  }
  SmallVector<Operation *> ordered = group.takeVector();
  llvm::sort(ordered,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return ordered;
}

/// Replaces `group` (in program order, the root last) by one `infer.fused`.
static void outlineGroup(RewriterBase &rewriter, ArrayRef<Operation *> group) {
  Operation *root = group.back();
  DenseSet<Operation *> members(group.begin(), group.end());
  llvm::SetVector<Value> inputs;
  SmallVector<Location> locs;
  for (Operation *op : group) {
    locs.push_back(op->getLoc());
    for (Value operand : op->getOperands())
      if (!members.contains(operand.getDefiningOp()))
        inputs.insert(operand);
  }

  rewriter.setInsertionPoint(root);
  auto fused = rewriter.create<FusedOp>(
      rewriter.getFusedLoc(locs), root->getResultTypes(), inputs.getArrayRef());
  Block *body = rewriter.createBlock(&fused.getBody());
  Type f32 = rewriter.getF32Type();
  auto inF32 = [&](Type type) {
    return cast<RankedTensorType>(type).clone(f32);
  };
  IRMapping mapping;
  for (Value input : inputs)
    mapping.map(input,
                body->addArgument(inF32(input.getType()), input.getLoc()));
  for (Operation *op : group) {
    Operation *clone = rewriter.clone(*op, mapping);
    for (OpResult result : clone->getResults())
      result.setType(inF32(result.getType()));
  }
  SmallVector<Value> yielded;
  for (Value result : root->getResults())
    yielded.push_back(mapping.lookup(result));
  rewriter.create<YieldOp>(root->getLoc(), yielded);

  rewriter.replaceOp(root, fused.getResults());
  for (Operation *op : llvm::reverse(group.drop_back()))
    rewriter.eraseOp(op);
}

void mlir::infer::formElementwiseRegions(RewriterBase &rewriter, Block &block) {
  DenseSet<Operation *> grouped;
  SmallVector<SmallVector<Operation *>> groups;
  for (Operation &op : llvm::reverse(block)) {
    if (!isFusibleElementwise(&op) || grouped.contains(&op))
      continue;
    SmallVector<Operation *> group = collectGroup(&op, grouped);
    grouped.insert(group.begin(), group.end());
    if (group.size() >= 2)
      groups.push_back(std::move(group));
  }
  for (ArrayRef<Operation *> group : groups)
    outlineGroup(rewriter, group);
}
