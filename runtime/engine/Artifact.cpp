//===- Artifact.cpp - Loading a compiled artifact directory ---------------===//

#include "runtime/engine/Artifact.h"
#include "runtime/safetensors/Safetensors.h"

#include <algorithm>
#include <variant>

#include <sys/stat.h>

namespace infer {

static bool isFile(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

static std::string joinPath(const std::string &dir, const std::string &file) {
  if (file.empty() || file.front() == '/' || dir.empty())
    return file;
  return dir.back() == '/' ? dir + file : dir + "/" + file;
}

std::string Artifact::path(const std::string &file) const {
  return file.empty() ? std::string() : joinPath(dir, file);
}

bool isArtifactDir(const std::string &dir) {
  return isFile(joinPath(dir, "manifest.json"));
}

StatusOr<Artifact> loadArtifact(const std::string &dir) {
  Artifact artifact;
  artifact.dir = dir;
  if (!isArtifactDir(dir))
    return notFound(dir + " is not an artifact directory (no manifest.json)");
  INFER_ASSIGN_OR_RETURN(artifact.manifest, plan::readManifestFile(joinPath(
                                                dir, "manifest.json")));
  INFER_ASSIGN_OR_RETURN(artifact.plan, plan::readPlanFile(artifact.path(
                                            artifact.manifest.planFile)));
  if (artifact.plan.numRanks != artifact.manifest.numRanks)
    return invalidArgument(
        dir + ": the plan has " + std::to_string(artifact.plan.numRanks) +
        " ranks, the manifest " + std::to_string(artifact.manifest.numRanks));
  if (!(artifact.plan.kvCache == artifact.manifest.kvCache))
    return invalidArgument(dir + ": the KV-cache layout of the plan and the "
                                 "manifest differ");
  return artifact;
}

std::string weightsDirOf(const Artifact &artifact,
                         const std::string &override) {
  if (!override.empty())
    return override;
  return joinPath(artifact.dir, artifact.manifest.weightsDir);
}

static Status checkWeightFile(const plan::WeightFile &expected,
                              const std::string &weightsDir) {
  const std::string path = joinPath(weightsDir, expected.name);
  if (!isFile(path))
    return notFound("weight file " + path +
                    " is missing (pass --weights DIR to point at the model)");
  INFER_ASSIGN_OR_RETURN(safetensors::Header header,
                         safetensors::readHeader(path));
  struct stat st;
  ::stat(path.c_str(), &st);
  if (static_cast<uint64_t>(st.st_size) != expected.size)
    return dataLoss("weight file " + path + " has " +
                    std::to_string(st.st_size) +
                    " bytes, the artifact was "
                    "compiled against " +
                    std::to_string(expected.size));
  if (!expected.headerFingerprint.empty() &&
      plan::fingerprint(header.headerJson) != expected.headerFingerprint)
    return dataLoss("weight file " + path +
                    " has a different header than the artifact was compiled "
                    "against (fingerprint " +
                    plan::fingerprint(header.headerJson) + ", expected " +
                    expected.headerFingerprint + ")");
  return Status::ok();
}

/// `slice` (dim, begin, size): indices begin .. begin+size of dimension dim,
/// a tensor-parallel shard.
static StatusOr<std::shared_ptr<const HostTensor>>
sliceTensor(const HostTensor &source, const plan::WeightTransform &transform) {
  auto attr = [&](const char *name) -> StatusOr<int64_t> {
    auto it = transform.attrs.find(name);
    if (it == transform.attrs.end() ||
        !std::holds_alternative<int64_t>(it->second))
      return invalidArgument(std::string("slice transform needs an integer '") +
                             name + "'");
    return std::get<int64_t>(it->second);
  };
  INFER_ASSIGN_OR_RETURN(int64_t dim, attr("dim"));
  INFER_ASSIGN_OR_RETURN(int64_t begin, attr("begin"));
  INFER_ASSIGN_OR_RETURN(int64_t size, attr("size"));
  const int64_t rank = static_cast<int64_t>(source.shape.size());
  if (dim < 0 || dim >= rank || begin < 0 || size < 0 ||
      begin + size > source.shape[dim])
    return invalidArgument("slice {dim " + std::to_string(dim) + ", begin " +
                           std::to_string(begin) + ", size " +
                           std::to_string(size) + "} is outside the tensor");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= source.shape[d];
  for (int64_t d = dim + 1; d < rank; ++d)
    inner *= source.shape[d];
  auto result = std::make_shared<HostTensor>();
  result->shape = source.shape;
  result->shape[dim] = size;
  result->data.resize(static_cast<size_t>(outer * size * inner));
  for (int64_t o = 0; o < outer; ++o)
    std::copy_n(source.data.begin() + (o * source.shape[dim] + begin) * inner,
                size * inner, result->data.begin() + o * size * inner);
  return std::shared_ptr<const HostTensor>(std::move(result));
}

static StatusOr<std::shared_ptr<const HostTensor>>
applyTransforms(const plan::Value &v,
                std::shared_ptr<const HostTensor> tensor) {
  for (const plan::WeightTransform &transform : v.transforms) {
    if (transform.kind != "slice")
      return unimplemented("param '" + v.name +
                           "': unknown weight transform '" + transform.kind +
                           "'");
    StatusOr<std::shared_ptr<const HostTensor>> sliced =
        sliceTensor(*tensor, transform);
    if (!sliced.isOk())
      return sliced.status().withContext("param '" + v.name + "'");
    tensor = std::move(*sliced);
  }
  return tensor;
}

StatusOr<ParamTable> loadParams(const Artifact &artifact, int rank,
                                const std::string &weightsDir) {
  const plan::Plan &plan = artifact.plan;
  if (rank < 0 || rank >= static_cast<int>(plan.ranks.size()))
    return invalidArgument("rank " + std::to_string(rank) + " not in the plan");
  for (const plan::WeightFile &file : artifact.manifest.weightFiles)
    INFER_RETURN_IF_ERROR(checkWeightFile(file, weightsDir));

  std::map<std::string, std::unique_ptr<safetensors::File>> files;
  std::map<std::pair<std::string, std::string>,
           std::shared_ptr<const HostTensor>>
      loaded;
  ParamTable params;
  for (const plan::Value &v : plan.ranks[rank].values) {
    if (v.kind != plan::ValueKind::kParam)
      continue;
    auto key = std::make_pair(v.sourceFile, v.sourceTensor);
    std::vector<int64_t> shape;
    for (const plan::Dim &d : v.shape)
      shape.push_back(d.size);
    if (auto it = loaded.find(key); it != loaded.end()) {
      INFER_ASSIGN_OR_RETURN(params[v.id], applyTransforms(v, it->second));
      if (params[v.id]->shape != shape)
        return invalidArgument("param '" + v.name +
                               "': the transformed tensor has a different "
                               "shape than the plan");
      continue;
    }
    auto &file = files[v.sourceFile];
    if (!file) {
      INFER_ASSIGN_OR_RETURN(
          file, safetensors::File::open(joinPath(weightsDir, v.sourceFile)));
    }
    const safetensors::TensorInfo *info = file->header().find(v.sourceTensor);
    if (!info)
      return notFound("param '" + v.name + "': tensor '" + v.sourceTensor +
                      "' not found in " + file->path());
    auto tensor = std::make_shared<HostTensor>();
    tensor->shape = info->shape;
    INFER_ASSIGN_OR_RETURN(tensor->data, file->readAsF32(v.sourceTensor));
    loaded[key] = tensor;
    INFER_ASSIGN_OR_RETURN(params[v.id], applyTransforms(v, tensor));
    if (params[v.id]->shape != shape)
      return invalidArgument("param '" + v.name + "': tensor '" +
                             v.sourceTensor + "' in " + file->path() +
                             " has a different shape than the plan");
  }
  return params;
}

} // namespace infer
