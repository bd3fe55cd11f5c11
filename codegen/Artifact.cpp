//===- Artifact.cpp - Writes the deployable artifact directory ------------===//

#include "codegen/Artifact.h"

#include "ir/InferDialect.h"
#include "runtime/safetensors/Safetensors.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <set>

using llvm::StringRef;

namespace infer::compiler {
namespace {

std::string joinPath(StringRef dir, StringRef name) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, name);
  return std::string(path);
}

Status writeTextFile(const std::string &path,
                     llvm::function_ref<void(llvm::raw_ostream &)> write) {
  std::error_code error;
  llvm::raw_fd_ostream os(path, error, llvm::sys::fs::OF_Text);
  if (error)
    return invalidArgument("cannot write " + path + ": " + error.message());
  write(os);
  os.close();
  if (os.has_error())
    return dataLoss("error writing " + path + ": " + os.error().message());
  return Status::ok();
}

StatusOr<std::vector<plan::WeightFile>>
describeWeightFiles(const std::string &modelDir,
                    const TensorFileMap &tensorFiles) {
  std::set<std::string> names;
  for (const auto &entry : tensorFiles)
    names.insert(entry.second);
  std::vector<plan::WeightFile> files;
  for (const std::string &name : names) {
    std::string path = joinPath(modelDir, name);
    StatusOr<safetensors::Header> header = safetensors::readHeader(path);
    if (!header.isOk())
      return header.status();
    plan::WeightFile file;
    file.name = name;
    if (std::error_code error = llvm::sys::fs::file_size(path, file.size))
      return notFound("cannot stat " + path + ": " + error.message());
    file.headerFingerprint = plan::fingerprint(header->headerJson);
    files.push_back(std::move(file));
  }
  return files;
}

/// Copies `name` from the model directory when it exists; returns whether it
/// did.
StatusOr<bool> copyIfPresent(const std::string &modelDir,
                             const std::string &outDir, StringRef name) {
  std::string from = joinPath(modelDir, name);
  if (!llvm::sys::fs::exists(from))
    return false;
  std::string to = joinPath(outDir, name);
  // `to` may be a link to `from` (or the file itself): copying would first
  // truncate the source. It already holds the contents.
  bool same = false;
  if (!llvm::sys::fs::equivalent(from, to, same) && same)
    return true;
  if (std::error_code error = llvm::sys::fs::copy_file(from, to))
    return invalidArgument("cannot copy " + from + " to " + to + ": " +
                           error.message());
  return true;
}

} // namespace

/// Writes kernels/ and returns the manifest's record of it.
static StatusOr<plan::KernelFiles>
writeKernels(const std::string &outDir, const GeneratedKernels &kernels) {
  const std::string dir = joinPath(outDir, "kernels");
  if (std::error_code error = llvm::sys::fs::create_directories(dir))
    return invalidArgument("cannot create " + dir + ": " + error.message());
  plan::KernelFiles files;
  files.source = "kernels/fused.cu";
  files.cubins[kernels.arch] = "kernels/fused." + kernels.arch + ".cubin";
  files.ptx = "kernels/fused.ptx";
  files.ptxArch = kernels.ptxArch;
  const std::pair<std::string, const std::string *> outputs[] = {
      {files.source, &kernels.source},
      {files.cubins[kernels.arch], &kernels.cubin},
      {files.ptx, &kernels.ptx}};
  for (const auto &[name, bytes] : outputs) {
    const std::string path = joinPath(outDir, name);
    std::error_code error;
    llvm::raw_fd_ostream os(path, error);
    if (error)
      return invalidArgument("cannot write " + path + ": " + error.message());
    os << *bytes;
    os.close();
    if (os.has_error())
      return dataLoss("error writing " + path + ": " + os.error().message());
  }
  return files;
}

StatusOr<plan::ModelInfo> readModelInfo(mlir::ModuleOp module) {
  auto dict = module->getAttrOfType<mlir::DictionaryAttr>(
      mlir::infer::InferDialect::kModelAttrName);
  if (!dict)
    return invalidArgument("the module has no '" +
                           mlir::infer::InferDialect::kModelAttrName.str() +
                           "' attribute");
  auto missing = [](StringRef key) {
    return invalidArgument("'infer.model' has no integer '" + key.str() + "'");
  };
  auto optionalInt = [&](StringRef key) -> std::optional<int64_t> {
    if (auto value = dict.getAs<mlir::IntegerAttr>(key))
      return value.getInt();
    return std::nullopt;
  };

  plan::ModelInfo info;
  auto architecture = dict.getAs<mlir::StringAttr>("architecture");
  if (!architecture)
    return invalidArgument("'infer.model' has no string 'architecture'");
  info.architecture = architecture.getValue().str();
  struct Field {
    StringRef key;
    int64_t *slot;
  };
  for (const Field &field :
       {Field{"vocab_size", &info.vocabSize},
        Field{"hidden_size", &info.hiddenSize},
        Field{"num_layers", &info.numLayers},
        Field{"num_heads", &info.numHeads},
        Field{"num_kv_heads", &info.numKVHeads},
        Field{"head_dim", &info.headDim},
        Field{"max_position_embeddings", &info.maxPositionEmbeddings}}) {
    std::optional<int64_t> value = optionalInt(field.key);
    if (!value)
      return missing(field.key);
    *field.slot = *value;
  }
  info.bosTokenId = optionalInt("bos_token_id");
  info.padTokenId = optionalInt("pad_token_id");
  if (auto eos = dict.getAs<mlir::ArrayAttr>("eos_token_ids")) {
    for (mlir::Attribute id : eos) {
      auto integer = mlir::dyn_cast<mlir::IntegerAttr>(id);
      if (!integer)
        return invalidArgument("'infer.model' eos_token_ids must be integers");
      info.eosTokenIds.push_back(integer.getInt());
    }
  }
  return info;
}

Status writeArtifact(const std::string &outDir,
                     const ArtifactContents &contents) {
  if (std::error_code error = llvm::sys::fs::create_directories(outDir))
    return invalidArgument("cannot create artifact directory " + outDir + ": " +
                           error.message());
  // Writing the artifact into the model directory would overwrite the
  // model's own files (its tokenizer copied onto itself ends up empty).
  bool same = false;
  if (!llvm::sys::fs::equivalent(outDir, contents.modelDir, same) && same)
    return invalidArgument("the artifact directory " + outDir +
                           " is the model directory " + contents.modelDir +
                           ": compile into another directory");

  plan::Manifest manifest;
  manifest.inferVersion = kInferVersion;
  INFER_ASSIGN_OR_RETURN(manifest.model, readModelInfo(contents.program));
  manifest.compileOptions = {
      {"target", contents.options.target},
      {"block_size", std::to_string(contents.options.blockSize)},
      {"dtype", contents.options.dtype},
      {"fuse", contents.options.fuse ? "true" : "false"},
      {"plan_memory", contents.options.planMemory ? "true" : "false"},
      {"tp", std::to_string(contents.options.tp)}};
  if (contents.options.quant != "none") {
    manifest.compileOptions["quant"] = contents.options.quant;
    manifest.compileOptions["quant_granularity"] =
        contents.options.quantGranularity;
  }
  if (contents.options.kvCacheDtype != "auto")
    manifest.compileOptions["kv_cache_dtype"] = contents.options.kvCacheDtype;
  if (contents.options.window > 0) {
    manifest.compileOptions["sink_tokens"] =
        std::to_string(contents.options.sinkTokens);
    manifest.compileOptions["window"] = std::to_string(contents.options.window);
  }
  manifest.numRanks = contents.plan->numRanks;
  manifest.targets = {contents.options.target};
  if (contents.kernels) {
    manifest.targets.push_back(contents.kernels->arch);
    manifest.targets.push_back(contents.kernels->ptxArch);
    INFER_ASSIGN_OR_RETURN(manifest.kernels,
                           writeKernels(outDir, *contents.kernels));
    manifest.compileOptions["cuda_arch"] = contents.kernels->arch;
  }
  manifest.kvCache = contents.plan->kvCache;
  manifest.weightsDir = contents.modelDir;
  INFER_ASSIGN_OR_RETURN(
      manifest.weightFiles,
      describeWeightFiles(contents.modelDir, *contents.tensorFiles));

  INFER_RETURN_IF_ERROR(writeTextFile(
      joinPath(outDir, manifest.programFile), [&](llvm::raw_ostream &os) {
        contents.program->print(os, mlir::OpPrintingFlags());
      }));
  INFER_RETURN_IF_ERROR(
      plan::writePlanFile(*contents.plan, joinPath(outDir, manifest.planFile)));

  INFER_ASSIGN_OR_RETURN(
      bool hasTokenizer,
      copyIfPresent(contents.modelDir, outDir, "tokenizer.json"));
  INFER_ASSIGN_OR_RETURN(
      bool hasTokenizerConfig,
      copyIfPresent(contents.modelDir, outDir, "tokenizer_config.json"));
  INFER_RETURN_IF_ERROR(
      copyIfPresent(contents.modelDir, outDir, "generation_config.json")
          .status());
  manifest.tokenizerFile = hasTokenizer ? "tokenizer.json" : "";
  manifest.tokenizerConfigFile =
      hasTokenizerConfig ? "tokenizer_config.json" : "";

  return plan::writeManifestFile(manifest, joinPath(outDir, "manifest.json"));
}

} // namespace infer::compiler
