//===- PageKVCache.cpp - attention -> paged KV cache ------------*- C++ -*-===//
//
// Implements `infer-page-kv-cache`: makes the KV cache an explicit function
// argument and rewrites logical attention into cache writes and paged
// attention over block tables.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/InferOps.h"
#include "ir/InferTypes.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::infer {
#define GEN_PASS_DEF_PAGEKVCACHEPASS
#include "passes/Passes.h.inc"
} // namespace mlir::infer

using namespace mlir;
using namespace mlir::infer;

namespace {

/// The batch-contract inputs that paged attention reads.
struct PagingInputs {
  Value slotMapping;
  Value blockTables;
  Value contextLens;
};

struct PageKVCachePass : infer::impl::PageKVCachePassBase<PageKVCachePass> {
  using Base::Base;

  void runOnOperation() override;
};

} // namespace

/// Returns the argument of `func` marked `{infer.input = <input>}`, or a
/// diagnostic on `func` if there is none.
static FailureOr<Value> findContractInput(func::FuncOp func, StringRef input) {
  for (BlockArgument arg : func.getArguments()) {
    auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  InferDialect::kInputAttrName);
    if (name && name.getValue() == input)
      return Value(arg);
  }
  return func.emitOpError()
         << "has infer.attention ops but no argument marked {"
         << InferDialect::kInputAttrName << " = \"" << input << "\"}";
}

static FailureOr<PagingInputs> findPagingInputs(func::FuncOp func) {
  FailureOr<Value> slotMapping = findContractInput(func, "slot_mapping");
  if (failed(slotMapping))
    return failure();
  FailureOr<Value> blockTables = findContractInput(func, "block_tables");
  if (failed(blockTables))
    return failure();
  FailureOr<Value> contextLens = findContractInput(func, "context_lens");
  if (failed(contextLens))
    return failure();
  return PagingInputs{*slotMapping, *blockTables, *contextLens};
}

static int64_t layerOf(AttentionOp op) { return op.getLayerAttr().getInt(); }

static Type keyElementType(AttentionOp op) {
  return op.getKey().getType().getElementType();
}

/// Derives the one cache type all attention layers share, or reports why
/// they cannot share one.
static FailureOr<KVCacheType> inferCacheType(ArrayRef<AttentionOp> layers,
                                             int64_t blockSize) {
  AttentionOp first = layers.front();
  int64_t numLayers = layers.size();
  llvm::SmallDenseMap<int64_t, AttentionOp> opOfLayer;
  for (AttentionOp op : layers) {
    if (op.getNumKvHeads() != first.getNumKvHeads() ||
        op.getHeadDim() != first.getHeadDim() ||
        keyElementType(op) != keyElementType(first)) {
      InFlightDiagnostic diag =
          op.emitOpError() << "cannot share a KV cache with layer "
                           << layerOf(first)
                           << ": (num_kv_heads, head_dim, key element type) = ("
                           << op.getNumKvHeads() << ", " << op.getHeadDim()
                           << ", " << keyElementType(op) << ") vs ("
                           << first.getNumKvHeads() << ", "
                           << first.getHeadDim() << ", "
                           << keyElementType(first) << ")";
      diag.attachNote(first.getLoc()) << "layer " << layerOf(first);
      return diag;
    }
    auto [it, inserted] = opOfLayer.try_emplace(layerOf(op), op);
    if (!inserted) {
      InFlightDiagnostic diag = op.emitOpError()
                                << "reuses KV-cache layer " << layerOf(op);
      diag.attachNote(it->second.getLoc()) << "first use of the layer";
      return diag;
    }
    numLayers = std::max(numLayers, layerOf(op) + 1);
  }
  return KVCacheType::get(first.getContext(), numLayers, first.getNumKvHeads(),
                          blockSize, first.getHeadDim(), keyElementType(first));
}

/// Replaces `op` by a write of its keys and values into `cache` and a paged
/// attention over the written cache; returns the written cache.
static Value pageAttention(OpBuilder &builder, AttentionOp op, Value cache,
                           const PagingInputs &inputs) {
  builder.setInsertionPoint(op);
  auto write = builder.create<KVCacheWriteOp>(
      op.getLoc(), cache.getType(), cache, op.getKey(), op.getValue(),
      inputs.slotMapping, op.getLayerAttr());
  auto paged = builder.create<PagedAttentionOp>(
      op.getLoc(), op.getType(), op.getQuery(), write.getResult(),
      inputs.blockTables, inputs.contextLens, op.getQueryStartLoc(),
      op.getLayerAttr(), op.getNumHeadsAttr(), op.getNumKvHeadsAttr(),
      op.getHeadDimAttr(), op.getScaleAttr(), op.getSlidingWindowAttr(),
      /*key_rope=*/nullptr, /*key_rotary_dim=*/nullptr,
      op.getLogitSoftcapAttr());
  op.replaceAllUsesWith(paged.getResult());
  op.erase();
  return write.getResult();
}

void PageKVCachePass::runOnOperation() {
  func::FuncOp func = getOperation();
  int64_t size = blockSize;
  if (size <= 0 || !llvm::isPowerOf2_64(size)) {
    func.emitError() << "infer-page-kv-cache: block-size must be a positive "
                        "power of two, got "
                     << size;
    return signalPassFailure();
  }

  SmallVector<AttentionOp> layers;
  func.walk([&](AttentionOp op) { layers.push_back(op); });
  if (layers.empty())
    return;
  // Threading one SSA cache value through the layers needs them in one block.
  for (AttentionOp op : layers) {
    if (op->getBlock() != &func.front()) {
      op.emitOpError() << "must be in the entry block of its function to be "
                          "paged";
      return signalPassFailure();
    }
  }

  FailureOr<PagingInputs> inputs = findPagingInputs(func);
  if (failed(inputs))
    return signalPassFailure();
  FailureOr<KVCacheType> cacheType = inferCacheType(layers, size);
  if (failed(cacheType))
    return signalPassFailure();

  MLIRContext *context = &getContext();
  unsigned cacheIndex = func.getNumArguments();
  auto cacheAttrs = DictionaryAttr::get(
      context,
      NamedAttribute(StringAttr::get(context, InferDialect::kInputAttrName),
                     StringAttr::get(context, "kv_cache")));
  func.insertArgument(cacheIndex, *cacheType, cacheAttrs, func.getLoc());

  OpBuilder builder(context);
  Value cache = func.getArgument(cacheIndex);
  for (AttentionOp op : layers)
    cache = pageAttention(builder, op, cache, *inputs);
}
