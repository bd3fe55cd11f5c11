//===- Graphs.cpp - Forward calls: eager runs and CUDA graphs -------------===//
//
// A forward call of at most maxGraphTokens tokens replays a CUDA graph
// captured the first time its shape (tokens, sequences, block-table width,
// logits rows, sampling) ran; other calls run their steps eagerly. Decode
// batches are padded to a few bucket sizes first (BatchInputs.cpp), so a
// growing or shrinking batch reuses the same graphs. A sampled call returns
// once its work is enqueued (collectSample waits for it); forward() waits
// for its logits.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/backend/CudaBackendImpl.h"

namespace infer::cuda {

StatusOr<Logits> CudaBackend::forward(const Batch &batch) {
  INFER_RETURN_IF_ERROR(batch.rejectSampledTokens(name()));
  INFER_RETURN_IF_ERROR(checkBatch(batch));
  // It runs after the launches in flight, in stream order: the device is
  // not idle between them and the next launch.
  otherWorkSinceLaunch_ = true;
  return forwardBatch(batch, nullptr);
}

StatusOr<Logits> CudaBackend::forwardBatch(const Batch &batch,
                                           const SamplingBatch *sampling) {
  INFER_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const std::optional<Batch> padded = padDecodeBatch(batch);
  const Batch &run = padded ? *padded : batch;
  const auto rows = static_cast<int64_t>(batch.logitsIndices.size());
  if (sampling) {
    INFER_RETURN_IF_ERROR(uploadSampling(
        *sampling, static_cast<int64_t>(run.logitsIndices.size())));
    sampling_ = sampling;
  }
  StatusOr<Logits> logits = Logits();
  for (;;) {
    arenaFull_ = false;
    logits = forwardOnce(run);
    if (!arenaFull_)
      break;
    // Rerunning is harmless: the steps before the failure wrote the same
    // keys and values to the same slots.
    Status grown = growArena(2 * arena_.capacity());
    if (!grown.isOk()) {
      logits = grown;
      break;
    }
  }
  sampling_ = nullptr;
  if (logits.isOk() && logits->rows > rows) {
    logits->rows = rows;
    if (!logits->data.empty())
      logits->data.resize(static_cast<size_t>(rows * logits->vocab));
  }
  return logits;
}

StatusOr<Logits> CudaBackend::forwardOnce(const Batch &batch) {
  INFER_RETURN_IF_ERROR(uploadInputs(batch));
  // Decode-only calls tune their GEMM shapes (they recur: bucketed row
  // counts, graphs); calls with prefill rows run the heuristic's choice.
  gemm_->setTuneNewShapes(batch.numTokens() == batch.numSeqs());
  Logits logits;

  constexpr size_t kMaxGraphs = 512;
  const GraphKey key{batch.numTokens(), batch.numSeqs(), paddedBlocksPerSeq_,
                     static_cast<int64_t>(batch.logitsIndices.size()),
                     sampling_ != nullptr};
  auto it = graphs_.find(key);
  // Profiled runs are eager: a graph's steps cannot be timed one by one.
  bool replay = !profileSteps_ && batch.numTokens() <= maxGraphTokens_ &&
                (it != graphs_.end() || graphs_.size() < kMaxGraphs);
  // A shape runs once eagerly before it is captured: cuBLASLt tunes a GEMM
  // shape only outside a capture (Gemm::tune: inside one the heuristic's
  // first choice would stay for good), and NCCL connects peers lazily, with
  // host allocations a capture forbids.
  if (replay && warmUpGraphs_ && warmShapes_.insert(key).second)
    replay = false;
  if (replay) {
    if (it == graphs_.end()) {
      CapturedGraph graph;
      INFER_RETURN_IF_ERROR(capture(batch, graph));
      it = graphs_.emplace(key, std::move(graph)).first;
    }
    const CapturedGraph &graph = it->second;
    // Shapes are the key's; the indices a gather reads are data.
    for (const auto &[step, rows] : graph.gatherRows)
      for (int32_t index : batch.logitsIndices)
        if (index < 0 || index >= rows)
          return outOfRange("gather_rows index " + std::to_string(index) +
                            " outside " + std::to_string(rows) + " rows");
    INFER_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph.exec, stream_));
    logits.rows = graph.rows;
    logits.vocab = graph.cols;
    if (sampling_)
      return logits;
    INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    if (copyLogits_) {
      const float *host = graph.hostLogits.as<float>();
      logits.data.assign(host, host + graph.rows * graph.cols);
    }
    return logits;
  }

  Status status = runSteps(batch);
  if (status.isOk()) {
    const Tensor &out = values_[output_];
    logits.rows = out.rows;
    logits.vocab = out.cols;
    if (sampling_) {
      status = enqueueSampling(out);
    } else if (copyLogits_) {
      logits.data.resize(out.size());
      status = cudaStatus(cudaMemcpyAsync(logits.data.data(), out.data,
                                          out.size() * sizeof(float),
                                          cudaMemcpyDeviceToHost, stream_),
                          "cudaMemcpyAsync", __FILE__, __LINE__);
    }
  }
  // Freeing activations is host bookkeeping: the next call's steps reuse
  // the memory after this call's, in stream order.
  Status released = releaseActivations();
  INFER_RETURN_IF_ERROR(status);
  INFER_RETURN_IF_ERROR(released);
  // A sampled call's tokens are waited for by collectSample(); a profiled
  // one waits here to read its step events.
  if (sampling_ && !profileSteps_)
    return logits;
  INFER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (profileSteps_)
    INFER_RETURN_IF_ERROR(collectStepProfile());
  return logits;
}

Status CudaBackend::capture(const Batch &batch, CapturedGraph &graph) {
  // The logits' size from the plan, for a pinned buffer allocated before
  // the capture (allocating host memory is not allowed inside it).
  int64_t size = 1;
  for (const plan::Dim &d : rank_.values[output_].shape)
    size *= !d.isDynamic()    ? d.size
            : d.symbol == "T" ? batch.numTokens()
            : d.symbol == "S" ? static_cast<int64_t>(batch.logitsIndices.size())
            : d.symbol == "B" ? batch.numSeqs()
                              : -1;
  if (size < 0)
    return unimplemented("cuda backend: graph of an output with shape "
                         "symbols other than T, S, B");
  if (!sampling_)
    INFER_RETURN_IF_ERROR(
        graph.hostLogits.allocate(std::max<int64_t>(1, size) * sizeof(float)));
  INFER_CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  Status status = runSteps(batch);
  if (status.isOk()) {
    const Tensor &out = values_[output_];
    graph.rows = out.rows;
    graph.cols = out.cols;
    graph.gatherRows = gatherRows_;
    if (out.size() != size)
      status = internalError(
          "cuda backend: the logits have " + std::to_string(out.size()) +
          " elements, the plan's shape says " + std::to_string(size));
    else if (sampling_)
      status = enqueueSampling(out);
    else if (copyLogits_)
      status = cudaStatus(cudaMemcpyAsync(graph.hostLogits.get(), out.data,
                                          out.size() * sizeof(float),
                                          cudaMemcpyDeviceToHost, stream_),
                          "cudaMemcpyAsync", __FILE__, __LINE__);
  }
  Status released = releaseActivations();
  cudaGraph_t captured = nullptr;
  Status ended = cudaStatus(cudaStreamEndCapture(stream_, &captured),
                            "cudaStreamEndCapture", __FILE__, __LINE__);
  if (status.isOk())
    status = released.isOk() ? ended : released;
  if (status.isOk())
    status = cudaStatus(cudaGraphInstantiate(&graph.exec, captured, 0),
                        "cudaGraphInstantiate", __FILE__, __LINE__);
  if (captured)
    cudaGraphDestroy(captured);
  return status;
}

Status CudaBackend::destroyGraphs() {
  for (auto &[key, graph] : graphs_)
    INFER_CUDA_RETURN_IF_ERROR(cudaGraphExecDestroy(graph.exec));
  graphs_.clear();
  return Status::ok();
}

} // namespace infer::cuda
