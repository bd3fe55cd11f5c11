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

/// The infer-quantize-fp8 options that `quant`, `quant-granularity` and
/// `kv-cache-dtype` ask for.
static QuantizeFp8PassOptions
getQuantizeFp8Options(const DeployPipelineOptions &options) {
  QuantizeFp8PassOptions quantize;
  quantize.weights = options.quant == DeployQuant::Fp8 ? Fp8WeightQuant::E4M3
                                                       : Fp8WeightQuant::None;
  quantize.granularity = options.quantGranularity;
  switch (options.kvCacheDtype) {
  case DeployKVCacheDtype::Auto:
    quantize.kvCache = Fp8KVCacheQuant::None;
    break;
  case DeployKVCacheDtype::Fp8E5M2:
    quantize.kvCache = Fp8KVCacheQuant::E5M2;
    break;
  case DeployKVCacheDtype::Fp8E4M3:
    quantize.kvCache = Fp8KVCacheQuant::E4M3;
    break;
  }
  return quantize;
}

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
  AssignPrecisionPassOptions precisionOptions;
  precisionOptions.activationType = options.dtype;
  pm.addNestedPass<func::FuncOp>(createAssignPrecisionPass(precisionOptions));
  if (options.quant != DeployQuant::None ||
      options.kvCacheDtype != DeployKVCacheDtype::Auto)
    pm.addNestedPass<func::FuncOp>(
        createQuantizeFp8Pass(getQuantizeFp8Options(options)));
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
