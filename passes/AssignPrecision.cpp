//===- AssignPrecision.cpp - element types of activations -------*- C++ -*-===//
//
// Implements `infer-assign-precision`. One walk over the function's block, in
// program order, gives each op's results their element types, so every op
// sees its operands' final types; an operand of another type than its op
// reads gets an `infer.cast` in front of the op:
//
//   %l = infer.logits ...             -> f32 (fixed)
//   %s = infer.add %l, %h             -> promote(f32, bf16) = f32:
//                                        %c = infer.cast %h : bf16 -> f32
//   %n = infer.rms_norm %s, %w        -> bf16 (the activation type):
//                                        %d = infer.cast %s : f32 -> bf16
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/InferOps.h"
#include "ir/InferTypes.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::infer {
#define GEN_PASS_DEF_ASSIGNPRECISIONPASS
#include "passes/Passes.h.inc"
} // namespace mlir::infer

using namespace mlir;
using namespace mlir::infer;

namespace {

struct AssignPrecisionPass
    : infer::impl::AssignPrecisionPassBase<AssignPrecisionPass> {
  using Base::Base;

  void runOnOperation() override;
};

/// How an op's float results get their element type.
enum class Rule {
  /// The activation type: the op makes a new activation from parameters,
  /// the cache or whole rows.
  kActivation,
  /// The operands' type, f32 where they differ: data movement and
  /// elementwise math keep the precision of what they read.
  kPromote,
  /// As written: the logits' f32 (and the return; a cast keeps its target
  /// type too).
  kFixed,
};

/// The rule of an op and the operands it reads as activations (those that
/// must have the type the rule gives; parameters, the cache and indices
/// convert or need nothing).
struct Precision {
  Rule rule;
  SmallVector<OpOperand *> activations;
};

Type elementTypeOf(Type type) {
  if (auto cache = dyn_cast<KVCacheType>(type))
    return cache.getElementType();
  if (auto tensor = dyn_cast<RankedTensorType>(type))
    return tensor.getElementType();
  return {};
}

/// Whether values of `type` take the element type the pass assigns: float
/// tensors and KV caches, but not fp8 ones (infer-quantize-fp8 chose those).
bool isAssignable(Type type) {
  auto element = dyn_cast_or_null<FloatType>(elementTypeOf(type));
  return element && element.getWidth() != 8;
}

/// `type` with element type `elementType` if it is assignable.
Type withElementType(Type type, Type elementType) {
  if (!isAssignable(type))
    return type;
  if (auto cache = dyn_cast<KVCacheType>(type))
    return KVCacheType::get(type.getContext(), cache.getNumLayers(),
                            cache.getNumKVHeads(), cache.getBlockSize(),
                            cache.getHeadDim(), elementType);
  return cast<RankedTensorType>(type).clone(elementType);
}

SmallVector<OpOperand *> operandsOf(MutableArrayRef<OpOperand> operands) {
  SmallVector<OpOperand *> result;
  for (OpOperand &operand : operands)
    result.push_back(&operand);
  return result;
}

/// The rule of `op`, or nothing for an op the pass does not know.
std::optional<Precision> precisionOf(Operation *op) {
  using Result = std::optional<Precision>;
  return llvm::TypeSwitch<Operation *, Result>(op)
      .Case<EmbeddingOp>([](auto) {
        return Precision{Rule::kActivation, {}};
      })
      .Case<LinearOp>([](LinearOp linear) {
        Precision precision{Rule::kActivation, {&linear.getInputMutable()}};
        if (MutableOperandRange residual = linear.getResidualMutable();
            !residual.empty())
          precision.activations.push_back(&residual[0]);
        return precision;
      })
      .Case<LinearSwiGluOp>([](LinearSwiGluOp linear) {
        return Precision{Rule::kActivation, {&linear.getInputMutable()}};
      })
      .Case<RMSNormOp>([](RMSNormOp norm) {
        return Precision{Rule::kActivation, {&norm.getInputMutable()}};
      })
      .Case<AddRMSNormOp>([](AddRMSNormOp norm) {
        return Precision{Rule::kActivation,
                         {&norm.getLhsMutable(), &norm.getRhsMutable()}};
      })
      .Case<AttentionOp>([](AttentionOp attention) {
        return Precision{Rule::kActivation,
                         {&attention.getQueryMutable(),
                          &attention.getKeyMutable(),
                          &attention.getValueMutable()}};
      })
      .Case<PagedAttentionOp>([](PagedAttentionOp attention) {
        return Precision{Rule::kActivation, {&attention.getQueryMutable()}};
      })
      .Case<KVCacheWriteOp, RopeKVCacheWriteOp>([](auto write) {
        return Precision{Rule::kActivation,
                         {&write.getKeyMutable(), &write.getValueMutable()}};
      })
      .Case<RopeQKVCacheWriteOp>([](RopeQKVCacheWriteOp write) {
        return Precision{Rule::kActivation,
                         {&write.getQueryMutable(), &write.getKeyMutable(),
                          &write.getValueMutable()}};
      })
      .Case<GatherRowsOp, RopeOp, BiasAddOp>([](auto unary) {
        return Precision{Rule::kPromote, {&unary.getInputMutable()}};
      })
      .Case<SplitOp, AllGatherOp, AllReduceOp, AddOp, MulOp, SiluOp, GeluOp,
            SiluMulOp>([](Operation *elementwise) {
        return Precision{Rule::kPromote,
                         operandsOf(elementwise->getOpOperands())};
      })
      // The region loads each input to f32 whatever its type: its inputs
      // need no casts, and parameters convert at load.
      .Case<FusedOp, WeightOp, ConcatWeightsOp>([](auto) {
        return Precision{Rule::kPromote, {}};
      })
      .Case<LogitsOp, func::ReturnOp>([](auto) {
        return Precision{Rule::kFixed, {}};
      })
      .Default([](Operation *) -> Result { return std::nullopt; });
}

/// The type a promoting op computes in: its operands' common element type,
/// or f32 where they differ (bf16 with f16 included, as PyTorch promotes).
Type promotedType(Operation *op, ValueRange operands) {
  Type common;
  for (Value operand : operands) {
    if (!isAssignable(operand.getType()))
      continue;
    Type element = elementTypeOf(operand.getType());
    if (common && common != element)
      return Float32Type::get(op->getContext());
    common = element;
  }
  return common;
}

/// Gives `op`'s results their element types and casts its activation
/// operands to the type it reads; `activationType` is the pass's.
LogicalResult assignPrecision(Operation *op, Type activationType) {
  if (auto cast = dyn_cast<CastOp>(op)) {
    // A cast that a changed operand type made an identity goes away.
    if (cast.getInput().getType() == cast.getType()) {
      cast.getResult().replaceAllUsesWith(cast.getInput());
      cast.erase();
    }
    return success();
  }
  std::optional<Precision> precision = precisionOf(op);
  if (!precision)
    return op->emitOpError() << "has no precision rule in "
                                "infer-assign-precision";
  Type type = activationType;
  switch (precision->rule) {
  case Rule::kFixed:
    return success();
  case Rule::kActivation:
    break;
  case Rule::kPromote: {
    // Parameters and fused regions cast nothing: they promote over all their
    // operands (a weight has none and takes the activation type).
    SmallVector<Value> promoted;
    for (OpOperand *use : precision->activations)
      promoted.push_back(use->get());
    if (precision->activations.empty())
      llvm::append_range(promoted, op->getOperands());
    if (Type common = promotedType(op, promoted))
      type = common;
    break;
  }
  }
  OpBuilder builder(op);
  for (OpOperand *use : precision->activations) {
    auto operandType = cast<RankedTensorType>(use->get().getType());
    if (operandType.getElementType() != type)
      use->set(builder.create<CastOp>(op->getLoc(), operandType.clone(type),
                                      use->get()));
  }
  for (OpResult result : op->getResults())
    result.setType(withElementType(result.getType(), type));
  return success();
}

Type getFloatType(MLIRContext *context, ActivationType type) {
  switch (type) {
  case ActivationType::BF16:
    return BFloat16Type::get(context);
  case ActivationType::F16:
    return Float16Type::get(context);
  case ActivationType::F32:
    return Float32Type::get(context);
  }
  llvm_unreachable("unknown activation type");
}

} // namespace

void AssignPrecisionPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  if (!func.getBody().hasOneBlock()) {
    func.emitError() << "infer-assign-precision expects a function of one "
                        "block";
    return signalPassFailure();
  }
  Type elementType = getFloatType(&getContext(), activationType);
  Block &block = func.getBody().front();
  // Batch-contract inputs keep their types, but the cache takes the
  // activation type; other float arguments are activations.
  for (BlockArgument arg : block.getArguments())
    if (isa<KVCacheType>(arg.getType()) ||
        !func.getArgAttr(arg.getArgNumber(), InferDialect::kInputAttrName))
      arg.setType(withElementType(arg.getType(), elementType));
  for (Operation &op : llvm::make_early_inc_range(block))
    if (failed(assignPrecision(&op, elementType)))
      return signalPassFailure();
  func.setType(FunctionType::get(&getContext(), block.getArgumentTypes(),
                                 block.getTerminator()->getOperandTypes()));
}
