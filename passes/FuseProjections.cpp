//===- FuseProjections.cpp - merge sibling linears into one -----*- C++ -*-===//
//
// Linears that read the same activations (q/k/v of attention, gate/up of the
// MLP) become one GEMM whose weight is their weights stacked row-wise:
//
//   x ─┬─ linear(wq) ─ q            x ─ linear(concat(wq, wk, wv)) ─ split ─┬─
//   q
//      ├─ linear(wk) ─ k     =>                                           ├─ k
//      └─ linear(wv) ─ v                                                  └─ v
//
// The weights must be whole checkpoint tensors (`infer.weight` without a
// tensor-parallel `shard`) so the runtime can stack them once at load time.
//
//===----------------------------------------------------------------------===//

#include "passes/FusePatterns.h"

#include "ir/InferOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace mlir::infer;

namespace {

/// What linears must share to be merged: the element types of their weight,
/// bias and result, and whether they have a bias at all.
struct MergeKey {
  Type weightType;
  Type biasType;
  Type resultType;

  bool operator==(const MergeKey &other) const {
    return weightType == other.weightType && biasType == other.biasType &&
           resultType == other.resultType;
  }
};

/// Whether `value` is a whole checkpoint tensor the runtime can concatenate
/// at load. Tensor-parallel shards are not (yet): their concatenation would
/// need a slice of every part.
bool isWholeCheckpointTensor(Value value) {
  auto weight = value.getDefiningOp<WeightOp>();
  return weight && !weight.getShard();
}

/// The merge key of `op`, or nothing if its weight or bias is not a whole
/// checkpoint tensor.
std::optional<MergeKey> getMergeKey(LinearOp op) {
  if (!isWholeCheckpointTensor(op.getWeight()))
    return std::nullopt;
  Type biasType;
  if (Value bias = op.getBias()) {
    if (!isWholeCheckpointTensor(bias))
      return std::nullopt;
    biasType = cast<RankedTensorType>(bias.getType()).getElementType();
  }
  return MergeKey{op.getWeight().getType().getElementType(), biasType,
                  op.getType().getElementType()};
}

/// Places the defining `infer.weight` of `value` before `anchor` if it comes
/// after it; weights have no operands, so they may move freely.
void hoistWeightBefore(RewriterBase &rewriter, Value value, Operation *anchor) {
  Operation *weight = value.getDefiningOp();
  if (weight->getBlock() != anchor->getBlock() ||
      anchor->isBeforeInBlock(weight))
    rewriter.moveOpBefore(weight, anchor);
}

/// Concatenates the row-stacked `parts` (weights or biases) with an
/// `infer.concat_weights` inserted at the rewriter's insertion point.
Value concatRows(RewriterBase &rewriter, Location loc, ValueRange parts) {
  auto first = cast<RankedTensorType>(parts.front().getType());
  SmallVector<int64_t> shape(first.getShape());
  shape[0] = 0;
  for (Value part : parts)
    shape[0] += cast<RankedTensorType>(part.getType()).getDimSize(0);
  auto type = RankedTensorType::get(shape, first.getElementType());
  return rewriter.create<ConcatWeightsOp>(loc, type, parts);
}

/// Merges every linear that reads the same input as the matched one and
/// shares its merge key; the first of them in program order is the root, so
/// the group is rewritten once.
struct MergeSiblingLinears : OpRewritePattern<LinearOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(LinearOp op,
                                PatternRewriter &rewriter) const override {
    std::optional<MergeKey> key = getMergeKey(op);
    if (!key)
      return rewriter.notifyMatchFailure(
          op, "weight or bias is not a whole checkpoint tensor");

    llvm::SetVector<Operation *> siblings;
    for (Operation *user : op.getInput().getUsers()) {
      auto sibling = dyn_cast<LinearOp>(user);
      if (!sibling || sibling.getInput() != op.getInput() ||
          sibling->getBlock() != op->getBlock())
        continue;
      std::optional<MergeKey> siblingKey = getMergeKey(sibling);
      if (siblingKey && *siblingKey == *key)
        siblings.insert(sibling);
    }
    if (siblings.size() < 2)
      return rewriter.notifyMatchFailure(op, "no sibling linear to merge with");
    SmallVector<Operation *> group = siblings.takeVector();
    llvm::sort(group, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });
    if (group.front() != op)
      return rewriter.notifyMatchFailure(op, "not the first of its siblings");

    SmallVector<Location> locs;
    SmallVector<Value> weights, biases;
    SmallVector<Type> resultTypes;
    for (Operation *member : group) {
      auto linear = cast<LinearOp>(member);
      locs.push_back(linear.getLoc());
      weights.push_back(linear.getWeight());
      if (linear.getBias())
        biases.push_back(linear.getBias());
      resultTypes.push_back(linear.getType());
      hoistWeightBefore(rewriter, linear.getWeight(), op);
      if (linear.getBias())
        hoistWeightBefore(rewriter, linear.getBias(), op);
    }

    Location loc = rewriter.getFusedLoc(locs);
    rewriter.setInsertionPoint(op);
    Value weight = concatRows(rewriter, loc, weights);
    Value bias = biases.empty() ? Value() : concatRows(rewriter, loc, biases);
    int64_t outFeatures =
        cast<RankedTensorType>(weight.getType()).getDimSize(0);
    auto mergedType = RankedTensorType::get(
        {op.getType().getDimSize(0), outFeatures}, key->resultType);
    auto merged =
        rewriter.create<LinearOp>(loc, mergedType, op.getInput(), weight, bias);
    auto split = rewriter.create<SplitOp>(loc, resultTypes, merged.getResult());
    for (auto [member, part] : llvm::zip_equal(group, split.getResults()))
      rewriter.replaceOp(member, part);
    return success();
  }
};

} // namespace

void mlir::infer::populateFuseProjectionPatterns(RewritePatternSet &patterns) {
  patterns.add<MergeSiblingLinears>(patterns.getContext());
}
