//===- Artifact.cpp - Loading a compiled artifact directory ---------------===//

#include "runtime/engine/Artifact.h"
#include "runtime/backend/ParamSource.h"
#include "runtime/engine/Progress.h"
#include "runtime/safetensors/Safetensors.h"
#include "runtime/support/Fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <thread>
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

namespace {

/// A checkpoint file mapped for the views into it.
class CheckpointMapping : public HostMapping {
public:
  explicit CheckpointMapping(std::unique_ptr<safetensors::File> file)
      : file_(std::move(file)) {}
  const std::string &name() const override { return file_->path(); }
  const safetensors::File &file() const { return *file_; }

private:
  std::unique_ptr<safetensors::File> file_;
};

/// Maps each safetensors file of the weights directory once.
class WeightReader {
public:
  explicit WeightReader(std::string weightsDir)
      : weightsDir_(std::move(weightsDir)) {}

  /// A view of the whole tensor in its checkpoint dtype and shape (bf16,
  /// f16 or f32: the bytes are moved as they are, never converted here).
  StatusOr<SourceView> view(const std::string &file,
                            const std::string &tensor) {
    auto &opened = files_[file];
    if (!opened) {
      INFER_ASSIGN_OR_RETURN(
          std::unique_ptr<safetensors::File> mapped,
          safetensors::File::open(joinPath(weightsDir_, file)));
      opened = std::make_shared<const CheckpointMapping>(std::move(mapped));
    }
    const safetensors::File &mapped = opened->file();
    const safetensors::TensorInfo *info = mapped.header().find(tensor);
    if (!info)
      return notFound("tensor '" + tensor + "' not found in " + mapped.path());
    plan::DType dtype;
    switch (info->dtype) {
    case safetensors::DType::kBF16:
      dtype = plan::DType::kBF16;
      break;
    case safetensors::DType::kF16:
      dtype = plan::DType::kF16;
      break;
    case safetensors::DType::kF32:
      dtype = plan::DType::kF32;
      break;
    default:
      return invalidArgument(
          "tensor '" + tensor + "' in " + mapped.path() + " is " +
          std::string(safetensors::dtypeName(info->dtype)) +
          " (weights are read from F32, F16 or BF16 tensors)");
    }
    INFER_ASSIGN_OR_RETURN(std::string_view bytes, mapped.tensorBytes(tensor));
    return SourceView::contiguous(opened, bytes.data(), dtype, info->shape);
  }

private:
  std::string weightsDir_;
  std::map<std::string, std::shared_ptr<const CheckpointMapping>> files_;
};

/// A transform attribute as text, to tell transforms apart.
std::string formatAttr(const plan::AttrValue &value) {
  struct Format {
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return std::to_string(v); }
    std::string operator()(const std::string &v) const { return v; }
    std::string operator()(const std::vector<int64_t> &v) const {
      std::string text;
      for (int64_t x : v)
        text += std::to_string(x) + ",";
      return text;
    }
    std::string operator()(const std::vector<double> &v) const {
      std::string text;
      for (double x : v)
        text += std::to_string(x) + ",";
      return text;
    }
  };
  return std::visit(Format{}, value);
}

std::string formatShape(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

/// Checks that indices begin .. begin+size of dimension dim are inside
/// `shape`.
Status checkSlice(const std::vector<int64_t> &shape, int64_t dim, int64_t begin,
                  int64_t size) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  // begin > extent - size: begin + size could overflow.
  if (dim < 0 || dim >= rank || begin < 0 || size < 0 || size > shape[dim] ||
      begin > shape[dim] - size)
    return invalidArgument("slice {dim " + std::to_string(dim) + ", begin " +
                           std::to_string(begin) + ", size " +
                           std::to_string(size) + "} is outside shape " +
                           formatShape(shape));
  return Status::ok();
}

/// Narrows dimension dim of `view` to begin .. begin+size (checked).
void sliceView(SourceView &view, int64_t dim, int64_t begin, int64_t size) {
  view.data += begin * view.strides[dim] * plan::dtypeSize(view.dtype);
  view.shape[dim] = size;
}

/// Keeps indices begin .. begin+size of dimension dim of the concatenation
/// of `source`'s parts: rows of the parts for dimension 0, the same range
/// of every part for the others.
Status sliceSource(ParamSource &source, int64_t dim, int64_t begin,
                   int64_t size) {
  INFER_RETURN_IF_ERROR(checkSlice(source.shape, dim, begin, size));
  source.shape[dim] = size;
  if (dim > 0) {
    for (SourceView &part : source.parts)
      sliceView(part, dim, begin, size);
    return Status::ok();
  }
  std::vector<SourceView> kept;
  int64_t first = 0; // of the part, in the concatenation
  for (SourceView &part : source.parts) {
    const int64_t rows = part.shape[0];
    const int64_t from = std::max(begin, first);
    const int64_t to = std::min(begin + size, first + rows);
    if (from < to) {
      sliceView(part, 0, from - first, to - from);
      kept.push_back(std::move(part));
    }
    first += rows;
  }
  source.parts = std::move(kept);
  return Status::ok();
}

/// The integer attribute `name` of `transform`.
StatusOr<int64_t> intAttr(const plan::WeightTransform &transform,
                          const std::string &name) {
  auto it = transform.attrs.find(name);
  if (it == transform.attrs.end() ||
      !std::holds_alternative<int64_t>(it->second))
    return invalidArgument(transform.kind + " needs an integer '" + name +
                           "' attribute");
  return std::get<int64_t>(it->second);
}

/// `slice` (dim, begin, size): indices begin .. begin+size of dimension dim,
/// a tensor-parallel shard.
Status applySlice(const plan::WeightTransform &transform, ParamSource &source) {
  INFER_ASSIGN_OR_RETURN(int64_t dim, intAttr(transform, "dim"));
  INFER_ASSIGN_OR_RETURN(int64_t begin, intAttr(transform, "begin"));
  INFER_ASSIGN_OR_RETURN(int64_t size, intAttr(transform, "size"));
  return sliceSource(source, dim, begin, size);
}

/// `concat`: appends another checkpoint tensor along axis 0, first sliced by
/// slice_dim, slice_begin, slice_size when it has them (a tensor-parallel
/// shard of a merged projection).
Status applyConcat(const plan::WeightTransform &transform, WeightReader &reader,
                   ParamSource &source) {
  auto attr = [&](const char *name) -> const plan::AttrValue * {
    auto it = transform.attrs.find(name);
    return it == transform.attrs.end() ? nullptr : &it->second;
  };
  const auto *axis =
      attr("axis") ? std::get_if<int64_t>(attr("axis")) : nullptr;
  const auto *file = attr("source_file")
                         ? std::get_if<std::string>(attr("source_file"))
                         : nullptr;
  const auto *name = attr("source_tensor")
                         ? std::get_if<std::string>(attr("source_tensor"))
                         : nullptr;
  if (!axis || !file || !name)
    return invalidArgument("concat needs integer 'axis' and string "
                           "'source_file' and 'source_tensor' attributes");
  if (*axis != 0)
    return unimplemented("concat along axis " + std::to_string(*axis) +
                         " (only 0)");
  INFER_ASSIGN_OR_RETURN(SourceView part, reader.view(*file, *name));
  if (transform.attrs.count("slice_dim")) {
    INFER_ASSIGN_OR_RETURN(int64_t dim, intAttr(transform, "slice_dim"));
    INFER_ASSIGN_OR_RETURN(int64_t begin, intAttr(transform, "slice_begin"));
    INFER_ASSIGN_OR_RETURN(int64_t size, intAttr(transform, "slice_size"));
    INFER_RETURN_IF_ERROR(checkSlice(part.shape, dim, begin, size)
                              .withContext("'" + *name + "'"));
    sliceView(part, dim, begin, size);
  }
  if (part.shape.empty() || part.shape.size() != source.shape.size() ||
      !std::equal(part.shape.begin() + 1, part.shape.end(),
                  source.shape.begin() + 1))
    return invalidArgument("cannot concatenate '" + *name + "' of shape " +
                           formatShape(part.shape) + " to shape " +
                           formatShape(source.shape) + " along axis 0");
  source.shape[0] += part.shape[0];
  // Parts of one 16-bit type stay 16-bit; otherwise both widen to fp32.
  if (part.dtype != source.gatherDType)
    source.gatherDType = plan::DType::kF32;
  source.parts.push_back(std::move(part));
  return Status::ok();
}

/// `quantize_fp8_e4m3` (granularity "per-tensor" | "per-channel", parts):
/// records the groups of rows that share a scale; the codes are made where
/// the param is materialized (quantizeOnHost here, or on the device).
Status applyQuantize(const plan::WeightTransform &transform,
                     ParamSource &source) {
  INFER_RETURN_IF_ERROR(checkFp8Granularity(transform));
  if (source.shape.size() != 2)
    return invalidArgument("quantize_fp8_e4m3 needs a 2-D tensor, got " +
                           formatShape(source.shape));
  INFER_ASSIGN_OR_RETURN(source.quantizeGroups,
                         fp8QuantizeGroups(transform, source.shape[0]));
  source.quantize = true;
  return Status::ok();
}

/// Calls fn(first, last) over ranges of [0, rows) on up to 16 threads when
/// the tensor is large enough to pay for them, else once on this thread.
void forEachRowRange(int64_t rows, int64_t cols,
                     const std::function<void(int64_t, int64_t)> &fn) {
  const int64_t threads =
      std::min<int64_t>({16, std::max(1u, std::thread::hardware_concurrency()),
                         std::max<int64_t>(1, rows * cols / (1 << 20))});
  if (threads <= 1) {
    fn(0, rows);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t chunk = (rows + threads - 1) / threads;
  for (int64_t first = 0; first < rows; first += chunk)
    pool.emplace_back(fn, first, std::min(rows, first + chunk));
  for (std::thread &t : pool)
    t.join();
}

/// Replaces the elements of a 2-D tensor by FP8 E4M3 codes with scale =
/// amax / 448 over each group of rows (fp8RowScales). Every row gets its
/// scale, so a backend reads decode(code) * rowScales[row] whatever the
/// granularity.
Status quantizeOnHost(const std::vector<int64_t> &groups, HostTensor &tensor) {
  if (!tensor.bits16.empty()) {
    tensor.data = tensor.toFloat();
    tensor.bits16 = std::vector<uint16_t>();
  }
  const int64_t rows = tensor.shape[0], cols = tensor.shape[1];
  // Each row's amax, then each group's scale, then the codes; rows are
  // spread over threads (a Llama-3-8B checkpoint is 7.5e9 elements), which
  // changes no result.
  std::vector<float> rowAmax(static_cast<size_t>(rows));
  forEachRowRange(rows, cols, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      float amax = 0.0f;
      const float *x = tensor.data.data() + r * cols;
      for (int64_t c = 0; c < cols; ++c)
        amax = std::isnan(amax) || std::isnan(x[c])
                   ? NAN
                   : std::max(amax, std::fabs(x[c]));
      rowAmax[static_cast<size_t>(r)] = amax;
    }
  });
  INFER_ASSIGN_OR_RETURN(tensor.rowScales, fp8RowScales(groups, rowAmax));
  tensor.fp8Codes.resize(tensor.data.size());
  forEachRowRange(rows, cols, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const float scale = tensor.rowScales[static_cast<size_t>(r)];
      const float *x = tensor.data.data() + r * cols;
      uint8_t *codes = tensor.fp8Codes.data() + r * cols;
      for (int64_t c = 0; c < cols; ++c)
        codes[c] =
            scale == 0.0f ? 0 : encodeFp8(x[c] / scale, Fp8Format::kE4M3);
    }
  });
  tensor.data = std::vector<float>();
  tensor.dtype = plan::DType::kF8E4M3;
  return Status::ok();
}

/// Views a param's source tensors through its transforms and checks the
/// result against the plan value: no element is read yet.
StatusOr<ParamSource> planParam(const plan::Value &v, WeightReader &reader) {
  ParamSource source;
  INFER_ASSIGN_OR_RETURN(SourceView first,
                         reader.view(v.sourceFile, v.sourceTensor));
  source.shape = first.shape;
  source.gatherDType = first.dtype;
  source.parts.push_back(std::move(first));
  for (const plan::WeightTransform &transform : v.transforms) {
    if (source.quantize)
      return invalidArgument("quantize_fp8_e4m3 must be the last transform");
    if (transform.kind == "concat")
      INFER_RETURN_IF_ERROR(
          applyConcat(transform, reader, source).withContext("concat"));
    else if (transform.kind == "slice")
      INFER_RETURN_IF_ERROR(applySlice(transform, source).withContext("slice"));
    else if (transform.kind == "quantize_fp8_e4m3")
      INFER_RETURN_IF_ERROR(
          applyQuantize(transform, source).withContext("quantize_fp8_e4m3"));
    else
      return unimplemented("unknown weight transform '" + transform.kind + "'");
  }
  std::vector<int64_t> shape;
  for (const plan::Dim &d : v.shape)
    shape.push_back(d.size);
  if (source.shape != shape)
    return invalidArgument(
        "tensor '" + v.sourceTensor + "' in " + v.sourceFile + " has shape " +
        formatShape(source.shape) +
        (v.transforms.empty() ? "" : " after its transforms") +
        ", the plan expects " + formatShape(shape));
  source.dtype = source.quantize ? plan::DType::kF8E4M3 : v.dtype;
  return source;
}

/// The param's elements on the host: gathered, then quantized or rounded to
/// its dtype.
StatusOr<HostTensor> materializeOnHost(const ParamSource &source) {
  HostTensor tensor = source.gatherToHost();
  if (source.quantize)
    INFER_RETURN_IF_ERROR(quantizeOnHost(source.quantizeGroups, tensor)
                              .withContext("quantize_fp8_e4m3"));
  else
    castHostTensor(tensor, source.dtype);
  return tensor;
}

} // namespace

Status applyQuantizeFp8(const plan::WeightTransform &transform,
                        HostTensor &tensor) {
  INFER_RETURN_IF_ERROR(checkFp8Granularity(transform));
  if (tensor.shape.size() != 2)
    return invalidArgument("quantize_fp8_e4m3 needs a 2-D tensor, got " +
                           formatShape(tensor.shape));
  INFER_ASSIGN_OR_RETURN(std::vector<int64_t> groups,
                         fp8QuantizeGroups(transform, tensor.shape[0]));
  castHostTensor(tensor, plan::DType::kF32);
  return quantizeOnHost(groups, tensor);
}

/// Bytes of a param as loaded: its elements, and an fp8 param's row scales.
static uint64_t paramBytes(const plan::Value &v) {
  int64_t elements = 1;
  for (const plan::Dim &d : v.shape)
    elements *= d.size;
  const int64_t scales = v.dtype == plan::DType::kF8E4M3 && !v.shape.empty()
                             ? v.shape[0].size * 4
                             : 0;
  return static_cast<uint64_t>(elements * plan::dtypeSize(v.dtype) + scales);
}

std::string paramLoadKey(const plan::Value &v) {
  // The same tensor may load both plain and quantized (a tied embedding
  // table and LM head), so the key names the transforms.
  std::string key = v.sourceFile + "\n" + v.sourceTensor + "\n" +
                    std::string(plan::dtypeName(v.dtype));
  for (const plan::WeightTransform &transform : v.transforms) {
    key += "\n" + transform.kind;
    for (const auto &[name, value] : transform.attrs)
      key += " " + name + "=" + formatAttr(value);
  }
  return key;
}

/// Calls fn with the source of each distinct param of the rank (the first
/// value of each paramLoadKey, in plan order), after checking the weight
/// files.
static Status forEachParamSource(
    const Artifact &artifact, int rank, const std::string &weightsDir,
    const std::function<Status(const plan::Value &, ParamSource)> &fn) {
  const plan::Plan &plan = artifact.plan;
  if (rank < 0 || rank >= static_cast<int>(plan.ranks.size()))
    return invalidArgument("rank " + std::to_string(rank) + " not in the plan");
  for (const plan::WeightFile &file : artifact.manifest.weightFiles)
    INFER_RETURN_IF_ERROR(checkWeightFile(file, weightsDir));

  WeightReader reader(weightsDir);
  std::set<std::string> seen;
  for (const plan::Value &v : plan.ranks[rank].values) {
    if (v.kind != plan::ValueKind::kParam ||
        !seen.insert(paramLoadKey(v)).second)
      continue;
    StatusOr<ParamSource> source = planParam(v, reader);
    if (!source.isOk())
      return source.status().withContext("param '" + v.name + "'");
    INFER_RETURN_IF_ERROR(fn(v, std::move(*source)));
  }
  return Status::ok();
}

Status
forEachParam(const Artifact &artifact, int rank, const std::string &weightsDir,
             const std::function<Status(const plan::Value &, HostTensor)> &fn,
             const ParamMaterializer &materialize) {
  return forEachParamSource(
      artifact, rank, weightsDir,
      [&](const plan::Value &v, ParamSource source) -> Status {
        StatusOr<HostTensor> tensor =
            materialize ? materialize(v, source) : materializeOnHost(source);
        if (!tensor.isOk())
          return tensor.status().withContext("param '" + v.name + "'");
        return fn(v, std::move(*tensor));
      });
}

StatusOr<ParamTable> loadDeferredParams(const Artifact &artifact, int rank,
                                        const std::string &weightsDir) {
  std::map<std::string, std::shared_ptr<const HostTensor>> loaded;
  INFER_RETURN_IF_ERROR(forEachParamSource(
      artifact, rank, weightsDir,
      [&](const plan::Value &v, ParamSource source) {
        auto tensor = std::make_shared<HostTensor>();
        tensor->dtype = source.dtype;
        tensor->shape = source.shape;
        tensor->source = std::make_shared<const ParamSource>(std::move(source));
        loaded[paramLoadKey(v)] = std::move(tensor);
        return Status::ok();
      }));
  ParamTable params;
  for (const plan::Value &v : artifact.plan.ranks[rank].values)
    if (v.kind == plan::ValueKind::kParam)
      params[v.id] = loaded.at(paramLoadKey(v));
  return params;
}

StatusOr<ParamTable> loadParams(const Artifact &artifact, int rank,
                                const std::string &weightsDir,
                                bool showProgress) {
  uint64_t total = 0;
  if (showProgress && rank >= 0 &&
      rank < static_cast<int>(artifact.plan.ranks.size())) {
    std::set<std::string> keys;
    for (const plan::Value &v : artifact.plan.ranks[rank].values)
      if (v.kind == plan::ValueKind::kParam &&
          keys.insert(paramLoadKey(v)).second)
        total += paramBytes(v);
  }
  Progress progress("loading weights of rank " + std::to_string(rank), total,
                    showProgress);
  // Values that read the same tensor through the same transforms share
  // its data.
  std::map<std::string, std::shared_ptr<const HostTensor>> loaded;
  INFER_RETURN_IF_ERROR(forEachParam(
      artifact, rank, weightsDir, [&](const plan::Value &v, HostTensor tensor) {
        progress.advance(paramBytes(v));
        loaded[paramLoadKey(v)] =
            std::make_shared<const HostTensor>(std::move(tensor));
        return Status::ok();
      }));
  progress.finish();
  ParamTable params;
  for (const plan::Value &v : artifact.plan.ranks[rank].values)
    if (v.kind == plan::ValueKind::kParam)
      params[v.id] = loaded.at(paramLoadKey(v));
  return params;
}

} // namespace infer
