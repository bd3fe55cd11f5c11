//===- Kernels.h - fp32 reference kernels of the CPU backend ----*- C++ -*-===//
//
// One function per plan op, on dense row-major fp32 buffers. They follow the
// Hugging Face transformers fp32 computation closely (same rope frequency
// arithmetic, fp32 products with wide accumulation) so that logits agree to
// ~1e-6 relative.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CPU_KERNELS_H
#define INFER_RUNTIME_CPU_KERNELS_H

#include "runtime/plan/Plan.h"
#include "runtime/support/Status.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace infer::cpu {

class ThreadPool;

/// y[T,N] = x[T,K] * w[N,K]^T (+ bias[N]).
void linear(const float *x, int64_t t, int64_t k, const float *w, int64_t n,
            const float *bias, float *y, ThreadPool &pool);

/// y = x / sqrt(mean(x^2) + eps) * w, per row of h.
void rmsNorm(const float *x, const float *w, float *y, int64_t rows, int64_t h,
             double epsilon);

/// sum = a + b, y = rmsNorm(sum, w), one pass per row (add_rms_norm).
void addRmsNorm(const float *a, const float *b, const float *w, float *sum,
                float *y, int64_t rows, int64_t h, double epsilon);

/// x * sigmoid(x), computed in double and rounded once, like HF's fp32 silu.
inline float siluScalar(float x) {
  return static_cast<float>(x / (1.0 + std::exp(-static_cast<double>(x))));
}
/// GELU with the tanh approximation (HF "gelu_pytorch_tanh").
inline float geluTanhScalar(float x) {
  const double v = x;
  return static_cast<float>(
      0.5 * v *
      (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
}

void silu(const float *x, float *y, int64_t n);
void geluTanh(const float *x, float *y, int64_t n);
/// y = silu(gate) * up.
void siluMul(const float *gate, const float *up, float *y, int64_t n);

/// Rotary embedding parameters of a `rope` step.
struct RopeConfig {
  int64_t headDim = 0;
  int64_t rotaryDim = 0;
  double theta = 10000.0;
  std::string scaling = "default"; ///< "default" | "linear" | "llama3"
  double factor = 1.0;
  double lowFreqFactor = 1.0;
  double highFreqFactor = 4.0;
  int64_t originalMaxPositionEmbeddings = 0;

  Status validate() const;
};

/// The rotary_dim / 2 inverse frequencies, computed in fp32 like HF's
/// _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters
/// and _compute_llama3_parameters.
std::vector<float> ropeInverseFrequencies(const RopeConfig &config);

/// Rotates each head of x[T, heads*headDim] in place (rotate_half style:
/// dimension i pairs with i + rotaryDim/2; dimensions past rotaryDim pass).
void applyRope(float *x, int64_t t, int64_t heads, const int32_t *positions,
               const RopeConfig &config, const std::vector<float> &invFreq);

/// Geometry of the paged KV pool (plan::KVCacheLayout, sizes only).
///
///   pool = [num_blocks][num_layers][2][block_size][kv_heads][head_dim]
///          block b, layer l: keys at   ((b*L + l)*2 + 0) * bs*kvh*d
///                            values at ((b*L + l)*2 + 1) * bs*kvh*d
struct CacheGeometry {
  int64_t numLayers = 0;
  int64_t numKVHeads = 0;
  int64_t headDim = 0;
  int64_t blockSize = 0;

  int64_t slotElements() const { return numKVHeads * headDim; }
  int64_t blockElements() const {
    return numLayers * 2 * blockSize * slotElements();
  }
  /// Offset of the keys (kv = 0) or values (kv = 1) of `slot` in `layer`.
  int64_t offset(int64_t slot, int64_t layer, int kv) const {
    const int64_t block = slot / blockSize, inBlock = slot % blockSize;
    return ((block * numLayers + layer) * 2 + kv) * blockSize * slotElements() +
           inBlock * slotElements();
  }
};

/// Writes k and v rows [T, kvh*d] of `layer` to their slots; slot -1 skips.
void kvCacheWrite(float *pool, const CacheGeometry &geometry, int64_t layer,
                  const float *k, const float *v, const int64_t *slots,
                  int64_t t);

/// kvCacheWrite of applyRope(k) and v: each key row is rotated in its cache
/// slot (rope_kv_cache_write).
void ropeKVCacheWrite(float *pool, const CacheGeometry &geometry, int64_t layer,
                      const float *k, const float *v, const int64_t *slots,
                      const int32_t *positions, int64_t t,
                      const RopeConfig &rope,
                      const std::vector<float> &invFreq);

struct AttentionParams {
  int64_t layer = 0;
  int64_t numHeads = 0;
  int64_t numKVHeads = 0;
  int64_t headDim = 0;
  double scale = 1.0;
  /// 0: none; else a query at position p sees keys in (p - window, p].
  int64_t slidingWindow = 0;
  /// keyRope.rotaryDim > 0: the cache holds unrotated keys, and key j of a
  /// sequence is rotated at position j, its index in the sequence's cache
  /// (StreamingLLM's position shift).
  RopeConfig keyRope;
  std::vector<float> keyRopeInvFreq;
};

/// Causal attention of q[T, h*d] over the cached keys and values of each
/// sequence; query i of sequence s sits at position
/// context_lens[s] - new_tokens(s) + i. Writes out[T, h*d]. With a key rope,
/// each sequence's keys are first gathered and rotated at their positions.
void pagedAttention(const float *q, const float *cache,
                    const CacheGeometry &geometry, const AttentionParams &p,
                    const int32_t *blockTables, int64_t maxBlocksPerSeq,
                    const int32_t *contextLens, const int32_t *queryStartLoc,
                    int64_t numSeqs, float *out, ThreadPool &pool);

} // namespace infer::cpu

#endif // INFER_RUNTIME_CPU_KERNELS_H
