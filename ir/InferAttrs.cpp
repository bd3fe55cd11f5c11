//===- InferAttrs.cpp - infer dialect attributes ----------------*- C++ -*-===//
//
// Implements the attributes and enumerations of the infer dialect.
//
//===----------------------------------------------------------------------===//

#include "ir/InferAttrs.h"

#include "ir/InferDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::infer;

#include "ir/InferEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/InferAttrs.cpp.inc"

void InferDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "ir/InferAttrs.cpp.inc"
      >();
}

LogicalResult
RopeAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                 APFloat thetaValue, RopeScalingKind kind, APFloat factorValue,
                 APFloat lowFreqFactorValue, APFloat highFreqFactorValue,
                 int64_t originalMaxPositionEmbeddings, APFloat betaFastValue,
                 APFloat betaSlowValue, DenseF64ArrayAttr shortFactor,
                 DenseF64ArrayAttr longFactor) {
  double theta = thetaValue.convertToDouble();
  double factor = factorValue.convertToDouble();
  double lowFreqFactor = lowFreqFactorValue.convertToDouble();
  double highFreqFactor = highFreqFactorValue.convertToDouble();
  StringRef name = stringifyRopeScalingKind(kind);
  if (!(theta > 0))
    return emitError() << "rope theta must be positive, got " << theta;
  if (kind != RopeScalingKind::LongRope && (shortFactor || longFactor))
    return emitError() << "short_factor and long_factor belong to 'longrope' "
                          "rope scaling, not '"
                       << name << "'";
  if (kind == RopeScalingKind::Default)
    return success();
  if (kind != RopeScalingKind::LongRope && !(factor > 0))
    return emitError() << "'" << name
                       << "' rope scaling needs a positive factor, got "
                       << factor;
  if (kind == RopeScalingKind::Linear)
    return success();
  if (originalMaxPositionEmbeddings <= 0)
    return emitError() << "'" << name
                       << "' rope scaling needs a positive "
                          "original_max_position_embeddings, got "
                       << originalMaxPositionEmbeddings;
  if (kind == RopeScalingKind::Yarn) {
    double betaFast = betaFastValue.convertToDouble();
    double betaSlow = betaSlowValue.convertToDouble();
    if (!(betaFast > 0) || !(betaSlow > 0))
      return emitError() << "'yarn' rope scaling needs positive beta_fast and "
                            "beta_slow, got "
                         << betaFast << " and " << betaSlow;
    return success();
  }
  if (kind == RopeScalingKind::LongRope) {
    if (!shortFactor || !longFactor)
      return emitError()
             << "'longrope' rope scaling needs short_factor and long_factor";
    if (shortFactor.size() != longFactor.size())
      return emitError() << "'longrope' short_factor has " << shortFactor.size()
                         << " entries, long_factor " << longFactor.size();
    for (DenseF64ArrayAttr list : {shortFactor, longFactor})
      for (double value : list.asArrayRef())
        if (!(value > 0))
          return emitError()
                 << "'longrope' short_factor and long_factor entries must be "
                    "positive, got "
                 << value;
    return success();
  }
  if (kind == RopeScalingKind::Dynamic)
    return success();
  if (!(highFreqFactor > lowFreqFactor))
    return emitError() << "'llama3' rope scaling needs high_freq_factor ("
                       << highFreqFactor << ") > low_freq_factor ("
                       << lowFreqFactor << ")";
  return success();
}

LogicalResult
StreamingAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                      int64_t sinkTokens, int64_t window) {
  if (sinkTokens < 0)
    return emitError() << "streaming sink_tokens must be non-negative, got "
                       << sinkTokens;
  if (window <= 0)
    return emitError() << "streaming window must be positive, got " << window;
  return success();
}

LogicalResult
ShardAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                  int64_t dim, int64_t shards, int64_t replication,
                  int64_t offset, int64_t size) {
  if (dim < 0)
    return emitError() << "shard dim must be non-negative, got " << dim;
  if (shards <= 0 || replication <= 0)
    return emitError() << "shard shards and replication must be positive, got "
                       << shards << " and " << replication;
  if (offset < 0 || size < 0)
    return emitError() << "shard offset and size must be non-negative, got "
                       << offset << " and " << size;
  if (offset > 0 && size == 0)
    return emitError() << "shard offset " << offset
                       << " needs the size of the split part";
  return success();
}

LogicalResult
ParallelAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                     ParallelStyle style, DenseI64ArrayAttr parts,
                     DenseBoolArrayAttr kvParts) {
  if (!parts && !kvParts)
    return success();
  if (style != ParallelStyle::Column)
    return emitError() << "parallel parts belong to 'column' linears, not '"
                       << stringifyParallelStyle(style) << "'";
  if (!parts || !kvParts || parts.size() != kvParts.size())
    return emitError() << "parallel parts and kv_parts need one entry per "
                          "part, got "
                       << (parts ? parts.size() : 0) << " and "
                       << (kvParts ? kvParts.size() : 0);
  for (int64_t width : parts.asArrayRef())
    if (width <= 0)
      return emitError() << "parallel parts must be positive, got " << width;
  return success();
}
