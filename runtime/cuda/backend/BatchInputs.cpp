//===- BatchInputs.cpp - The batch contract on the device -----------------===//
//
// One forward call's inputs go to the device in one copy: the arrays packed
// 16-byte aligned into pinned staging (double-buffered: PinnedStaging.h),
// then one cudaMemcpyAsync into a buffer that only grows (captured graphs
// read it). The batch's sampled tokens (asynchronous scheduling) travel in
// the same copy as (token index, row) pairs after the arrays; a small
// kernel, enqueued before the forward's steps and outside any graph, then
// writes the previous launch's tokens into token_ids on the device:
//
//   inputs_   token_ids | positions | ... | logits_indices | (index, row)...
//   feed      token_ids[index] = deviceTokens_[row]   (0 outside the vocab)
//
// A decode batch (one new token per sequence, a logits row each) is padded
// to its graph bucket (decodeGraphBucket) so that a few graphs serve every
// batch size:
//
//   real    seq 0..B-1   token t_i, position p_i, slot s_i, logits row i
//   padding seq B..P-1   token t_0, position 0, slot -1 (no cache write),
//                        context 1 in the scratch block, logits row i
//
// The padding's keys are never written and its logits and tokens are
// dropped; the scratch block (one past the engine's pool) only gives its
// attention something valid to read.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/backend/CudaBackendImpl.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>

namespace infer::cuda {

std::optional<Batch> CudaBackend::padDecodeBatch(const Batch &batch) const {
  const int64_t rows = batch.numTokens();
  if (profileSteps_ || rows == 0 || rows != batch.numSeqs() ||
      static_cast<int64_t>(batch.logitsIndices.size()) != rows)
    return std::nullopt;
  for (int64_t i = 0; i < rows; ++i)
    if (batch.logitsIndices[i] != i)
      return std::nullopt;
  const int64_t bucket = decodeGraphBucket(rows);
  if (bucket == rows || bucket > maxGraphTokens_)
    return std::nullopt;
  Batch padded = batch;
  const int64_t width = batch.maxBlocksPerSeq;
  for (int64_t i = rows; i < bucket; ++i) {
    padded.tokenIds.push_back(batch.tokenIds[0]);
    padded.positions.push_back(0);
    padded.slotMapping.push_back(-1);
    padded.queryStartLoc.push_back(static_cast<int32_t>(i + 1));
    padded.contextLens.push_back(1);
    padded.blockTables.push_back(scratchBlock_);
    padded.blockTables.insert(padded.blockTables.end(), width - 1, -1);
    padded.logitsIndices.push_back(static_cast<int32_t>(i));
  }
  return padded;
}

Status CudaBackend::uploadInputs(const Batch &batch) {
  auto bytesOf = [](const auto &v) { return v.size() * sizeof(v[0]); };
  paddedBlocksPerSeq_ = 1;
  while (paddedBlocksPerSeq_ < batch.maxBlocksPerSeq)
    paddedBlocksPerSeq_ *= 2;
  std::vector<int32_t> tables(batch.numSeqs() * paddedBlocksPerSeq_, -1);
  for (int64_t s = 0; s < batch.numSeqs(); ++s)
    std::copy_n(batch.blockTables.begin() + s * batch.maxBlocksPerSeq,
                batch.maxBlocksPerSeq,
                tables.begin() + s * paddedBlocksPerSeq_);
  static_assert(sizeof(Batch::SampledToken) == sizeof(DeviceSampledToken) &&
                    offsetof(Batch::SampledToken, tokenIndex) ==
                        offsetof(DeviceSampledToken, tokenIndex) &&
                    offsetof(Batch::SampledToken, row) ==
                        offsetof(DeviceSampledToken, row),
                "sampled tokens are copied to the device as they are");
  const std::pair<const void *, size_t> arrays[] = {
      {batch.tokenIds.data(), bytesOf(batch.tokenIds)},
      {batch.positions.data(), bytesOf(batch.positions)},
      {batch.queryStartLoc.data(), bytesOf(batch.queryStartLoc)},
      {batch.contextLens.data(), bytesOf(batch.contextLens)},
      {tables.data(), bytesOf(tables)},
      {batch.slotMapping.data(), bytesOf(batch.slotMapping)},
      {batch.logitsIndices.data(), bytesOf(batch.logitsIndices)},
  };
  size_t total = 0;
  for (int i = 0; i < static_cast<int>(InputKind::kCount); ++i) {
    inputOffset_[i] = total;
    total += (arrays[i].second + 15) / 16 * 16;
  }
  sampledOffset_ = total;
  const size_t sampledBytes = bytesOf(batch.sampledTokens);
  total += sampledBytes;
  INFER_ASSIGN_OR_RETURN(char *staging, inputStaging_.acquire(total));
  for (int i = 0; i < static_cast<int>(InputKind::kCount); ++i)
    if (arrays[i].second)
      std::memcpy(staging + inputOffset_[i], arrays[i].first, arrays[i].second);
  if (sampledBytes)
    std::memcpy(staging + sampledOffset_, batch.sampledTokens.data(),
                sampledBytes);
  if (total > inputs_.bytes()) {
    // Captured graphs read the old buffer.
    INFER_RETURN_IF_ERROR(destroyGraphs());
    INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    INFER_RETURN_IF_ERROR(inputs_.allocate(total * 2));
  }
  INFER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(inputs_.get(), staging, total,
                                             cudaMemcpyHostToDevice, stream_));
  INFER_RETURN_IF_ERROR(inputStaging_.markRead(stream_));
  if (batch.sampledTokens.empty())
    return Status::ok();
  char *base = inputs_.as<char>();
  INFER_CUDA_RETURN_IF_ERROR(launchFeedSampledTokens(
      reinterpret_cast<int32_t *>(
          base + inputOffset_[static_cast<int>(InputKind::kTokenIds)]),
      reinterpret_cast<const DeviceSampledToken *>(base + sampledOffset_),
      static_cast<int64_t>(batch.sampledTokens.size()),
      deviceTokens_.as<int32_t>(), tokenVocab_, stream_));
  return Status::ok();
}

const void *CudaBackend::input(int id, int64_t *length,
                               const Batch &batch) const {
  const InputKind kind = *inputOf_[id];
  switch (kind) {
  case InputKind::kTokenIds:
    *length = batch.numTokens();
    break;
  case InputKind::kPositions:
    *length = static_cast<int64_t>(batch.positions.size());
    break;
  case InputKind::kQueryStartLoc:
    *length = static_cast<int64_t>(batch.queryStartLoc.size());
    break;
  case InputKind::kContextLens:
    *length = batch.numSeqs();
    break;
  case InputKind::kBlockTables:
    *length = batch.numSeqs() * paddedBlocksPerSeq_;
    break;
  case InputKind::kSlotMapping:
    *length = static_cast<int64_t>(batch.slotMapping.size());
    break;
  case InputKind::kLogitsIndices:
  case InputKind::kCount:
    *length = static_cast<int64_t>(batch.logitsIndices.size());
    break;
  }
  return inputs_.as<char>() + inputOffset_[static_cast<int>(kind)];
}

Status CudaBackend::checkBatch(const Batch &batch) const {
  INFER_RETURN_IF_ERROR(batch.validate(numBlocks_, dims_.blockSize));
  return checkTokenIds(batch);
}

int64_t CudaBackend::embeddingVocab(const PreparedStep &s) const {
  return s.step.vocabSize ? s.step.vocabSize : params_[s.step.operands[0]].rows;
}

void CudaBackend::findTokenVocab() {
  tokenVocab_ = INT32_MAX;
  for (const PreparedStep &s : steps_)
    if (s.step.op == plan::StepOp::kEmbedding)
      tokenVocab_ = std::min(tokenVocab_, embeddingVocab(s));
}

Status CudaBackend::checkTokenIds(const Batch &batch) const {
  for (const PreparedStep &s : steps_) {
    if (s.step.op != plan::StepOp::kEmbedding)
      continue;
    const int64_t vocab = embeddingVocab(s);
    for (int32_t id : batch.tokenIds)
      if (id < 0 || id >= vocab)
        return outOfRange("token id " + std::to_string(id) +
                          " outside the vocabulary of " +
                          std::to_string(vocab));
  }
  return Status::ok();
}

} // namespace infer::cuda
