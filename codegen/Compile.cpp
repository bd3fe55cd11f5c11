//===- Compile.cpp - Entry points of the compiler for the infer tool ------===//

#include "codegen/Compile.h"

#include "codegen/Artifact.h"
#include "codegen/PlanLowering.h"
#include "codegen/cuda/CudaEmitter.h"
#include "codegen/cuda/Nvrtc.h"
#include "frontend/ImportHF.h"
#include "passes/Passes.h"
#include "runtime/safetensors/Safetensors.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"

namespace infer::compiler {
namespace {

/// `file:line:col`, `file` for a whole-file location, the name of a NameLoc,
/// or the first known part of a fused location.
std::string formatLocation(mlir::Location loc) {
  if (auto file = mlir::dyn_cast<mlir::FileLineColLoc>(loc)) {
    std::string text = file.getFilename().str();
    if (file.getLine() != 0)
      text += ":" + std::to_string(file.getLine()) + ":" +
              std::to_string(file.getColumn());
    return text;
  }
  if (auto name = mlir::dyn_cast<mlir::NameLoc>(loc))
    return name.getName().str();
  if (auto fused = mlir::dyn_cast<mlir::FusedLoc>(loc)) {
    for (mlir::Location part : fused.getLocations()) {
      std::string text = formatLocation(part);
      if (!text.empty())
        return text;
    }
  }
  if (auto callSite = mlir::dyn_cast<mlir::CallSiteLoc>(loc))
    return formatLocation(callSite.getCallee());
  return "";
}

const char *severityName(mlir::DiagnosticSeverity severity) {
  switch (severity) {
  case mlir::DiagnosticSeverity::Error:
    return "error";
  case mlir::DiagnosticSeverity::Warning:
    return "warning";
  case mlir::DiagnosticSeverity::Note:
    return "note";
  case mlir::DiagnosticSeverity::Remark:
    return "remark";
  }
  llvm_unreachable("unknown severity");
}

/// Collects the diagnostics of a compilation for a Status message, one per
/// line: `loc: message` for errors (the caller reports the Status as an
/// error), `loc: note: message` for notes and warnings.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext &context)
      : handler(&context, [this](mlir::Diagnostic &diag) {
          append(diag);
          for (mlir::Diagnostic &note : diag.getNotes())
            append(note);
          return mlir::success();
        }) {}

  Status failure(StatusCode code, const std::string &fallback) const {
    return Status(code, text.empty() ? fallback : text);
  }

private:
  void append(mlir::Diagnostic &diag) {
    if (!text.empty())
      text += "\n";
    std::string where = formatLocation(diag.getLocation());
    if (!where.empty())
      text += where + ": ";
    if (diag.getSeverity() != mlir::DiagnosticSeverity::Error)
      text += std::string(severityName(diag.getSeverity())) + ": ";
    text += diag.str();
  }

  std::string text;
  mlir::ScopedDiagnosticHandler handler;
};

std::string absolutePath(const std::string &path) {
  llvm::SmallString<256> real;
  if (!llvm::sys::fs::real_path(path, real))
    return std::string(real);
  llvm::SmallString<256> absolute(path);
  llvm::sys::fs::make_absolute(absolute);
  return std::string(absolute);
}

/// "sm_90a" -> "compute_90": the virtual architecture of a real one.
std::string virtualArchOf(llvm::StringRef arch) {
  return ("compute_" + arch.drop_front(3).rtrim("af")).str();
}

/// The activation type of a `--dtype` name other than "auto".
std::optional<mlir::infer::ActivationType>
activationTypeOf(llvm::StringRef dtype) {
  return llvm::StringSwitch<std::optional<mlir::infer::ActivationType>>(dtype)
      .Case("bfloat16", mlir::infer::ActivationType::BF16)
      .Case("float16", mlir::infer::ActivationType::F16)
      .Case("float32", mlir::infer::ActivationType::F32)
      .Default(std::nullopt);
}

/// What `--dtype auto` means: float32 on the CPU (the reference computes in
/// fp32); on a GPU the checkpoint's torch_dtype from config.json (`dtype`
/// since transformers 4.56, `torch_dtype` before), except that a float32
/// checkpoint, or one that names none, runs in bfloat16: serving in fp32 is
/// never what a GPU deployment wants, and bf16 keeps fp32's range (vLLM's
/// auto likewise narrows float32 checkpoints).
StatusOr<std::string> resolveDtype(const std::string &modelDir,
                                   const CompileOptions &options) {
  if (options.dtype != "auto")
    return options.dtype;
  if (options.target == "cpu")
    return std::string("float32");
  std::string path = modelDir + "/config.json";
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFile(path);
  if (!file)
    return notFound("cannot read " + path + ": " + file.getError().message());
  llvm::Expected<llvm::json::Value> config =
      llvm::json::parse((*file)->getBuffer());
  if (!config)
    return invalidArgument(
        path + " is not valid JSON: " + llvm::toString(config.takeError()));
  const llvm::json::Object *object = config->getAsObject();
  std::optional<llvm::StringRef> dtype;
  if (object) {
    dtype = object->getString("dtype");
    if (!dtype)
      dtype = object->getString("torch_dtype");
  }
  if (!dtype || *dtype == "float32")
    return std::string("bfloat16");
  if (!activationTypeOf(*dtype))
    return invalidArgument(
        path + ": the checkpoint's dtype '" + dtype->str() +
        "' is not bfloat16, float16 or float32 (pass --dtype)");
  return dtype->str();
}

Status checkOptions(const CompileOptions &options) {
  if (options.target == "cuda") {
    std::string why;
    if (!nvrtcAvailable(&why))
      return unimplemented("target 'cuda' compiles the generated kernels "
                           "with NVRTC: " +
                           why + " (use --target cpu)");
    llvm::StringRef arch = options.cudaArch;
    if (!arch.starts_with("sm_") ||
        arch.drop_front(3).rtrim("af").find_first_not_of("0123456789") !=
            llvm::StringRef::npos ||
        arch.size() < 5)
      return invalidArgument("CUDA architecture '" + options.cudaArch +
                             "' is not of the form sm_XY (e.g. sm_90a)");
  }
  if (options.target != "cpu" && options.target != "cuda")
    return invalidArgument("unknown target '" + options.target +
                           "' (supported: cpu, cuda)");
  if (options.dtype != "auto" && !activationTypeOf(options.dtype))
    return invalidArgument("unknown dtype '" + options.dtype +
                           "' (supported: auto, bfloat16, float16, float32)");
  if (options.tp < 1)
    return invalidArgument("tensor parallelism must be at least 1, got " +
                           std::to_string(options.tp));
  if (options.blockSize <= 0)
    return invalidArgument("block size must be positive, got " +
                           std::to_string(options.blockSize));
  if (options.quant != "none" && options.quant != "fp8")
    return invalidArgument("unknown quantization '" + options.quant +
                           "' (supported: none, fp8)");
  if (options.quantGranularity != "per-tensor" &&
      options.quantGranularity != "per-channel")
    return invalidArgument("unknown quantization granularity '" +
                           options.quantGranularity +
                           "' (supported: per-tensor, per-channel)");
  if (options.kvCacheDtype != "auto" && options.kvCacheDtype != "fp8_e5m2" &&
      options.kvCacheDtype != "fp8_e4m3")
    return invalidArgument("unknown KV-cache dtype '" + options.kvCacheDtype +
                           "' (supported: auto, fp8_e5m2, fp8_e4m3)");
  if (options.window < 0 || options.sinkTokens < 0)
    return invalidArgument("streaming needs --window >= 0 and --sink-tokens "
                           ">= 0, got --window " +
                           std::to_string(options.window) + " --sink-tokens " +
                           std::to_string(options.sinkTokens));
  return Status::ok();
}

} // namespace

Status importModel(const std::string &modelDir, const std::string &outPath) {
  mlir::MLIRContext context;
  DiagnosticCollector diagnostics(context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      frontend::importHFModel(modelDir, context);
  if (!module)
    return diagnostics.failure(StatusCode::kInvalidArgument,
                               "cannot import " + modelDir);

  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> output =
      mlir::openOutputFile(outPath, &error);
  if (!output)
    return invalidArgument(error);
  module->print(output->os());
  output->os().flush();
  if (output->os().has_error())
    return dataLoss("error writing " + outPath);
  output->keep();
  return Status::ok();
}

Status compileModel(const std::string &modelDir, const std::string &outDir,
                    const CompileOptions &options) {
  INFER_RETURN_IF_ERROR(checkOptions(options));
  std::string weightsDir = absolutePath(modelDir);

  mlir::MLIRContext context;
  context.disableMultithreading();
  // Diagnostics name the op through its location; the generic dump of the
  // op that MLIR appends as a note is noise for users of `infer compile`.
  context.printOpOnDiagnostic(false);
  DiagnosticCollector diagnostics(context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      frontend::importHFModel(weightsDir, context);
  if (!module)
    return diagnostics.failure(StatusCode::kInvalidArgument,
                               "cannot import " + modelDir);

  CompileOptions resolved = options;
  INFER_ASSIGN_OR_RETURN(resolved.dtype, resolveDtype(weightsDir, options));

  mlir::PassManager pm(&context);
  mlir::infer::DeployPipelineOptions pipelineOptions;
  pipelineOptions.dtype = *activationTypeOf(resolved.dtype);
  pipelineOptions.blockSize = options.blockSize;
  pipelineOptions.fuse = options.fuse;
  pipelineOptions.planMemory = options.planMemory;
  pipelineOptions.tp = options.tp;
  pipelineOptions.sinkTokens = options.sinkTokens;
  pipelineOptions.window = options.window;
  pipelineOptions.quant = options.quant == "fp8"
                              ? mlir::infer::DeployQuant::Fp8
                              : mlir::infer::DeployQuant::None;
  pipelineOptions.quantGranularity =
      options.quantGranularity == "per-channel"
          ? mlir::infer::Fp8Granularity::PerChannel
          : mlir::infer::Fp8Granularity::PerTensor;
  pipelineOptions.kvCacheDtype = options.kvCacheDtype == "fp8_e5m2"
                                     ? mlir::infer::DeployKVCacheDtype::Fp8E5M2
                                 : options.kvCacheDtype == "fp8_e4m3"
                                     ? mlir::infer::DeployKVCacheDtype::Fp8E4M3
                                     : mlir::infer::DeployKVCacheDtype::Auto;
  mlir::infer::buildDeployPipeline(pm, pipelineOptions);
  if (options.printIrAfterAll) {
    // Module-scope printing needs the passes to run one at a time.
    context.disableMultithreading();
    pm.enableIRPrinting(
        /*shouldPrintBeforePass=*/[](mlir::Pass *,
                                     mlir::Operation *) { return false; },
        /*shouldPrintAfterPass=*/
        [](mlir::Pass *, mlir::Operation *) { return true; },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
  }
  if (mlir::failed(pm.run(*module)) || mlir::failed(mlir::verify(*module)))
    return diagnostics
        .failure(StatusCode::kInternal, "infer-deploy-pipeline failed")
        .withContext("compiling " + modelDir);

  StatusOr<TensorFileMap> tensorFiles =
      safetensors::listModelTensors(weightsDir);
  if (!tensorFiles.isOk())
    return tensorFiles.status();
  mlir::FailureOr<plan::Plan> plan = lowerToPlan(*module, *tensorFiles);
  if (mlir::failed(plan))
    return diagnostics.failure(StatusCode::kInternal, "cannot lower to a plan")
        .withContext("lowering " + modelDir + " to a plan");

  GeneratedKernels kernels;
  if (options.target == "cuda") {
    StatusOr<std::vector<FusedKernel>> fused = assignFusedKernels(*plan);
    if (!fused.isOk())
      return fused.status().withContext("generating CUDA kernels");
    kernels.source = emitCudaUnit(*fused);
    kernels.arch = options.cudaArch;
    kernels.ptxArch = virtualArchOf(options.cudaArch);
    StatusOr<CudaBinaries> binaries = compileCuda(
        kernels.source, "kernels/fused.cu", kernels.arch, kernels.ptxArch);
    if (!binaries.isOk())
      return binaries.status().withContext("compiling the generated kernels "
                                           "of " +
                                           modelDir);
    kernels.cubin = std::move(binaries->cubin);
    kernels.ptx = std::move(binaries->ptx);
  }

  ArtifactContents contents;
  contents.modelDir = weightsDir;
  contents.options = resolved;
  contents.program = *module;
  contents.plan = &*plan;
  contents.tensorFiles = &*tensorFiles;
  contents.kernels = options.target == "cuda" ? &kernels : nullptr;
  return writeArtifact(outDir, contents)
      .withContext("writing artifact " + outDir);
}

} // namespace infer::compiler
