//===- NcclCommunicator.h - Collectives between GPUs over NCCL --*- C++ -*-===//
//
// The Communicator of a tensor-parallel rank on a GPU. Buffers are device
// pointers on the rank's device; a collective is enqueued on the stream the
// rank's backend bound with setStream() and the call returns at once, so a
// forward call never waits on the host between steps and its collectives can
// be captured into a CUDA graph like any kernel:
//
//   rank 0 stream: ... gemm ─ ncclAllReduce ─ add_rms_norm ...
//   rank 1 stream: ... gemm ─ ncclAllReduce ─ add_rms_norm ...
//                             └─ meet on the GPUs, not on the host
//
// Single host: createNcclGroup() makes one communicator per device of this
// process (one thread per rank calls ncclCommInitRank). Several hosts: one
// process makes an id with newNcclUniqueId(), the launcher hands its bytes to
// every rank (file or TCP rendezvous), and each rank calls joinNcclGroup().
//
// Built without NCCL, every factory returns an Unimplemented error that says
// so; ncclAvailable() tells beforehand.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_NCCLCOMMUNICATOR_H
#define INFER_RUNTIME_CUDA_NCCLCOMMUNICATOR_H

#include "runtime/backend/Communicator.h"
#include "runtime/plan/Plan.h"

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

struct ncclComm;

namespace infer::cuda {

/// The bytes of an ncclUniqueId, exchanged between the ranks' processes.
struct NcclUniqueId {
  std::array<char, 128> bytes{};
};

class NcclCommunicator final : public Communicator {
public:
  NcclCommunicator(ncclComm *comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device) {}
  NcclCommunicator(const NcclCommunicator &) = delete;
  NcclCommunicator &operator=(const NcclCommunicator &) = delete;
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  /// The device every buffer of this rank lives on.
  int device() const { return device_; }
  /// The stream the collectives are enqueued on (the backend's).
  void setStream(cudaStream_t stream) { stream_ = stream; }

  /// In place: enqueues the sum over the ranks of `data[0, count)`.
  Status allReduceSum(float *data, int64_t count) override;
  /// Out of place: `recv` = the sum over the ranks of `send[0, count)`.
  Status allReduceSum(const float *send, float *recv, int64_t count);
  /// Enqueues the rank-major gather of every rank's `send[0, count)`.
  Status allGather(const float *send, int64_t count, float *recv) override;
  /// The same two of `count` elements of `dtype` (f32, bf16 or f16): a bf16
  /// or f16 sum is NCCL's, rounded to the dtype as it adds.
  Status allReduceSum(const void *send, void *recv, int64_t count,
                      plan::DType dtype);
  Status allGather(const void *send, int64_t count, void *recv,
                   plan::DType dtype);
  /// Ends every collective of this rank still pending on the device, e.g.
  /// one whose peer failed before joining it; the communicator is unusable
  /// afterwards.
  void abort();

private:
  ncclComm *comm_;
  /// Set by abort(), possibly from another rank's thread.
  std::atomic<bool> aborted_{false};
  int rank_;
  int size_;
  int device_;
  cudaStream_t stream_ = nullptr;
};

/// Whether this build has NCCL; `why` says why not.
bool ncclAvailable(std::string *why = nullptr);

/// A fresh id for a group of ranks (one process makes it, all ranks join).
StatusOr<NcclUniqueId> newNcclUniqueId();

/// Joins rank `rank` of a `size`-rank group on `device`; every rank of the
/// group must call it with the same id, concurrently (it blocks until all
/// have joined).
StatusOr<std::unique_ptr<NcclCommunicator>>
joinNcclGroup(const NcclUniqueId &id, int rank, int size, int device);

/// One communicator per entry of `devices` (rank r on devices[r]), all in
/// this process.
StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>>
createNcclGroup(const std::vector<int> &devices);

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_NCCLCOMMUNICATOR_H
