//===- PackedWeights.cpp - Per-rank weight files inside an artifact -------===//

#include "runtime/engine/PackedWeights.h"
#include "runtime/engine/Progress.h"
#include "runtime/safetensors/Safetensors.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <sys/stat.h>

namespace infer {

namespace {

using nlohmann::json;

constexpr const char *kFormat = "infer-packed-weights";
constexpr const char *kScalesSuffix = ".row_scales";
constexpr const char *kPaddingPrefix = "__padding__.";
/// Hashes cover blocks of this many bytes (hashed in parallel).
constexpr uint64_t kHashBlock = 64ull << 20;
constexpr const char *kHashScheme = "xxh3-64/64MiB:";

std::string rankFileName(int rank) {
  return "weights/rank" + std::to_string(rank) + ".safetensors";
}

uint64_t alignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

std::vector<int64_t> shapeOf(const plan::Value &v) {
  std::vector<int64_t> shape;
  for (const plan::Dim &d : v.shape)
    shape.push_back(d.size);
  return shape;
}

StatusOr<safetensors::DType> fileDType(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::kF32:
    return safetensors::DType::kF32;
  case plan::DType::kBF16:
    return safetensors::DType::kBF16;
  case plan::DType::kF16:
    return safetensors::DType::kF16;
  case plan::DType::kF8E4M3:
    return safetensors::DType::kF8E4M3;
  default:
    return invalidArgument("a param of dtype " +
                           std::string(plan::dtypeName(dtype)) +
                           " cannot be packed");
  }
}

std::string hashOfBlockHashes(const std::vector<uint64_t> &blocks) {
  std::vector<uint8_t> bytes(blocks.size() * 8);
  for (size_t i = 0; i < blocks.size(); ++i)
    for (int b = 0; b < 8; ++b)
      bytes[i * 8 + b] = static_cast<uint8_t>(blocks[i] >> (8 * b));
  char hex[17];
  std::snprintf(
      hex, sizeof(hex), "%016llx",
      static_cast<unsigned long long>(XXH3_64bits(bytes.data(), bytes.size())));
  return kHashScheme + std::string(hex);
}

/// packedFileHash of bytes that arrive in order (the file being written).
class BlockHasher {
public:
  BlockHasher() : state_(XXH3_createState()) { XXH3_64bits_reset(state_); }
  ~BlockHasher() { XXH3_freeState(state_); }
  BlockHasher(const BlockHasher &) = delete;
  BlockHasher &operator=(const BlockHasher &) = delete;

  void update(const char *data, uint64_t size) {
    while (size > 0) {
      const uint64_t take = std::min(size, kHashBlock - inBlock_);
      XXH3_64bits_update(state_, data, take);
      data += take;
      size -= take;
      inBlock_ += take;
      if (inBlock_ == kHashBlock)
        endBlock();
    }
  }
  std::string finish() {
    if (inBlock_ > 0)
      endBlock();
    return hashOfBlockHashes(blocks_);
  }

private:
  void endBlock() {
    blocks_.push_back(XXH3_64bits_digest(state_));
    XXH3_64bits_reset(state_);
    inBlock_ = 0;
  }
  XXH3_state_t *state_;
  uint64_t inBlock_ = 0;
  std::vector<uint64_t> blocks_;
};

/// One tensor of a packed file: a param's elements or an fp8 param's row
/// scales, at `offset` in the data section.
struct PackedEntry {
  std::string name;
  safetensors::DType dtype;
  std::vector<int64_t> shape;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

/// A rank's packed file before it is written: every entry in the order
/// forEachParam yields the params, and the header.
struct PackedLayout {
  std::vector<PackedEntry> entries;
  /// paramLoadKey -> index of the param's element entry (its scales follow).
  std::map<std::string, size_t> entryOfKey;
  uint64_t dataBytes = 0;
  std::string header; ///< padded: the data section starts aligned
};

StatusOr<PackedLayout> layoutRank(const plan::RankPlan &rank) {
  PackedLayout layout;
  const std::map<int, std::string> names = packedTensorNames(rank);
  auto add = [&](PackedEntry entry) {
    entry.offset = alignUp(layout.dataBytes, kPackedTensorAlignment);
    layout.dataBytes = entry.offset + entry.bytes;
    layout.entries.push_back(std::move(entry));
  };
  for (const plan::Value &v : rank.values) {
    if (v.kind != plan::ValueKind::kParam)
      continue;
    const std::string key = paramLoadKey(v);
    if (layout.entryOfKey.count(key))
      continue;
    layout.entryOfKey[key] = layout.entries.size();
    INFER_ASSIGN_OR_RETURN(safetensors::DType dtype, fileDType(v.dtype));
    PackedEntry elements{names.at(v.id), dtype, shapeOf(v)};
    int64_t count = 1;
    for (int64_t d : elements.shape)
      count *= d;
    elements.bytes = static_cast<uint64_t>(count * plan::dtypeSize(v.dtype));
    add(elements);
    if (v.dtype == plan::DType::kF8E4M3) {
      PackedEntry scales{names.at(v.id) + kScalesSuffix,
                         safetensors::DType::kF32,
                         {elements.shape.at(0)}};
      scales.bytes = static_cast<uint64_t>(elements.shape[0]) * sizeof(float);
      add(scales);
    }
  }

  json header = json::object();
  header["__metadata__"] = {{"format", kFormat},
                            {"rank", std::to_string(rank.rank)}};
  uint64_t end = 0;
  int paddings = 0;
  for (const PackedEntry &e : layout.entries) {
    if (e.offset > end)
      header[kPaddingPrefix + std::to_string(paddings++)] = {
          {"dtype", "U8"},
          {"shape", {e.offset - end}},
          {"data_offsets", {end, e.offset}}};
    header[e.name] = {{"dtype", std::string(safetensors::dtypeName(e.dtype))},
                      {"shape", e.shape},
                      {"data_offsets", {e.offset, e.offset + e.bytes}}};
    end = e.offset + e.bytes;
  }
  layout.header = header.dump();
  const uint64_t dataStart =
      alignUp(8 + layout.header.size(), kPackedDataAlignment);
  layout.header.append(dataStart - 8 - layout.header.size(), ' ');
  return layout;
}

/// Sequential output that hashes what it writes.
class PackedWriter {
public:
  Status open(const std::string &path) {
    path_ = path;
    out_.open(path, std::ios::binary | std::ios::trunc);
    if (!out_)
      return notFound("cannot open '" + path + "' for writing");
    return Status::ok();
  }
  void write(const char *data, uint64_t size) {
    out_.write(data, static_cast<std::streamsize>(size));
    hasher_.update(data, size);
    position_ += size;
  }
  Status padTo(uint64_t position) {
    if (position < position_)
      return internalError(path_ + ": packed tensors out of order");
    static const char zeros[kPackedTensorAlignment] = {};
    while (position_ < position)
      write(zeros, std::min<uint64_t>(position - position_, sizeof(zeros)));
    return Status::ok();
  }
  StatusOr<plan::PackedWeightFile> close(int rank, const std::string &file) {
    out_.close();
    if (!out_)
      return dataLoss("failed to write '" + path_ + "'");
    return plan::PackedWeightFile{rank, file, position_, hasher_.finish()};
  }

private:
  std::string path_;
  std::ofstream out_;
  BlockHasher hasher_;
  uint64_t position_ = 0;
};

/// Writes one rank's packed file to `path`.
StatusOr<plan::PackedWeightFile> packRank(const Artifact &artifact, int rank,
                                          const std::string &weightsDir,
                                          const std::string &path,
                                          const ParamMaterializer &materialize,
                                          Progress &progress) {
  INFER_ASSIGN_OR_RETURN(PackedLayout layout,
                         layoutRank(artifact.plan.ranks.at(rank)));
  PackedWriter writer;
  INFER_RETURN_IF_ERROR(writer.open(path));
  char prefix[8];
  for (int i = 0; i < 8; ++i)
    prefix[i] = static_cast<char>((layout.header.size() >> (8 * i)) & 0xff);
  writer.write(prefix, 8);
  writer.write(layout.header.data(), layout.header.size());
  const uint64_t dataStart = 8 + layout.header.size();
  INFER_RETURN_IF_ERROR(forEachParam(
      artifact, rank, weightsDir,
      [&](const plan::Value &v, HostTensor tensor) -> Status {
        const size_t index = layout.entryOfKey.at(paramLoadKey(v));
        const PackedEntry &entry = layout.entries[index];
        if (tensor.dtype != v.dtype || !tensor.consistent() ||
            tensor.shape != entry.shape)
          return internalError("param '" + v.name +
                               "' loaded in another dtype or shape than "
                               "its plan value");
        INFER_RETURN_IF_ERROR(writer.padTo(dataStart + entry.offset));
        const void *elements = tensor.isFp8()
                                   ? static_cast<const void *>(tensor.fp8Data())
                               : tensor.dtype == plan::DType::kF32
                                   ? static_cast<const void *>(tensor.f32Data())
                                   : tensor.bits16Data();
        writer.write(static_cast<const char *>(elements), entry.bytes);
        progress.advance(entry.bytes);
        if (tensor.isFp8()) {
          const PackedEntry &scales = layout.entries[index + 1];
          INFER_RETURN_IF_ERROR(writer.padTo(dataStart + scales.offset));
          writer.write(reinterpret_cast<const char *>(tensor.rowScaleData()),
                       scales.bytes);
          progress.advance(scales.bytes);
        }
        return Status::ok();
      },
      materialize));
  return writer.close(rank, rankFileName(rank));
}

/// The mapped packed file the tensors of a rank view.
class PackedMapping : public HostMapping {
public:
  explicit PackedMapping(std::unique_ptr<safetensors::File> file)
      : file_(std::move(file)) {}
  const std::string &name() const override { return file_->path(); }
  const safetensors::File &file() const { return *file_; }

private:
  std::unique_ptr<safetensors::File> file_;
};

/// The tensor `name` of the packed file, checked to be `dtype` of `shape`
/// and aligned for its elements.
StatusOr<const char *> packedTensor(const safetensors::File &file,
                                    const std::string &name,
                                    safetensors::DType dtype,
                                    const std::vector<int64_t> &shape) {
  const safetensors::TensorInfo *info = file.header().find(name);
  if (!info)
    return dataLoss(file.path() + ": no tensor '" + name + "'");
  if (info->dtype != dtype || info->shape != shape)
    return dataLoss(file.path() + ": tensor '" + name + "' is not " +
                    std::string(safetensors::dtypeName(dtype)) +
                    " of the plan's shape");
  INFER_ASSIGN_OR_RETURN(std::string_view bytes, file.tensorBytes(name));
  if (reinterpret_cast<uintptr_t>(bytes.data()) %
          static_cast<uintptr_t>(safetensors::dtypeSize(dtype)) !=
      0)
    return dataLoss(file.path() + ": tensor '" + name +
                    "' is not aligned for its elements");
  return bytes.data();
}

} // namespace

std::map<int, std::string> packedTensorNames(const plan::RankPlan &rank) {
  std::map<int, std::string> names;
  std::map<std::string, std::string> nameOfKey;
  std::set<std::string> used;
  for (const plan::Value &v : rank.values) {
    if (v.kind != plan::ValueKind::kParam)
      continue;
    const std::string key = paramLoadKey(v);
    auto it = nameOfKey.find(key);
    if (it == nameOfKey.end()) {
      std::string name = v.name;
      if (used.count(name) || used.count(name + kScalesSuffix) ||
          name.rfind(kPaddingPrefix, 0) == 0 || name == "__metadata__")
        name = v.name + "@" + std::to_string(v.id);
      used.insert(name);
      used.insert(name + kScalesSuffix);
      it = nameOfKey.emplace(key, name).first;
    }
    names[v.id] = it->second;
  }
  return names;
}

std::string packedFileHash(std::string_view bytes) {
  const uint64_t blocks = (bytes.size() + kHashBlock - 1) / kHashBlock;
  std::vector<uint64_t> hashes(blocks);
  const uint64_t threads = std::min<uint64_t>(
      {blocks, 16, std::max(1u, std::thread::hardware_concurrency())});
  auto hashBlocks = [&](uint64_t first) {
    for (uint64_t b = first; b < blocks; b += threads) {
      const uint64_t begin = b * kHashBlock;
      hashes[b] =
          XXH3_64bits(bytes.data() + begin,
                      std::min<uint64_t>(kHashBlock, bytes.size() - begin));
    }
  };
  std::vector<std::thread> pool;
  for (uint64_t t = 1; t < threads; ++t)
    pool.emplace_back(hashBlocks, t);
  if (threads > 0)
    hashBlocks(0);
  for (std::thread &t : pool)
    t.join();
  return hashOfBlockHashes(hashes);
}

Status rewriteManifest(const std::string &artifactDir,
                       const plan::Manifest &manifest) {
  const std::string path = artifactDir + "/manifest.json";
  const std::string temporary = path + ".tmp";
  INFER_RETURN_IF_ERROR(plan::writeManifestFile(manifest, temporary));
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    return dataLoss("cannot replace " + path + ": " + std::strerror(errno));
  return Status::ok();
}

Status packArtifact(const std::string &artifactDir,
                    const PackOptions &options) {
  INFER_ASSIGN_OR_RETURN(Artifact artifact, loadArtifact(artifactDir));
  const std::string weightsDir = weightsDirOf(artifact, options.weightsDir);
  std::error_code error;
  std::filesystem::create_directories(artifact.path("weights"), error);
  if (error)
    return invalidArgument("cannot create " + artifact.path("weights") + ": " +
                           error.message());
  uint64_t total = 0;
  for (const plan::RankPlan &rank : artifact.plan.ranks) {
    INFER_ASSIGN_OR_RETURN(PackedLayout layout, layoutRank(rank));
    total += layout.dataBytes;
  }
  Progress progress("packing weights", total, options.showProgress);
  std::vector<plan::PackedWeightFile> files;
  for (int rank = 0; rank < artifact.plan.numRanks; ++rank) {
    const std::string path = artifact.path(rankFileName(rank)) + ".tmp";
    StatusOr<plan::PackedWeightFile> file = packRank(
        artifact, rank, weightsDir, path, options.materialize, progress);
    if (!file.isOk()) {
      std::filesystem::remove(path, error);
      return file.status().withContext("packing rank " + std::to_string(rank));
    }
    files.push_back(std::move(*file));
  }
  progress.finish();
  for (const plan::PackedWeightFile &file : files) {
    const std::string path = artifact.path(file.file);
    if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0)
      return dataLoss("cannot write " + path + ": " + std::strerror(errno));
  }
  artifact.manifest.packedWeights = std::move(files);
  return rewriteManifest(artifactDir, artifact.manifest);
}

StatusOr<ParamTable> loadPackedParams(const Artifact &artifact, int rank,
                                      bool verifyHash) {
  const plan::Plan &plan = artifact.plan;
  if (rank < 0 || rank >= static_cast<int>(plan.ranks.size()))
    return invalidArgument("rank " + std::to_string(rank) + " not in the plan");
  auto entry = std::find_if(
      artifact.manifest.packedWeights.begin(),
      artifact.manifest.packedWeights.end(),
      [&](const plan::PackedWeightFile &f) { return f.rank == rank; });
  if (entry == artifact.manifest.packedWeights.end())
    return notFound(artifact.dir +
                    ": the manifest lists no packed weights "
                    "of rank " +
                    std::to_string(rank));
  const std::string path = artifact.path(entry->file);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return notFound("packed weight file " + path + " is missing");
  if (static_cast<uint64_t>(st.st_size) != entry->size)
    return dataLoss("packed weight file " + path + " has " +
                    std::to_string(st.st_size) + " bytes, the manifest " +
                    "records " + std::to_string(entry->size) +
                    " (truncated or replaced)");
  if (entry->hash.rfind(kHashScheme, 0) != 0)
    return invalidArgument(artifact.dir + ": unknown hash '" + entry->hash +
                           "' of " + entry->file + " (expected " + kHashScheme +
                           "...)");
  INFER_ASSIGN_OR_RETURN(std::unique_ptr<safetensors::File> file,
                         safetensors::File::open(path));
  if (verifyHash) {
    const std::string hash = packedFileHash(file->bytes());
    if (hash != entry->hash)
      return dataLoss("packed weight file " + path +
                      " does not match the manifest's content hash (" + hash +
                      ", expected " + entry->hash +
                      "): it was modified or belongs to another artifact "
                      "(--skip-weight-check skips this check)");
  }
  const std::map<std::string, std::string> &metadata = file->header().metadata;
  auto format = metadata.find("format");
  auto fileRank = metadata.find("rank");
  if (format == metadata.end() || format->second != kFormat ||
      fileRank == metadata.end())
    return dataLoss(path + " is not a packed weight file");
  if (fileRank->second != std::to_string(rank))
    return dataLoss(path + " holds the weights of rank " + fileRank->second +
                    ", expected rank " + std::to_string(rank));

  auto mapping = std::make_shared<const PackedMapping>(std::move(file));
  const safetensors::File &mapped = mapping->file();
  const std::map<int, std::string> names = packedTensorNames(plan.ranks[rank]);
  std::map<std::string, std::shared_ptr<const HostTensor>> byName;
  ParamTable params;
  for (const plan::Value &v : plan.ranks[rank].values) {
    if (v.kind != plan::ValueKind::kParam)
      continue;
    const std::string &name = names.at(v.id);
    if (auto it = byName.find(name); it != byName.end()) {
      params[v.id] = it->second;
      continue;
    }
    auto tensor = std::make_shared<HostTensor>();
    tensor->dtype = v.dtype;
    tensor->shape = shapeOf(v);
    tensor->mapping = mapping;
    INFER_ASSIGN_OR_RETURN(safetensors::DType dtype, fileDType(v.dtype));
    INFER_ASSIGN_OR_RETURN(tensor->mappedElements,
                           packedTensor(mapped, name, dtype, tensor->shape));
    if (tensor->isFp8()) {
      INFER_ASSIGN_OR_RETURN(const char *scales,
                             packedTensor(mapped, name + kScalesSuffix,
                                          safetensors::DType::kF32,
                                          {tensor->shape.at(0)}));
      tensor->mappedRowScales = reinterpret_cast<const float *>(scales);
    }
    byName[name] = tensor;
    params[v.id] = std::move(tensor);
  }
  return params;
}

StatusOr<ParamTable> loadRankParams(const Artifact &artifact, int rank,
                                    const WeightLoadOptions &options) {
  if ((artifact.manifest.packedWeights.empty() ||
       !options.weightsDirOverride.empty()) &&
      options.deferTransforms)
    return loadDeferredParams(
        artifact, rank, weightsDirOf(artifact, options.weightsDirOverride));
  if (artifact.manifest.packedWeights.empty() ||
      !options.weightsDirOverride.empty())
    return loadParams(artifact, rank,
                      weightsDirOf(artifact, options.weightsDirOverride),
                      options.showProgress);
  // Mapping is instant; the time goes to the hash (in parallel blocks).
  const auto &files = artifact.manifest.packedWeights;
  auto entry = std::find_if(
      files.begin(), files.end(),
      [&](const plan::PackedWeightFile &f) { return f.rank == rank; });
  Progress progress(std::string(options.verifyHash ? "checking" : "mapping") +
                        " packed weights of rank " + std::to_string(rank),
                    entry == files.end() ? 0 : entry->size,
                    options.showProgress);
  StatusOr<ParamTable> params =
      loadPackedParams(artifact, rank, options.verifyHash);
  if (params.isOk())
    progress.finish();
  return params;
}

} // namespace infer
