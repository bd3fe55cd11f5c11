//===- Sampling.h - Token choice inside a backend ---------------*- C++ -*-===//
//
// What a backend needs to choose the next token of each logits row itself
// (Backend::forwardSample), so that only the chosen ids leave the device:
//
//   logits row ─▶ masked ids at -inf ─▶ greedy: argmax (lowest id on ties)
//                                    └▶ / temperature ─▶ min-p ─▶ top-k
//                                       ─▶ top-p ─▶ inverse CDF at `uniform`
//
// The filters are the engine Sampler's (Sampler.h), without penalties: the
// functions below are its reference implementation, shared with it. The
// random draw is not made here: the engine draws `uniform` from the
// request's own RNG, one draw per sampled token, so a seeded request gets
// the same tokens whatever else is in its batch and whichever backend
// samples. A device samples in fp32 where the host uses fp64, so for
// temperature > 0 a device may choose another token than the host when the
// draw lands within rounding of a CDF step; greedy choices are identical.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_BACKEND_SAMPLING_H
#define INFER_RUNTIME_BACKEND_SAMPLING_H

#include "runtime/support/Status.h"

#include <array>
#include <cstdint>
#include <vector>

namespace infer {

/// The sampling of one logits row.
struct RowSampling {
  /// Most ids a row can mask (the EOS ids of an ignore_eos request).
  static constexpr int kMaxMaskedIds = 8;

  /// 0 = greedy; > 0 samples softmax(logits / temperature).
  double temperature = 0.0;
  /// Keep the k most likely tokens (and ties with the k-th); 0 keeps all.
  int64_t topK = 0;
  /// Keep the smallest most-likely set whose mass reaches top_p.
  double topP = 1.0;
  /// Drop tokens less likely than min_p times the most likely one.
  double minP = 0.0;
  /// The request's draw in [0, 1) for this token; unused when greedy.
  double uniform = 0.0;
  /// Ids never chosen.
  std::array<int32_t, kMaxMaskedIds> maskedIds{};
  int32_t numMaskedIds = 0;

  bool greedy() const { return temperature <= 0.0; }
};

/// One RowSampling per row of Batch::logitsIndices, in order.
struct SamplingBatch {
  std::vector<RowSampling> rows;

  /// Checks the parameters' ranges and that there is one row per logits
  /// row of a batch with `numLogitsRows` of them.
  Status validate(int64_t numLogitsRows) const;
};

/// The index of the largest value that is not -inf, lowest on ties; -1 when
/// every value is -inf.
int64_t argmaxOf(const std::vector<double> &values);

/// Unnormalized weights of `logits` (-inf: excluded) after temperature,
/// min-p, top-k and top-p; 0 marks a filtered token.
std::vector<double> filteredWeights(const std::vector<double> &logits,
                                    double temperature, int64_t topK,
                                    double topP, double minP);

/// The token whose CDF step holds `uniform` (in [0, 1)) of the total of
/// `weights` (unnormalized, in id order).
int32_t drawFromWeights(const std::vector<double> &weights, double uniform);

/// The host reference: the token `row` chooses from a row of logits.
int32_t sampleRow(const float *logits, int64_t vocab, const RowSampling &row);

} // namespace infer

#endif // INFER_RUNTIME_BACKEND_SAMPLING_H
