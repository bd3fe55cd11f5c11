//===- Passes.h - infer transformation passes -------------------*- C++ -*-===//
//
// Declares the passes of the infer compiler (generated from Passes.td) and
// the pipelines built from them.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_PASSES_PASSES_H
#define INFER_PASSES_PASSES_H

#include "ir/InferAttrs.h"
#include "ir/InferDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::infer {

/// What `infer-quantize-fp8` does to projection weights.
enum class Fp8WeightQuant { None, E4M3 };
/// What `infer-quantize-fp8` does to the paged KV cache.
enum class Fp8KVCacheQuant { None, E5M2, E4M3 };
/// The element types `infer-assign-precision` gives activations, weights and
/// the KV cache.
enum class ActivationType { BF16, F16, F32 };

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

/// `infer-deploy-pipeline`'s `quant` and `kv-cache-dtype` (vLLM's names).
enum class DeployQuant { None, Fp8 };
enum class DeployKVCacheDtype { Auto, Fp8E5M2, Fp8E4M3 };

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
  PassOptions::Option<ActivationType> dtype{
      *this, "dtype",
      llvm::cl::desc("Element type of activations, weights and the KV cache "
                     "(infer-assign-precision): bf16, f16 or f32"),
      llvm::cl::init(ActivationType::F32),
      llvm::cl::values(
          clEnumValN(ActivationType::BF16, "bf16", "bfloat16"),
          clEnumValN(ActivationType::F16, "f16", "IEEE half precision"),
          clEnumValN(ActivationType::F32, "f32", "IEEE single precision"))};
  PassOptions::Option<DeployQuant> quant{
      *this, "quant",
      llvm::cl::desc("Weight quantization: none or fp8 (E4M3 projection "
                     "weights, infer-quantize-fp8)"),
      llvm::cl::init(DeployQuant::None),
      llvm::cl::values(
          clEnumValN(DeployQuant::None, "none", "checkpoint weights"),
          clEnumValN(DeployQuant::Fp8, "fp8", "FP8 E4M3 projection weights"))};
  PassOptions::Option<Fp8Granularity> quantGranularity{
      *this, "quant-granularity",
      llvm::cl::desc("Scales of fp8 weights: per-tensor or per-channel"),
      llvm::cl::init(Fp8Granularity::PerTensor),
      llvm::cl::values(clEnumValN(Fp8Granularity::PerTensor, "per-tensor",
                                  "one scale per tensor"),
                       clEnumValN(Fp8Granularity::PerChannel, "per-channel",
                                  "one scale per output row"))};
  PassOptions::Option<DeployKVCacheDtype> kvCacheDtype{
      *this, "kv-cache-dtype",
      llvm::cl::desc("KV-cache element type: auto (the activations'), "
                     "fp8_e5m2 or fp8_e4m3"),
      llvm::cl::init(DeployKVCacheDtype::Auto),
      llvm::cl::values(
          clEnumValN(DeployKVCacheDtype::Auto, "auto", "the activations'"),
          clEnumValN(DeployKVCacheDtype::Fp8E5M2, "fp8_e5m2",
                     "FP8 E5M2, no scale"),
          clEnumValN(DeployKVCacheDtype::Fp8E4M3, "fp8_e4m3",
                     "FP8 E4M3, an fp32 scale per token and head"))};
  PassOptions::Option<bool> planMemory{
      *this, "plan-memory",
      llvm::cl::desc("Run infer-plan-memory (activations in one workspace)"),
      llvm::cl::init(true)};
};

/// Builds the pipeline that takes imported model IR to the form codegen
/// lowers: tensor-parallel sharding, paging of the KV cache, attention sinks
/// and a rolling window when `window > 0`, the element types `dtype` says,
/// fp8 quantization when `quant=fp8` or `kv-cache-dtype` asks for it, fusion
/// unless `fuse=false`, then the memory plan unless `plan-memory=false`.
void buildDeployPipeline(OpPassManager &pm,
                         const DeployPipelineOptions &options);

/// Registers `infer-deploy-pipeline` with the global pass registry.
void registerInferPipelines();

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace mlir::infer

#endif // INFER_PASSES_PASSES_H
