//===- ParamUpload.cpp - Deferred params streamed to the device -----------===//

#include "runtime/cuda/ParamUpload.h"
#include "runtime/cuda/WeightKernels.h"

#include <algorithm>
#include <cstring>
#include <thread>

namespace infer::cuda {

namespace {

constexpr uint64_t kStagingChunk = 64ull << 20;
constexpr uint64_t kGatherThreads = 8;
/// Below this many bytes a gather thread does not pay for its start.
constexpr uint64_t kBytesPerThread = 4ull << 20;

/// Writes bytes [offset, offset + bytes) of a param's staged form to `out`.
using GatherFn =
    std::function<void(uint64_t offset, uint64_t bytes, char *out)>;

/// `gather` of [offset, offset + bytes) on several threads: reading the
/// checkpoint mapping faults its pages in, which one thread does at a
/// fraction of the copy engine's rate. Pieces are whole `granule`s.
void parallelGather(const GatherFn &gather, uint64_t offset, uint64_t bytes,
                    char *out, uint64_t granule) {
  const uint64_t threads =
      std::clamp<uint64_t>(bytes / kBytesPerThread, 1, kGatherThreads);
  const uint64_t piece =
      ((bytes + threads - 1) / threads + granule - 1) / granule * granule;
  std::vector<std::thread> pool;
  for (uint64_t begin = piece; begin < bytes; begin += piece)
    pool.emplace_back([&, begin] {
      gather(offset + begin, std::min(piece, bytes - begin), out + begin);
    });
  gather(offset, std::min(piece, bytes), out);
  for (std::thread &t : pool)
    t.join();
}

/// Two pinned chunks and the stream their copies (and the fp8 kernels) run
/// on, destroyed on every path.
class Stager {
public:
  Stager() = default;
  Stager(const Stager &) = delete;
  Stager &operator=(const Stager &) = delete;
  ~Stager() {
    for (cudaEvent_t event : copied_)
      if (event)
        cudaEventDestroy(event);
    if (stream_)
      cudaStreamDestroy(stream_);
  }

  Status init(uint64_t chunkBytes) {
    chunkBytes_ = std::max<uint64_t>(chunkBytes, 1);
    for (PinnedBuffer &buffer : staging_)
      INFER_RETURN_IF_ERROR(buffer.allocate(chunkBytes_));
    INFER_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (cudaEvent_t &event : copied_)
      INFER_CUDA_RETURN_IF_ERROR(
          cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return Status::ok();
  }

  cudaStream_t stream() const { return stream_; }

  /// Gathers `bytes` chunk by chunk into staging and enqueues their copies
  /// to `device`; returns when the last chunk is gathered (the copies may
  /// still run). `granule` divides the chunk size.
  Status put(uint64_t bytes, uint64_t granule, const GatherFn &gather,
             char *device) {
    const uint64_t chunk = chunkBytes_ / granule * granule;
    for (uint64_t offset = 0; offset < bytes; offset += chunk, ++chunks_) {
      const uint64_t n = std::min(chunk, bytes - offset);
      const size_t slot = chunks_ % 2;
      // The copy that last read this staging chunk must be done with it.
      if (chunks_ >= 2)
        INFER_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(copied_[slot]));
      parallelGather(gather, offset, n, staging_[slot].as<char>(), granule);
      INFER_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(device + offset, staging_[slot].get(), n,
                          cudaMemcpyHostToDevice, stream_));
      INFER_CUDA_RETURN_IF_ERROR(cudaEventRecord(copied_[slot], stream_));
    }
    return Status::ok();
  }

private:
  uint64_t chunkBytes_ = 0;
  PinnedBuffer staging_[2];
  cudaStream_t stream_ = nullptr;
  cudaEvent_t copied_[2] = {nullptr, nullptr};
  uint64_t chunks_ = 0;
};

ElementType elementType(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::kBF16:
    return ElementType::kBf16;
  case plan::DType::kF16:
    return ElementType::kF16;
  default:
    return ElementType::kF32;
  }
}

/// What the fp8 params share: the scratch their gathered elements land in,
/// each row's amax, every param's group ends (uploaded once) and a
/// non-finite flag per param, checked at the end.
struct QuantizeBuffers {
  DeviceBuffer scratch;
  DeviceBuffer rowAmax;
  DeviceBuffer groupEnds;
  DeviceBuffer nonFinite;
  /// Index of each param's first group end in groupEnds.
  std::vector<size_t> firstGroup;
};

Status prepareQuantize(const std::vector<ParamToUpload> &params,
                       QuantizeBuffers &q, cudaStream_t stream) {
  uint64_t scratchBytes = 0;
  int64_t maxRows = 0;
  std::vector<int64_t> ends;
  q.firstGroup.assign(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSource &source = *params[i].source;
    q.firstGroup[i] = ends.size();
    if (!source.quantize)
      continue;
    scratchBytes = std::max(scratchBytes, source.gatheredBytes());
    maxRows = std::max(maxRows, source.shape[0]);
    int64_t end = 0;
    for (int64_t rows : source.quantizeGroups)
      ends.push_back(end += rows);
  }
  if (ends.empty())
    return Status::ok();
  INFER_RETURN_IF_ERROR(q.scratch.allocate(scratchBytes));
  INFER_RETURN_IF_ERROR(
      q.rowAmax.allocate(static_cast<size_t>(maxRows) * sizeof(float)));
  INFER_RETURN_IF_ERROR(uploadToDevice(ends.data(), ends.size(), q.groupEnds));
  INFER_RETURN_IF_ERROR(q.nonFinite.allocate(params.size() * sizeof(int)));
  // On the stream the kernels run on (it does not wait for the default
  // stream).
  INFER_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      q.nonFinite.get(), 0, params.size() * sizeof(int), stream));
  return Status::ok();
}

/// Enqueues the amax, scales and codes of a quantized param whose gathered
/// elements are in q.scratch.
Status enqueueQuantize(const ParamSource &source, size_t index,
                       QuantizeBuffers &q, DeviceParam &out,
                       cudaStream_t stream) {
  const int64_t rows = source.shape[0], cols = source.shape[1];
  const ElementType type = elementType(source.gatherDType);
  INFER_RETURN_IF_ERROR(
      out.elements.allocate(static_cast<size_t>(rows * cols)));
  INFER_RETURN_IF_ERROR(
      out.rowScales.allocate(static_cast<size_t>(rows) * sizeof(float)));
  INFER_CUDA_RETURN_IF_ERROR(launchWeightRowAmax(
      q.scratch.get(), type, rows, cols, q.rowAmax.as<float>(), stream));
  INFER_CUDA_RETURN_IF_ERROR(launchWeightGroupScales(
      q.rowAmax.as<float>(), q.groupEnds.as<int64_t>() + q.firstGroup[index],
      static_cast<int64_t>(source.quantizeGroups.size()),
      out.rowScales.as<float>(), q.nonFinite.as<int>() + index, stream));
  INFER_CUDA_RETURN_IF_ERROR(launchWeightEncodeFp8(
      q.scratch.get(), type, rows, cols, out.rowScales.as<float>(),
      out.elements.as<uint8_t>(), stream));
  return Status::ok();
}

/// A param that needs a cast: gathered and rounded on the host (the
/// loader's castHostTensor), then staged as it is.
Status uploadCast(const ParamSource &source, Stager &stager, DeviceParam &out) {
  HostTensor tensor = source.gatherToHost();
  castHostTensor(tensor, source.dtype);
  if (tensor.dtype != source.dtype || !tensor.consistent())
    return unimplemented(
        "loading a " + std::string(plan::dtypeName(source.gatherDType)) +
        " checkpoint tensor as " + std::string(plan::dtypeName(source.dtype)));
  const char *bytes =
      tensor.dtype == plan::DType::kF32
          ? reinterpret_cast<const char *>(tensor.data.data())
          : reinterpret_cast<const char *>(tensor.bits16.data());
  const auto size = static_cast<uint64_t>(tensor.elementBytes());
  INFER_RETURN_IF_ERROR(out.elements.allocate(size));
  return stager.put(
      size, 1,
      [bytes](uint64_t offset, uint64_t n, char *to) {
        std::memcpy(to, bytes + offset, n);
      },
      out.elements.as<char>());
}

} // namespace

StatusOr<std::vector<DeviceParam>>
uploadParamSources(const std::vector<ParamToUpload> &params,
                   const UploadProgress &progress) {
  std::vector<DeviceParam> out(params.size());
  uint64_t largest = 0;
  for (const ParamToUpload &p : params)
    largest = std::max(largest, p.source->gatheredBytes());
  Stager stager;
  // Twice the largest param: a cast may widen bf16 to f32.
  INFER_RETURN_IF_ERROR(
      stager.init(std::clamp<uint64_t>(2 * largest, 4096, kStagingChunk)));
  QuantizeBuffers q;
  INFER_RETURN_IF_ERROR(prepareQuantize(params, q, stager.stream()));
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSource &source = *params[i].source;
    const uint64_t elementSize = plan::dtypeSize(source.gatherDType);
    const GatherFn gather = [&source](uint64_t offset, uint64_t n, char *to) {
      source.gather(offset, n, to);
    };
    Status status;
    if (source.gatheredIsFinal()) {
      status = out[i].elements.allocate(source.gatheredBytes());
      if (status.isOk())
        status = stager.put(source.gatheredBytes(), elementSize, gather,
                            out[i].elements.as<char>());
    } else if (source.quantize) {
      status = stager.put(source.gatheredBytes(), elementSize, gather,
                          q.scratch.as<char>());
      if (status.isOk())
        status = enqueueQuantize(source, i, q, out[i], stager.stream());
    } else {
      status = uploadCast(source, stager, out[i]);
    }
    if (!status.isOk())
      return status.withContext("cuda backend: uploading param '" +
                                params[i].name + "'");
    if (progress)
      progress(out[i].elements.bytes() + out[i].rowScales.bytes());
  }
  INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stager.stream()));
  if (q.nonFinite) {
    std::vector<int> nonFinite(params.size());
    INFER_CUDA_RETURN_IF_ERROR(cudaMemcpy(nonFinite.data(), q.nonFinite.get(),
                                          nonFinite.size() * sizeof(int),
                                          cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < params.size(); ++i)
      if (nonFinite[i])
        return invalidArgument("param '" + params[i].name +
                               "': quantize_fp8_e4m3: cannot quantize a "
                               "tensor holding inf or NaN");
  }
  return out;
}

StatusOr<HostTensor> materializeOnDevice(const std::string &name,
                                         const ParamSource &source) {
  if (!source.quantize) {
    HostTensor tensor = source.gatherToHost();
    castHostTensor(tensor, source.dtype);
    return tensor;
  }
  INFER_ASSIGN_OR_RETURN(std::vector<DeviceParam> onDevice,
                         uploadParamSources({{name, &source}}));
  HostTensor tensor;
  tensor.dtype = plan::DType::kF8E4M3;
  tensor.shape = source.shape;
  tensor.fp8Codes.resize(onDevice[0].elements.bytes());
  tensor.rowScales.resize(onDevice[0].rowScales.bytes() / sizeof(float));
  if (!tensor.fp8Codes.empty())
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(tensor.fp8Codes.data(), onDevice[0].elements.get(),
                   tensor.fp8Codes.size(), cudaMemcpyDeviceToHost));
  if (!tensor.rowScales.empty())
    INFER_CUDA_RETURN_IF_ERROR(cudaMemcpy(
        tensor.rowScales.data(), onDevice[0].rowScales.get(),
        tensor.rowScales.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return tensor;
}

} // namespace infer::cuda
