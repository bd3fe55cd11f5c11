//===- Pipelines.cpp - infer pass pipelines ---------------------*- C++ -*-===//
//
// Builds and registers the pipelines that chain the infer passes.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace mlir::infer;

void mlir::infer::buildDeployPipeline(OpPassManager &pm,
                                      const DeployPipelineOptions &options) {
  ShardTensorParallelPassOptions shardOptions;
  shardOptions.tp = options.tp;
  pm.addPass(createShardTensorParallelPass(shardOptions));
  PageKVCachePassOptions pageOptions;
  pageOptions.blockSize = options.blockSize;
  pm.addNestedPass<func::FuncOp>(createPageKVCachePass(pageOptions));
  if (options.window != 0) {
    StreamingKVPassOptions streamingOptions;
    streamingOptions.sinkTokens = options.sinkTokens;
    streamingOptions.window = options.window;
    pm.addPass(createStreamingKVPass(streamingOptions));
  }
  if (options.fuse)
    pm.addNestedPass<func::FuncOp>(createFusePass());
  if (options.planMemory)
    pm.addNestedPass<func::FuncOp>(createPlanMemoryPass());
}

void mlir::infer::registerInferPipelines() {
  PassPipelineRegistration<DeployPipelineOptions>(
      "infer-deploy-pipeline",
      "Runs the infer passes that prepare imported model IR for codegen",
      buildDeployPipeline);
}
