//===- Artifact.h - Writes the deployable artifact directory ----*- C++ -*-===//
//
//   ARTIFACT/
//     manifest.json          written last: its presence marks a whole artifact
//     program.mlir           the final IR, for people (`infer inspect`)
//     plan.json              the kernel plan the runtime executes
//     tokenizer.json, tokenizer_config.json, generation_config.json
//                            copied from the model directory when present
//     kernels/               target "cuda": the generated kernels of the
//       fused.cu             fused steps (codegen/cuda/CudaEmitter.h),
//       fused.sm_90a.cubin   compiled by NVRTC for the target architecture
//       fused.ptx            and as PTX for the driver to JIT elsewhere
//
// Weights stay in the model directory: the manifest records its absolute path
// and a size + header fingerprint per safetensors file.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_CODEGEN_ARTIFACT_H
#define INFER_CODEGEN_ARTIFACT_H

#include "codegen/Compile.h"
#include "codegen/PlanLowering.h"
#include "runtime/plan/Plan.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace infer::compiler {

/// Version string recorded in manifests.
inline constexpr const char *kInferVersion = "0.1.0";

/// The `infer.model` module attribute as manifest model info.
StatusOr<plan::ModelInfo> readModelInfo(mlir::ModuleOp module);

/// Target "cuda": the generated translation unit and what NVRTC made of it.
struct GeneratedKernels {
  std::string source;
  std::string arch; ///< "sm_90a"
  std::string cubin;
  std::string ptxArch; ///< "compute_90"
  std::string ptx;
};

struct ArtifactContents {
  std::string modelDir;
  CompileOptions options;
  mlir::ModuleOp program;
  const plan::Plan *plan = nullptr;
  const TensorFileMap *tensorFiles = nullptr;
  /// Null for target "cpu".
  const GeneratedKernels *kernels = nullptr;
};

/// Writes `contents` to `outDir`, creating it if needed.
Status writeArtifact(const std::string &outDir,
                     const ArtifactContents &contents);

} // namespace infer::compiler

#endif // INFER_CODEGEN_ARTIFACT_H
