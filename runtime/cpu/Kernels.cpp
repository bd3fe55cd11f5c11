//===- Kernels.cpp - fp32 reference kernels of the CPU backend ------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/support/Half.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace infer::cpu {

//===----------------------------------------------------------------------===//
// Matrix products
//===----------------------------------------------------------------------===//

namespace {
constexpr int kLanes = 8;

/// Dot products of `Rows` rows of x with one row of w, eight partial sums per
/// row so the compiler can vectorise without reassociating a single sum.
template <int Rows>
inline void dotRows(const float *const *x, const float *w, int64_t k,
                    float *out) {
  float acc[Rows][kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes)
    for (int r = 0; r < Rows; ++r)
      for (int l = 0; l < kLanes; ++l)
        acc[r][l] += x[r][i + l] * w[i + l];
  for (int r = 0; r < Rows; ++r) {
    float tail = 0.0f;
    for (int64_t j = i; j < k; ++j)
      tail += x[r][j] * w[j];
    out[r] = ((acc[r][0] + acc[r][4]) + (acc[r][1] + acc[r][5])) +
             ((acc[r][2] + acc[r][6]) + (acc[r][3] + acc[r][7])) + tail;
  }
}

inline float dot(const float *a, const float *b, int64_t k) {
  float out;
  const float *rows[1] = {a};
  dotRows<1>(rows, b, k, &out);
  return out;
}
} // namespace

namespace {
constexpr int64_t kWeightTile = 64;

/// y[T,N] = x[T,K] * w^T (+ bias), where `weightTile(n0, n1, scratch)`
/// returns rows n0 .. n1 of w (at most kWeightTile), row-major, as fp32.
template <typename WeightTile>
void linearTiles(const float *x, int64_t t, int64_t k, int64_t n,
                 const float *bias, float *y, ThreadPool &pool,
                 const WeightTile &weightTile) {
  // Columns of y (rows of w) are split across threads; within a thread a
  // tile of w rows stays in cache while every group of 4 x rows passes by.
  constexpr int64_t kRowGroup = 4;
  const int64_t minChunk =
      std::max<int64_t>(8, 65536 / std::max<int64_t>(1, k * t));
  pool.parallelFor(n, minChunk, [&](int64_t nBegin, int64_t nEnd) {
    std::vector<float> scratch;
    for (int64_t n0 = nBegin; n0 < nEnd; n0 += kWeightTile) {
      const int64_t n1 = std::min(nEnd, n0 + kWeightTile);
      const float *w = weightTile(n0, n1, scratch) - n0 * k;
      for (int64_t t0 = 0; t0 < t; t0 += kRowGroup) {
        const int64_t rows = std::min(kRowGroup, t - t0);
        const float *xr[kRowGroup];
        for (int64_t r = 0; r < kRowGroup; ++r)
          xr[r] = x + (t0 + std::min(r, rows - 1)) * k;
        for (int64_t j = n0; j < n1; ++j) {
          float out[kRowGroup];
          if (rows == kRowGroup)
            dotRows<kRowGroup>(xr, w + j * k, k, out);
          else
            for (int64_t r = 0; r < rows; ++r)
              dotRows<1>(&xr[r], w + j * k, k, &out[r]);
          const float b = bias ? bias[j] : 0.0f;
          for (int64_t r = 0; r < rows; ++r)
            y[(t0 + r) * n + j] = out[r] + b;
        }
      }
    }
  });
}

std::vector<float> makeDecodeTable(Fp8Format format) {
  std::vector<float> table(256);
  for (int code = 0; code < 256; ++code)
    table[code] = decodeFp8(static_cast<uint8_t>(code), format);
  return table;
}
} // namespace

void linear(const float *x, int64_t t, int64_t k, const float *w, int64_t n,
            const float *bias, float *y, ThreadPool &pool) {
  linearTiles(
      x, t, k, n, bias, y, pool,
      [&](int64_t n0, int64_t, std::vector<float> &) { return w + n0 * k; });
}

const float *fp8DecodeTable(Fp8Format format) {
  static const std::vector<float> e4m3 = makeDecodeTable(Fp8Format::kE4M3);
  static const std::vector<float> e5m2 = makeDecodeTable(Fp8Format::kE5M2);
  return format == Fp8Format::kE4M3 ? e4m3.data() : e5m2.data();
}

void linearFp8(const float *x, int64_t t, int64_t k, const uint8_t *codes,
               const float *rowScales, int64_t n, const float *bias, float *y,
               ThreadPool &pool) {
  const float *decode = fp8DecodeTable(Fp8Format::kE4M3);
  linearTiles(x, t, k, n, bias, y, pool,
              [&](int64_t n0, int64_t n1, std::vector<float> &tile) {
                tile.resize(static_cast<size_t>((n1 - n0) * k));
                for (int64_t j = n0; j < n1; ++j) {
                  const uint8_t *row = codes + j * k;
                  float *out = tile.data() + (j - n0) * k;
                  for (int64_t i = 0; i < k; ++i)
                    out[i] = decode[row[i]] * rowScales[j];
                }
                return tile.data();
              });
}

//===----------------------------------------------------------------------===//
// Elementwise and normalisation
//===----------------------------------------------------------------------===//

void rmsNorm(const float *x, const float *w, float *y, int64_t rows, int64_t h,
             double epsilon, float weightOffset) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * h;
    double sumSquares = 0.0;
    for (int64_t i = 0; i < h; ++i)
      sumSquares += static_cast<double>(xr[i]) * xr[i];
    const float variance = static_cast<float>(sumSquares / h);
    const float inv = static_cast<float>(
        1.0 / std::sqrt(static_cast<double>(variance) + epsilon));
    float *yr = y + r * h;
    for (int64_t i = 0; i < h; ++i)
      yr[i] = (w[i] + weightOffset) * (xr[i] * inv);
  }
}

void addRmsNorm(const float *a, const float *b, const float *w, float *sum,
                float *y, int64_t rows, int64_t h, double epsilon,
                float weightOffset) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *ar = a + r * h, *br = b + r * h;
    float *sr = sum + r * h;
    double sumSquares = 0.0;
    for (int64_t i = 0; i < h; ++i) {
      sr[i] = ar[i] + br[i];
      sumSquares += static_cast<double>(sr[i]) * sr[i];
    }
    const float variance = static_cast<float>(sumSquares / h);
    const float inv = static_cast<float>(
        1.0 / std::sqrt(static_cast<double>(variance) + epsilon));
    float *yr = y + r * h;
    for (int64_t i = 0; i < h; ++i)
      yr[i] = (w[i] + weightOffset) * (sr[i] * inv);
  }
}

void silu(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = siluScalar(x[i]);
}

void gelu(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = geluScalar(x[i]);
}

void geluTanh(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = geluTanhScalar(x[i]);
}

void siluMul(const float *gate, const float *up, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = siluScalar(gate[i]) * up[i];
}

//===----------------------------------------------------------------------===//
// Rotary embedding
//===----------------------------------------------------------------------===//

void applyRope(float *x, int64_t t, int64_t heads, const int32_t *positions,
               const RopeConfig &c, const std::vector<float> &invFreq) {
  const int64_t half = c.rotaryDim / 2;
  const int64_t longFrom = c.longFrom();
  std::vector<float> cosines(half), sines(half);
  for (int64_t i = 0; i < t; ++i) {
    const float pos = static_cast<float>(positions[i]);
    // longrope: the second table from longFrom on.
    const float *table =
        invFreq.data() + (longFrom > 0 && positions[i] >= longFrom ? half : 0);
    for (int64_t f = 0; f < half; ++f) {
      const float angle = pos * table[f];
      cosines[f] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sines[f] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
    for (int64_t h = 0; h < heads; ++h) {
      float *v = x + (i * heads + h) * c.headDim;
      for (int64_t f = 0; f < half; ++f) {
        const float x1 = v[f], x2 = v[f + half];
        v[f] = x1 * cosines[f] - x2 * sines[f];
        v[f + half] = x2 * cosines[f] + x1 * sines[f];
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// KV cache and attention
//===----------------------------------------------------------------------===//

void KVPool::storeHead(int64_t offset, int64_t headDim,
                       const float *src) const {
  if (values) {
    float *out = values + offset;
    switch (valueType) {
    case plan::DType::kBF16:
      for (int64_t e = 0; e < headDim; ++e)
        out[e] = roundToBf16(src[e]);
      break;
    case plan::DType::kF16:
      for (int64_t e = 0; e < headDim; ++e)
        out[e] = roundToF16(src[e]);
      break;
    default:
      std::memcpy(out, src, headDim * sizeof(float));
      break;
    }
    return;
  }
  uint8_t *out = codes + offset;
  if (format == Fp8Format::kE5M2) {
    for (int64_t e = 0; e < headDim; ++e)
      out[e] = encodeFp8(src[e], Fp8Format::kE5M2);
    return;
  }
  float amax = 0.0f;
  for (int64_t e = 0; e < headDim; ++e)
    amax = std::max(amax, std::fabs(src[e]));
  // A head whose scale is 0 (all zeros, or an amax so small that amax / 448
  // underflows) keeps codes 0, no 0 / 0; a non-finite one gets a non-finite
  // scale, as the activations it came from.
  const float scale = amax / kFp8E4M3Max;
  scales[offset / headDim] = scale;
  for (int64_t e = 0; e < headDim; ++e)
    out[e] = scale == 0.0f ? 0 : encodeFp8(src[e] / scale, Fp8Format::kE4M3);
}

void KVPool::decodeHead(int64_t offset, int64_t headDim, float *out) const {
  const float *decode = fp8DecodeTable(format);
  const uint8_t *in = codes + offset;
  if (format == Fp8Format::kE5M2) {
    for (int64_t e = 0; e < headDim; ++e)
      out[e] = decode[in[e]];
    return;
  }
  const float scale = scales[offset / headDim];
  for (int64_t e = 0; e < headDim; ++e)
    out[e] = decode[in[e]] * scale;
}

void kvCacheWrite(const KVPool &pool, const CacheGeometry &g, int64_t layer,
                  const float *k, const float *v, const int64_t *slots,
                  int64_t t) {
  const int64_t width = g.slotElements();
  for (int64_t i = 0; i < t; ++i) {
    if (slots[i] < 0)
      continue;
    for (int kv = 0; kv < 2; ++kv) {
      const float *row = (kv == 0 ? k : v) + i * width;
      const int64_t offset = g.offset(slots[i], layer, kv);
      for (int64_t h = 0; h < g.numKVHeads; ++h)
        pool.storeHead(offset + h * g.headDim, g.headDim, row + h * g.headDim);
    }
  }
}

void ropeKVCacheWrite(const KVPool &pool, const CacheGeometry &g, int64_t layer,
                      const float *k, const float *v, const int64_t *slots,
                      const int32_t *positions, int64_t t,
                      const RopeConfig &rope,
                      const std::vector<float> &invFreq) {
  // Keys are rotated before they are stored, so an fp8 pool quantizes the
  // rotated values.
  const int64_t width = g.slotElements();
  std::vector<float> key(width);
  for (int64_t i = 0; i < t; ++i) {
    if (slots[i] < 0)
      continue;
    std::memcpy(key.data(), k + i * width, width * sizeof(float));
    applyRope(key.data(), 1, g.numKVHeads, positions + i, rope, invFreq);
    kvCacheWrite(pool, g, layer, key.data(), v + i * width, slots + i, 1);
  }
}

void pagedAttention(const float *q, const KVPool &cachePool,
                    const CacheGeometry &g, const AttentionParams &p,
                    const int32_t *blockTables, int64_t maxBlocksPerSeq,
                    const int32_t *contextLens, const int32_t *queryStartLoc,
                    int64_t numSeqs, float *out, ThreadPool &pool) {
  const int64_t t = queryStartLoc[numSeqs];
  const int64_t d = p.headDim;
  const int64_t groupSize = p.numHeads / p.numKVHeads;
  std::vector<int32_t> seqOfToken(t);
  for (int64_t s = 0; s < numSeqs; ++s)
    for (int64_t i = queryStartLoc[s]; i < queryStartLoc[s + 1]; ++i)
      seqOfToken[i] = static_cast<int32_t>(s);
  // Unrotated cached keys: each sequence's keys [context_len, kvh*d],
  // rotated at their index in its cache.
  const bool rotateKeys = p.keyRope.rotaryDim > 0;
  const int64_t width = g.slotElements();
  std::vector<std::vector<float>> rotatedKeys(rotateKeys ? numSeqs : 0);
  if (rotateKeys)
    pool.parallelFor(numSeqs, 1, [&](int64_t begin, int64_t end) {
      for (int64_t s = begin; s < end; ++s) {
        const int32_t *table = blockTables + s * maxBlocksPerSeq;
        std::vector<float> &keys = rotatedKeys[s];
        std::vector<int32_t> positions(contextLens[s]);
        keys.resize(positions.size() * width);
        for (int64_t j = 0; j < contextLens[s]; ++j) {
          const int64_t slot =
              static_cast<int64_t>(table[j / g.blockSize]) * g.blockSize +
              j % g.blockSize;
          for (int64_t h = 0; h < p.numKVHeads; ++h) {
            float *key = keys.data() + j * width + h * d;
            const float *cached =
                cachePool.loadHead(g.offset(slot, p.layer, 0) + h * d, d, key);
            if (cached != key)
              std::memcpy(key, cached, d * sizeof(float));
          }
          positions[j] = static_cast<int32_t>(j);
        }
        applyRope(keys.data(), contextLens[s], p.numKVHeads, positions.data(),
                  p.keyRope, p.keyRopeInvFreq);
      }
    });

  const int64_t items = t * p.numHeads;
  pool.parallelFor(items, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    std::vector<float> acc(d);
    std::vector<float> scratch(d);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i = item / p.numHeads, h = item % p.numHeads;
      const int64_t s = seqOfToken[i];
      const int64_t newTokens = queryStartLoc[s + 1] - queryStartLoc[s];
      const int64_t position =
          contextLens[s] - newTokens + (i - queryStartLoc[s]);
      const int64_t first =
          p.slidingWindow > 0
              ? std::max<int64_t>(0, position - p.slidingWindow + 1)
              : 0;
      const int32_t *table = blockTables + s * maxBlocksPerSeq;
      const int64_t kvHead = h / groupSize;
      const float *qh = q + (i * p.numHeads + h) * d;
      auto slotOf = [&](int64_t pos) {
        return static_cast<int64_t>(table[pos / g.blockSize]) * g.blockSize +
               pos % g.blockSize;
      };
      scores.resize(position - first + 1);
      float maxScore = -std::numeric_limits<float>::infinity();
      for (int64_t j = first; j <= position; ++j) {
        const float *kj =
            rotateKeys ? rotatedKeys[s].data() + j * width + kvHead * d
                       : cachePool.loadHead(g.offset(slotOf(j), p.layer, 0) +
                                                kvHead * d,
                                            d, scratch.data());
        float score = dot(qh, kj, d) * static_cast<float>(p.scale);
        if (p.logitSoftcap > 0)
          score = static_cast<float>(
              p.logitSoftcap *
              std::tanh(static_cast<double>(score) / p.logitSoftcap));
        scores[j - first] = score;
        maxScore = std::max(maxScore, score);
      }
      double sum = 0.0;
      for (float &score : scores) {
        score =
            static_cast<float>(std::exp(static_cast<double>(score - maxScore)));
        sum += score;
      }
      const float invSum = static_cast<float>(1.0 / sum);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = first; j <= position; ++j) {
        const float *vj = cachePool.loadHead(
            g.offset(slotOf(j), p.layer, 1) + kvHead * d, d, scratch.data());
        const float weight = scores[j - first] * invSum;
        for (int64_t e = 0; e < d; ++e)
          acc[e] += weight * vj[e];
      }
      std::memcpy(out + (i * p.numHeads + h) * d, acc.data(),
                  d * sizeof(float));
    }
  });
}

} // namespace infer::cpu
