//===- FuseActivation.cpp - gated activations -------------------*- C++ -*-===//
//
// The SwiGLU gate of Llama-style MLPs, silu(gate) * up, as one
// `infer.silu_mul`. The silu must have no other user: fusing it would
// otherwise compute it twice.
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

} // namespace

void mlir::infer::populateFuseActivationPatterns(RewritePatternSet &patterns) {
  patterns.add<FuseSiluMul>(patterns.getContext());
}
