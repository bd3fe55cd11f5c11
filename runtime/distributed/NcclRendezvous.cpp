//===- NcclRendezvous.cpp - An NCCL group of processes over MPI -----------===//

#include "runtime/distributed/NcclRendezvous.h"
#include "runtime/cuda/CudaStatus.h"

#include <cuda_runtime_api.h>

#include <cstring>

namespace infer::distributed {

StatusOr<int> deviceOfRank(const MpiWorld &world) {
  int count = 0;
  INFER_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (count < 1)
    return unimplemented("no CUDA device visible to " +
                         world.describeRank(world.rank()));
  return world.localRank() % count;
}

StatusOr<std::unique_ptr<cuda::NcclCommunicator>>
joinNcclGroupOverMpi(MpiWorld &world, int device) {
  // The message: one status byte, then the id (or rank 0's error).
  cuda::NcclUniqueId id;
  if (world.rank() == 0) {
    StatusOr<cuda::NcclUniqueId> made = cuda::newNcclUniqueId();
    std::string message =
        made.isOk() ? std::string(1, '\1') : std::string(1, '\0');
    if (made.isOk()) {
      id = *made;
      message.append(id.bytes.data(), id.bytes.size());
    } else {
      message += made.status().message();
    }
    INFER_RETURN_IF_ERROR(world.sendToAll(Tag::kBytes, message, joinTimeout(),
                                          "the NCCL unique id"));
    if (!made.isOk())
      return made.status().withContext("rank 0: ncclGetUniqueId");
  } else {
    INFER_ASSIGN_OR_RETURN(
        std::string message,
        world.receive(0, Tag::kBytes, joinTimeout(), "the NCCL unique id"));
    if (message.empty() || message[0] != '\1')
      return internalError(
          "rank 0: ncclGetUniqueId: " +
          (message.empty() ? std::string() : message.substr(1)));
    if (message.size() != 1 + id.bytes.size())
      return dataLoss("the NCCL unique id from rank 0 has " +
                      std::to_string(message.size() - 1) + " bytes, not " +
                      std::to_string(id.bytes.size()));
    std::memcpy(id.bytes.data(), message.data() + 1, id.bytes.size());
  }
  return cuda::joinNcclGroup(id, world.rank(), world.size(), device);
}

} // namespace infer::distributed
