//===- Compile.h - Entry points of the compiler for `infer` -----*- C++ -*-===//
//
// What `infer import` and `infer compile` call. The interface has no MLIR types
// so tools/infer can be built with INFER_ENABLE_COMPILER=OFF (then these
// commands report that the compiler is not built).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_CODEGEN_COMPILE_H
#define INFER_CODEGEN_COMPILE_H

#include "runtime/support/Status.h"

#include <cstdint>
#include <string>

namespace infer::compiler {

struct CompileOptions {
  std::string target = "cpu"; ///< "cpu" or "cuda"
  /// Target "cuda": the real GPU architecture the generated kernels are
  /// compiled for; PTX for its virtual architecture (sm_90a -> compute_90)
  /// goes along for other GPUs.
  std::string cudaArch = "sm_90a";
  /// Element type of activations, weights and the KV cache, vLLM's
  /// `--dtype`: "auto" (the checkpoint's torch_dtype for target "cuda",
  /// "float32" for "cpu"), "bfloat16", "float16" or "float32"
  /// (`infer-assign-precision`). The manifest records what "auto" chose.
  std::string dtype = "auto";
  int64_t blockSize = 16;
  /// Run infer-fuse in the deploy pipeline.
  bool fuse = true;
  /// Run infer-plan-memory: activations share one workspace.
  bool planMemory = true;
  /// Tensor-parallel ranks (`infer-shard-tensor-parallel`).
  int64_t tp = 1;
  /// `infer-quantize-fp8`: weights "none" or "fp8" (E4M3 projections) with
  /// "per-tensor" or "per-channel" scales, and the KV cache "auto" (the
  /// activations' type), "fp8_e5m2" or "fp8_e4m3".
  std::string quant = "none";
  std::string quantGranularity = "per-tensor";
  std::string kvCacheDtype = "auto";
  /// StreamingLLM (`infer-streaming-kv`): attention sinks and the rolling
  /// window of recent tokens each sequence keeps; window 0 caches the whole
  /// context.
  int64_t sinkTokens = 4;
  int64_t window = 0;
  /// Print the module to stderr after every pass of the pipeline.
  bool printIrAfterAll = false;
};

/// Imports the HF model directory and prints the model-level IR to `outPath`
/// ("-" for stdout).
Status importModel(const std::string &modelDir, const std::string &outPath);

/// HF model directory -> artifact directory (manifest.json, program.mlir,
/// plan.json, tokenizer files; kernels/ for target "cuda"). Diagnostics
/// become the Status message.
Status compileModel(const std::string &modelDir, const std::string &outDir,
                    const CompileOptions &options);

} // namespace infer::compiler

#endif // INFER_CODEGEN_COMPILE_H
