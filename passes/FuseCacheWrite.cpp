//===- FuseCacheWrite.cpp - rotary embedding into the cache -----*- C++ -*-===//
//
// After paging, rotated keys are read by nothing but the cache write:
// attention reads them back from the cache. `infer.rope_kv_cache_write`
// rotates them on their way into the cache, so they are never stored twice.
// The queries the layer's attention reads with that cache are rotated by the
// same rope at the same positions: `infer.rope_qkv_cache_write` does both,
// one pass over the token's q/k/v row that takes the rotation factors once.
//
//   %q = infer.rope %qkv#0, %pos
//   %c1 = infer.rope_kv_cache_write %c0, %qkv#1, %qkv#2, %slots, %pos
//   %o = infer.paged_attention %q, %c1, ...
//     ==>
//   %q, %c1 = infer.rope_qkv_cache_write %c0, %qkv#0, %qkv#1, %qkv#2,
//                                        %slots, %pos
//   %o = infer.paged_attention %q, %c1, ...
//
//===----------------------------------------------------------------------===//

#include "passes/FusePatterns.h"

#include "ir/InferOps.h"
#include "mlir/IR/TypeUtilities.h"

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

/// The `infer.rope` whose rotated queries an `infer.paged_attention` reads
/// together with the cache `write` produced: the queries of the layer.
static RopeOp findLayerQueryRope(RopeKVCacheWriteOp write) {
  for (Operation *user : write.getResult().getUsers()) {
    auto attention = dyn_cast<PagedAttentionOp>(user);
    if (attention && attention.getCache() == write.getResult())
      if (auto rope = attention.getQuery().getDefiningOp<RopeOp>())
        return rope;
  }
  return {};
}

/// Whether every user of `earlier`'s results comes after `later` in their
/// block, so that one op at `later` may replace both.
static bool usersFollow(Operation *earlier, Operation *later) {
  for (Operation *user : earlier->getUsers())
    if (user->getBlock() != later->getBlock() || !later->isBeforeInBlock(user))
      return false;
  return true;
}

struct FuseQueryRopeIntoCacheWrite : OpRewritePattern<RopeKVCacheWriteOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RopeKVCacheWriteOp write,
                                PatternRewriter &rewriter) const override {
    RopeOp rope = findLayerQueryRope(write);
    if (!rope)
      return rewriter.notifyMatchFailure(
          write, "no infer.paged_attention reads this cache with queries "
                 "from an infer.rope");
    if (rope.getPositions() != write.getPositions() ||
        rope.getQueryStartLoc() != write.getQueryStartLoc())
      return rewriter.notifyMatchFailure(
          write, "the query rope has other positions or query_start_loc");
    if (rope.getHeadDimAttr() != write.getHeadDimAttr() ||
        rope.getRotaryDimAttr() != write.getRotaryDimAttr() ||
        rope.getRopeAttr() != write.getRopeAttr())
      return rewriter.notifyMatchFailure(
          write, "the query rope has another head_dim, rotary_dim or rope");
    if (getElementTypeOrSelf(rope.getInput().getType()) !=
        getElementTypeOrSelf(write.getKey().getType()))
      return rewriter.notifyMatchFailure(
          write, "queries and keys have different element types");
    if (rope->getBlock() != write->getBlock())
      return rewriter.notifyMatchFailure(write,
                                         "the query rope is in another block");
    Operation *earlier = rope, *later = write;
    if (write->isBeforeInBlock(rope))
      std::swap(earlier, later);
    if (!usersFollow(earlier, later))
      return rewriter.notifyMatchFailure(
          write, "a user of the earlier op comes before the later one");

    rewriter.setInsertionPoint(later);
    auto fused = rewriter.create<RopeQKVCacheWriteOp>(
        rewriter.getFusedLoc({rope.getLoc(), write.getLoc()}), rope.getType(),
        write.getType(), write.getCache(), rope.getInput(), write.getKey(),
        write.getValue(), write.getSlotMapping(), write.getPositions(),
        write.getQueryStartLoc(), write.getLayerAttr(), write.getHeadDimAttr(),
        write.getRotaryDimAttr(), write.getRopeAttr());
    rewriter.replaceOp(rope, fused.getRotatedQuery());
    rewriter.replaceOp(write, fused.getResult());
    return success();
  }
};

} // namespace

void mlir::infer::populateFuseCacheWritePatterns(RewritePatternSet &patterns) {
  patterns.add<FuseRopeIntoCacheWrite, FuseQueryRopeIntoCacheWrite>(
      patterns.getContext());
}
