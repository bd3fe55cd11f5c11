//===- SamplingKernels.h - Token choice on the device -----------*- C++ -*-===//
//
// The launcher of kernels/Sampling.cu: each logits row chooses its token on
// the device (Backend::forwardSample), so only the ids come back. The
// semantics are runtime/backend/Sampling.h's (the host reference), in fp32.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_SAMPLINGKERNELS_H
#define INFER_RUNTIME_CUDA_SAMPLINGKERNELS_H

#include <cuda_runtime_api.h>

#include <cstdint>

namespace infer::cuda {

inline constexpr int kMaxSampleMaskedIds = 8;

/// One row's RowSampling as the kernel reads it.
struct DeviceRowSampling {
  /// The request's draw in [0, 1); unused when greedy.
  double uniform = 0.0;
  /// <= 0: greedy.
  float temperature = 0.0f;
  float topP = 1.0f;
  float minP = 0.0f;
  /// 0 keeps all.
  int32_t topK = 0;
  int32_t numMaskedIds = 0;
  int32_t maskedIds[kMaxSampleMaskedIds] = {};
};

/// tokens[r] = the token row r of logits [rows, vocab] chooses under
/// params[r], one block per row:
/// - greedy: the argmax, lowest id on ties (masked ids and -inf excluded;
///   0 when nothing is left);
/// - else weights exp((logit - max) / temperature), zero below min_p; top-k
///   keeps weights >= the k-th largest (a radix select over the weights'
///   bits); top-p drops the least likely weights whose mass stays <= 1 - p
///   (a radix select over the bits weighted by mass, ties at the threshold
///   kept); then the inverse CDF in id order at uniform * total. Masses are
///   2^-40 fixed point, so sums are exact and the result deterministic.
cudaError_t launchSampleRows(const float *logits, int64_t rows, int64_t vocab,
                             const DeviceRowSampling *params, int32_t *tokens,
                             cudaStream_t stream);

/// One token of a forward call that a previous call sampled on the device
/// (Batch::SampledToken): tokenIds[tokenIndex] = sampled[row].
struct DeviceSampledToken {
  int32_t tokenIndex = 0;
  int32_t row = 0;
};

/// Writes each of the `count` pairs' sampled token into `tokenIds`; a token
/// outside [0, vocab) (kNonFiniteLogitsToken) feeds 0, and the engine fails
/// its request when it collects that row. Indices are checked on the host.
cudaError_t launchFeedSampledTokens(int32_t *tokenIds,
                                    const DeviceSampledToken *pairs,
                                    int64_t count, const int32_t *sampled,
                                    int64_t vocab, cudaStream_t stream);

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_SAMPLINGKERNELS_H
