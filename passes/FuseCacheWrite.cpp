//===- FuseCacheWrite.cpp - rotary embedding into the cache -----*- C++ -*-===//
//
// After paging, rotated keys are read by nothing but the cache write:
// attention reads them back from the cache. `infer.rope_kv_cache_write`
// rotates them on their way into the cache, so they are never stored twice.
//
//===----------------------------------------------------------------------===//

#include "passes/FusePatterns.h"

#include "ir/InferOps.h"

using namespace mlir;
using namespace mlir::infer;

namespace {

struct FuseRopeIntoCacheWrite : OpRewritePattern<KVCacheWriteOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(KVCacheWriteOp write,
                                PatternRewriter &rewriter) const override {
    auto rope = write.getKey().getDefiningOp<RopeOp>();
    if (!rope || !rope->hasOneUse())
      return rewriter.notifyMatchFailure(
          write, "keys are not an infer.rope used only here");
    rewriter.setInsertionPoint(write);
    auto fused = rewriter.create<RopeKVCacheWriteOp>(
        rewriter.getFusedLoc({rope.getLoc(), write.getLoc()}), write.getType(),
        write.getCache(), rope.getInput(), write.getValue(),
        write.getSlotMapping(), rope.getPositions(), rope.getQueryStartLoc(),
        write.getLayerAttr(), rope.getHeadDimAttr(), rope.getRotaryDimAttr(),
        rope.getRopeAttr());
    rewriter.replaceOp(write, fused.getResult());
    rewriter.eraseOp(rope);
    return success();
  }
};

} // namespace

void mlir::infer::populateFuseCacheWritePatterns(RewritePatternSet &patterns) {
  patterns.add<FuseRopeIntoCacheWrite>(patterns.getContext());
}
