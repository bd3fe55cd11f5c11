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
// The weights must be checkpoint tensors (`infer.weight`) so the runtime can
// stack them once at load time. In a tensor-parallel program they may be
// column-parallel shards (`#infer.shard` along dim 0, the stacking axis):
// each rank then stacks its own slice of every part,
//
//   rank r:  concat(slice_r(wq), slice_r(wk), slice_r(wv))
//
// where each part keeps its own slicing (key/value heads replicated over
// ranks when there are fewer of them than ranks). Parts split for a different
// number of ranks, or a mix of whole and split parts, stay apart, and so do
// row-parallel (dim 1) shards, whose outputs are partial sums.
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
/// bias and result, whether they have a bias at all, and for how many ranks
/// their weight and bias are split (0: whole).
struct MergeKey {
  Type weightType;
  Type biasType;
  Type resultType;
  int64_t weightRanks;
  int64_t biasRanks;

  bool operator==(const MergeKey &other) const {
    return weightType == other.weightType && biasType == other.biasType &&
           resultType == other.resultType && weightRanks == other.weightRanks &&
           biasRanks == other.biasRanks;
  }
};

/// For how many ranks `value` is split if it is a checkpoint tensor the
/// runtime can concatenate at load: 0 for a whole tensor, the shard's ranks
/// for a slice along dim 0 (each part is sliced before the concatenation);
/// nothing otherwise.
std::optional<int64_t> getConcatenableRanks(Value value) {
  auto weight = value.getDefiningOp<WeightOp>();
  if (!weight)
    return std::nullopt;
  std::optional<ShardAttr> shard = weight.getShard();
  if (!shard)
    return 0;
  if (shard->getDim() != 0)
    return std::nullopt;
  return shard->getNumRanks();
}

/// The merge key of `op`, or nothing if its weight or bias is not a
/// concatenable checkpoint tensor or it adds a residual (one per linear).
std::optional<MergeKey> getMergeKey(LinearOp op) {
  // A linear with a parallel style may yet be split by
  // infer-shard-tensor-parallel (which consumes every style, at any tp):
  // merging it first would lose how.
  if (op.getResidual() || op.getParallel())
    return std::nullopt;
  std::optional<int64_t> weightRanks = getConcatenableRanks(op.getWeight());
  if (!weightRanks)
    return std::nullopt;
  Type biasType;
  std::optional<int64_t> biasRanks = 0;
  if (Value bias = op.getBias()) {
    biasRanks = getConcatenableRanks(bias);
    if (!biasRanks)
      return std::nullopt;
    biasType = cast<RankedTensorType>(bias.getType()).getElementType();
  }
  return MergeKey{op.getWeight().getType().getElementType(), biasType,
                  op.getType().getElementType(), *weightRanks, *biasRanks};
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
          op, "weight or bias is not a checkpoint tensor whole or split "
              "along dim 0, it adds a residual, or it has a parallel style");

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
    // No member has a parallel style (getMergeKey).
    auto merged = rewriter.create<LinearOp>(loc, mergedType, op.getInput(),
                                            weight, bias, ParallelAttr());
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
