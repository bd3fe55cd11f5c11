//===- FusePatterns.h - rewrite patterns of infer-fuse ----------*- C++ -*-===//
//
// The pattern families `infer-fuse` applies, one file each, and the grouping
// of elementwise chains into `infer.fused` regions that follows them.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_PASSES_FUSEPATTERNS_H
#define INFER_PASSES_FUSEPATTERNS_H

#include "mlir/IR/PatternMatch.h"

namespace mlir::infer {

/// Sibling `infer.linear`s of one input -> one GEMM over concatenated weights
/// and an `infer.split` (q/k/v, gate/up).
void populateFuseProjectionPatterns(RewritePatternSet &patterns);

/// `infer.rms_norm(infer.add(a, b))` -> `infer.add_rms_norm(a, b)`.
void populateFuseNormalizationPatterns(RewritePatternSet &patterns);

/// `infer.add_rms_norm(r, infer.linear(x, w))` ->
/// `infer.rms_norm(infer.linear(x, w) residual(r))`, and `infer.add` of a
/// single-use linear likewise where the add would join no elementwise region.
void populateFuseResidualPatterns(RewritePatternSet &patterns);

/// `infer.mul(infer.silu(g), u)` -> `infer.silu_mul(g, u)`, and
/// `infer.silu_mul` of the halves of a gate/up `infer.linear` ->
/// `infer.linear_swiglu`.
void populateFuseActivationPatterns(RewritePatternSet &patterns);

/// `infer.kv_cache_write(c, infer.rope(k), v)` ->
/// `infer.rope_kv_cache_write(c, k, v)`, and that with the `infer.rope(q)`
/// of the layer's attention -> `infer.rope_qkv_cache_write(c, q, k, v)`.
void populateFuseCacheWritePatterns(RewritePatternSet &patterns);

/// Whether formElementwiseRegions groups `op` with its elementwise
/// neighbours.
bool isFusibleElementwise(Operation *op);

/// Moves every connected group of two or more elementwise operations of
/// `block` into one `infer.fused` region. A producer joins a group only when
/// all users of its result are in the group.
void formElementwiseRegions(RewriterBase &rewriter, Block &block);

} // namespace mlir::infer

#endif // INFER_PASSES_FUSEPATTERNS_H
