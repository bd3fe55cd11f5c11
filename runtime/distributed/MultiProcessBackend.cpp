//===- MultiProcessBackend.cpp - Tensor parallelism, one process per rank -===//

#include "runtime/distributed/MultiProcessBackend.h"

#include <algorithm>
#include <cstring>
#include <iostream>
#include <optional>
#include <type_traits>

namespace infer::distributed {
namespace {

//===----------------------------------------------------------------------===//
// Messages
//===----------------------------------------------------------------------===//

enum class Command : uint8_t {
  kCreate = 1,
  kForward = 2,
  kCopyBlocks = 3,
  kRelease = 4,
  kShutdown = 5,
};

/// Little helpers that flatten the commands into bytes (both ends run the
/// same binary, so host byte order and layout are shared).
class Writer {
public:
  template <typename T> Writer &put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char *>(&value), sizeof(T));
    return *this;
  }
  Writer &put(const std::string &text) {
    put<uint64_t>(text.size());
    bytes_ += text;
    return *this;
  }
  template <typename T> Writer &put(const std::vector<T> &values) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(values.size());
    bytes_.append(reinterpret_cast<const char *>(values.data()),
                  values.size() * sizeof(T));
    return *this;
  }
  std::string take() { return std::move(bytes_); }

private:
  std::string bytes_;
};

class Reader {
public:
  explicit Reader(const std::string &bytes) : bytes_(bytes) {}

  template <typename T> Status get(T &value) {
    static_assert(std::is_trivially_copyable_v<T>);
    INFER_RETURN_IF_ERROR(need(sizeof(T)));
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return Status::ok();
  }
  Status get(std::string &text) {
    uint64_t size = 0;
    INFER_RETURN_IF_ERROR(get(size));
    INFER_RETURN_IF_ERROR(need(size));
    text.assign(bytes_.data() + offset_, size);
    offset_ += size;
    return Status::ok();
  }
  template <typename T> Status get(std::vector<T> &values) {
    uint64_t size = 0;
    INFER_RETURN_IF_ERROR(get(size));
    if (size > (bytes_.size() - offset_) / sizeof(T))
      return dataLoss("a command from rank 0 is cut short");
    values.resize(size);
    std::memcpy(values.data(), bytes_.data() + offset_, size * sizeof(T));
    offset_ += size * sizeof(T);
    return Status::ok();
  }

private:
  Status need(uint64_t size) const {
    if (size > bytes_.size() - offset_)
      return dataLoss("a command from rank 0 is cut short");
    return Status::ok();
  }

  const std::string &bytes_;
  size_t offset_ = 0;
};

std::string encodeSpec(const RankBackendSpec &spec) {
  Writer w;
  w.put(Command::kCreate)
      .put(spec.artifactDir)
      .put(spec.weightsDirOverride)
      .put(spec.verifyHash)
      .put(spec.showProgress)
      .put(spec.backend)
      .put(spec.numBlocks)
      .put(spec.numThreads)
      .put(spec.kvCacheMemoryFraction);
  return w.take();
}

Status decodeSpec(Reader &r, RankBackendSpec &spec) {
  INFER_RETURN_IF_ERROR(r.get(spec.artifactDir));
  INFER_RETURN_IF_ERROR(r.get(spec.weightsDirOverride));
  INFER_RETURN_IF_ERROR(r.get(spec.verifyHash));
  INFER_RETURN_IF_ERROR(r.get(spec.showProgress));
  INFER_RETURN_IF_ERROR(r.get(spec.backend));
  INFER_RETURN_IF_ERROR(r.get(spec.numBlocks));
  INFER_RETURN_IF_ERROR(r.get(spec.numThreads));
  return r.get(spec.kvCacheMemoryFraction);
}

std::string encodeBatch(const Batch &batch) {
  Writer w;
  w.put(Command::kForward)
      .put(batch.tokenIds)
      .put(batch.positions)
      .put(batch.queryStartLoc)
      .put(batch.contextLens)
      .put(batch.blockTables)
      .put(batch.maxBlocksPerSeq)
      .put(batch.slotMapping)
      .put(batch.logitsIndices);
  return w.take();
}

Status decodeBatch(Reader &r, Batch &batch) {
  INFER_RETURN_IF_ERROR(r.get(batch.tokenIds));
  INFER_RETURN_IF_ERROR(r.get(batch.positions));
  INFER_RETURN_IF_ERROR(r.get(batch.queryStartLoc));
  INFER_RETURN_IF_ERROR(r.get(batch.contextLens));
  INFER_RETURN_IF_ERROR(r.get(batch.blockTables));
  INFER_RETURN_IF_ERROR(r.get(batch.maxBlocksPerSeq));
  INFER_RETURN_IF_ERROR(r.get(batch.slotMapping));
  return r.get(batch.logitsIndices);
}

//===----------------------------------------------------------------------===//
// Joining a group
//===----------------------------------------------------------------------===//

/// Every rank reports `local` (and `value`) to rank 0, which answers all
/// with the first failure in rank order, naming its rank, or with the
/// smallest value. A rank that does not report within joinTimeout() fails
/// the agreement and breaks the world (it may be hung).
StatusOr<int64_t> agree(MpiWorld &world, const Status &local, int64_t value,
                        const std::string &what) {
  const std::string here = world.describeRank(world.rank());
  auto report = [&](const Status &status, int64_t v) {
    Writer w;
    w.put(static_cast<int32_t>(status.code())).put(status.message()).put(v);
    return w.take();
  };
  auto parse = [](const std::string &bytes, Status &status,
                  int64_t &v) -> Status {
    Reader r(bytes);
    int32_t code = 0;
    std::string message;
    INFER_RETURN_IF_ERROR(r.get(code));
    INFER_RETURN_IF_ERROR(r.get(message));
    INFER_RETURN_IF_ERROR(r.get(v));
    status = Status(static_cast<StatusCode>(code), std::move(message));
    return Status::ok();
  };
  const Status mine = local.withContext(here);

  if (world.rank() != 0) {
    Status sent = world.send(0, Tag::kJoinReport, report(mine, value),
                             joinTimeout(), what);
    if (!sent.isOk()) {
      world.markBroken();
      return sent;
    }
    StatusOr<std::string> verdict = world.receive(
        0, Tag::kJoinVerdict, joinTimeout(), "its verdict on " + what);
    if (!verdict.isOk()) {
      world.markBroken();
      return verdict.status();
    }
    Status status;
    int64_t agreed = 0;
    INFER_RETURN_IF_ERROR(parse(*verdict, status, agreed));
    if (!status.isOk())
      return status;
    return agreed;
  }

  Status verdict = mine;
  int64_t agreed = value;
  const auto deadline = std::chrono::steady_clock::now() + joinTimeout();
  for (int peer = 1; peer < world.size(); ++peer) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    StatusOr<std::string> bytes = world.receive(
        peer, Tag::kJoinReport, std::max(left, std::chrono::milliseconds(1)),
        "its report on " + what);
    Status status;
    int64_t v = 0;
    if (!bytes.isOk()) {
      world.markBroken();
      status = bytes.status();
    } else {
      INFER_RETURN_IF_ERROR(parse(*bytes, status, v));
    }
    if (verdict.isOk() && !status.isOk())
      verdict = status;
    agreed = std::min(agreed, v);
  }
  Status told = world.sendToAll(Tag::kJoinVerdict, report(verdict, agreed),
                                stepTimeout(), "the verdict on " + what);
  if (!told.isOk())
    world.markBroken();
  if (!verdict.isOk())
    return verdict;
  INFER_RETURN_IF_ERROR(told);
  return agreed;
}

/// Every rank: makes its part of `spec`'s backend with the others; the
/// backend and the smallest KV pool of all ranks.
StatusOr<std::pair<RankBackend, int64_t>>
joinGroup(MpiWorld &world, const RankBackendSpec &spec,
          const RankBackendBuilderFactory &factory) {
  std::unique_ptr<RankBackendBuilder> builder = factory();
  INFER_RETURN_IF_ERROR(
      agree(world, builder->load(spec, world), 0, "loading its weights")
          .status());
  StatusOr<RankBackend> made = builder->create(world);
  const int64_t blocks = made.isOk() ? made->backend->numBlocks() : 0;
  INFER_ASSIGN_OR_RETURN(int64_t smallest, agree(world, made.status(), blocks,
                                                 "making its backend"));
  return std::make_pair(std::move(made).value(), smallest);
}

//===----------------------------------------------------------------------===//
// Rank 0
//===----------------------------------------------------------------------===//

bool leaderExists = false;

class LeaderBackend final : public Backend {
public:
  LeaderBackend(MpiWorld &world, RankBackend local, int64_t numBlocks)
      : world_(world), local_(std::move(local)), numBlocks_(numBlocks) {
    leaderExists = true;
  }
  ~LeaderBackend() override {
    leaderExists = false;
    if (world_.broken())
      return;
    Writer w;
    w.put(Command::kRelease);
    if (!world_
             .sendToAll(Tag::kCommand, w.take(), stepTimeout(),
                        "releasing the backend")
             .isOk())
      world_.markBroken();
  }

  std::string_view name() const override { return local_.backend->name(); }
  int64_t numBlocks() const override { return numBlocks_; }

  StatusOr<Logits> forward(const Batch &batch) override {
    INFER_RETURN_IF_ERROR(batch.rejectSampledTokens(name()));
    INFER_RETURN_IF_ERROR(start(batch));
    StatusOr<Logits> logits = local_.backend->forward(batch);
    if (!logits.isOk())
      return fail(logits.status());
    return logits;
  }

  /// Rank 0 samples where its logits are; the others run forward(), whose
  /// collectives meet rank 0's.
  StatusOr<std::vector<int32_t>>
  forwardSample(const Batch &batch, const SamplingBatch &sampling) override {
    INFER_RETURN_IF_ERROR(batch.rejectSampledTokens(name()));
    INFER_RETURN_IF_ERROR(
        sampling.validate(static_cast<int64_t>(batch.logitsIndices.size())));
    INFER_RETURN_IF_ERROR(start(batch));
    StatusOr<std::vector<int32_t>> tokens =
        local_.backend->forwardSample(batch, sampling);
    if (!tokens.isOk())
      return fail(tokens.status());
    return tokens;
  }

  Status
  copyBlocks(const std::vector<std::pair<int32_t, int32_t>> &copies) override {
    INFER_RETURN_IF_ERROR(usable());
    for (const auto &[from, to] : copies)
      if (from < 0 || from >= numBlocks_ || to < 0 || to >= numBlocks_)
        return outOfRange("copying KV block " + std::to_string(from) + " to " +
                          std::to_string(to) + " of a pool of " +
                          std::to_string(numBlocks_));
    std::vector<int32_t> flat;
    for (const auto &[from, to] : copies) {
      flat.push_back(from);
      flat.push_back(to);
    }
    Writer w;
    w.put(Command::kCopyBlocks).put(flat);
    INFER_RETURN_IF_ERROR(send(w.take()));
    Status status = local_.backend->copyBlocks(copies);
    if (!status.isOk())
      return fail(status);
    return Status::ok();
  }

private:
  Status usable() const {
    if (world_.broken())
      return internalError("the multi-process tensor-parallel group is "
                           "broken by an earlier failure");
    return Status::ok();
  }

  /// Checks what every rank would reject alike, then sends the step.
  Status start(const Batch &batch) {
    INFER_RETURN_IF_ERROR(usable());
    INFER_RETURN_IF_ERROR(batch.validate(numBlocks_, local_.blockSize));
    for (int32_t id : batch.tokenIds)
      if (id < 0 || id >= local_.vocabSize)
        return outOfRange("token id " + std::to_string(id) +
                          " outside the vocabulary of " +
                          std::to_string(local_.vocabSize));
    return send(encodeBatch(batch));
  }

  Status send(const std::string &command) {
    Status sent = world_.sendToAll(Tag::kCommand, command, stepTimeout(),
                                   "a step from rank 0");
    if (!sent.isOk())
      return fail(sent);
    return Status::ok();
  }

  /// A step failed after it was sent: the peers may wait in a collective.
  Status fail(const Status &status) {
    world_.markBroken();
    return status.withContext("tensor-parallel " +
                              world_.describeRank(world_.rank()));
  }

  MpiWorld &world_;
  RankBackend local_;
  int64_t numBlocks_;
};

/// Prints a follower's fatal error and ends the launch.
[[noreturn]] void abortFollower(MpiWorld &world, const Status &status) {
  std::cerr << "infer: error: tensor-parallel "
            << world.describeRank(world.rank()) << ": " << status.message()
            << std::endl;
  world.abort(1);
}

} // namespace

StatusOr<int64_t> tokenVocabulary(const plan::RankPlan &rank) {
  for (const plan::Step &step : rank.steps) {
    if (step.op != "embedding" || step.operands.empty() ||
        step.operands[0] < 0 ||
        step.operands[0] >= static_cast<int>(rank.values.size()))
      continue;
    const plan::Value &table = rank.values[step.operands[0]];
    return step.getInt("vocab_size",
                       table.shape.empty() ? 0 : table.shape[0].size);
  }
  return invalidArgument("the plan has no embedding step");
}

StatusOr<std::unique_ptr<Backend>>
createLeaderBackend(MpiWorld &world, const RankBackendSpec &spec,
                    const RankBackendBuilderFactory &factory) {
  if (world.rank() != 0 || world.size() < 2)
    return internalError("createLeaderBackend: not rank 0 of a launch");
  if (leaderExists)
    return unimplemented(
        "a multi-process launch runs one tensor-parallel model at a time "
        "(a draft model must have one rank)");
  INFER_RETURN_IF_ERROR(world.sendToAll(Tag::kCommand, encodeSpec(spec),
                                        joinTimeout(), "the backend spec"));
  StatusOr<std::pair<RankBackend, int64_t>> joined =
      joinGroup(world, spec, factory);
  if (!joined.isOk())
    return joined.status().withContext(
        "multi-process tensor parallelism over " +
        std::to_string(world.size()) + " ranks");
  std::cerr << "infer: " << world.size()
            << " tensor-parallel ranks joined, one process each (KV pool of "
            << joined->second << " blocks per rank)" << std::endl;
  return std::unique_ptr<Backend>(std::make_unique<LeaderBackend>(
      world, std::move(joined->first), joined->second));
}

int followRankZero(MpiWorld &world, const RankBackendBuilderFactory &factory) {
  std::optional<RankBackend> local;
  for (;;) {
    // Waits as long as rank 0 idles (a server between requests); a rank 0
    // that dies ends the launch through the launcher.
    StatusOr<std::string> bytes = world.receive(
        0, Tag::kCommand, std::chrono::milliseconds(0), "a command");
    if (!bytes.isOk())
      abortFollower(world, bytes.status());
    Reader r(*bytes);
    Command command{};
    if (!r.get(command).isOk())
      abortFollower(world, dataLoss("an empty command from rank 0"));
    switch (command) {
    case Command::kCreate: {
      local.reset();
      RankBackendSpec spec;
      if (Status s = decodeSpec(r, spec); !s.isOk())
        abortFollower(world, s);
      StatusOr<std::pair<RankBackend, int64_t>> joined =
          joinGroup(world, spec, factory);
      // Rank 0 reports a failure every rank agreed on; one that broke the
      // world (a rank that did not answer) ends the launch.
      if (joined.isOk())
        local = std::move(joined->first);
      else if (world.broken())
        abortFollower(world, joined.status());
      break;
    }
    case Command::kForward: {
      Batch batch;
      if (Status s = decodeBatch(r, batch); !s.isOk())
        abortFollower(world, s);
      if (!local)
        abortFollower(world, internalError("a step before any backend"));
      if (Status s = local->backend->forward(batch).status(); !s.isOk())
        abortFollower(world, s);
      break;
    }
    case Command::kCopyBlocks: {
      std::vector<int32_t> flat;
      if (Status s = r.get(flat); !s.isOk())
        abortFollower(world, s);
      if (!local)
        abortFollower(world, internalError("a block copy before any backend"));
      std::vector<std::pair<int32_t, int32_t>> copies;
      for (size_t i = 0; i + 1 < flat.size(); i += 2)
        copies.emplace_back(flat[i], flat[i + 1]);
      if (Status s = local->backend->copyBlocks(copies); !s.isOk())
        abortFollower(world, s);
      break;
    }
    case Command::kRelease:
      local.reset();
      break;
    case Command::kShutdown:
      local.reset();
      world.finalize();
      return 0;
    default:
      abortFollower(world, dataLoss("unknown command " +
                                    std::to_string(static_cast<int>(command)) +
                                    " from rank 0"));
    }
  }
}

int finishRankZero(MpiWorld &world, int exitCode) {
  if (world.broken()) {
    std::cerr << "infer: error: aborting all " << world.size()
              << " ranks of the launch" << std::endl;
    world.abort(exitCode ? exitCode : 1);
  }
  Writer w;
  w.put(Command::kShutdown);
  Status told =
      world.sendToAll(Tag::kCommand, w.take(), stepTimeout(), "the shutdown");
  if (!told.isOk()) {
    std::cerr << "infer: error: " << told.message() << std::endl;
    world.abort(1);
  }
  world.finalize();
  return exitCode;
}

} // namespace infer::distributed
