//===- MpiWorld.cpp - The processes of one mpirun / srun launch -----------===//

#include "runtime/distributed/MpiWorld.h"

#include <sched.h>

#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

namespace infer::distributed {
namespace {

std::unique_ptr<MpiWorld> &activeWorld() {
  static std::unique_ptr<MpiWorld> world;
  return world;
}

const char *env(const char *name) {
  const char *value = std::getenv(name);
  return value && *value ? value : nullptr;
}

/// A positive integer from the environment, or `fallback`.
int64_t envSeconds(const char *name, int64_t fallback) {
  const char *value = env(name);
  if (!value)
    return fallback;
  char *end = nullptr;
  const long long parsed = std::strtoll(value, &end, 10);
  return end && *end == '\0' && parsed > 0 ? parsed : fallback;
}

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

/// Yields the core while waiting: first by sched_yield (a peer's message
/// usually follows within microseconds), then by sleeps growing to 1 ms.
class Backoff {
public:
  void pause() {
    if (++polls_ < 2000) {
      sched_yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(1000));
  }

private:
  int polls_ = 0;
  std::chrono::microseconds sleep_{20};
};

std::string formatSeconds(std::chrono::milliseconds timeout) {
  const int64_t ms = timeout.count();
  if (ms % 1000 == 0)
    return std::to_string(ms / 1000) + " s";
  return std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100) +
         " s";
}

/// This process's rank as the launcher's environment says (before MPI).
const char *launcherRank() {
  for (const char *name :
       {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char *value = env(name))
      return value;
  return "?";
}

} // namespace

bool launchedAsRanks() {
  if (env("OMPI_COMM_WORLD_SIZE") || env("PMI_SIZE") || env("PMIX_RANK"))
    return true;
  // srun starts tasks with SLURM_STEP_ID set; a batch script alone has none.
  return env("SLURM_STEP_ID") && env("SLURM_PROCID") && env("SLURM_NTASKS");
}

std::chrono::milliseconds stepTimeout() {
  return std::chrono::seconds(envSeconds("INFER_MPI_TIMEOUT", 300));
}

std::chrono::milliseconds joinTimeout() {
  return std::chrono::seconds(envSeconds("INFER_MPI_JOIN_TIMEOUT", 1800));
}

StatusOr<MpiWorld *> MpiWorld::init() {
  if (activeWorld())
    return activeWorld().get();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // MPI_Init waits for every rank of the launch, with no deadline of its
    // own: a rank that never starts or hangs would hold the others forever.
    std::mutex mutex;
    std::condition_variable done;
    bool finished = false;
    std::thread watchdog([&] {
      std::unique_lock<std::mutex> lock(mutex);
      const std::chrono::milliseconds timeout = joinTimeout();
      if (done.wait_for(lock, timeout, [&] { return finished; }))
        return;
      std::fprintf(stderr,
                   "infer: error: rank %s: MPI_Init did not complete within "
                   "%s: a rank of the launch did not start, died or hangs\n",
                   launcherRank(), formatSeconds(timeout).c_str());
      std::fflush(stderr);
      std::_Exit(1);
    });
    // Serialized: the engine may drive the backend from a thread other than
    // main (a server's), one call at a time.
    int provided = 0;
    const int rc =
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    {
      std::lock_guard<std::mutex> lock(mutex);
      finished = true;
    }
    done.notify_one();
    watchdog.join();
    if (rc != MPI_SUCCESS)
      return internalError("MPI_Init_thread failed");
  }
  auto world = std::unique_ptr<MpiWorld>(new MpiWorld());
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &world->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world->size_);
  if (MPI_Comm_dup(MPI_COMM_WORLD, &world->worldComm_) != MPI_SUCCESS ||
      MPI_Comm_dup(MPI_COMM_WORLD, &world->collectiveComm_) != MPI_SUCCESS)
    return internalError("MPI_Comm_dup failed");
  MPI_Comm_set_errhandler(world->worldComm_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(world->collectiveComm_, MPI_ERRORS_RETURN);
  MPI_Comm local;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world->rank_,
                          MPI_INFO_NULL, &local) != MPI_SUCCESS)
    return internalError("MPI_Comm_split_type failed");
  MPI_Comm_rank(local, &world->localRank_);
  MPI_Comm_size(local, &world->localSize_);
  MPI_Comm_free(&local);
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_Get_processor_name(name, &length);
  world->hostName_.assign(name, static_cast<size_t>(length));

  // srun without an MPI plugin starts N singletons that each think they are
  // the whole world: refuse rather than run N unrelated copies.
  if (const char *tasks = env("SLURM_NTASKS"); tasks && env("SLURM_STEP_ID") &&
                                               world->size_ == 1 &&
                                               std::atoi(tasks) > 1)
    return invalidArgument(
        std::string("srun started ") + tasks +
        " tasks but MPI sees a world of 1: launch with srun --mpi=pmix "
        "(or the MPI plugin the cluster uses)");
  activeWorld() = std::move(world);
  return activeWorld().get();
}

MpiWorld *MpiWorld::active() { return activeWorld().get(); }

std::string MpiWorld::describeRank(int rank) const {
  std::string text = "rank " + std::to_string(rank);
  if (rank == rank_)
    text += " (host " + hostName_ + ")";
  return text;
}

Status MpiWorld::send(int peer, Tag tag, const std::string &bytes,
                      std::chrono::milliseconds timeout,
                      const std::string &what) {
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    return invalidArgument(what + ": message of " +
                           std::to_string(bytes.size()) +
                           " bytes is too large for one MPI message");
  std::vector<MPI_Request> requests(1);
  const int rc =
      MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, peer,
                static_cast<int>(tag), worldComm_, &requests[0]);
  if (rc != MPI_SUCCESS)
    return internalError(what + ": sending to rank " + std::to_string(peer) +
                         ": " + mpiError(rc));
  return waitAll(*this, requests, {peer}, timeout, what);
}

Status MpiWorld::sendToAll(Tag tag, const std::string &bytes,
                           std::chrono::milliseconds timeout,
                           const std::string &what) {
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    return invalidArgument(what + ": message of " +
                           std::to_string(bytes.size()) +
                           " bytes is too large for one MPI message");
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_)
      continue;
    requests.emplace_back();
    peers.push_back(peer);
    const int rc =
        MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, peer,
                  static_cast<int>(tag), worldComm_, &requests.back());
    if (rc != MPI_SUCCESS)
      return internalError(what + ": sending to rank " + std::to_string(peer) +
                           ": " + mpiError(rc));
  }
  return waitAll(*this, requests, peers, timeout, what);
}

StatusOr<std::string> MpiWorld::receive(int peer, Tag tag,
                                        std::chrono::milliseconds timeout,
                                        const std::string &what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Backoff backoff;
  MPI_Status status;
  for (;;) {
    int arrived = 0;
    const int rc =
        MPI_Iprobe(peer, static_cast<int>(tag), worldComm_, &arrived, &status);
    if (rc != MPI_SUCCESS)
      return internalError(what + ": waiting for rank " + std::to_string(peer) +
                           ": " + mpiError(rc));
    if (arrived)
      break;
    if (timeout.count() > 0 && std::chrono::steady_clock::now() > deadline)
      return Status(StatusCode::kInternal,
                    "rank " + std::to_string(peer) + " did not send " + what +
                        " within " + formatSeconds(timeout) +
                        " (it died, hangs or cannot reach this host)");
    backoff.pause();
  }
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::string bytes(static_cast<size_t>(count), '\0');
  const int rc = MPI_Recv(bytes.data(), count, MPI_BYTE, peer,
                          static_cast<int>(tag), worldComm_, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS)
    return internalError(what + ": receiving from rank " +
                         std::to_string(peer) + ": " + mpiError(rc));
  return bytes;
}

void MpiWorld::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void MpiWorld::finalize() {
  MPI_Comm_free(&worldComm_);
  MPI_Comm_free(&collectiveComm_);
  MPI_Finalize();
}

Status waitAll(const MpiWorld &world, std::vector<MPI_Request> &requests,
               const std::vector<int> &peers, std::chrono::milliseconds timeout,
               const std::string &what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Backoff backoff;
  size_t pending = requests.size();
  for (MPI_Request request : requests)
    if (request == MPI_REQUEST_NULL)
      --pending;
  while (pending > 0) {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (requests[i] == MPI_REQUEST_NULL)
        continue;
      int done = 0;
      const int rc = MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS)
        return internalError(what + ": MPI error with rank " +
                             std::to_string(peers[i]) + ": " + mpiError(rc));
      if (done)
        --pending;
    }
    if (pending == 0)
      break;
    if (timeout.count() > 0 && std::chrono::steady_clock::now() > deadline) {
      std::string missing;
      int count = 0;
      for (size_t i = 0; i < requests.size(); ++i) {
        if (requests[i] == MPI_REQUEST_NULL)
          continue;
        const std::string peer = std::to_string(peers[i]);
        if (missing.find(" " + peer + ",") != std::string::npos)
          continue;
        missing += " " + peer + ",";
        ++count;
      }
      missing.pop_back();
      return Status(
          StatusCode::kInternal,
          (count == 1 ? "rank" : "ranks") + missing + " did not " + "answer " +
              what + " of " + world.describeRank(world.rank()) + " within " +
              formatSeconds(timeout) + " (dead, hung or unreachable)");
    }
    backoff.pause();
  }
  return Status::ok();
}

} // namespace infer::distributed
