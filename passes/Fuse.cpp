//===- Fuse.cpp - the infer-fuse pass ---------------------------*- C++ -*-===//
//
// Implements `infer-fuse`: applies the fusion pattern families to a fixed
// point, then groups the elementwise chains that remain into `infer.fused`
// regions (after the patterns, so that named fused ops such as
// `infer.silu_mul` take precedence over generic regions).
//
//===----------------------------------------------------------------------===//

#include "passes/FusePatterns.h"
#include "passes/Passes.h"

#include "ir/InferOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::infer {
#define GEN_PASS_DEF_FUSEPASS
#include "passes/Passes.h.inc"
} // namespace mlir::infer

using namespace mlir;
using namespace mlir::infer;

namespace {

struct FusePass : infer::impl::FusePassBase<FusePass> {
  using Base::Base;

  void runOnOperation() override;
};

} // namespace

void FusePass::runOnOperation() {
  func::FuncOp func = getOperation();
  RewritePatternSet patterns(&getContext());
  populateFuseProjectionPatterns(patterns);
  populateFuseNormalizationPatterns(patterns);
  // With add+rmsnorm: whichever fires first, a residual add of a linear ends
  // in its epilogue and the norm alone (add_rms_norm is rewritten again).
  populateFuseResidualPatterns(patterns);
  populateFuseActivationPatterns(patterns);
  populateFuseCacheWritePatterns(patterns);
  GreedyRewriteConfig config;
  config.enableRegionSimplification = GreedySimplifyRegionLevel::Disabled;
  if (failed(applyPatternsAndFoldGreedily(func, std::move(patterns), config))) {
    func.emitError() << "infer-fuse: the fusion patterns did not converge";
    return signalPassFailure();
  }

  IRRewriter rewriter(&getContext());
  for (Block &block : func.getBody())
    formElementwiseRegions(rewriter, block);
}
