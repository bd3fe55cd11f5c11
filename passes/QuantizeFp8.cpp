//===- QuantizeFp8.cpp - FP8 weights and KV cache ---------------*- C++ -*-===//
//
// Implements `infer-quantize-fp8`: projection weights become FP8 E4M3 with
// scales the runtime computes when it loads the checkpoint, and the paged KV
// cache becomes FP8 E5M2 or E4M3. The rewrite is a change of types: the
// numerics (scales, rounding, dequantization) belong to the runtime.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/InferOps.h"
#include "ir/InferTypes.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir::infer {
#define GEN_PASS_DEF_QUANTIZEFP8PASS
#include "passes/Passes.h.inc"
} // namespace mlir::infer

using namespace mlir;
using namespace mlir::infer;

namespace {

struct QuantizeFp8Pass : infer::impl::QuantizeFp8PassBase<QuantizeFp8Pass> {
  using Base::Base;

  void runOnOperation() override;
};

/// The weight operand of an infer.linear or infer.logits, or null.
OpOperand *getProjectionWeight(Operation *op) {
  if (auto linear = dyn_cast<LinearOp>(op))
    return &linear.getWeightMutable();
  if (auto logits = dyn_cast<LogitsOp>(op))
    return &logits.getWeightMutable();
  return nullptr;
}

bool isProjectionWeightUse(OpOperand &use) {
  return getProjectionWeight(use.getOwner()) == &use;
}

/// Gives every projection weight f8E4M3FN elements and `#infer.fp8` scales.
/// A weight read only as projection weights changes in place; one that
/// something else reads too (a tied embedding table) keeps its type, and
/// the projections read a quantized copy of it.
LogicalResult quantizeWeights(func::FuncOp func, Fp8Granularity granularity) {
  MLIRContext *context = func.getContext();
  auto quant = Fp8Attr::get(context, granularity);
  Type fp8 = FloatType::getFloat8E4M3FN(context);

  SmallVector<OpOperand *> weightUses;
  func.walk([&](Operation *op) {
    if (OpOperand *weight = getProjectionWeight(op))
      weightUses.push_back(weight);
  });
  llvm::DenseMap<Operation *, Value> quantized;
  OpBuilder builder(context);
  for (OpOperand *use : weightUses) {
    auto type = cast<RankedTensorType>(use->get().getType());
    if (type.getElementType() == fp8)
      continue;
    // A tensor-parallel rank's slices of a stacked projection (Phi-3's
    // qkv_proj after infer-shard-tensor-parallel): each slice is quantized
    // on its own (a per-tensor scale per part) and concatenated as fp8.
    if (auto concat = use->get().getDefiningOp<ConcatWeightsOp>();
        concat && llvm::all_of(concat->getUses(), isProjectionWeightUse) &&
        llvm::all_of(concat.getInputs(), [&](Value input) {
          auto part = input.getDefiningOp<WeightOp>();
          return part && part->hasOneUse();
        })) {
      for (Value input : concat.getInputs()) {
        auto part = input.getDefiningOp<WeightOp>();
        part.getResult().setType(RankedTensorType::get(
            cast<RankedTensorType>(input.getType()).getShape(), fp8));
        part.setQuantAttr(quant);
      }
      concat.getResult().setType(RankedTensorType::get(type.getShape(), fp8));
      continue;
    }
    auto weight = use->get().getDefiningOp<WeightOp>();
    if (!weight)
      return use->getOwner()->emitOpError()
             << "reads a weight that is not an infer.weight, which "
                "infer-quantize-fp8 cannot quantize (run it before "
                "infer-fuse)";
    Value &fp8Weight = quantized[weight];
    if (!fp8Weight) {
      auto fp8Type = RankedTensorType::get(type.getShape(), fp8);
      if (llvm::all_of(weight->getUses(), isProjectionWeightUse)) {
        weight.getResult().setType(fp8Type);
        weight.setQuantAttr(quant);
        fp8Weight = weight.getResult();
      } else {
        builder.setInsertionPointAfter(weight);
        fp8Weight = builder.create<WeightOp>(weight.getLoc(), fp8Type,
                                             weight.getNameAttr(),
                                             weight.getShardAttr(), quant);
      }
    }
    use->set(fp8Weight);
  }
  return success();
}

/// Changes the element type of every `!infer.kv_cache` value: the cache
/// argument and the results of the writes that thread it through the layers.
LogicalResult quantizeKVCache(func::FuncOp func, Type elementType) {
  bool hasCache = false;
  auto convert = [&](Type type) -> Type {
    auto cache = dyn_cast<KVCacheType>(type);
    if (!cache)
      return type;
    hasCache = true;
    return KVCacheType::get(type.getContext(), cache.getNumLayers(),
                            cache.getNumKVHeads(), cache.getBlockSize(),
                            cache.getHeadDim(), elementType);
  };
  for (BlockArgument arg : func.getArguments())
    arg.setType(convert(arg.getType()));
  func.walk([&](Operation *op) {
    for (OpResult result : op->getResults())
      result.setType(convert(result.getType()));
  });
  if (!hasCache) {
    WalkResult attention = func.walk([](AttentionOp op) {
      op.emitOpError() << "has no paged KV cache to quantize (run "
                          "infer-page-kv-cache before infer-quantize-fp8)";
      return WalkResult::interrupt();
    });
    return failure(attention.wasInterrupted());
  }
  SmallVector<Type> results;
  for (Type type : func.getResultTypes())
    results.push_back(convert(type));
  func.setType(FunctionType::get(func.getContext(),
                                 func.getBody().getArgumentTypes(), results));
  return success();
}

} // namespace

void QuantizeFp8Pass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (weights == Fp8WeightQuant::E4M3 &&
      failed(quantizeWeights(func, granularity)))
    return signalPassFailure();
  MLIRContext *context = func.getContext();
  Type kvElementType;
  switch (kvCache) {
  case Fp8KVCacheQuant::None:
    return;
  case Fp8KVCacheQuant::E5M2:
    kvElementType = FloatType::getFloat8E5M2(context);
    break;
  case Fp8KVCacheQuant::E4M3:
    kvElementType = FloatType::getFloat8E4M3FN(context);
    break;
  }
  if (failed(quantizeKVCache(func, kvElementType)))
    signalPassFailure();
}
