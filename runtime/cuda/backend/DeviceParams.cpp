//===- DeviceParams.cpp - Parameters on the device ------------------------===//
//
// Each param value goes to the device as the loader made it, which is its
// plan dtype (HostTensor): bf16 or f16 bits, f32 elements, or fp8 codes and
// row scales. Values that share a HostTensor (a tied embedding and LM head)
// share the device copy. Nothing is converted here.
//
// A packed artifact's tensors view one mapped file per rank, laid out as
// they are used (PackedWeights.h). The span of the file they cover goes to
// one device buffer in large chunks through two pinned staging buffers:
//
//   host threads: read chunk 0 | read chunk 1 | read chunk 2 | ...
//   copy engine:                | copy 0       | copy 1       | copy 2
//
// and each tensor is that buffer plus its offset in the span (the file's
// 256-byte tensor alignment carries over to the device).
//
// An unpacked artifact's params come deferred (HostTensor::source) and are
// gathered from the checkpoint mapping and transformed on their way to the
// device (ParamUpload.h), one after another: no host copy of the model.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/backend/CudaBackendImpl.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>

namespace infer::cuda {

using plan::DType;
using plan::Value;
using plan::ValueKind;

namespace {

constexpr size_t kStagingChunk = 64ull << 20;
constexpr unsigned kCopyThreads = 8;

/// A stream and the two staging buffers' events, destroyed on every path.
struct StagingStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t copied[2] = {nullptr, nullptr};
  ~StagingStream() {
    for (cudaEvent_t event : copied)
      if (event)
        cudaEventDestroy(event);
    if (stream)
      cudaStreamDestroy(stream);
  }
};

/// memcpy on several threads: reading the mapping faults its pages in,
/// which one thread does at a fraction of the copy engine's rate.
void parallelCopy(char *to, const char *from, size_t bytes) {
  const size_t piece = (bytes + kCopyThreads - 1) / kCopyThreads;
  std::vector<std::thread> threads;
  for (size_t begin = piece; begin < bytes; begin += piece)
    threads.emplace_back([=] {
      std::memcpy(to + begin, from + begin, std::min(piece, bytes - begin));
    });
  std::memcpy(to, from, std::min(piece, bytes));
  for (std::thread &t : threads)
    t.join();
}

/// Copies host bytes [begin, begin + bytes) to a new device buffer.
Status uploadSpan(const char *begin, size_t bytes, DeviceBuffer &out) {
  INFER_RETURN_IF_ERROR(out.allocate(bytes));
  PinnedBuffer staging[2];
  for (PinnedBuffer &buffer : staging)
    INFER_RETURN_IF_ERROR(buffer.allocate(std::min(bytes, kStagingChunk)));
  StagingStream s;
  INFER_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  for (cudaEvent_t &event : s.copied)
    INFER_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  for (size_t offset = 0, chunk = 0; offset < bytes;
       offset += kStagingChunk, ++chunk) {
    const size_t n = std::min(kStagingChunk, bytes - offset);
    const int slot = static_cast<int>(chunk % 2);
    // The copy that last read this staging buffer must be done with it.
    if (chunk >= 2)
      INFER_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.copied[slot]));
    parallelCopy(staging[slot].as<char>(), begin + offset, n);
    INFER_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(out.as<char>() + offset, staging[slot].get(), n,
                        cudaMemcpyHostToDevice, s.stream));
    INFER_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.copied[slot], s.stream));
  }
  INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.stream));
  return Status::ok();
}

/// The bytes a mapped tensor views: its elements and an fp8 one's scales.
void extendSpan(const HostTensor &host, const char *&low, const char *&high) {
  auto cover = [&](const void *p, size_t bytes) {
    const char *c = static_cast<const char *>(p);
    low = low ? std::min(low, c) : c;
    high = high ? std::max(high, c + bytes) : c + bytes;
  };
  cover(host.mappedElements, static_cast<size_t>(host.elementBytes()));
  if (host.isFp8())
    cover(host.mappedRowScales, static_cast<size_t>(host.shape[0]) * 4);
}

} // namespace

/// The device copies of every mapping the params view (packed files, whose
/// every byte between the first and last tensor is a param's or padding):
/// the covered span of each, uploaded once.
Status CudaBackend::uploadMappedParams(
    const ParamTable &params,
    std::map<const HostMapping *, std::pair<const char *, char *>> &spans) {
  std::map<const HostMapping *, std::pair<const char *, const char *>> covered;
  for (const auto &[id, host] : params) {
    if (!host || !host->isMapped() || !host->consistent())
      continue;
    auto &[low, high] = covered[host->mapping.get()];
    extendSpan(*host, low, high);
  }
  for (const auto &[mapping, span] : covered) {
    // From a multiple of 256 of the (page-aligned) mapping, so that every
    // tensor keeps its alignment on the device (cudaMalloc's is 256).
    const char *low = reinterpret_cast<const char *>(
        reinterpret_cast<uintptr_t>(span.first) & ~uintptr_t{255});
    DeviceBuffer buffer;
    INFER_RETURN_IF_ERROR(
        uploadSpan(low, static_cast<size_t>(span.second - low), buffer)
            .withContext("cuda backend: uploading " + mapping->name()));
    spans[mapping] = {low, buffer.as<char>()};
    paramBuffers_.push_back(std::move(buffer));
  }
  return Status::ok();
}

Status CudaBackend::uploadDeferredParams(
    const ParamTable &params, const UploadProgress &progress,
    std::map<const HostTensor *, Tensor> &uploaded) {
  std::vector<ParamToUpload> sources;
  std::vector<const HostTensor *> hosts;
  for (const Value &v : rank_.values) {
    if (v.kind != ValueKind::kParam)
      continue;
    auto it = params.find(v.id);
    if (it == params.end() || !it->second || !it->second->isDeferred() ||
        uploaded.count(it->second.get()))
      continue;
    const HostTensor &host = *it->second;
    if (host.dtype != v.dtype || host.dtype != host.source->dtype)
      return invalidArgument("cuda backend: param '" + v.name + "' of dtype " +
                             std::string(plan::dtypeName(v.dtype)) +
                             " was loaded as " +
                             std::string(plan::dtypeName(host.source->dtype)));
    uploaded[&host] = Tensor();
    hosts.push_back(&host);
    sources.push_back({v.name, host.source.get()});
  }
  if (sources.empty())
    return Status::ok();
  INFER_ASSIGN_OR_RETURN(std::vector<DeviceParam> onDevice,
                         uploadParamSources(sources, progress));
  for (size_t i = 0; i < hosts.size(); ++i) {
    Tensor &t = uploaded[hosts[i]];
    const std::vector<int64_t> &shape = hosts[i]->shape;
    t.rows = shape.size() == 2 ? shape[0] : 1;
    t.cols = shape.empty() ? 1 : shape.back();
    t.dtype = hosts[i]->dtype;
    if (t.dtype == DType::kF8E4M3) {
      t.fp8 = onDevice[i].elements.as<const uint8_t>();
      t.rowScales = onDevice[i].rowScales.as<const float>();
    } else {
      t.data = onDevice[i].elements.get();
    }
    paramBuffers_.push_back(std::move(onDevice[i].elements));
    paramBuffers_.push_back(std::move(onDevice[i].rowScales));
  }
  return Status::ok();
}

Status CudaBackend::uploadParams(const ParamTable &params,
                                 const UploadProgress &progress) {
  params_.assign(rank_.values.size(), Tensor());
  std::map<const HostMapping *, std::pair<const char *, char *>> spans;
  INFER_RETURN_IF_ERROR(uploadMappedParams(params, spans));
  std::map<const HostTensor *, Tensor> uploaded;
  INFER_RETURN_IF_ERROR(uploadDeferredParams(params, progress, uploaded));
  for (const Value &v : rank_.values) {
    if (v.kind != ValueKind::kParam)
      continue;
    auto it = params.find(v.id);
    if (it == params.end() || !it->second)
      return invalidArgument("cuda backend: no data for param '" + v.name +
                             "'");
    const HostTensor &host = *it->second;
    std::vector<int64_t> shape;
    for (const plan::Dim &d : v.shape)
      shape.push_back(d.size);
    if (host.shape != shape)
      return invalidArgument("cuda backend: param '" + v.name +
                             "' data has a different shape than the plan");
    if (host.isDeferred()) {
      params_[v.id] = uploaded.at(&host);
      continue;
    }
    if (host.dtype != v.dtype || !host.consistent())
      return invalidArgument(
          "cuda backend: param '" + v.name + "' of dtype " +
          std::string(plan::dtypeName(v.dtype)) + " was loaded as " +
          std::string(plan::dtypeName(host.dtype)) +
          (host.consistent() ? "" : " with the wrong number of elements"));
    auto [at, fresh] = uploaded.try_emplace(&host);
    Tensor &t = at->second;
    if (fresh) {
      t.rows = shape.size() == 2 ? shape[0] : 1;
      t.cols = shape.back();
      t.dtype = host.dtype;
      if (host.isMapped()) {
        const char *hostBase = spans.at(host.mapping.get()).first;
        char *deviceBase = spans.at(host.mapping.get()).second;
        auto onDevice = [&](const void *p) {
          return deviceBase + (static_cast<const char *>(p) - hostBase);
        };
        if (host.isFp8()) {
          t.fp8 =
              reinterpret_cast<const uint8_t *>(onDevice(host.mappedElements));
          t.rowScales =
              reinterpret_cast<const float *>(onDevice(host.mappedRowScales));
        } else {
          t.data = onDevice(host.mappedElements);
        }
        params_[v.id] = t;
        continue;
      }
      const size_t count = static_cast<size_t>(host.numElements());
      auto upload = [&](const auto *elements) -> Status {
        DeviceBuffer buffer;
        INFER_RETURN_IF_ERROR(uploadToDevice(elements, count, buffer));
        void *device = buffer.get();
        paramBuffers_.push_back(std::move(buffer));
        t.data = device;
        return Status::ok();
      };
      switch (host.dtype) {
      case DType::kF8E4M3: {
        INFER_RETURN_IF_ERROR(upload(host.fp8Data()));
        t.fp8 = static_cast<const uint8_t *>(t.data);
        t.data = nullptr;
        DeviceBuffer scales;
        INFER_RETURN_IF_ERROR(uploadToDevice(
            host.rowScaleData(), static_cast<size_t>(t.rows), scales));
        t.rowScales = scales.as<float>();
        paramBuffers_.push_back(std::move(scales));
        break;
      }
      case DType::kBF16:
      case DType::kF16:
        INFER_RETURN_IF_ERROR(upload(host.bits16Data()));
        break;
      default:
        INFER_RETURN_IF_ERROR(upload(host.f32Data()));
        break;
      }
    }
    params_[v.id] = t;
  }
  return Status::ok();
}

} // namespace infer::cuda
