//===- FuseRope.cpp - the infer-fuse-rope pass ------------------*- C++ -*-===//
//
// Implements `infer-fuse-rope`: the rotary-embedding patterns of
// `infer-fuse` (FuseCacheWrite.cpp) on their own, to a fixed point.
//
//===----------------------------------------------------------------------===//

#include "passes/FusePatterns.h"
#include "passes/Passes.h"

#include "ir/InferOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::infer {
#define GEN_PASS_DEF_FUSEROPEPASS
#include "passes/Passes.h.inc"
} // namespace mlir::infer

using namespace mlir;
using namespace mlir::infer;

namespace {

struct FuseRopePass : infer::impl::FuseRopePassBase<FuseRopePass> {
  using Base::Base;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseCacheWritePatterns(patterns);
    if (failed(applyPatternsAndFoldGreedily(getOperation(),
                                            std::move(patterns)))) {
      getOperation().emitError()
          << "infer-fuse-rope: the rope patterns did not converge";
      signalPassFailure();
    }
  }
};

} // namespace
