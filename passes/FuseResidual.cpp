//===- FuseResidual.cpp - residual adds into the GEMM epilogue --*- C++ -*-===//
//
// Implements `infer-fuse-residual` and the patterns `infer-fuse` shares with
// it. A decoder layer's o_proj and down_proj feed the residual stream:
//
//   %o       = linear %a, %w                   GEMM: writes o
//   %h, %n   = add_rms_norm %res, %o, %g       reads res, o; writes h, n
// =>
//   %h       = linear %a, %w residual(%res)    GEMM: reads res, writes h
//   %n       = rms_norm %h, %g                 reads h; writes n
//
// The GEMM adds the residual in its epilogue (cuBLASLt's beta * C), so o is
// never written nor read back.
//
//===----------------------------------------------------------------------===//

#include "passes/FusePatterns.h"
#include "passes/Passes.h"

#include "ir/InferOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::infer {
#define GEN_PASS_DEF_FUSERESIDUALPASS
#include "passes/Passes.h.inc"
} // namespace mlir::infer

using namespace mlir;
using namespace mlir::infer;

namespace {

/// `value`'s defining linear if it can take a residual of type `type`: used
/// only by the add, in its block, with no residual yet and no `parallel`
/// style. Under tensor parallelism a row-parallel product reaches the add
/// through infer.all_reduce, so only whole products (replicated or
/// column-parallel ones gathered) qualify. A style is left only before
/// infer-shard-tensor-parallel (which consumes every one, at any tp): the
/// linear may still be split, and a rank must not add the residual to its
/// partial sum.
LinearOp residualCandidate(Value value, Operation *add, Type type) {
  auto linear = value.getDefiningOp<LinearOp>();
  if (!linear || !linear->hasOneUse() || linear.getResidual() ||
      linear.getParallel() || linear->getBlock() != add->getBlock() ||
      linear.getType() != type)
    return nullptr;
  return linear;
}

/// The operand of `add` (lhs, rhs) whose linear takes the other as its
/// residual, the right one first (`residual + out` in the importer).
std::optional<std::pair<LinearOp, Value>>
chooseLinear(Operation *add, Value lhs, Value rhs, Type type) {
  if (lhs.getType() != type || rhs.getType() != type)
    return std::nullopt;
  if (LinearOp linear = residualCandidate(rhs, add, type))
    return std::make_pair(linear, lhs);
  if (LinearOp linear = residualCandidate(lhs, add, type))
    return std::make_pair(linear, rhs);
  return std::nullopt;
}

/// Gives `linear` the residual `residual` and makes it take the place of
/// `add`, whose operands they both are.
void addResidual(PatternRewriter &rewriter, LinearOp linear, Value residual,
                 Operation *add) {
  // The residual may be computed after the product: the linear then moves
  // down to the add, which its operands dominate as they dominate it.
  Operation *def = residual.getDefiningOp();
  if (def && def->getBlock() == linear->getBlock() &&
      linear->isBeforeInBlock(def))
    rewriter.moveOpBefore(linear, add);
  rewriter.modifyOpInPlace(linear, [&] {
    linear.getResidualMutable().assign(residual);
    linear->setLoc(rewriter.getFusedLoc({linear.getLoc(), add->getLoc()}));
  });
}

struct FuseResidualIntoLinear : OpRewritePattern<AddRMSNormOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddRMSNormOp norm,
                                PatternRewriter &rewriter) const override {
    std::optional<std::pair<LinearOp, Value>> chosen = chooseLinear(
        norm, norm.getLhs(), norm.getRhs(), norm.getSum().getType());
    if (!chosen)
      return rewriter.notifyMatchFailure(
          norm, "no operand is a single-use infer.linear of the sum's type, "
                "in its block, without a residual or a parallel style");
    auto [linear, residual] = *chosen;
    addResidual(rewriter, linear, residual, norm);
    rewriter.setInsertionPoint(norm);
    auto normalized = rewriter.create<RMSNormOp>(
        norm.getLoc(), norm.getResult().getType(), linear.getResult(),
        norm.getWeight(), norm.getEpsilonAttr(), IntegerAttr(),
        norm.getWeightOffsetAttr());
    rewriter.replaceOp(norm, {linear.getResult(), normalized.getResult()});
    return success();
  }
};

/// Whether `op` is an infer.add that has a linear to take its other operand
/// as residual: it leaves the elementwise ops, so it forms no region.
bool isResidualAdd(Operation *op) {
  auto add = dyn_cast<AddOp>(op);
  return add && chooseLinear(add, add.getLhs(), add.getRhs(), add.getType());
}

/// Whether `op` would be grouped into an infer.fused region by infer-fuse
/// rather than disappear into a GEMM.
bool staysElementwise(Operation *op) {
  return isFusibleElementwise(op) && !isResidualAdd(op);
}

struct FuseResidualAddIntoLinear : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp add,
                                PatternRewriter &rewriter) const override {
    // An add inside an elementwise region reads the product there at no
    // extra pass over the rows; leave it to the region.
    if (!add->use_empty() && llvm::all_of(add->getUsers(), staysElementwise))
      return rewriter.notifyMatchFailure(
          add, "every user is elementwise: the add joins their region");
    std::optional<std::pair<LinearOp, Value>> chosen =
        chooseLinear(add, add.getLhs(), add.getRhs(), add.getType());
    if (!chosen)
      return rewriter.notifyMatchFailure(
          add, "no operand is a single-use infer.linear, in its block, "
               "without a residual or a parallel style");
    auto [linear, residual] = *chosen;
    if (Operation *producer = residual.getDefiningOp();
        producer && producer->hasOneUse() && staysElementwise(producer))
      return rewriter.notifyMatchFailure(
          add, "the other operand is elementwise and used only here: the add "
               "roots its region");
    addResidual(rewriter, linear, residual, add);
    rewriter.replaceOp(add, linear.getResult());
    return success();
  }
};

struct FuseResidualPass : infer::impl::FuseResidualPassBase<FuseResidualPass> {
  using Base::Base;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseResidualPatterns(patterns);
    GreedyRewriteConfig config;
    config.enableRegionSimplification = GreedySimplifyRegionLevel::Disabled;
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns),
                                            config))) {
      getOperation().emitError()
          << "infer-fuse-residual: the patterns did not converge";
      return signalPassFailure();
    }
  }
};

} // namespace

void mlir::infer::populateFuseResidualPatterns(RewritePatternSet &patterns) {
  patterns.add<FuseResidualIntoLinear, FuseResidualAddIntoLinear>(
      patterns.getContext());
}
