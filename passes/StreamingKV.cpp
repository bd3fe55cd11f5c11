//===- StreamingKV.cpp - attention sinks and a rolling window ---*- C++ -*-===//
//
// Implements `infer-streaming-kv`: moves the keys' rotary embedding from
// before the KV-cache write into paged attention, which rotates each cached
// key at its index in the sequence's cache (StreamingLLM's position shift),
// and records the sink/window policy on the module for the runtime.
//
//   before:  k -> rope(k, positions) -> kv_cache_write -> paged_attention
//   after:   k -> kv_cache_write -> paged_attention {key_rope, key_rotary_dim}
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/InferAttrs.h"
#include "ir/InferOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::infer {
#define GEN_PASS_DEF_STREAMINGKVPASS
#include "passes/Passes.h.inc"
} // namespace mlir::infer

using namespace mlir;
using namespace mlir::infer;

namespace {

struct StreamingKVPass : infer::impl::StreamingKVPassBase<StreamingKVPass> {
  using Base::Base;

  void runOnOperation() override;
};

} // namespace

/// Rotates `attention`'s keys inside the attention instead of before the
/// cache write that stores them.
static LogicalResult shiftKeyPositions(PagedAttentionOp attention) {
  if (attention.getKeyRopeAttr())
    return success();
  int64_t layer = attention.getLayerAttr().getInt();
  if (int64_t window = attention.getSlidingWindowAttr().getInt())
    return attention.emitOpError()
           << "has a sliding window of " << window
           << " tokens: attention sinks (infer-streaming-kv) are not "
              "combined with sliding-window attention";
  auto write = attention.getCache().getDefiningOp<KVCacheWriteOp>();
  if (!write || write.getLayerAttr().getInt() != layer)
    return attention.emitOpError()
           << "reads a cache not written by an infer.kv_cache_write of layer "
           << layer << " just before it";
  auto rope = write.getKey().getDefiningOp<RopeOp>();
  if (!rope)
    return write.emitOpError()
           << "stores keys that no infer.rope rotates: StreamingLLM's "
              "position shift needs rotary position embeddings";
  if (rope.getHeadDimAttr().getInt() != attention.getHeadDimAttr().getInt())
    return rope.emitOpError()
           << "rotates heads of " << rope.getHeadDimAttr().getInt()
           << " features but layer " << layer << " attends over heads of "
           << attention.getHeadDimAttr().getInt();
  if (rope.getRope().getKind() == RopeScalingKind::LongRope ||
      rope.getRope().getKind() == RopeScalingKind::Dynamic)
    return rope.emitOpError()
           << "uses '" << stringifyRopeScalingKind(rope.getRope().getKind())
           << "' rope scaling, whose frequencies depend on the sequence's "
              "length: StreamingLLM's position shift does not apply to it";
  write.getKeyMutable().assign(rope.getInput());
  attention.setKeyRopeAttr(rope.getRopeAttr());
  attention.setKeyRotaryDimAttr(rope.getRotaryDimAttr());
  if (rope->use_empty())
    rope->erase();
  return success();
}

void StreamingKVPass::runOnOperation() {
  ModuleOp module = getOperation();
  const int64_t sinks = sinkTokens, recent = window;
  if (sinks < 0 || recent <= 0) {
    module.emitError() << "infer-streaming-kv: sink-tokens must be >= 0 and "
                          "window > 0, got sink-tokens="
                       << sinks << " window=" << recent;
    return signalPassFailure();
  }

  bool failed = false;
  module.walk([&](Operation *op) {
    if (isa<AttentionOp>(op)) {
      op->emitOpError() << "is not paged: run infer-page-kv-cache before "
                           "infer-streaming-kv";
      failed = true;
    } else if (isa<RopeKVCacheWriteOp, RopeQKVCacheWriteOp>(op)) {
      op->emitOpError() << "has rotated keys on their way into the cache: "
                           "run infer-streaming-kv before infer-fuse";
      failed = true;
    }
  });
  if (failed)
    return signalPassFailure();

  SmallVector<PagedAttentionOp> attentions;
  module.walk([&](PagedAttentionOp op) { attentions.push_back(op); });
  for (PagedAttentionOp attention : attentions)
    if (mlir::failed(shiftKeyPositions(attention)))
      return signalPassFailure();
  module->setAttr(InferDialect::kStreamingAttrName,
                  StreamingAttr::get(&getContext(), sinks, recent));
}
