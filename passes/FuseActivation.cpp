//===- FuseActivation.cpp - gated activations -------------------*- C++ -*-===//
//
// The SwiGLU gate of Llama-style MLPs, silu(gate) * up, as one
// `infer.silu_mul`. The silu must have no other user: fusing it would
// otherwise compute it twice.
//
// Then the gate/up projection with it: `infer.silu_mul` of the two halves
// of an `infer.split` of a merged gate/up `infer.linear` becomes one
// `infer.linear_swiglu` of the same weight, whose GEMM applies the
// activation in its epilogue (the [T, 2I] product is never written):
//
//   x ─ linear(concat(wg, wu)) ─ split ─┬─ g ─┐
//                                       └─ u ─┴─ silu_mul   =>
//   x ─ linear_swiglu(concat(wg, wu))
//
// Only where nothing else reads the product or its halves, the linear has
// no bias, residual or `parallel` style (sharding has split it already),
// and the weight is not FP8: an FP8 MLP keeps its silu_mul, which writes
// the down projection's FP8 operand as it goes (the CUDA backend's
// quantizing fusion).
//
//===----------------------------------------------------------------------===//

#include "passes/FusePatterns.h"

#include "ir/InferOps.h"

using namespace mlir;
using namespace mlir::infer;

namespace {

struct FuseSiluMul : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MulOp mul,
                                PatternRewriter &rewriter) const override {
    for (unsigned gateIndex : {0u, 1u}) {
      auto silu = mul->getOperand(gateIndex).getDefiningOp<SiluOp>();
      if (!silu || !silu->hasOneUse())
        continue;
      Value up = mul->getOperand(1 - gateIndex);
      rewriter.setInsertionPoint(mul);
      auto fused = rewriter.create<SiluMulOp>(
          rewriter.getFusedLoc({silu.getLoc(), mul.getLoc()}), silu.getInput(),
          up);
      rewriter.replaceOp(mul, fused.getResult());
      rewriter.eraseOp(silu);
      return success();
    }
    return rewriter.notifyMatchFailure(
        mul, "no operand is an infer.silu used only here");
  }
};

struct FuseLinearSwiGlu : OpRewritePattern<SiluMulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(SiluMulOp siluMul,
                                PatternRewriter &rewriter) const override {
    auto split = siluMul.getGate().getDefiningOp<SplitOp>();
    if (!split || split->getNumResults() != 2 ||
        siluMul.getGate() != split->getResult(0) ||
        siluMul.getUp() != split->getResult(1))
      return rewriter.notifyMatchFailure(
          siluMul, "gate and up are not the two halves of one infer.split");
    if (!split->getResult(0).hasOneUse() || !split->getResult(1).hasOneUse())
      return rewriter.notifyMatchFailure(siluMul, "a half has another user");
    auto gateType = cast<RankedTensorType>(split->getResult(0).getType());
    auto upType = cast<RankedTensorType>(split->getResult(1).getType());
    if (gateType.isDynamicDim(1) ||
        gateType.getDimSize(1) != upType.getDimSize(1))
      return rewriter.notifyMatchFailure(siluMul, "the halves differ in width");
    auto linear = split.getInput().getDefiningOp<LinearOp>();
    if (!linear || !linear->hasOneUse() || linear.getBias() ||
        linear.getResidual() || linear.getParallel())
      return rewriter.notifyMatchFailure(
          siluMul, "the split's input is not an infer.linear without bias, "
                   "residual or parallel style, used only there");
    if (cast<ShapedType>(linear.getWeight().getType())
            .getElementType()
            .getIntOrFloatBitWidth() == 8)
      return rewriter.notifyMatchFailure(siluMul, "an fp8 weight");
    rewriter.setInsertionPoint(siluMul);
    auto fused = rewriter.create<LinearSwiGluOp>(
        rewriter.getFusedLoc(
            {linear.getLoc(), split.getLoc(), siluMul.getLoc()}),
        siluMul.getType(), linear.getInput(), linear.getWeight());
    rewriter.replaceOp(siluMul, fused.getResult());
    rewriter.eraseOp(split);
    rewriter.eraseOp(linear);
    return success();
  }
};

} // namespace

void mlir::infer::populateFuseActivationPatterns(RewritePatternSet &patterns) {
  patterns.add<FuseSiluMul, FuseLinearSwiGlu>(patterns.getContext());
}
