//===- MpiCommunicator.cpp - Collectives between processes over MPI -------===//

#include "runtime/distributed/MpiCommunicator.h"

#include <climits>
#include <cstring>

namespace infer::distributed {

/// One tag serves every collective: MPI keeps messages between two ranks on
/// one communicator and tag in order, and all ranks make the same calls in
/// the same order.
constexpr int kCollectiveTag = 1;

Status MpiCommunicator::exchange(const float *send, int64_t count, float *recv,
                                 const char *op) {
  ++calls_;
  const std::string what = std::string(op) + " #" + std::to_string(calls_) +
                           " (" + std::to_string(count) + " floats)";
  if (count > INT_MAX)
    return invalidArgument(what + ": more floats than one MPI message holds");
  const int n = world_.size();
  const int self = world_.rank();
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  requests.reserve(2 * static_cast<size_t>(n));
  auto post = [&](int rc, int peer) -> Status {
    if (rc != MPI_SUCCESS)
      return internalError(what + ": posting a message to or from rank " +
                           std::to_string(peer) + " failed");
    peers.push_back(peer);
    return Status::ok();
  };
  for (int peer = 0; peer < n; ++peer) {
    if (peer == self)
      continue;
    requests.emplace_back();
    INFER_RETURN_IF_ERROR(post(
        MPI_Irecv(recv + peer * count, static_cast<int>(count), MPI_FLOAT, peer,
                  kCollectiveTag, world_.collectiveComm(), &requests.back()),
        peer));
  }
  for (int peer = 0; peer < n; ++peer) {
    if (peer == self)
      continue;
    requests.emplace_back();
    INFER_RETURN_IF_ERROR(post(
        MPI_Isend(send, static_cast<int>(count), MPI_FLOAT, peer,
                  kCollectiveTag, world_.collectiveComm(), &requests.back()),
        peer));
  }
  if (recv + self * count != send)
    std::memcpy(recv + self * count, send, count * sizeof(float));
  return waitAll(world_, requests, peers, stepTimeout(), what);
}

Status MpiCommunicator::allReduceSum(float *data, int64_t count) {
  const int n = world_.size();
  if (n == 1)
    return Status::ok();
  gathered_.resize(static_cast<size_t>(n * count));
  INFER_RETURN_IF_ERROR(exchange(data, count, gathered_.data(), "all_reduce"));
  // Rank order from rank 0's values, as ThreadGroup sums.
  std::memcpy(data, gathered_.data(), count * sizeof(float));
  for (int r = 1; r < n; ++r) {
    const float *other = gathered_.data() + r * count;
    for (int64_t i = 0; i < count; ++i)
      data[i] += other[i];
  }
  return Status::ok();
}

Status MpiCommunicator::allGather(const float *send, int64_t count,
                                  float *recv) {
  return exchange(send, count, recv, "all_gather");
}

} // namespace infer::distributed
