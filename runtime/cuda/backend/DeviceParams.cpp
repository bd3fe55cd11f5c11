//===- DeviceParams.cpp - Parameters on the device ------------------------===//
//
// Each param value goes to the device as the loader made it, which is its
// plan dtype (HostTensor): bf16 or f16 bits, f32 elements, or fp8 codes and
// row scales. Values that share a HostTensor (a tied embedding and LM head)
// share the device copy. Nothing is converted here.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/backend/CudaBackendImpl.h"

namespace infer::cuda {

using plan::DType;
using plan::Value;
using plan::ValueKind;

Status CudaBackend::uploadParams(const ParamTable &params) {
  params_.assign(rank_.values.size(), Tensor());
  std::map<const HostTensor *, Tensor> uploaded;
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
      auto upload = [&](const auto &elements) -> Status {
        DeviceBuffer buffer;
        INFER_RETURN_IF_ERROR(
            uploadToDevice(elements.data(), elements.size(), buffer));
        void *device = buffer.get();
        paramBuffers_.push_back(std::move(buffer));
        t.data = device;
        return Status::ok();
      };
      switch (host.dtype) {
      case DType::kF8E4M3: {
        INFER_RETURN_IF_ERROR(upload(host.fp8Codes));
        t.fp8 = static_cast<const uint8_t *>(t.data);
        t.data = nullptr;
        DeviceBuffer scales;
        INFER_RETURN_IF_ERROR(uploadToDevice(host.rowScales.data(),
                                             host.rowScales.size(), scales));
        t.rowScales = scales.as<float>();
        paramBuffers_.push_back(std::move(scales));
        break;
      }
      case DType::kBF16:
      case DType::kF16:
        INFER_RETURN_IF_ERROR(upload(host.bits16));
        break;
      default:
        INFER_RETURN_IF_ERROR(upload(host.data));
        break;
      }
    }
    params_[v.id] = t;
  }
  return Status::ok();
}

} // namespace infer::cuda
