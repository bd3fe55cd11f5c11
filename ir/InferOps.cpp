//===- InferOps.cpp - infer dialect operations ------------------*- C++ -*-===//
//
// Implements the verifiers of the infer dialect's operations.
//
//===----------------------------------------------------------------------===//

#include "ir/InferOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::infer;

#define GET_OP_CLASSES
#include "ir/InferOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Shape helpers
//===----------------------------------------------------------------------===//

/// Two sizes are compatible when they can describe the same runtime size.
static bool isCompatibleDim(int64_t lhs, int64_t rhs) {
  return ShapedType::isDynamic(lhs) || ShapedType::isDynamic(rhs) || lhs == rhs;
}

/// Formats a shape as `[?, 384]`.
static std::string formatShape(ArrayRef<int64_t> shape) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "[";
  llvm::interleaveComma(shape, os, [&](int64_t size) {
    if (ShapedType::isDynamic(size))
      os << "?";
    else
      os << size;
  });
  os << "]";
  return text;
}

static int64_t featureDim(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape().back();
}

/// Checks that a `[rows, columns]` result has the expected shape; `how`
/// says where the expected sizes come from.
static LogicalResult
verifyResultShape(Operation *op, ArrayRef<int64_t> expected, StringRef how) {
  auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
  ArrayRef<int64_t> actual = resultType.getShape();
  if (actual.size() == expected.size() &&
      llvm::all_of(llvm::zip_equal(actual, expected), [](auto sizes) {
        return isCompatibleDim(std::get<0>(sizes), std::get<1>(sizes));
      }))
    return success();
  return op->emitOpError() << "expects result shape " << formatShape(expected)
                           << " (" << how << "), got " << resultType;
}

/// Whether `type` is an 8-bit float (an fp8 KV cache or weight).
static bool isFp8(Type type) {
  auto floatType = dyn_cast<FloatType>(type);
  return floatType && floatType.getWidth() == 8;
}

/// Whether `type` is a tensor of 8-bit floats.
static bool hasFp8Elements(Type type) {
  return isFp8(cast<ShapedType>(type).getElementType());
}

/// Checks that a parameter other than a projection weight is not fp8:
/// `infer-quantize-fp8` quantizes only infer.linear and infer.logits weights.
static LogicalResult verifyNotFp8(Operation *op, Value value, StringRef what) {
  if (!hasFp8Elements(value.getType()))
    return success();
  return op->emitOpError() << "expects a " << what
                           << " of at least 16-bit floats (only projection "
                              "weights may be fp8), got "
                           << value.getType();
}

/// Checks that a `[N, K]` projection weight matches `[T, K]` input features.
static LogicalResult verifyProjectionWeight(Operation *op, Value input,
                                            Value weight) {
  if (hasFp8Elements(weight.getType()) &&
      !cast<ShapedType>(weight.getType()).getElementType().isFloat8E4M3FN())
    return op->emitOpError() << "expects an fp8 weight of f8E4M3FN elements "
                                "(E4M3 with scales), got "
                             << weight.getType();
  int64_t features = featureDim(input);
  if (isCompatibleDim(featureDim(weight), features))
    return success();
  return op->emitOpError() << "expects weight of shape [N, " << features
                           << "] to match the input features, got "
                           << weight.getType();
}

static Type elementTypeOf(Value value) {
  return cast<ShapedType>(value.getType()).getElementType();
}

/// Checks that the activation `value` (the op's `role`) has the element type
/// `expected` of another of its activations (`owner`, a possessive: "the
/// input's"): an op reads and writes one activation type, and changing it
/// takes an explicit infer.cast.
static LogicalResult verifyElementType(Operation *op, Value value,
                                       StringRef role, Type expected,
                                       StringRef owner) {
  Type actual = elementTypeOf(value);
  if (actual == expected)
    return success();
  return op->emitOpError() << "expects " << role << " to have " << owner
                           << " element type " << expected
                           << " (convert with infer.cast), got " << actual;
}

/// Checks an activation that is written to or read with the KV cache: of the
/// cache's element type, unless the cache is fp8 (quantized on write,
/// decoded on read).
static LogicalResult verifyCacheElementType(Operation *op, Value value,
                                            StringRef role,
                                            KVCacheType cacheType) {
  if (isFp8(cacheType.getElementType()))
    return success();
  return verifyElementType(op, value, role, cacheType.getElementType(),
                           "the cache's");
}

static LogicalResult verifySameType(Operation *op, Type actual, Type expected,
                                    StringRef what) {
  if (actual == expected)
    return success();
  return op->emitOpError() << "expects result type to match " << what
                           << " type " << expected << ", got " << actual;
}

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

LogicalResult ConcatWeightsOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "expects at least one input";
  RankedTensorType resultType = getResult().getType();
  int64_t rows = 0;
  for (auto [index, input] : llvm::enumerate(getInputs())) {
    auto type = cast<RankedTensorType>(input.getType());
    if (type.getElementType() != resultType.getElementType() ||
        type.getRank() != resultType.getRank() || type.getRank() == 0 ||
        type.getShape().drop_front() != resultType.getShape().drop_front())
      return emitOpError() << "expects input #" << index
                           << " to match the result in element type and all "
                              "dimensions but the first, got "
                           << type << " for " << resultType;
    if (ShapedType::isDynamic(type.getDimSize(0)))
      return emitOpError() << "expects statically shaped inputs, got " << type;
    rows += type.getDimSize(0);
  }
  if (!isCompatibleDim(resultType.getDimSize(0), rows))
    return emitOpError() << "expects " << rows
                         << " result rows (the sum of the inputs'), got "
                         << resultType;
  return success();
}

LogicalResult WeightOp::verify() {
  if (getName().empty())
    return emitOpError() << "expects a non-empty checkpoint tensor name";
  RankedTensorType type = getResult().getType();
  if (!type.hasStaticShape())
    return emitOpError() << "expects a statically shaped result, got " << type;
  if (!isa<FloatType>(type.getElementType()))
    return emitOpError() << "expects a float element type, got "
                         << type.getElementType();
  if (getQuant() && !type.getElementType().isFloat8E4M3FN())
    return emitOpError() << "expects f8E4M3FN elements with a 'quant' "
                            "attribute, got "
                         << type.getElementType();
  if (!getQuant() && hasFp8Elements(type))
    return emitOpError() << "expects a 'quant' attribute (#infer.fp8) on a "
                            "weight of fp8 elements";
  if (std::optional<ShardAttr> shard = getShard();
      shard && shard->getDim() >= type.getRank())
    return emitOpError() << "expects shard dim " << shard->getDim()
                         << " to be a dimension of " << type;
  return success();
}

//===----------------------------------------------------------------------===//
// Embedding and projections
//===----------------------------------------------------------------------===//

/// A positive optional f64 attribute (a scale or a soft cap), or an error.
static LogicalResult verifyPositive(Operation *op, std::optional<APFloat> value,
                                    StringRef name) {
  if (value && !(value->convertToDouble() > 0))
    return op->emitOpError() << "expects a positive " << name << ", got "
                             << value->convertToDouble();
  return success();
}

LogicalResult EmbeddingOp::verify() {
  if (failed(verifyPositive(*this, getScale(), "scale")))
    return failure();
  if (IntegerAttr shards = getVocabShardsAttr(); shards && shards.getInt() <= 0)
    return emitOpError() << "expects a positive vocab_shards, got "
                         << shards.getInt();
  if (failed(verifyNotFp8(*this, getTable(), "table")))
    return failure();
  return verifyResultShape(
      *this, {getIds().getType().getDimSize(0), featureDim(getTable())},
      "ids rows, table columns");
}

LogicalResult GatherRowsOp::verify() {
  if (failed(verifyElementType(*this, getResult(), "the result",
                               elementTypeOf(getInput()), "the input's")))
    return failure();
  return verifyResultShape(
      *this, {getIndices().getType().getDimSize(0), featureDim(getInput())},
      "indices rows, input columns");
}

LogicalResult LinearOp::verify() {
  if (failed(verifyProjectionWeight(*this, getInput(), getWeight())))
    return failure();
  if (Value bias = getBias(); bias && failed(verifyNotFp8(*this, bias, "bias")))
    return failure();
  if (failed(verifyElementType(*this, getResult(), "the result",
                               elementTypeOf(getInput()), "the input's")))
    return failure();
  int64_t outFeatures = getWeight().getType().getDimSize(0);
  if (std::optional<ParallelAttr> parallel = getParallel();
      parallel && parallel->getParts()) {
    int64_t sum = 0;
    for (int64_t width : parallel->getParts().asArrayRef())
      sum += width;
    if (sum != outFeatures)
      return emitOpError() << "expects parallel parts adding up to the "
                              "weight rows ("
                           << outFeatures << "), got " << sum;
  }
  if (Value bias = getBias();
      bias && !isCompatibleDim(featureDim(bias), outFeatures))
    return emitOpError() << "expects bias of shape [" << outFeatures
                         << "] to match the weight rows, got "
                         << bias.getType();
  if (getResidual() && getParallel())
    return emitOpError()
           << "expects no parallel attribute with a residual (a row-parallel "
              "rank would add it to its partial sum): fuse after sharding";
  return verifyResultShape(*this,
                           {getInput().getType().getDimSize(0), outFeatures},
                           "input rows, weight rows");
}

LogicalResult LinearSwiGluOp::verify() {
  if (failed(verifyProjectionWeight(*this, getInput(), getWeight())))
    return failure();
  if (failed(verifyElementType(*this, getResult(), "the result",
                               elementTypeOf(getInput()), "the input's")))
    return failure();
  int64_t rows = getWeight().getType().getDimSize(0);
  if (!ShapedType::isDynamic(rows) && rows % 2 != 0)
    return emitOpError() << "expects an even number of weight rows (gate "
                            "rows, then as many up rows), got "
                         << rows;
  return verifyResultShape(
      *this,
      {getInput().getType().getDimSize(0),
       ShapedType::isDynamic(rows) ? ShapedType::kDynamic : rows / 2},
      "input rows, half the weight rows");
}

LogicalResult BiasAddOp::verify() {
  if (failed(verifyNotFp8(*this, getBias(), "bias")))
    return failure();
  int64_t features = featureDim(getInput());
  if (!isCompatibleDim(featureDim(getBias()), features))
    return emitOpError() << "expects bias of shape [" << features
                         << "] to match the input features, got "
                         << getBias().getType();
  return success();
}

LogicalResult LogitsOp::verify() {
  if (failed(verifyPositive(*this, getSoftcap(), "softcap")))
    return failure();
  if (failed(verifyProjectionWeight(*this, getInput(), getWeight())))
    return failure();
  return verifyResultShape(
      *this,
      {getInput().getType().getDimSize(0), getWeight().getType().getDimSize(0)},
      "input rows, vocabulary size");
}

LogicalResult SplitOp::verify() {
  if (getResults().empty())
    return emitOpError() << "expects at least one result";
  int64_t rows = getInput().getType().getDimSize(0);
  int64_t columns = 0;
  for (auto [index, result] : llvm::enumerate(getResults())) {
    auto type = cast<RankedTensorType>(result.getType());
    if (type.getElementType() != getInput().getType().getElementType() ||
        !isCompatibleDim(type.getDimSize(0), rows))
      return emitOpError() << "expects result #" << index
                           << " to have the input's rows and element type, "
                              "got "
                           << type;
    if (ShapedType::isDynamic(type.getDimSize(1)))
      return emitOpError() << "expects result #" << index
                           << " to have a static feature width, got " << type;
    columns += type.getDimSize(1);
  }
  if (!isCompatibleDim(featureDim(getInput()), columns))
    return emitOpError() << "expects the results' feature widths to add up to "
                            "the input's ("
                         << featureDim(getInput()) << "), got " << columns;
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization and positions
//===----------------------------------------------------------------------===//

/// Checks an RMS-norm weight against the normalized input and the epsilon.
static LogicalResult verifyRMSNorm(Operation *op, Value input, Value weight,
                                   const APFloat &epsilon) {
  if (failed(verifyNotFp8(op, weight, "weight")))
    return failure();
  int64_t features = featureDim(input);
  if (!isCompatibleDim(featureDim(weight), features))
    return op->emitOpError()
           << "expects weight of shape [" << features
           << "] to match the input features, got " << weight.getType();
  if (!(epsilon.convertToDouble() > 0))
    return op->emitOpError()
           << "expects a positive epsilon, got " << epsilon.convertToDouble();
  return success();
}

LogicalResult AddRMSNormOp::verify() {
  if (getLhs().getType() != getRhs().getType())
    return emitOpError() << "expects operands of one type, got "
                         << getLhs().getType() << " and " << getRhs().getType();
  if (failed(verifyRMSNorm(*this, getLhs(), getWeight(), getEpsilon())) ||
      failed(verifySameType(*this, getSum().getType(), getLhs().getType(),
                            "operand")) ||
      failed(verifyElementType(*this, getResult(), "the result",
                               elementTypeOf(getLhs()), "the operands'")))
    return failure();
  if (getResult().getType().getShape() != getLhs().getType().getShape())
    return emitOpError() << "expects result shape to match input shape "
                         << formatShape(getLhs().getType().getShape())
                         << ", got " << getResult().getType();
  return success();
}

LogicalResult RMSNormOp::verify() {
  if (std::optional<int64_t> headDim = getHeadDim()) {
    int64_t features = featureDim(getInput());
    if (*headDim <= 0 ||
        (!ShapedType::isDynamic(features) && features % *headDim != 0))
      return emitOpError() << "expects a positive head_dim that divides the "
                              "input features ("
                           << features << "), got " << *headDim;
    if (!isCompatibleDim(featureDim(getWeight()), *headDim))
      return emitOpError() << "expects weight of shape [" << *headDim
                           << "] (head_dim), got " << getWeight().getType();
    if (!(getEpsilon().convertToDouble() > 0))
      return emitOpError() << "expects a positive epsilon, got "
                           << getEpsilon().convertToDouble();
    if (failed(verifyNotFp8(*this, getWeight(), "weight")))
      return failure();
  } else if (failed(
                 verifyRMSNorm(*this, getInput(), getWeight(), getEpsilon()))) {
    return failure();
  }
  if (failed(verifyElementType(*this, getResult(), "the result",
                               elementTypeOf(getInput()), "the input's")))
    return failure();
  if (getResult().getType().getShape() != getInput().getType().getShape())
    return emitOpError() << "expects result shape to match input shape "
                         << formatShape(getInput().getType().getShape())
                         << ", got " << getResult().getType();
  return success();
}

/// Checks the head geometry of a rotary embedding over `input`, that a
/// longrope attribute has one factor per inverse frequency, and that the
/// batch's query_start_loc is an operand exactly when the rope is dynamic.
static LogicalResult verifyRope(Operation *op, Value input, int64_t headDim,
                                int64_t rotaryDim, RopeAttr rope,
                                Value queryStartLoc) {
  const bool dynamic = rope.getKind() == RopeScalingKind::Dynamic;
  if (dynamic && !queryStartLoc)
    return op->emitOpError() << "expects a query_start_loc operand with a "
                                "'dynamic' rope (its frequencies depend on "
                                "each sequence's length)";
  if (!dynamic && queryStartLoc)
    return op->emitOpError()
           << "expects no query_start_loc operand with a '"
           << stringifyRopeScalingKind(rope.getKind()) << "' rope";
  if (headDim <= 0)
    return op->emitOpError() << "expects a positive head_dim, got " << headDim;
  int64_t features = featureDim(input);
  if (!ShapedType::isDynamic(features) && features % headDim != 0)
    return op->emitOpError()
           << "expects input features (" << features
           << ") to be a multiple of head_dim (" << headDim << ")";
  if (rotaryDim <= 0 || rotaryDim > headDim || rotaryDim % 2 != 0)
    return op->emitOpError()
           << "expects an even rotary_dim in (0, head_dim = " << headDim
           << "], got " << rotaryDim;
  if (dynamic && rotaryDim <= 2)
    return op->emitOpError() << "expects a rotary_dim above 2 with a "
                                "'dynamic' rope (its base grows by a power "
                                "of rotary_dim / (rotary_dim - 2)), got "
                             << rotaryDim;
  if (rope.getShortFactor() && rope.getShortFactor().size() != rotaryDim / 2)
    return op->emitOpError()
           << "expects longrope short_factor and long_factor of rotary_dim / "
              "2 = "
           << rotaryDim / 2 << " entries, got " << rope.getShortFactor().size();
  return success();
}

LogicalResult RopeOp::verify() {
  if (failed(verifyRope(*this, getInput(), getHeadDimAttr().getInt(),
                        getRotaryDimAttr().getInt(), getRope(),
                        getQueryStartLoc())))
    return failure();
  return verifySameType(*this, getResult().getType(), getInput().getType(),
                        "input");
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult CastOp::verify() {
  if (elementTypeOf(getInput()) != elementTypeOf(getResult()))
    return success();
  return emitOpError() << "expects a result element type other than the "
                          "input's ("
                       << elementTypeOf(getInput()) << ")";
}

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError() << "expects approximate to be \"none\" or \"tanh\", "
                            "got \""
                         << getApproximate() << "\"";
  return success();
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// Checks what logical and paged attention share: head counts, query width,
/// scale, window, layer and result type.
template <typename AttentionOpT>
static LogicalResult verifyAttentionCommon(AttentionOpT op) {
  // I64Attr getters are unsigned; read the attributes as signed to diagnose
  // negative values.
  int64_t numHeads = op.getNumHeadsAttr().getInt();
  int64_t numKVHeads = op.getNumKvHeadsAttr().getInt();
  int64_t headDim = op.getHeadDimAttr().getInt();
  if (numHeads <= 0 || numKVHeads <= 0 || headDim <= 0)
    return op.emitOpError()
           << "expects positive num_heads, num_kv_heads and head_dim, got "
           << numHeads << ", " << numKVHeads << ", " << headDim;
  if (numHeads % numKVHeads != 0)
    return op.emitOpError()
           << "expects num_heads (" << numHeads
           << ") to be a multiple of num_kv_heads (" << numKVHeads << ")";
  int64_t queryFeatures = featureDim(op.getQuery());
  if (!isCompatibleDim(queryFeatures, numHeads * headDim))
    return op.emitOpError()
           << "expects query features (" << queryFeatures
           << ") to equal num_heads * head_dim (" << numHeads * headDim << ")";
  if (!(op.getScale().convertToDouble() > 0))
    return op.emitOpError() << "expects a positive scale, got "
                            << op.getScale().convertToDouble();
  int64_t slidingWindow = op.getSlidingWindowAttr().getInt();
  if (slidingWindow < 0)
    return op.emitOpError()
           << "expects a non-negative sliding_window, got " << slidingWindow;
  int64_t layer = op.getLayerAttr().getInt();
  if (layer < 0)
    return op.emitOpError() << "expects a non-negative layer, got " << layer;
  return verifySameType(op, op.getResult().getType(), op.getQuery().getType(),
                        "query");
}

/// Checks that keys or values hold `kvWidth` = num_kv_heads * head_dim
/// features per token.
static LogicalResult verifyKVFeatures(Operation *op, StringRef role,
                                      Value keysOrValues, int64_t kvWidth) {
  int64_t features = featureDim(keysOrValues);
  if (isCompatibleDim(features, kvWidth))
    return success();
  return op->emitOpError() << "expects " << role << " features (" << features
                           << ") to equal num_kv_heads * head_dim (" << kvWidth
                           << ")";
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyPositive(*this, getLogitSoftcap(), "logit_softcap")))
    return failure();
  if (failed(verifyAttentionCommon(*this)))
    return failure();
  int64_t kvWidth = getNumKvHeadsAttr().getInt() * getHeadDimAttr().getInt();
  if (failed(verifyKVFeatures(*this, "key", getKey(), kvWidth)) ||
      failed(verifyKVFeatures(*this, "value", getValue(), kvWidth)))
    return failure();
  Type queryType = elementTypeOf(getQuery());
  if (failed(verifyElementType(*this, getKey(), "the keys", queryType,
                               "the query's")) ||
      failed(verifyElementType(*this, getValue(), "the values", queryType,
                               "the query's")))
    return failure();
  return success();
}

/// Keys and values of a cache write: one element type, the cache's unless
/// the cache is fp8.
static LogicalResult verifyCacheWriteTypes(Operation *op, Value key,
                                           Value value, KVCacheType cacheType) {
  if (failed(verifyElementType(op, value, "the values", elementTypeOf(key),
                               "the keys'")))
    return failure();
  return verifyCacheElementType(op, key, "the keys", cacheType);
}

LogicalResult KVCacheWriteOp::verify() {
  KVCacheType cacheType = getCache().getType();
  int64_t layer = getLayerAttr().getInt();
  if (layer < 0 || layer >= cacheType.getNumLayers())
    return emitOpError() << "expects layer in [0, num_layers = "
                         << cacheType.getNumLayers() << "), got " << layer;
  if (failed(
          verifyKVFeatures(*this, "key", getKey(), cacheType.getKVWidth())) ||
      failed(
          verifyKVFeatures(*this, "value", getValue(), cacheType.getKVWidth())))
    return failure();
  if (failed(verifyCacheWriteTypes(*this, getKey(), getValue(), cacheType)))
    return failure();
  return verifySameType(*this, getResult().getType(), cacheType, "cache");
}

/// What rope_kv_cache_write and rope_qkv_cache_write check alike: the layer
/// and head_dim against the cache, the rope of the keys, and the keys' and
/// values' widths and element types.
template <typename Op> static LogicalResult verifyRopeCacheWrite(Op op) {
  KVCacheType cacheType = op.getCache().getType();
  int64_t layer = op.getLayerAttr().getInt();
  if (layer < 0 || layer >= cacheType.getNumLayers())
    return op.emitOpError()
           << "expects layer in [0, num_layers = " << cacheType.getNumLayers()
           << "), got " << layer;
  int64_t headDim = op.getHeadDimAttr().getInt();
  if (headDim != cacheType.getHeadDim())
    return op.emitOpError()
           << "expects head_dim (" << headDim << ") to match the cache's ("
           << cacheType.getHeadDim() << ")";
  if (failed(verifyRope(op, op.getKey(), headDim,
                        op.getRotaryDimAttr().getInt(), op.getRope(),
                        op.getQueryStartLoc())) ||
      failed(
          verifyKVFeatures(op, "key", op.getKey(), cacheType.getKVWidth())) ||
      failed(
          verifyKVFeatures(op, "value", op.getValue(), cacheType.getKVWidth())))
    return failure();
  return verifyCacheWriteTypes(op, op.getKey(), op.getValue(), cacheType);
}

LogicalResult RopeKVCacheWriteOp::verify() {
  if (failed(verifyRopeCacheWrite(*this)))
    return failure();
  return verifySameType(*this, getResult().getType(), getCache().getType(),
                        "cache");
}

LogicalResult RopeQKVCacheWriteOp::verify() {
  if (failed(verifyRopeCacheWrite(*this)))
    return failure();
  int64_t headDim = getHeadDimAttr().getInt();
  int64_t queryFeatures = featureDim(getQuery());
  if (!ShapedType::isDynamic(queryFeatures) && queryFeatures % headDim != 0)
    return emitOpError() << "expects query features (" << queryFeatures
                         << ") to be a multiple of head_dim (" << headDim
                         << ")";
  if (failed(verifyElementType(*this, getQuery(), "the query",
                               elementTypeOf(getKey()), "the keys'")) ||
      failed(verifySameType(*this, getRotatedQuery().getType(),
                            getQuery().getType(), "query")))
    return failure();
  return verifySameType(*this, getResult().getType(), getCache().getType(),
                        "cache");
}

LogicalResult PagedAttentionOp::verify() {
  if (failed(verifyPositive(*this, getLogitSoftcap(), "logit_softcap")))
    return failure();
  if (failed(verifyAttentionCommon(*this)))
    return failure();
  KVCacheType cacheType = getCache().getType();
  if (failed(verifyCacheElementType(*this, getQuery(), "the query", cacheType)))
    return failure();
  int64_t numKVHeads = getNumKvHeadsAttr().getInt();
  int64_t headDim = getHeadDimAttr().getInt();
  if (numKVHeads != cacheType.getNumKVHeads() ||
      headDim != cacheType.getHeadDim())
    return emitOpError() << "expects num_kv_heads and head_dim (" << numKVHeads
                         << ", " << headDim << ") to match the cache's ("
                         << cacheType.getNumKVHeads() << ", "
                         << cacheType.getHeadDim() << ")";
  int64_t layer = getLayerAttr().getInt();
  if (layer >= cacheType.getNumLayers())
    return emitOpError() << "expects layer in [0, num_layers = "
                         << cacheType.getNumLayers() << "), got " << layer;
  if (static_cast<bool>(getKeyRopeAttr()) !=
      static_cast<bool>(getKeyRotaryDimAttr()))
    return emitOpError() << "expects key_rope and key_rotary_dim together";
  if (!getKeyRopeAttr())
    return success();
  int64_t rotaryDim = getKeyRotaryDimAttr().getInt();
  if (rotaryDim <= 0 || rotaryDim > headDim || rotaryDim % 2 != 0)
    return emitOpError() << "expects an even key_rotary_dim in (0, head_dim = "
                         << headDim << "], got " << rotaryDim;
  if (getSlidingWindowAttr().getInt() != 0)
    return emitOpError() << "cannot rotate keys at their cache index "
                            "(key_rope) with a sliding_window";
  RopeScalingKind kind = getKeyRopeAttr().getKind();
  if (kind == RopeScalingKind::LongRope || kind == RopeScalingKind::Dynamic)
    return emitOpError() << "cannot rotate keys at their cache index with a '"
                         << stringifyRopeScalingKind(kind)
                         << "' key_rope (its frequencies depend on the "
                            "sequence's length)";
  return success();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

LogicalResult AllGatherOp::verify() {
  auto inputType = cast<RankedTensorType>(getInput().getType());
  auto resultType = cast<RankedTensorType>(getResult().getType());
  int64_t dim = getDimAttr().getInt();
  if (dim < 0 || dim >= inputType.getRank())
    return emitOpError() << "expects dim in [0, " << inputType.getRank()
                         << "), got " << dim;
  if (resultType.getRank() != inputType.getRank() ||
      resultType.getElementType() != inputType.getElementType())
    return emitOpError() << "expects a result of the input's rank and "
                            "element type, got "
                         << resultType;
  for (int64_t i = 0; i < inputType.getRank(); ++i) {
    int64_t in = inputType.getDimSize(i), out = resultType.getDimSize(i);
    if (ShapedType::isDynamic(in) || ShapedType::isDynamic(out))
      continue;
    if (i != dim && in != out)
      return emitOpError() << "expects result dimension " << i
                           << " to equal the input's (" << in << "), got "
                           << out;
    if (i == dim && (in == 0 || out % in != 0))
      return emitOpError() << "expects result dimension " << dim
                           << " to be a multiple of the input's (" << in
                           << "), got " << out;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

LogicalResult FusedOp::verifyRegions() {
  if (getInputs().empty() || getResults().empty())
    return emitOpError() << "expects at least one input and one result";
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError() << "expects one block argument per input ("
                         << getInputs().size() << "), got "
                         << body.getNumArguments();
  // The body computes in f32: its arguments are the inputs loaded to f32.
  Type f32 = Float32Type::get(getContext());
  auto inF32 = [&](Type type) {
    return cast<RankedTensorType>(type).clone(f32);
  };
  for (auto [index, input, arg] :
       llvm::enumerate(getInputs(), body.getArguments()))
    if (arg.getType() != inF32(input.getType()))
      return emitOpError() << "expects block argument #" << index
                           << " to be the input in f32, "
                           << inF32(input.getType()) << ", got "
                           << arg.getType();
  ArrayRef<int64_t> shape =
      cast<RankedTensorType>(getResult(0).getType()).getShape();
  SmallVector<Type> types(getInputs().getTypes());
  llvm::append_range(types, getResults().getTypes());
  for (Type type : types)
    if (cast<RankedTensorType>(type).getShape() != shape)
      return emitOpError() << "expects every input and result to have shape "
                           << formatShape(shape) << ", got " << type;
  auto yield = cast<YieldOp>(body.getTerminator());
  if (yield.getValues().size() != getResults().size())
    return yield.emitOpError()
           << "expects one value per result of the enclosing 'infer.fused' ("
           << getResults().size() << "), got " << yield.getValues().size();
  for (auto [index, value, result] :
       llvm::enumerate(yield.getValues(), getResults()))
    if (value.getType() != inF32(result.getType()))
      return yield.emitOpError()
             << "expects value #" << index << " to be result #" << index
             << " of the enclosing 'infer.fused' in f32, "
             << inF32(result.getType()) << ", got " << value.getType();
  for (Operation &op : body.without_terminator())
    if (!isa<AddOp, GeluOp, MulOp, SiluOp, SiluMulOp>(op))
      return op.emitOpError() << "is not an elementwise operation an "
                                 "'infer.fused' body may hold";
  return success();
}
