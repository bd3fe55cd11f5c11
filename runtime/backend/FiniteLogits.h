//===- FiniteLogits.h - Rows of logits that cannot be sampled ---*- C++ -*-===//
//
// A NaN or +infinite logit means a broken checkpoint or an overflow in the
// model: no token can be chosen from its row. (-infinity is a masked token,
// as the samplers use it.) The host sampler
// (sampleRow, and so Backend::forwardSample's default) then chooses
// kNonFiniteLogitsToken, and the engine fails that request with an error
// instead of silently emitting token 0 or the last id. The cuda backend's
// device sampler (kernels/Sampling.cu) gives the same token for such rows.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_BACKEND_FINITELOGITS_H
#define INFER_RUNTIME_BACKEND_FINITELOGITS_H

#include <cmath>
#include <cstdint>

namespace infer {

/// What sampleRow chooses for a row with a NaN or +infinite logit.
inline constexpr int32_t kNonFiniteLogitsToken = -1;

/// Whether none of `n` logits is NaN or +infinity.
inline bool allFinite(const float *logits, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(logits[i]) || logits[i] == HUGE_VALF)
      return false;
  return true;
}

} // namespace infer

#endif // INFER_RUNTIME_BACKEND_FINITELOGITS_H
