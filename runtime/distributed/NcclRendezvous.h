//===- NcclRendezvous.h - An NCCL group of processes over MPI ---*- C++ -*-===//
//
// How the ranks of a launch make one NCCL communicator (as TensorRT-LLM does
// multi-node): rank 0 calls ncclGetUniqueId and sends the id's bytes to every
// rank over MPI; then every rank calls ncclCommInitRank on its GPU, the
// launch's local rank, concurrently.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_DISTRIBUTED_NCCLRENDEZVOUS_H
#define INFER_RUNTIME_DISTRIBUTED_NCCLRENDEZVOUS_H

#include "runtime/cuda/NcclCommunicator.h"
#include "runtime/distributed/MpiWorld.h"

namespace infer::distributed {

/// The GPU a rank takes: its local rank, modulo the devices it sees (a
/// launcher that gives each process one GPU through CUDA_VISIBLE_DEVICES
/// leaves device 0).
StatusOr<int> deviceOfRank(const MpiWorld &world);

/// Joins this rank to the world's NCCL group on `device`; every rank calls
/// it at once. Rank 0's failure to make an id reaches every rank.
StatusOr<std::unique_ptr<cuda::NcclCommunicator>>
joinNcclGroupOverMpi(MpiWorld &world, int device);

} // namespace infer::distributed

#endif // INFER_RUNTIME_DISTRIBUTED_NCCLRENDEZVOUS_H
