//===- Artifact.cpp - Loading a compiled artifact directory ---------------===//

#include "runtime/engine/Artifact.h"
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

/// Opens each safetensors file of the weights directory once.
class WeightReader {
public:
  explicit WeightReader(std::string weightsDir)
      : weightsDir_(std::move(weightsDir)) {}

  /// The tensor with its checkpoint shape: a bf16 or f16 tensor as its
  /// bit patterns (no fp32 detour: slices and concatenations move them as
  /// they are), any other as fp32.
  StatusOr<HostTensor> read(const std::string &file,
                            const std::string &tensor) {
    auto &opened = files_[file];
    if (!opened) {
      INFER_ASSIGN_OR_RETURN(
          opened, safetensors::File::open(joinPath(weightsDir_, file)));
    }
    const safetensors::TensorInfo *info = opened->header().find(tensor);
    if (!info)
      return notFound("tensor '" + tensor + "' not found in " + opened->path());
    HostTensor result;
    result.shape = info->shape;
    if (info->dtype == safetensors::DType::kBF16 ||
        info->dtype == safetensors::DType::kF16) {
      INFER_ASSIGN_OR_RETURN(std::string_view bytes,
                             opened->tensorBytes(tensor));
      result.dtype = info->dtype == safetensors::DType::kBF16
                         ? plan::DType::kBF16
                         : plan::DType::kF16;
      result.bits16.resize(bytes.size() / 2);
      std::memcpy(result.bits16.data(), bytes.data(), bytes.size());
      return result;
    }
    INFER_ASSIGN_OR_RETURN(result.data, opened->readAsF32(tensor));
    return result;
  }

private:
  std::string weightsDir_;
  std::map<std::string, std::unique_ptr<safetensors::File>> files_;
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

/// Keeps indices begin .. begin+size of dimension dim of `elements` (a
/// tensor of `shape`).
template <typename T>
void sliceElements(std::vector<T> &elements, const std::vector<int64_t> &shape,
                   int64_t dim, int64_t begin, int64_t size) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d)
    inner *= shape[d];
  std::vector<T> sliced(static_cast<size_t>(outer * size * inner));
  for (int64_t o = 0; o < outer; ++o)
    std::copy_n(elements.begin() + (o * shape[dim] + begin) * inner,
                size * inner, sliced.begin() + o * size * inner);
  elements = std::move(sliced);
}

/// Keeps indices begin .. begin+size of dimension dim of `tensor`.
Status sliceTensor(HostTensor &tensor, int64_t dim, int64_t begin,
                   int64_t size) {
  const int64_t rank = static_cast<int64_t>(tensor.shape.size());
  // begin > extent - size: begin + size could overflow.
  if (dim < 0 || dim >= rank || begin < 0 || size < 0 ||
      size > tensor.shape[dim] || begin > tensor.shape[dim] - size)
    return invalidArgument("slice {dim " + std::to_string(dim) + ", begin " +
                           std::to_string(begin) + ", size " +
                           std::to_string(size) + "} is outside shape " +
                           formatShape(tensor.shape));
  if (tensor.bits16.empty())
    sliceElements(tensor.data, tensor.shape, dim, begin, size);
  else
    sliceElements(tensor.bits16, tensor.shape, dim, begin, size);
  tensor.shape[dim] = size;
  return Status::ok();
}

/// `tensor` as fp32 elements (a 16-bit one widened exactly).
void widenToFloat(HostTensor &tensor) {
  if (tensor.bits16.empty())
    return;
  tensor.data = tensor.toFloat();
  tensor.bits16 = std::vector<uint16_t>();
  tensor.dtype = plan::DType::kF32;
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
Status applySlice(const plan::WeightTransform &transform, HostTensor &tensor) {
  INFER_ASSIGN_OR_RETURN(int64_t dim, intAttr(transform, "dim"));
  INFER_ASSIGN_OR_RETURN(int64_t begin, intAttr(transform, "begin"));
  INFER_ASSIGN_OR_RETURN(int64_t size, intAttr(transform, "size"));
  return sliceTensor(tensor, dim, begin, size);
}

/// `concat`: appends another checkpoint tensor along axis 0, first sliced by
/// slice_dim, slice_begin, slice_size when it has them (a tensor-parallel
/// shard of a merged projection).
Status applyConcat(const plan::WeightTransform &transform, WeightReader &reader,
                   HostTensor &tensor) {
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
  INFER_ASSIGN_OR_RETURN(HostTensor part, reader.read(*file, *name));
  if (transform.attrs.count("slice_dim")) {
    INFER_ASSIGN_OR_RETURN(int64_t dim, intAttr(transform, "slice_dim"));
    INFER_ASSIGN_OR_RETURN(int64_t begin, intAttr(transform, "slice_begin"));
    INFER_ASSIGN_OR_RETURN(int64_t size, intAttr(transform, "slice_size"));
    INFER_RETURN_IF_ERROR(
        sliceTensor(part, dim, begin, size).withContext("'" + *name + "'"));
  }
  if (part.shape.empty() || part.shape.size() != tensor.shape.size() ||
      !std::equal(part.shape.begin() + 1, part.shape.end(),
                  tensor.shape.begin() + 1))
    return invalidArgument("cannot concatenate '" + *name + "' of shape " +
                           formatShape(part.shape) + " to shape " +
                           formatShape(tensor.shape) + " along axis 0");
  tensor.shape[0] += part.shape[0];
  // Parts of one 16-bit type stay 16-bit; otherwise both widen to fp32.
  if (part.dtype != tensor.dtype) {
    widenToFloat(tensor);
    widenToFloat(part);
  }
  if (tensor.bits16.empty())
    tensor.data.insert(tensor.data.end(), part.data.begin(), part.data.end());
  else
    tensor.bits16.insert(tensor.bits16.end(), part.bits16.begin(),
                         part.bits16.end());
  return Status::ok();
}

/// max(a, b) that stays NaN once either is (std::max drops a NaN b).
inline float maxKeepingNaN(float a, float b) {
  return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
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

/// `quantize_fp8_e4m3` (granularity "per-tensor" | "per-channel", parts):
/// replaces the fp32 data by FP8 E4M3 codes with scale = amax / 448 over the
/// tensor, over each of its `parts` (consecutive row ranges), or over each
/// output channel (row of dimension 0). Every row gets its scale, so a
/// backend reads decode(code) * rowScales[row] whatever the granularity.
Status quantizeFp8(const plan::WeightTransform &transform, HostTensor &tensor) {
  auto it = transform.attrs.find("granularity");
  const auto *granularity = it == transform.attrs.end()
                                ? nullptr
                                : std::get_if<std::string>(&it->second);
  if (!granularity)
    return invalidArgument("quantize_fp8_e4m3 needs a string 'granularity' "
                           "attribute");
  if (*granularity != "per-tensor" && *granularity != "per-channel")
    return invalidArgument("quantize_fp8_e4m3: unknown granularity '" +
                           *granularity +
                           "' (expected per-tensor or per-channel)");
  widenToFloat(tensor);
  if (tensor.shape.size() != 2)
    return invalidArgument("quantize_fp8_e4m3 needs a 2-D tensor, got " +
                           formatShape(tensor.shape));
  const int64_t rows = tensor.shape[0], cols = tensor.shape[1];
  // Rows that share a scale: every row, the parts, or the whole tensor.
  std::vector<int64_t> groups;
  if (*granularity == "per-channel") {
    groups.assign(static_cast<size_t>(rows), 1);
  } else if (auto parts = transform.attrs.find("parts");
             parts != transform.attrs.end()) {
    const auto *sizes = std::get_if<std::vector<int64_t>>(&parts->second);
    bool positive = sizes != nullptr;
    int64_t total = 0;
    for (int64_t n : sizes ? *sizes : std::vector<int64_t>{}) {
      positive = positive && n > 0;
      total += n;
    }
    if (!positive || total != rows)
      return invalidArgument("quantize_fp8_e4m3: parts must be positive row "
                             "counts adding up to " +
                             std::to_string(rows));
    groups = *sizes;
  } else {
    groups = {rows};
  }
  tensor.fp8Codes.resize(tensor.data.size());
  tensor.rowScales.resize(static_cast<size_t>(rows));
  // Each row's amax, then each group's (the max over its rows), then the
  // codes; rows are spread over threads (a Llama-3-8B checkpoint is 7.5e9
  // elements), which changes no result.
  std::vector<float> rowAmax(static_cast<size_t>(rows));
  forEachRowRange(rows, cols, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      float amax = 0.0f;
      const float *x = tensor.data.data() + r * cols;
      for (int64_t c = 0; c < cols; ++c)
        amax = maxKeepingNaN(amax, std::fabs(x[c]));
      rowAmax[static_cast<size_t>(r)] = amax;
    }
  });
  int64_t row = 0;
  for (int64_t groupRows : groups) {
    float amax = 0.0f;
    for (int64_t r = row; r < row + groupRows; ++r)
      amax = maxKeepingNaN(amax, rowAmax[static_cast<size_t>(r)]);
    if (!std::isfinite(amax))
      return invalidArgument("cannot quantize a tensor holding inf or NaN");
    // An all-zero group keeps scale 0 and codes 0 (no division by zero).
    std::fill_n(tensor.rowScales.begin() + row, groupRows, amax / kFp8E4M3Max);
    row += groupRows;
  }
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

/// Reads a param's source tensor, applies its transforms in order and
/// rounds it to the param's dtype.
StatusOr<HostTensor> loadParam(const plan::Value &v, WeightReader &reader) {
  INFER_ASSIGN_OR_RETURN(HostTensor tensor,
                         reader.read(v.sourceFile, v.sourceTensor));
  for (const plan::WeightTransform &transform : v.transforms) {
    if (tensor.isFp8())
      return invalidArgument("quantize_fp8_e4m3 must be the last transform");
    if (transform.kind == "concat")
      INFER_RETURN_IF_ERROR(
          applyConcat(transform, reader, tensor).withContext("concat"));
    else if (transform.kind == "slice")
      INFER_RETURN_IF_ERROR(applySlice(transform, tensor).withContext("slice"));
    else if (transform.kind == "quantize_fp8_e4m3")
      INFER_RETURN_IF_ERROR(
          quantizeFp8(transform, tensor).withContext("quantize_fp8_e4m3"));
    else
      return unimplemented("unknown weight transform '" + transform.kind + "'");
  }
  std::vector<int64_t> shape;
  for (const plan::Dim &d : v.shape)
    shape.push_back(d.size);
  if (tensor.shape != shape)
    return invalidArgument(
        "tensor '" + v.sourceTensor + "' in " + v.sourceFile + " has shape " +
        formatShape(tensor.shape) +
        (v.transforms.empty() ? "" : " after its transforms") +
        ", the plan expects " + formatShape(shape));
  if (!tensor.isFp8() && tensor.dtype != v.dtype) {
    widenToFloat(tensor);
    tensor.convertTo(v.dtype);
  }
  return tensor;
}

} // namespace

Status applyQuantizeFp8(const plan::WeightTransform &transform,
                        HostTensor &tensor) {
  return quantizeFp8(transform, tensor);
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

Status
forEachParam(const Artifact &artifact, int rank, const std::string &weightsDir,
             const std::function<Status(const plan::Value &, HostTensor)> &fn) {
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
    StatusOr<HostTensor> tensor = loadParam(v, reader);
    if (!tensor.isOk())
      return tensor.status().withContext("param '" + v.name + "'");
    INFER_RETURN_IF_ERROR(fn(v, std::move(*tensor)));
  }
  return Status::ok();
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
