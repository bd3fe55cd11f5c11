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

#include "runtime/plan/StepAttrs.h"
#include "runtime/support/Fp8.h"
#include "runtime/support/Status.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace infer::cpu {

class ThreadPool;

/// y[T,N] = x[T,K] * w[N,K]^T (+ bias[N]).
void linear(const float *x, int64_t t, int64_t k, const float *w, int64_t n,
            const float *bias, float *y, ThreadPool &pool);

/// linear() of an FP8 E4M3 weight, codes[N,K] with one scale per row:
/// w[j][i] = decodeFp8(codes[j*K+i]) * rowScales[j], decoded on the fly (a
/// tile of rows at a time, through a 256-entry table) into exactly the fp32
/// values, products and sums of linear() on the dequantized matrix.
void linearFp8(const float *x, int64_t t, int64_t k, const uint8_t *codes,
               const float *rowScales, int64_t n, const float *bias, float *y,
               ThreadPool &pool);

/// decodeFp8 of all 256 codes of `format`.
const float *fp8DecodeTable(Fp8Format format);

/// y = x / sqrt(mean(x^2) + eps) * (weightOffset + w), per row of h (the
/// offset added to w in fp32: Gemma's 1 + w).
void rmsNorm(const float *x, const float *w, float *y, int64_t rows, int64_t h,
             double epsilon, float weightOffset = 0.0f);

/// sum = a + b, y = rmsNorm(sum, w), one pass per row (add_rms_norm).
void addRmsNorm(const float *a, const float *b, const float *w, float *sum,
                float *y, int64_t rows, int64_t h, double epsilon,
                float weightOffset = 0.0f);

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

/// Exact GELU (HF "gelu"): 0.5 x (1 + erf(x / sqrt 2)), in double and
/// rounded once.
inline float geluScalar(float x) {
  const double v = x;
  return static_cast<float>(0.5 * v * (1.0 + std::erf(v * M_SQRT1_2)));
}

void silu(const float *x, float *y, int64_t n);
void geluTanh(const float *x, float *y, int64_t n);
void gelu(const float *x, float *y, int64_t n);
/// y = silu(gate) * up.
void siluMul(const float *gate, const float *up, float *y, int64_t n);

/// Rotary embedding parameters (rope, rope_kv_cache_write, key ropes).
using plan::RopeConfig;

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

/// The storage of a KV pool laid out as CacheGeometry says: fp32 `values`,
/// or one FP8 code per element (plan::KVCacheLayout dtype f8e5m2, or f8e4m3
/// with one fp32 scale per head vector of one token, layer and k/v):
///
///   codes  [num_blocks][num_layers][2][block_size][num_kv_heads][head_dim]
///   scales [num_blocks][num_layers][2][block_size][num_kv_heads]   (E4M3)
///
/// so the scale of the head vector at element offset o is scales[o / d].
struct KVPool {
  float *values = nullptr;
  uint8_t *codes = nullptr;
  float *scales = nullptr;
  Fp8Format format = Fp8Format::kE5M2;
  /// The dtype `values` stores: f32 as is, bf16 / f16 rounded to it.
  plan::DType valueType = plan::DType::kF32;

  /// Stores `src`, the head_dim keys or values of the head vector at element
  /// `offset`, quantizing them in an fp8 pool (E4M3: scale = amax / 448).
  void storeHead(int64_t offset, int64_t headDim, const float *src) const;
  /// The head vector at element `offset` as fp32: in place in an fp32 pool,
  /// else decoded into `scratch` (headDim floats).
  const float *loadHead(int64_t offset, int64_t headDim, float *scratch) const {
    if (values)
      return values + offset;
    decodeHead(offset, headDim, scratch);
    return scratch;
  }
  void decodeHead(int64_t offset, int64_t headDim, float *out) const;
};

/// Writes k and v rows [T, kvh*d] of `layer` to their slots; slot -1 skips.
void kvCacheWrite(const KVPool &pool, const CacheGeometry &geometry,
                  int64_t layer, const float *k, const float *v,
                  const int64_t *slots, int64_t t);
inline void kvCacheWrite(float *pool, const CacheGeometry &geometry,
                         int64_t layer, const float *k, const float *v,
                         const int64_t *slots, int64_t t) {
  kvCacheWrite(KVPool{pool}, geometry, layer, k, v, slots, t);
}

/// kvCacheWrite of applyRope(k) and v: each key row is rotated on its way
/// into the cache (rope_kv_cache_write).
void ropeKVCacheWrite(const KVPool &pool, const CacheGeometry &geometry,
                      int64_t layer, const float *k, const float *v,
                      const int64_t *slots, const int32_t *positions, int64_t t,
                      const RopeConfig &rope,
                      const std::vector<float> &invFreq);
inline void ropeKVCacheWrite(float *pool, const CacheGeometry &geometry,
                             int64_t layer, const float *k, const float *v,
                             const int64_t *slots, const int32_t *positions,
                             int64_t t, const RopeConfig &rope,
                             const std::vector<float> &invFreq) {
  ropeKVCacheWrite(KVPool{pool}, geometry, layer, k, v, slots, positions, t,
                   rope, invFreq);
}

struct AttentionParams {
  int64_t layer = 0;
  int64_t numHeads = 0;
  int64_t numKVHeads = 0;
  int64_t headDim = 0;
  double scale = 1.0;
  /// 0: none; else a query at position p sees keys in (p - window, p].
  int64_t slidingWindow = 0;
  /// > 0: each scaled score s becomes logitSoftcap * tanh(s / logitSoftcap).
  double logitSoftcap = 0.0;
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
/// An fp8 pool's keys and values are dequantized as they are read.
void pagedAttention(const float *q, const KVPool &cache,
                    const CacheGeometry &geometry, const AttentionParams &p,
                    const int32_t *blockTables, int64_t maxBlocksPerSeq,
                    const int32_t *contextLens, const int32_t *queryStartLoc,
                    int64_t numSeqs, float *out, ThreadPool &pool);
inline void pagedAttention(const float *q, const float *cache,
                           const CacheGeometry &geometry,
                           const AttentionParams &p, const int32_t *blockTables,
                           int64_t maxBlocksPerSeq, const int32_t *contextLens,
                           const int32_t *queryStartLoc, int64_t numSeqs,
                           float *out, ThreadPool &pool) {
  pagedAttention(q, KVPool{const_cast<float *>(cache)}, geometry, p,
                 blockTables, maxBlocksPerSeq, contextLens, queryStartLoc,
                 numSeqs, out, pool);
}

} // namespace infer::cpu

#endif // INFER_RUNTIME_CPU_KERNELS_H
