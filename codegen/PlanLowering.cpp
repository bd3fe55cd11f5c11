//===- PlanLowering.cpp - Final infer IR -> kernel plan -------------------===//
//
// Values and their plan shapes:
//
//   func argument {infer.input = "token_ids"}  -> input     [T]
//   func argument {infer.input = "kv_cache"}   -> kv_cache  (no shape)
//   infer.weight "model.norm.weight"           -> param     [384]
//   infer.concat_weights of infer.weight ops   -> param     [192, 384], the
//                    first tensor with a `concat` transform per further one
//                    (of split weights: each part sliced for the rank)
//   infer.weight {shard = #infer.shard<...>}    -> param, the rank's slice
//   infer.weight {quant = #infer.fp8<...>}      -> param f8e4m3, with a
//                    `quantize_fp8_e4m3` transform after any slice (a
//                    concatenation of such weights: per-tensor `parts`)
//   any other op result                        -> activation, e.g. [T, 384]
//
// Every value's dtype is its element type (infer-assign-precision chose
// them): a bf16 program has bf16 activations, params and KV cache, f32
// logits, and an infer.cast becomes a `cast` step whose result value's dtype
// is the target type:
//
//   %y = infer.cast %x : tensor<?x384xf32> -> tensor<?x384xbf16>
//     -> cast(x) -> y    x: activation f32 [T, 384], y: activation bf16
//
// An infer.weight read only by infer.concat_weights gets no value of its own:
// the runtime loads it as part of the concatenation. An infer.fused region
// becomes one `fused` step whose body is the region's register program
// (runtime/plan/FusedBody.h).
//
// Dynamic dimensions get the symbol of the batch-contract input they come
// from (T tokens, B sequences, S logits rows, M blocks per sequence), traced
// through each op's shape rule. kv_cache_write updates the cache in place, so
// its result is the cache value itself and the step has no results.
//
// A module with `infer.tp = N` lowers to N rank plans with the same values
// and steps; they differ only in what is rank-dependent: the `slice`
// transform of each split parameter and the vocabulary range of a
// vocabulary-parallel embedding:
//
//   rank r:  q_proj.weight  slice {dim 0, begin r * 64, size 64}
//            embedding      vocab_offset = r * V/N, vocab_size = V
//
// A concatenation of split weights slices every part on its own: a `slice`
// of the first tensor before the concatenations, and `slice_*` attributes on
// the `concat` of each further part,
//
//   rank r:  q_proj.weight+k_proj.weight  slice {dim 0, begin r * 64, ...},
//            concat {source_tensor k_proj.weight, slice_dim 0,
//                    slice_begin r * 16, slice_size 16}
//
// A shard of one part of a tensor (#infer.shard with `offset`) starts its
// slices there: Phi-3's qkv_proj [128 | 32 | 32] at tp 2 gives rank r the
// rows r * 64 + [0, 64), 128 + r * 16 + [0, 16) and 160 + r * 16 + [0, 16).
//
//===----------------------------------------------------------------------===//

#include "codegen/PlanLowering.h"

#include "passes/MemoryPlan.h"
#include "runtime/plan/FusedBody.h"
#include "runtime/plan/StepOps.h"

#include "ir/InferAttrs.h"
#include "ir/InferDialect.h"
#include "ir/InferOps.h"
#include "ir/InferTypes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <array>

using llvm::StringRef;
using mlir::FailureOr;

namespace infer::compiler {
namespace {

/// Symbolic shapes of the batch-contract inputs. query_start_loc has B + 1
/// entries; the plan format only names B, and the runtime binds inputs from
/// the batch, not from these shapes.
std::optional<std::vector<plan::Dim>> inputShape(StringRef name) {
  auto sym = [](const char *symbol) { return plan::Dim::dynamic(symbol); };
  return llvm::StringSwitch<std::optional<std::vector<plan::Dim>>>(name)
      .Cases("token_ids", "positions", "slot_mapping",
             std::vector<plan::Dim>{sym("T")})
      .Cases("query_start_loc", "context_lens",
             std::vector<plan::Dim>{sym("B")})
      .Case("block_tables", std::vector<plan::Dim>{sym("B"), sym("M")})
      .Case("logits_indices", std::vector<plan::Dim>{sym("S")})
      .Default(std::nullopt);
}

double asDouble(const llvm::APFloat &value) {
  bool losesInfo = false;
  llvm::APFloat copy = value;
  copy.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
               &losesInfo);
  return copy.convertToDouble();
}

/// The load-time transform of a `#infer.fp8` weight; `parts` are the rows
/// of the concatenated weights, each quantized per tensor on its own.
plan::WeightTransform quantizeTransform(mlir::infer::Fp8Attr quant,
                                        const std::vector<int64_t> &parts) {
  plan::WeightTransform transform;
  transform.kind = "quantize_fp8_e4m3";
  const bool perTensor =
      quant.getGranularity() == mlir::infer::Fp8Granularity::PerTensor;
  transform.attrs["granularity"] =
      std::string(perTensor ? "per-tensor" : "per-channel");
  if (perTensor && parts.size() > 1)
    transform.attrs["parts"] = parts;
  return transform;
}

/// How a rank slices one split part of a concatenation: `size` indices of
/// dimension `shard.dim`, the slice `shard` gives the rank.
struct PartSlice {
  mlir::infer::ShardAttr shard;
  int64_t size;

  bool operator==(const PartSlice &other) const {
    return shard == other.shard && size == other.size;
  }
};

class PlanLowering {
public:
  PlanLowering(mlir::func::FuncOp func, const TensorFileMap &tensorFiles,
               int64_t numRanks)
      : func(func), tensorFiles(tensorFiles), numRanks(numRanks),
        asmState(func) {}

  FailureOr<plan::Plan> lower();

private:
  FailureOr<plan::DType> dtypeOf(mlir::Operation *at, mlir::Type type);
  int addValue(plan::Value value);
  mlir::LogicalResult lowerArgument(mlir::BlockArgument arg);
  mlir::LogicalResult lowerWeight(mlir::infer::WeightOp op);
  mlir::LogicalResult lowerConcatWeights(mlir::infer::ConcatWeightsOp op);
  mlir::LogicalResult lowerStep(mlir::Operation *op, StringRef stepName);
  mlir::LogicalResult lowerCacheUpdate(mlir::Operation *op, mlir::Value cache,
                                       StringRef stepName);
  mlir::LogicalResult lowerFused(mlir::infer::FusedOp op);
  /// linear, or linear_residual for a linear with a residual.
  mlir::LogicalResult lowerLinear(mlir::infer::LinearOp op);
  FailureOr<std::vector<plan::Dim>> resultShape(mlir::Operation *op,
                                                mlir::RankedTensorType type);
  mlir::LogicalResult lowerAttributes(mlir::Operation *op, plan::Step &step);
  const std::vector<plan::Dim> &shapeOf(mlir::Value value) {
    return rank.values[ids.lookup(value)].shape;
  }
  plan::RankPlan specializeRank(int rankIndex) const;
  void sliceConcatParts(plan::Value &value,
                        const std::vector<std::optional<PartSlice>> &parts,
                        int rankIndex) const;

  mlir::func::FuncOp func;
  const TensorFileMap &tensorFiles;
  int64_t numRanks;
  /// Split params (value id -> shard) and vocabulary-parallel embedding
  /// steps (step index -> vocabulary shards): what differs between ranks.
  std::map<int, mlir::infer::ShardAttr> paramShards;
  /// Concatenated params with a split part: each part's slice (nothing for
  /// a whole part), in concatenation order.
  std::map<int, std::vector<std::optional<PartSlice>>> concatPartSlices;
  /// FP8 params: the quantize_fp8_e4m3 transform each gets after its slice.
  std::map<int, plan::WeightTransform> paramQuantize;
  std::map<size_t, int64_t> vocabParallelSteps;
  mlir::AsmState asmState;
  plan::Plan result;
  plan::RankPlan rank;
  llvm::DenseMap<mlir::Value, int> ids;
  std::map<std::string, int> paramIds;
};

FailureOr<plan::DType> PlanLowering::dtypeOf(mlir::Operation *at,
                                             mlir::Type type) {
  if (std::optional<plan::DType> dtype = planDTypeOf(type))
    return *dtype;
  return at->emitError() << "element type " << type
                         << " has no plan dtype (f32, f16, bf16, i32, i64, "
                            "f8E4M3FN, f8E5M2)";
}

int PlanLowering::addValue(plan::Value value) {
  value.id = static_cast<int>(rank.values.size());
  rank.values.push_back(std::move(value));
  return rank.values.back().id;
}

mlir::LogicalResult PlanLowering::lowerArgument(mlir::BlockArgument arg) {
  auto name = func.getArgAttrOfType<mlir::StringAttr>(
      arg.getArgNumber(), mlir::infer::InferDialect::kInputAttrName);
  if (!name)
    return func.emitError()
           << "argument #" << arg.getArgNumber() << " has no '"
           << mlir::infer::InferDialect::kInputAttrName << "' attribute";
  plan::Value value;
  value.name = name.getValue().str();

  if (auto cache = mlir::dyn_cast<mlir::infer::KVCacheType>(arg.getType())) {
    FailureOr<plan::DType> dtype = dtypeOf(func, cache.getElementType());
    if (mlir::failed(dtype))
      return mlir::failure();
    value.kind = plan::ValueKind::kKVCache;
    value.dtype = *dtype;
    result.kvCache.numLayers = cache.getNumLayers();
    result.kvCache.numKVHeads = cache.getNumKVHeads();
    result.kvCache.headDim = cache.getHeadDim();
    result.kvCache.blockSize = cache.getBlockSize();
    result.kvCache.dtype = *dtype;
    ids[arg] = addValue(std::move(value));
    return mlir::success();
  }

  auto type = mlir::dyn_cast<mlir::RankedTensorType>(arg.getType());
  std::optional<std::vector<plan::Dim>> shape = inputShape(value.name);
  if (!type || !shape || type.getRank() != static_cast<int64_t>(shape->size()))
    return func.emitError()
           << "argument #" << arg.getArgNumber() << " ('" << value.name
           << "') is not a batch-contract input of the plan "
              "format";
  FailureOr<plan::DType> dtype = dtypeOf(func, type.getElementType());
  if (mlir::failed(dtype))
    return mlir::failure();
  value.kind = plan::ValueKind::kInput;
  value.dtype = *dtype;
  value.shape = *shape;
  ids[arg] = addValue(std::move(value));
  return mlir::success();
}

mlir::LogicalResult PlanLowering::lowerWeight(mlir::infer::WeightOp op) {
  if (!op->use_empty() &&
      llvm::all_of(op->getUsers(), [](mlir::Operation *user) {
        return mlir::isa<mlir::infer::ConcatWeightsOp>(user);
      }))
    return mlir::success();
  std::string name = op.getName().str();
  // A tied table and its quantized copy (the LM head) are two params.
  const std::string key = op.getQuant() ? name + "\nfp8" : name;
  std::optional<mlir::infer::ShardAttr> shard = op.getShard();
  if (shard && shard->getNumRanks() != numRanks)
    return op.emitError() << "is split for " << shard->getNumRanks()
                          << " ranks in a module of infer.tp = " << numRanks;
  auto found = paramIds.find(key);
  if (found != paramIds.end()) {
    auto other = paramShards.find(found->second);
    std::optional<mlir::infer::ShardAttr> otherShard;
    if (other != paramShards.end())
      otherShard = other->second;
    if (otherShard != shard)
      return op.emitError() << "reads tensor '" << name
                            << "' split differently than another "
                               "infer.weight of it";
    ids[op.getResult()] = found->second;
    return mlir::success();
  }
  auto file = tensorFiles.find(name);
  if (file == tensorFiles.end())
    return op.emitError() << "tensor '" << name
                          << "' is not in the model's safetensors files";
  auto type = mlir::cast<mlir::RankedTensorType>(op.getType());
  FailureOr<plan::DType> dtype = dtypeOf(op, type.getElementType());
  if (mlir::failed(dtype))
    return mlir::failure();
  plan::Value value;
  value.kind = plan::ValueKind::kParam;
  value.name = name;
  value.dtype = *dtype;
  for (int64_t size : type.getShape())
    value.shape.push_back(plan::Dim::fixed(size));
  value.sourceFile = file->second;
  value.sourceTensor = name;
  int id = addValue(std::move(value));
  paramIds[key] = id;
  if (shard)
    paramShards[id] = *shard;
  if (std::optional<mlir::infer::Fp8Attr> quant = op.getQuant())
    paramQuantize[id] = quantizeTransform(*quant, {});
  ids[op.getResult()] = id;
  return mlir::success();
}

mlir::LogicalResult
PlanLowering::lowerConcatWeights(mlir::infer::ConcatWeightsOp op) {
  auto type = mlir::cast<mlir::RankedTensorType>(op.getType());
  FailureOr<plan::DType> dtype = dtypeOf(op, type.getElementType());
  if (mlir::failed(dtype))
    return mlir::failure();
  plan::Value value;
  value.kind = plan::ValueKind::kParam;
  value.dtype = *dtype;
  for (int64_t size : type.getShape())
    value.shape.push_back(plan::Dim::fixed(size));
  std::optional<mlir::infer::Fp8Attr> quant;
  std::vector<int64_t> parts;
  std::vector<std::optional<PartSlice>> slices;
  for (mlir::Value input : op.getInputs()) {
    auto weight = input.getDefiningOp<mlir::infer::WeightOp>();
    if (!weight)
      return op.emitError() << "can only concatenate infer.weight tensors at "
                               "load time";
    std::optional<mlir::infer::ShardAttr> shard = weight.getShard();
    if (shard && shard->getNumRanks() != numRanks)
      return weight.emitError()
             << "is split for " << shard->getNumRanks()
             << " ranks in a module of infer.tp = " << numRanks;
    slices.push_back(std::nullopt);
    if (shard)
      slices.back() =
          PartSlice{*shard, weight.getType().getDimSize(shard->getDim())};
    if (input == op.getInputs().front())
      quant = weight.getQuant();
    else if (weight.getQuant() != quant)
      return op.emitError() << "concatenates weights quantized differently";
    parts.push_back(weight.getType().getDimSize(0));
    std::string name = weight.getName().str();
    auto file = tensorFiles.find(name);
    if (file == tensorFiles.end())
      return weight.emitError() << "tensor '" << name
                                << "' is not in the model's safetensors files";
    if (value.sourceTensor.empty()) {
      value.name = name;
      value.sourceFile = file->second;
      value.sourceTensor = name;
      continue;
    }
    value.name += "+" + name;
    plan::WeightTransform concat;
    concat.kind = "concat";
    concat.attrs["axis"] = int64_t{0};
    concat.attrs["source_file"] = file->second;
    concat.attrs["source_tensor"] = name;
    value.transforms.push_back(std::move(concat));
  }
  const bool split = llvm::any_of(
      slices, [](const std::optional<PartSlice> &s) { return s.has_value(); });
  if (!split)
    slices.clear();
  const std::string key = quant ? value.name + "\nfp8" : value.name;
  auto found = paramIds.find(key);
  if (found != paramIds.end()) {
    auto other = concatPartSlices.find(found->second);
    const bool otherSplit = other != concatPartSlices.end();
    if (otherSplit != split || (split && other->second != slices))
      return op.emitError() << "concatenates tensors '" << value.name
                            << "' split differently than another "
                               "infer.concat_weights of them";
    ids[op.getResult()] = found->second;
    return mlir::success();
  }
  int id = addValue(std::move(value));
  paramIds[key] = id;
  ids[op.getResult()] = id;
  if (split)
    concatPartSlices[id] = std::move(slices);
  if (quant)
    paramQuantize[id] = quantizeTransform(*quant, parts);
  return mlir::success();
}

FailureOr<std::vector<plan::Dim>>
PlanLowering::resultShape(mlir::Operation *op, mlir::RankedTensorType type) {
  auto operandShape = [&](unsigned index) {
    return shapeOf(op->getOperand(index));
  };
  auto dim = [](const std::vector<plan::Dim> &shape, size_t index) {
    return index < shape.size() ? shape[index] : plan::Dim::fixed(0);
  };
  // Each op's rule for where its result dimensions come from.
  std::vector<plan::Dim> derived =
      llvm::TypeSwitch<mlir::Operation *, std::vector<plan::Dim>>(op)
          .Case<mlir::infer::EmbeddingOp>([&](auto) {
            return std::vector<plan::Dim>{dim(operandShape(1), 0),
                                          dim(operandShape(0), 1)};
          })
          .Case<mlir::infer::GatherRowsOp>([&](auto) {
            return std::vector<plan::Dim>{dim(operandShape(1), 0),
                                          dim(operandShape(0), 1)};
          })
          .Case<mlir::infer::LinearOp, mlir::infer::LogitsOp>([&](auto) {
            return std::vector<plan::Dim>{dim(operandShape(0), 0),
                                          dim(operandShape(1), 0)};
          })
          .Case<mlir::infer::RopeQKVCacheWriteOp>(
              [&](auto) { return operandShape(1); }) // the query's
          .Default([&](mlir::Operation *) { return operandShape(0); });

  if (derived.size() != static_cast<size_t>(type.getRank()))
    return op->emitError() << "cannot derive the plan shape of result type "
                           << type;
  std::vector<plan::Dim> shape;
  for (auto [index, size] : llvm::enumerate(type.getShape())) {
    if (!mlir::ShapedType::isDynamic(size)) {
      shape.push_back(plan::Dim::fixed(size));
      continue;
    }
    if (!derived[index].isDynamic())
      return op->emitError() << "dynamic dimension #" << index
                             << " of the result is not traceable to a "
                                "batch-contract input";
    shape.push_back(derived[index]);
  }
  return shape;
}

/// Copies op attributes into step attributes; `#infer.rope` is flattened to
/// theta / scaling / factor / low_freq_factor / high_freq_factor /
/// original_max_position_embeddings, and beta_fast / beta_slow (yarn) or
/// short_factor / long_factor (longrope).
mlir::LogicalResult PlanLowering::lowerAttributes(mlir::Operation *op,
                                                  plan::Step &step) {
  for (mlir::NamedAttribute named : op->getAttrDictionary()) {
    std::string name = named.getName().str();
    mlir::Attribute attr = named.getValue();
    if (mlir::isa<mlir::infer::GeluOp>(op) && name == "approximate")
      continue;
    // The memory plan becomes workspace offsets of the result values.
    if (name == mlir::infer::kWorkspaceOffsetsAttrName)
      continue;
    // Which operands an optional one is: the step's operand roles say it.
    if (name == mlir::OpTrait::AttrSizedOperandSegments<
                    void>::getOperandSegmentSizeAttr())
      continue;
    // Rank-dependent: specializeRank writes vocab_offset and vocab_size.
    if (mlir::isa<mlir::infer::EmbeddingOp>(op) && name == "vocab_shards")
      continue;
    // How tensor parallelism splits a linear: the compiler's business (the
    // sharding pass consumes it at every tp; only IR lowered without that
    // pass still carries one, unused).
    if (mlir::isa<mlir::infer::ParallelAttr>(attr))
      continue;
    if (auto integer = mlir::dyn_cast<mlir::IntegerAttr>(attr)) {
      step.attrs[name] = integer.getValue().getSExtValue();
    } else if (auto real = mlir::dyn_cast<mlir::FloatAttr>(attr)) {
      step.attrs[name] = real.getValueAsDouble();
    } else if (auto text = mlir::dyn_cast<mlir::StringAttr>(attr)) {
      step.attrs[name] = text.getValue().str();
    } else if (auto rope = mlir::dyn_cast<mlir::infer::RopeAttr>(attr)) {
      step.attrs["theta"] = asDouble(rope.getTheta());
      step.attrs["scaling"] =
          mlir::infer::stringifyRopeScalingKind(rope.getKind()).str();
      step.attrs["factor"] = asDouble(rope.getFactor());
      step.attrs["low_freq_factor"] = asDouble(rope.getLowFreqFactor());
      step.attrs["high_freq_factor"] = asDouble(rope.getHighFreqFactor());
      step.attrs["original_max_position_embeddings"] =
          rope.getOriginalMaxPositionEmbeddings();
      if (rope.getKind() == mlir::infer::RopeScalingKind::Yarn) {
        step.attrs["beta_fast"] = asDouble(rope.getBetaFast());
        step.attrs["beta_slow"] = asDouble(rope.getBetaSlow());
      }
      if (rope.getShortFactor())
        step.attrs["short_factor"] = rope.getShortFactor().asArrayRef().vec();
      if (rope.getLongFactor())
        step.attrs["long_factor"] = rope.getLongFactor().asArrayRef().vec();
    } else {
      return op->emitError() << "attribute '" << name
                             << "' has no plan representation: " << attr;
    }
  }
  return mlir::success();
}

mlir::LogicalResult PlanLowering::lowerStep(mlir::Operation *op,
                                            StringRef stepName) {
  plan::Step step;
  step.op = stepName.str();
  for (mlir::Value operand : op->getOperands())
    step.operands.push_back(ids.lookup(operand));
  if (mlir::failed(lowerAttributes(op, step)))
    return mlir::failure();
  if (auto embedding = mlir::dyn_cast<mlir::infer::EmbeddingOp>(op)) {
    if (mlir::IntegerAttr shards = embedding.getVocabShardsAttr()) {
      if (shards.getInt() != numRanks)
        return op->emitError() << "looks up " << shards.getInt()
                               << " vocabulary shards in a module of "
                                  "infer.tp = "
                               << numRanks;
      vocabParallelSteps[rank.steps.size()] = shards.getInt();
    }
  }
  auto offsets = op->getAttrOfType<mlir::DenseI64ArrayAttr>(
      mlir::infer::kWorkspaceOffsetsAttrName);
  if (offsets && offsets.size() != static_cast<int64_t>(op->getNumResults()))
    return op->emitError() << "has " << offsets.size()
                           << " workspace offsets for " << op->getNumResults()
                           << " results";
  for (mlir::Value res : op->getResults()) {
    // A cache result is the cache operand, which the caller maps.
    if (mlir::isa<mlir::infer::KVCacheType>(res.getType()))
      continue;
    auto type = mlir::dyn_cast<mlir::RankedTensorType>(res.getType());
    if (!type)
      return op->emitError()
             << "result type " << res.getType() << " is not a ranked tensor";
    FailureOr<std::vector<plan::Dim>> shape = resultShape(op, type);
    FailureOr<plan::DType> dtype = dtypeOf(op, type.getElementType());
    if (mlir::failed(shape) || mlir::failed(dtype))
      return mlir::failure();
    plan::Value value;
    value.kind = plan::ValueKind::kActivation;
    llvm::raw_string_ostream os(value.name);
    res.printAsOperand(os, asmState);
    os.flush();
    value.dtype = *dtype;
    value.shape = std::move(*shape);
    if (offsets)
      value.workspaceOffset =
          offsets[mlir::cast<mlir::OpResult>(res).getResultNumber()];
    int id = addValue(std::move(value));
    ids[res] = id;
    step.results.push_back(id);
  }
  rank.steps.push_back(std::move(step));
  return mlir::success();
}

mlir::LogicalResult PlanLowering::lowerCacheUpdate(mlir::Operation *op,
                                                   mlir::Value cache,
                                                   StringRef stepName) {
  plan::Step step;
  step.op = stepName.str();
  for (mlir::Value operand : op->getOperands())
    step.operands.push_back(ids.lookup(operand));
  if (mlir::failed(lowerAttributes(op, step)))
    return mlir::failure();
  ids[op->getResult(0)] = ids.lookup(cache);
  rank.steps.push_back(std::move(step));
  return mlir::success();
}

mlir::LogicalResult PlanLowering::lowerFused(mlir::infer::FusedOp op) {
  FailureOr<plan::FusedBody> body = fusedBodyOf(op);
  if (mlir::failed(body) || mlir::failed(lowerStep(op, "fused")))
    return mlir::failure();
  plan::setFusedBody(*body, rank.steps.back());
  return mlir::success();
}

mlir::LogicalResult PlanLowering::lowerLinear(mlir::infer::LinearOp op) {
  if (!op.getResidual())
    return lowerStep(op, "linear");
  if (mlir::failed(lowerStep(op, "linear_residual")))
    return mlir::failure();
  // (x, w, bias?, residual) -> (x, w, residual, bias?): the registry keeps
  // the optional operand last.
  std::vector<int> &operands = rank.steps.back().operands;
  std::rotate(operands.begin() + 2, operands.end() - 1, operands.end());
  return mlir::success();
}

FailureOr<plan::Plan> PlanLowering::lower() {
  if (!func.getBody().hasOneBlock())
    return func.emitError() << "@forward must have a single block";
  for (mlir::BlockArgument arg : func.getArguments())
    if (mlir::failed(lowerArgument(arg)))
      return mlir::failure();

  for (mlir::Operation &op : func.getBody().front()) {
    // The tensors a concatenation reads are loaded as part of it.
    if (!mlir::isa<mlir::infer::ConcatWeightsOp>(op))
      for (mlir::Value operand : op.getOperands())
        if (!ids.count(operand))
          return op.emitError() << "operand is not a plan value";
    StringRef name = op.getName().stripDialect();
    mlir::LogicalResult lowered =
        llvm::TypeSwitch<mlir::Operation *, mlir::LogicalResult>(&op)
            .Case<mlir::infer::WeightOp>(
                [&](auto weight) { return lowerWeight(weight); })
            .Case<mlir::infer::ConcatWeightsOp>(
                [&](auto concat) { return lowerConcatWeights(concat); })
            .Case<mlir::infer::KVCacheWriteOp>([&](auto write) {
              return lowerCacheUpdate(write, write.getCache(),
                                      "kv_cache_write");
            })
            .Case<mlir::infer::RopeKVCacheWriteOp>([&](auto write) {
              return lowerCacheUpdate(write, write.getCache(),
                                      "rope_kv_cache_write");
            })
            .Case<mlir::infer::RopeQKVCacheWriteOp>([&](auto write) {
              // One result, the rotated queries; the cache is written in
              // place, as by rope_kv_cache_write.
              ids[write.getResult()] = ids.lookup(write.getCache());
              return lowerStep(write, "rope_qkv_cache_write");
            })
            .Case<mlir::infer::SplitOp>([&](auto split) -> mlir::LogicalResult {
              if (mlir::failed(lowerStep(split, "split")))
                return mlir::failure();
              std::vector<int64_t> sizes;
              for (mlir::Type type : split.getResultTypes())
                sizes.push_back(
                    mlir::cast<mlir::RankedTensorType>(type).getDimSize(1));
              rank.steps.back().attrs["sizes"] = sizes;
              return mlir::success();
            })
            .Case<mlir::infer::FusedOp>(
                [&](auto fused) { return lowerFused(fused); })
            .Case<mlir::infer::LinearOp>(
                [&](auto linear) { return lowerLinear(linear); })
            .Case<mlir::infer::AttentionOp>([&](auto attention) {
              return attention.emitError()
                     << "logical attention has no plan step: run "
                        "infer-page-kv-cache first";
            })
            .Case<mlir::infer::GeluOp>([&](auto gelu) {
              return lowerStep(
                  gelu, gelu.getApproximate() == "tanh" ? "gelu_tanh" : "gelu");
            })
            .Case<mlir::func::ReturnOp>([&](auto ret) {
              for (mlir::Value operand : ret.getOperands())
                rank.outputs.push_back(ids.lookup(operand));
              return mlir::success();
            })
            .Default([&](mlir::Operation *other) -> mlir::LogicalResult {
              if (other->getDialect() &&
                  mlir::isa<mlir::infer::InferDialect>(other->getDialect()) &&
                  plan::isDirectStep(name))
                return lowerStep(other, name);
              return other->emitError() << "'" << other->getName()
                                        << "' has no step in plan format "
                                        << plan::kPlanFormatVersion;
            });
    if (mlir::failed(lowered))
      return mlir::failure();
  }
  if (auto peak = func->getAttrOfType<mlir::IntegerAttr>(
          mlir::infer::kWorkspaceBytesPerRowAttrName))
    rank.workspaceBytesPerRow = peak.getInt();
  result.numRanks = static_cast<int>(numRanks);
  for (int r = 0; r < numRanks; ++r)
    result.ranks.push_back(specializeRank(r));
  return std::move(result);
}

plan::RankPlan PlanLowering::specializeRank(int rankIndex) const {
  plan::RankPlan specialized = rank;
  specialized.rank = rankIndex;
  for (const auto &[id, shard] : paramShards) {
    plan::Value &value = specialized.values[id];
    int64_t size = value.shape[shard.getDim()].size;
    value.transforms.push_back(plan::WeightTransform{
        "slice",
        {{"dim", shard.getDim()},
         {"begin", shard.getOffset() + shard.getShardOf(rankIndex) * size},
         {"size", size}}});
  }
  for (const auto &[id, parts] : concatPartSlices)
    sliceConcatParts(specialized.values[id], parts, rankIndex);
  // Scales are computed on the rank's slice: quantization comes last.
  for (const auto &[id, quantize] : paramQuantize)
    specialized.values[id].transforms.push_back(quantize);
  for (const auto &[stepIndex, shards] : vocabParallelSteps) {
    plan::Step &step = specialized.steps[stepIndex];
    int64_t rows = specialized.values[step.operands[0]].shape[0].size;
    step.attrs["vocab_offset"] = rankIndex * rows;
    step.attrs["vocab_size"] = rows * shards;
  }
  return specialized;
}

/// Slices each part of the concatenated `value` for `rankIndex`: the first
/// with a `slice` transform ahead of the concatenations (which then see the
/// sliced tensor), every further one through its `concat`'s `slice_*`
/// attributes.
void PlanLowering::sliceConcatParts(
    plan::Value &value, const std::vector<std::optional<PartSlice>> &parts,
    int rankIndex) const {
  auto sliceAttrs = [&](const PartSlice &part) {
    return std::array<int64_t, 3>{
        part.shard.getDim(),
        part.shard.getOffset() + part.shard.getShardOf(rankIndex) * part.size,
        part.size};
  };
  for (size_t i = 1; i < parts.size(); ++i) {
    if (!parts[i])
      continue;
    auto [dim, begin, size] = sliceAttrs(*parts[i]);
    plan::AttrMap &concat = value.transforms[i - 1].attrs;
    concat["slice_dim"] = dim;
    concat["slice_begin"] = begin;
    concat["slice_size"] = size;
  }
  if (parts.front()) {
    auto [dim, begin, size] = sliceAttrs(*parts.front());
    value.transforms.insert(
        value.transforms.begin(),
        plan::WeightTransform{
            "slice", {{"dim", dim}, {"begin", begin}, {"size", size}}});
  }
}

} // namespace

/// Numbers the body's values as registers (block arguments first, then one
/// per op) and records each op as an instruction of the step's program.
FailureOr<plan::FusedBody> fusedBodyOf(mlir::infer::FusedOp op) {
  mlir::Block &block = op.getBody().front();
  plan::FusedBody body;
  body.numInputs = static_cast<int>(block.getNumArguments());
  llvm::DenseMap<mlir::Value, int> registers;
  for (mlir::BlockArgument arg : block.getArguments())
    registers[arg] = static_cast<int>(arg.getArgNumber());
  for (mlir::Operation &inner : block.without_terminator()) {
    std::optional<plan::ElementwiseOp> kind =
        llvm::TypeSwitch<mlir::Operation *, std::optional<plan::ElementwiseOp>>(
            &inner)
            .Case<mlir::infer::AddOp>(
                [](auto) { return plan::ElementwiseOp::kAdd; })
            .Case<mlir::infer::MulOp>(
                [](auto) { return plan::ElementwiseOp::kMul; })
            .Case<mlir::infer::SiluOp>(
                [](auto) { return plan::ElementwiseOp::kSilu; })
            .Case<mlir::infer::SiluMulOp>(
                [](auto) { return plan::ElementwiseOp::kSiluMul; })
            .Case<mlir::infer::GeluOp>(
                [](mlir::infer::GeluOp gelu)
                    -> std::optional<plan::ElementwiseOp> {
                  return gelu.getApproximate() == "tanh"
                             ? plan::ElementwiseOp::kGeluTanh
                             : plan::ElementwiseOp::kGelu;
                })
            .Default([](mlir::Operation *) { return std::nullopt; });
    if (!kind)
      return inner.emitError() << "has no elementwise op in plan format "
                               << plan::kPlanFormatVersion;
    plan::FusedInstruction instruction;
    instruction.op = *kind;
    for (mlir::Value operand : inner.getOperands())
      instruction.args.push_back(registers.lookup(operand));
    registers[inner.getResult(0)] = body.numRegisters();
    body.instructions.push_back(std::move(instruction));
  }
  for (mlir::Value yielded : block.getTerminator()->getOperands())
    body.yields.push_back(registers.lookup(yielded));

  return body;
}

std::optional<plan::DType> planDTypeOf(mlir::Type elementType) {
  if (elementType.isF32())
    return plan::DType::kF32;
  if (elementType.isF16())
    return plan::DType::kF16;
  if (elementType.isBF16())
    return plan::DType::kBF16;
  if (elementType.isSignlessInteger(32))
    return plan::DType::kI32;
  if (elementType.isSignlessInteger(64))
    return plan::DType::kI64;
  if (elementType.isFloat8E4M3FN())
    return plan::DType::kF8E4M3;
  if (elementType.isFloat8E5M2())
    return plan::DType::kF8E5M2;
  return std::nullopt;
}

/// lowerToPlan before verification.
static FailureOr<plan::Plan> lowerModule(mlir::ModuleOp module,
                                         const TensorFileMap &tensorFiles) {
  auto func = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (!func)
    return module.emitError() << "the module has no func.func @forward";
  int64_t numRanks = 1;
  if (auto tp = module->getAttrOfType<mlir::IntegerAttr>(
          mlir::infer::InferDialect::kTensorParallelAttrName))
    numRanks = tp.getInt();
  FailureOr<plan::Plan> lowered =
      PlanLowering(func, tensorFiles, numRanks).lower();
  auto streaming = module->getAttrOfType<mlir::infer::StreamingAttr>(
      mlir::infer::InferDialect::kStreamingAttrName);
  if (mlir::failed(lowered) || !streaming)
    return lowered;
  // Eviction renumbers the cached keys: only keys rotated when attention
  // reads them (infer-streaming-kv) stay correct.
  mlir::WalkResult walk = func.walk([](mlir::infer::PagedAttentionOp op) {
    if (op.getKeyRopeAttr())
      return mlir::WalkResult::advance();
    op.emitError() << "reads keys rotated before the cache in a module with "
                   << mlir::infer::InferDialect::kStreamingAttrName
                   << ": run infer-streaming-kv on the paged program";
    return mlir::WalkResult::interrupt();
  });
  if (walk.wasInterrupted())
    return mlir::failure();
  lowered->kvCache.sinkTokens = streaming.getSinkTokens();
  lowered->kvCache.window = streaming.getWindow();
  return lowered;
}

FailureOr<plan::Plan> lowerToPlan(mlir::ModuleOp module,
                                  const TensorFileMap &tensorFiles) {
  FailureOr<plan::Plan> lowered = lowerModule(module, tensorFiles);
  if (mlir::failed(lowered))
    return mlir::failure();
  // The runtime rejects what the verifier rejects: say so at compile time.
  if (Status verified = plan::verifyPlan(*lowered); !verified.isOk())
    return module.emitError()
           << "the lowered plan does not verify: " << verified.message();
  return lowered;
}

} // namespace infer::compiler
