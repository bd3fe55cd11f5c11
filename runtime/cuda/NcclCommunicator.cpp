//===- NcclCommunicator.cpp - Collectives between GPUs through NCCL -------===//

#include "runtime/cuda/NcclCommunicator.h"
#include "runtime/cuda/CudaStatus.h"

#include <algorithm>
#include <cstring>
#include <thread>

#ifdef INFER_HAS_NCCL
#include <nccl.h>
#endif

namespace infer::cuda {

#ifdef INFER_HAS_NCCL

/// NCCL's results join the INFER_CUDA_RETURN_IF_ERROR family.
static Status cudaStatus(ncclResult_t result, const char *expr,
                         const char *file, int line) {
  if (result == ncclSuccess)
    return Status::ok();
  const StatusCode code =
      result == ncclInvalidArgument || result == ncclInvalidUsage
          ? StatusCode::kInvalidArgument
          : StatusCode::kInternal;
  return Status(code, "NCCL error " + std::to_string(int(result)) + " (" +
                          ncclGetErrorString(result) + ") in " + expr + " at " +
                          file + ":" + std::to_string(line));
}

/// A collective's status, with the communicator's last error when NCCL
/// recorded a more precise one.
#define INFER_NCCL_RETURN_IF_ERROR(comm, expr)                                 \
  do {                                                                         \
    Status status_ = cudaStatus((expr), #expr, __FILE__, __LINE__);            \
    if (!status_.isOk()) {                                                     \
      const char *last_ = ncclGetLastError(comm);                              \
      return last_ && *last_ ? status_.withContext(last_) : status_;           \
    }                                                                          \
  } while (false)

NcclCommunicator::~NcclCommunicator() {
  // An aborted communicator's resources are already freed.
  if (!aborted_)
    ncclCommDestroy(comm_);
}

Status NcclCommunicator::allReduceSum(float *data, int64_t count) {
  return allReduceSum(data, data, count);
}

Status NcclCommunicator::allReduceSum(const float *send, float *recv,
                                      int64_t count) {
  return allReduceSum(send, recv, count, plan::DType::kF32);
}

Status NcclCommunicator::allGather(const float *send, int64_t count,
                                   float *recv) {
  return allGather(send, count, recv, plan::DType::kF32);
}

static StatusOr<ncclDataType_t> ncclTypeOf(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::kF32:
    return ncclFloat32;
  case plan::DType::kBF16:
    return ncclBfloat16;
  case plan::DType::kF16:
    return ncclFloat16;
  default:
    return unimplemented("NCCL collectives of " +
                         std::string(plan::dtypeName(dtype)));
  }
}

Status NcclCommunicator::allReduceSum(const void *send, void *recv,
                                      int64_t count, plan::DType dtype) {
  if (aborted_)
    return internalError("NCCL communicator of rank " + std::to_string(rank_) +
                         " was aborted");
  INFER_ASSIGN_OR_RETURN(ncclDataType_t type, ncclTypeOf(dtype));
  INFER_NCCL_RETURN_IF_ERROR(
      comm_,
      ncclAllReduce(send, recv, size_t(count), type, ncclSum, comm_, stream_));
  return Status::ok();
}

Status NcclCommunicator::allGather(const void *send, int64_t count, void *recv,
                                   plan::DType dtype) {
  if (aborted_)
    return internalError("NCCL communicator of rank " + std::to_string(rank_) +
                         " was aborted");
  INFER_ASSIGN_OR_RETURN(ncclDataType_t type, ncclTypeOf(dtype));
  INFER_NCCL_RETURN_IF_ERROR(
      comm_, ncclAllGather(send, recv, size_t(count), type, comm_, stream_));
  return Status::ok();
}

void NcclCommunicator::abort() {
  if (!aborted_.exchange(true))
    ncclCommAbort(comm_);
}

bool ncclAvailable(std::string *) { return true; }

StatusOr<NcclUniqueId> newNcclUniqueId() {
  ncclUniqueId id;
  INFER_CUDA_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  static_assert(sizeof(id) == sizeof(NcclUniqueId::bytes),
                "NcclUniqueId holds an ncclUniqueId");
  NcclUniqueId out;
  std::memcpy(out.bytes.data(), &id, sizeof(id));
  return out;
}

StatusOr<std::unique_ptr<NcclCommunicator>>
joinNcclGroup(const NcclUniqueId &id, int rank, int size, int device) {
  if (size < 1 || rank < 0 || rank >= size)
    return invalidArgument("NCCL: rank " + std::to_string(rank) +
                           " of a group of " + std::to_string(size));
  ncclUniqueId ncclId;
  std::memcpy(&ncclId, id.bytes.data(), sizeof(ncclId));
  INFER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  ncclComm_t comm = nullptr;
  INFER_CUDA_RETURN_IF_ERROR(ncclCommInitRank(&comm, size, ncclId, rank));
  return std::make_unique<NcclCommunicator>(comm, rank, size, device);
}

#else // !INFER_HAS_NCCL

static constexpr const char *kNoNccl =
    "infer was built without NCCL (nccl.h and libnccl were not found; set "
    "NCCL_ROOT or NCCL_INCLUDE_DIR/NCCL_LIBRARY), so tensor-parallel plans do "
    "not run on the cuda backend";

NcclCommunicator::~NcclCommunicator() = default;

Status NcclCommunicator::allReduceSum(float *, int64_t) {
  return unimplemented(kNoNccl);
}
Status NcclCommunicator::allReduceSum(const float *, float *, int64_t) {
  return unimplemented(kNoNccl);
}
Status NcclCommunicator::allGather(const float *, int64_t, float *) {
  return unimplemented(kNoNccl);
}
Status NcclCommunicator::allReduceSum(const void *, void *, int64_t,
                                      plan::DType) {
  return unimplemented(kNoNccl);
}
Status NcclCommunicator::allGather(const void *, int64_t, void *, plan::DType) {
  return unimplemented(kNoNccl);
}
void NcclCommunicator::abort() {}

bool ncclAvailable(std::string *why) {
  if (why)
    *why = kNoNccl;
  return false;
}

StatusOr<NcclUniqueId> newNcclUniqueId() { return unimplemented(kNoNccl); }

StatusOr<std::unique_ptr<NcclCommunicator>> joinNcclGroup(const NcclUniqueId &,
                                                          int, int, int) {
  return unimplemented(kNoNccl);
}

#endif // INFER_HAS_NCCL

StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>>
createNcclGroup(const std::vector<int> &devices) {
  const int size = static_cast<int>(devices.size());
  // A rank that cannot join would leave the others waiting forever.
  int count = 0;
  INFER_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  for (int r = 0; r < size; ++r)
    if (devices[r] < 0 || devices[r] >= count ||
        std::count(devices.begin(), devices.begin() + r, devices[r]))
      return invalidArgument("NCCL: device " + std::to_string(devices[r]) +
                             " of rank " + std::to_string(r) +
                             " is not a distinct device of the " +
                             std::to_string(count) + " on this host");
  INFER_ASSIGN_OR_RETURN(NcclUniqueId id, newNcclUniqueId());
  // ncclCommInitRank blocks until every rank has joined: one thread each.
  std::vector<StatusOr<std::unique_ptr<NcclCommunicator>>> joined;
  for (int r = 0; r < size; ++r)
    joined.emplace_back(internalError("NCCL rank did not join"));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back(
        [&, r] { joined[r] = joinNcclGroup(id, r, size, devices[r]); });
  for (std::thread &t : threads)
    t.join();
  std::vector<std::unique_ptr<NcclCommunicator>> group;
  for (int r = 0; r < size; ++r) {
    if (!joined[r].isOk())
      return joined[r].status().withContext("NCCL rank " + std::to_string(r) +
                                            " on device " +
                                            std::to_string(devices[r]));
    group.push_back(std::move(joined[r]).value());
  }
  return group;
}

} // namespace infer::cuda
