//===- Passes.h - infer transformation passes -------------------*- C++ -*-===//
//
// Declares the passes of the infer compiler (generated from Passes.td) and
// the pipelines built from them.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_PASSES_PASSES_H
#define INFER_PASSES_PASSES_H

#include "ir/InferDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::infer {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

/// Options of `infer-deploy-pipeline`.
struct DeployPipelineOptions
    : public PassPipelineOptions<DeployPipelineOptions> {
  PassOptions::Option<int64_t> blockSize{
      *this, "block-size",
      llvm::cl::desc("Tokens per KV-cache block; a positive power of two"),
      llvm::cl::init(16)};
  PassOptions::Option<int64_t> tp{
      *this, "tp", llvm::cl::desc("Number of tensor-parallel ranks"),
      llvm::cl::init(1)};
  PassOptions::Option<bool> fuse{
      *this, "fuse",
      llvm::cl::desc("Run infer-fuse (merged projections, fused norms, "
                     "activations, cache writes and elementwise regions)"),
      llvm::cl::init(true)};
  PassOptions::Option<int64_t> sinkTokens{
      *this, "sink-tokens",
      llvm::cl::desc("Attention-sink tokens kept by infer-streaming-kv"),
      llvm::cl::init(4)};
  PassOptions::Option<int64_t> window{
      *this, "window",
      llvm::cl::desc("Recent tokens kept by infer-streaming-kv (0: no "
                     "streaming, the whole context is cached)"),
      llvm::cl::init(0)};
  PassOptions::Option<bool> planMemory{
      *this, "plan-memory",
      llvm::cl::desc("Run infer-plan-memory (activations in one workspace)"),
      llvm::cl::init(true)};
};

/// Builds the pipeline that takes imported model IR to the form codegen
/// lowers: tensor-parallel sharding, paging of the KV cache, attention sinks
/// and a rolling window when `window > 0`, fusion unless `fuse=false`, then
/// the memory plan unless `plan-memory=false`.
void buildDeployPipeline(OpPassManager &pm,
                         const DeployPipelineOptions &options);

/// Registers `infer-deploy-pipeline` with the global pass registry.
void registerInferPipelines();

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace mlir::infer

#endif // INFER_PASSES_PASSES_H
