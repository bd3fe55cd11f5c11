//===- ShardTensorParallel.cpp - Megatron-style tensor parallelism -------===//
//
// Implements `infer-shard-tensor-parallel`: rewrites a one-rank model into
// the SPMD program of `tp` ranks. Parameters become per-rank slices of their
// checkpoint tensors (#infer.shard), attention keeps the rank's heads, and
// collectives complete what one rank computes partially:
//
//   x ─┬─ q/k/v (column) ─ rope ─ attention (heads/tp) ─ o (row) ─ all_reduce
//      └────────────────────────── residual ─────────────────────────────┘
//   y ─┬─ gate/up (column) ─ silu * ─ down (row) ─ all_reduce
//   ids ─ embedding (vocab slice) ─ all_reduce       logits (vocab slice) ─
//                                                     all_gather(dim 1)
//
// A row-parallel bias (o_proj, down_proj with attention_bias / mlp_bias) is
// replicated and added once, after the sum (Megatron-LM, ShardFormer):
//
//   o (row, no bias) ─ all_reduce ─ bias_add(o_proj.bias)
//
// How each linear splits is the importer's word, its `parallel` attribute
// (#infer.parallel<column | kv_column | row>, with `parts` for a checkpoint
// tensor that stacks several projections); a linear without one is
// replicated. The embedding and the LM head are found structurally
// (`infer.embedding`, `infer.logits`). The pass knows no architecture and
// reads no checkpoint names.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "ir/InferAttrs.h"
#include "ir/InferOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::infer {
#define GEN_PASS_DEF_SHARDTENSORPARALLELPASS
#include "passes/Passes.h.inc"
} // namespace mlir::infer

using namespace mlir;
using namespace mlir::infer;

namespace {

//===----------------------------------------------------------------------===//
// The rewrite
//===----------------------------------------------------------------------===//

/// How the key/value heads of every attention layer are distributed.
struct KVSplit {
  int64_t shards = 1;
  int64_t replication = 1;
};

class TensorParallelRewriter {
public:
  explicit TensorParallelRewriter(int64_t tp) : tp(tp) {}

  LogicalResult run(func::FuncOp func);

private:
  FailureOr<KVSplit> planKVSplit(func::FuncOp func);
  LogicalResult shardWeight(Value weight, int64_t dim, int64_t shards,
                            int64_t replication);
  LogicalResult rewriteLinear(LinearOp op, OpBuilder &builder);
  LogicalResult rewriteFusedColumn(LinearOp op, ParallelAttr parallel,
                                   OpBuilder &builder);
  LogicalResult rewriteAttention(AttentionOp op);
  LogicalResult rewriteEmbedding(EmbeddingOp op, OpBuilder &builder);
  LogicalResult rewriteLogits(LogitsOp op, OpBuilder &builder);
  void followOperandType(Operation *op);

  int64_t tp;
  KVSplit kvSplit;
};

/// Replaces every use of `from` except in `except` by `to`.
void replaceUsesExcept(Value from, Value to, Operation *except) {
  from.replaceUsesWithIf(
      to, [&](OpOperand &use) { return use.getOwner() != except; });
}

RankedTensorType withDim(Type type, int64_t dim, int64_t size) {
  auto ranked = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(ranked.getShape());
  shape[dim] = size;
  return ranked.clone(shape);
}

FailureOr<KVSplit> TensorParallelRewriter::planKVSplit(func::FuncOp func) {
  std::optional<KVSplit> split;
  WalkResult walked = func.walk([&](AttentionOp op) {
    int64_t heads = op.getNumHeadsAttr().getInt();
    int64_t kvHeads = op.getNumKvHeadsAttr().getInt();
    if (tp > heads) {
      op.emitOpError() << "cannot be split over tp = " << tp
                       << " ranks: it has only " << heads << " heads";
      return WalkResult::interrupt();
    }
    if (heads % tp != 0) {
      op.emitOpError() << "cannot be split over tp = " << tp
                       << " ranks: num_heads (" << heads
                       << ") is not divisible by tp";
      return WalkResult::interrupt();
    }
    KVSplit layer;
    if (kvHeads % tp == 0) {
      layer.shards = tp;
    } else if (tp % kvHeads == 0) {
      layer.shards = kvHeads;
      layer.replication = tp / kvHeads;
    } else {
      op.emitOpError() << "cannot be split over tp = " << tp
                       << " ranks: num_kv_heads (" << kvHeads
                       << ") neither divides nor is divisible by tp";
      return WalkResult::interrupt();
    }
    if (split && (split->shards != layer.shards ||
                  split->replication != layer.replication)) {
      op.emitOpError() << "has a different number of key/value heads than "
                          "the other attention layers";
      return WalkResult::interrupt();
    }
    split = layer;
    return WalkResult::advance();
  });
  if (walked.wasInterrupted())
    return failure();
  return split.value_or(KVSplit{tp, 1});
}

/// Makes the `infer.weight` defining `weight` a slice: `shards` equal parts
/// along `dim`, each held by `replication` consecutive ranks.
LogicalResult TensorParallelRewriter::shardWeight(Value weight, int64_t dim,
                                                  int64_t shards,
                                                  int64_t replication) {
  auto op = weight.getDefiningOp<WeightOp>();
  if (!op)
    return emitError(weight.getLoc())
           << "infer-shard-tensor-parallel: a split parameter must be an "
              "infer.weight";
  auto shard = ShardAttr::get(op.getContext(), dim, shards, replication);
  // A parameter read by several ops (a tied embedding) is split once.
  if (std::optional<ShardAttr> existing = op.getShard()) {
    if (*existing == shard)
      return success();
    return op.emitOpError() << "is split as " << *existing
                            << " by one user and as " << shard << " by another";
  }
  int64_t size = op.getType().getDimSize(dim);
  if (size % shards != 0)
    return op.emitOpError()
           << "cannot be split into " << shards << " slices along dimension "
           << dim << " of size " << size;
  op.setShardAttr(shard);
  op.getResult().setType(withDim(op.getType(), dim, size / shards));
  return success();
}

LogicalResult TensorParallelRewriter::rewriteLinear(LinearOp op,
                                                    OpBuilder &builder) {
  // The attribute is consumed: the program's linears become per-rank ones.
  std::optional<ParallelAttr> parallel = op.getParallel();
  op.removeParallelAttr();
  if (parallel && parallel->getParts())
    return rewriteFusedColumn(op, *parallel, builder);
  std::optional<ParallelStyle> split;
  if (parallel)
    split = parallel->getStyle();
  if (split == ParallelStyle::Column || split == ParallelStyle::KVColumn) {
    const bool kv = split == ParallelStyle::KVColumn;
    int64_t shards = kv ? kvSplit.shards : tp;
    int64_t replication = kv ? kvSplit.replication : 1;
    if (failed(shardWeight(op.getWeight(), 0, shards, replication)))
      return failure();
    if (Value bias = op.getBias())
      if (failed(shardWeight(bias, 0, shards, replication)))
        return failure();
  } else if (split == ParallelStyle::Row) {
    if (failed(shardWeight(op.getWeight(), 1, tp, 1)))
      return failure();
  }
  op.getResult().setType(
      withDim(op.getType(), 1, op.getWeight().getType().getDimSize(0)));
  if (split != ParallelStyle::Row)
    return success();
  // Each rank's product is a partial sum; a bias (replicated, not split)
  // must join once, after the sum, not once per rank.
  Value bias = op.getBias();
  if (bias)
    op.getBiasMutable().clear();
  builder.setInsertionPointAfter(op);
  auto reduce = builder.create<AllReduceOp>(op.getLoc(), op.getResult());
  replaceUsesExcept(op.getResult(), reduce.getResult(), reduce);
  if (!bias)
    return success();
  auto biased = builder.create<BiasAddOp>(op.getLoc(), reduce.getType(),
                                          reduce.getResult(), bias);
  replaceUsesExcept(reduce.getResult(), biased.getResult(), biased);
  return success();
}

/// A column linear over stacked projections (Phi-3's qkv_proj): each part
/// of the weight is split on its own, the rank's slices concatenated at
/// load, and the infer.split of the result takes the rank's part widths:
///
///   qkv_proj [q | k | v] -> concat_weights(q slice r, k slice r, v slice r)
///   split -> q [T, q/tp], k [T, kv/shards], v [T, kv/shards]
LogicalResult TensorParallelRewriter::rewriteFusedColumn(LinearOp op,
                                                         ParallelAttr parallel,
                                                         OpBuilder &builder) {
  auto weight = op.getWeight().getDefiningOp<WeightOp>();
  if (!weight || weight.getShard() || op.getBias())
    return op.emitOpError()
           << "with parallel parts must read an unsplit infer.weight and no "
              "bias";
  ArrayRef<int64_t> parts = parallel.getParts().asArrayRef();
  ArrayRef<bool> kvParts = parallel.getKvParts().asArrayRef();
  builder.setInsertionPoint(op);
  SmallVector<Value> slices;
  SmallVector<int64_t> widths;
  int64_t offset = 0, rows = 0;
  for (auto [part, kv] : llvm::zip_equal(parts, kvParts)) {
    int64_t shards = kv ? kvSplit.shards : tp;
    int64_t replication = kv ? kvSplit.replication : 1;
    if (part % shards != 0)
      return op.emitOpError() << "cannot split its part of " << part
                              << " rows into " << shards << " slices";
    auto shard =
        ShardAttr::get(op.getContext(), 0, shards, replication, offset, part);
    auto type = withDim(weight.getType(), 0, part / shards);
    slices.push_back(builder.create<WeightOp>(weight.getLoc(), type,
                                              weight.getNameAttr(), shard,
                                              weight.getQuantAttr()));
    widths.push_back(part / shards);
    offset += part;
    rows += part / shards;
  }
  auto concat = builder.create<ConcatWeightsOp>(
      weight.getLoc(), withDim(weight.getType(), 0, rows), slices);
  op.getWeightMutable().assign(concat.getResult());
  if (weight->use_empty())
    weight->erase();
  op.getResult().setType(withDim(op.getType(), 1, rows));
  for (Operation *user : op->getUsers()) {
    auto split = dyn_cast<SplitOp>(user);
    if (!split || split.getNumResults() != parts.size() ||
        llvm::any_of(llvm::zip_equal(split.getResults(), parts), [](auto pair) {
          return cast<RankedTensorType>(std::get<0>(pair).getType())
                     .getDimSize(1) != std::get<1>(pair);
        }))
      return op.emitOpError() << "with parallel parts must be read only by "
                                 "an infer.split into those parts";
    for (auto [result, width] : llvm::zip_equal(split.getResults(), widths))
      result.setType(withDim(result.getType(), 1, width));
  }
  return success();
}

LogicalResult TensorParallelRewriter::rewriteAttention(AttentionOp op) {
  MLIRContext *context = op.getContext();
  auto i64 = [&](int64_t value) {
    return IntegerAttr::get(IntegerType::get(context, 64), value);
  };
  int64_t kvHeads = op.getNumKvHeadsAttr().getInt();
  int64_t rankQueryWidth =
      op.getNumHeadsAttr().getInt() / tp * op.getHeadDimAttr().getInt();
  if (cast<RankedTensorType>(op.getQuery().getType()).getDimSize(1) !=
      rankQueryWidth)
    return op.emitOpError()
           << "reads queries that are not split by head over tp = " << tp
           << " ranks (its query projection needs #infer.parallel<column>)";
  op.setNumHeadsAttr(i64(op.getNumHeadsAttr().getInt() / tp));
  op.setNumKvHeadsAttr(i64(kvHeads / kvSplit.shards));
  op.getResult().setType(op.getQuery().getType());
  return success();
}

/// Size of dimension `dim` of the checkpoint tensor behind `weight`, whether
/// or not it is split already (a tied table seen by its second user).
int64_t checkpointDimSize(Value weight, int64_t dim) {
  int64_t size = cast<RankedTensorType>(weight.getType()).getDimSize(dim);
  if (auto op = weight.getDefiningOp<WeightOp>())
    if (std::optional<ShardAttr> shard = op.getShard();
        shard && shard->getDim() == dim)
      return size * shard->getShards();
  return size;
}

LogicalResult TensorParallelRewriter::rewriteEmbedding(EmbeddingOp op,
                                                       OpBuilder &builder) {
  int64_t vocab = checkpointDimSize(op.getTable(), 0);
  if (vocab % tp != 0)
    return success();
  if (failed(shardWeight(op.getTable(), 0, tp, 1)))
    return failure();
  op.setVocabShardsAttr(builder.getI64IntegerAttr(tp));
  builder.setInsertionPointAfter(op);
  auto reduce = builder.create<AllReduceOp>(op.getLoc(), op.getResult());
  replaceUsesExcept(op.getResult(), reduce.getResult(), reduce);
  return success();
}

LogicalResult TensorParallelRewriter::rewriteLogits(LogitsOp op,
                                                    OpBuilder &builder) {
  auto fullType = cast<RankedTensorType>(op.getType());
  int64_t vocab = checkpointDimSize(op.getWeight(), 0);
  if (vocab % tp != 0)
    return success();
  if (failed(shardWeight(op.getWeight(), 0, tp, 1)))
    return failure();
  op.getResult().setType(withDim(fullType, 1, vocab / tp));
  builder.setInsertionPointAfter(op);
  auto gather = builder.create<AllGatherOp>(
      op.getLoc(), fullType, op.getResult(), builder.getI64IntegerAttr(1));
  replaceUsesExcept(op.getResult(), gather.getResult(), gather);
  return success();
}

/// Rope and elementwise ops keep the type of their first operand: the
/// rank's heads or MLP slice.
void TensorParallelRewriter::followOperandType(Operation *op) {
  op->getResult(0).setType(op->getOperand(0).getType());
}

LogicalResult TensorParallelRewriter::run(func::FuncOp func) {
  FailureOr<KVSplit> split = planKVSplit(func);
  if (failed(split))
    return failure();
  kvSplit = *split;

  OpBuilder builder(func.getContext());
  // Program order: every op sees its operands' final (per-rank) types.
  for (Operation &op : llvm::make_early_inc_range(func.getBody().getOps())) {
    LogicalResult rewritten =
        llvm::TypeSwitch<Operation *, LogicalResult>(&op)
            .Case<LinearOp>(
                [&](LinearOp linear) { return rewriteLinear(linear, builder); })
            .Case<AttentionOp>([&](AttentionOp attention) {
              return rewriteAttention(attention);
            })
            .Case<EmbeddingOp>([&](EmbeddingOp embedding) {
              return rewriteEmbedding(embedding, builder);
            })
            .Case<LogitsOp>(
                [&](LogitsOp logits) { return rewriteLogits(logits, builder); })
            .Case<RopeOp, SiluOp, GeluOp, MulOp, AddOp, RMSNormOp>(
                [&](Operation *other) {
                  followOperandType(other);
                  return success();
                })
            .Default([](Operation *) { return success(); });
    if (failed(rewritten))
      return failure();
  }
  return success();
}

struct ShardTensorParallelPass
    : infer::impl::ShardTensorParallelPassBase<ShardTensorParallelPass> {
  using Base::Base;

  void runOnOperation() override;
};

} // namespace

void ShardTensorParallelPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (tp < 1) {
    module.emitError() << "infer-shard-tensor-parallel: tp must be at least 1, "
                          "got "
                       << tp.getValue();
    return signalPassFailure();
  }
  // One rank splits nothing, yet the styles are consumed as at any tp: the
  // fusions after it (infer-fuse-residual) meet no style, whatever the tp.
  if (tp == 1) {
    module.walk([](LinearOp linear) { linear.removeParallelAttr(); });
    return;
  }
  if (module->hasAttr(InferDialect::kTensorParallelAttrName)) {
    module.emitError() << "infer-shard-tensor-parallel: the module is already "
                          "split ('"
                       << InferDialect::kTensorParallelAttrName << "')";
    return signalPassFailure();
  }
  TensorParallelRewriter rewriter(tp);
  for (func::FuncOp func : module.getOps<func::FuncOp>())
    if (failed(rewriter.run(func)))
      return signalPassFailure();
  module->setAttr(InferDialect::kTensorParallelAttrName,
                  IntegerAttr::get(IntegerType::get(&getContext(), 64), tp));
}
