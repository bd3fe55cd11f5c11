//===- FuseNormalization.cpp - residual add + RMS norm ----------*- C++ -*-===//
//
// A decoder layer adds a block's output to the residual stream and normalizes
// the sum for the next block; `infer.add_rms_norm` does both in one pass over
// the row and returns the sum too, for the next residual addition.
//
//===----------------------------------------------------------------------===//

#include "passes/FusePatterns.h"

#include "ir/InferOps.h"

using namespace mlir;
using namespace mlir::infer;

namespace {

struct FuseAddRMSNorm : OpRewritePattern<RMSNormOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RMSNormOp norm,
                                PatternRewriter &rewriter) const override {
    auto add = norm.getInput().getDefiningOp<AddOp>();
    if (!add)
      return rewriter.notifyMatchFailure(norm, "input is not an infer.add");
    if (norm.getHeadDim())
      return rewriter.notifyMatchFailure(norm, "normalizes each head");
    // The fused op takes the place of the norm, so the sum must not be needed
    // earlier.
    for (Operation *user : add->getUsers())
      if (user->getBlock() != norm->getBlock() || user->isBeforeInBlock(norm))
        return rewriter.notifyMatchFailure(
            norm, "the sum is used before the normalization");
    rewriter.setInsertionPoint(norm);
    auto fused = rewriter.create<AddRMSNormOp>(
        rewriter.getFusedLoc({add.getLoc(), norm.getLoc()}), add.getType(),
        norm.getType(), add.getLhs(), add.getRhs(), norm.getWeight(),
        norm.getEpsilonAttr(), norm.getWeightOffsetAttr());
    rewriter.replaceOp(norm, fused.getResult());
    rewriter.replaceOp(add, fused.getSum());
    return success();
  }
};

} // namespace

void mlir::infer::populateFuseNormalizationPatterns(
    RewritePatternSet &patterns) {
  patterns.add<FuseAddRMSNorm>(patterns.getContext());
}
