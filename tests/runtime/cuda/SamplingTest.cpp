//===- SamplingTest.cpp - Device sampling against the host reference -----===//
//
// launchSampleRows (kernels/Sampling.cu) against sampleRow
// (runtime/backend/Sampling.h):
// - greedy: the same token on every row, ties (lowest id wins), masked ids,
//   rows of -inf, vocabularies from 1 to Llama 3's 128256;
// - temperature / top-k / top-p / min-p on a small vocabulary, 20000 draws
//   per case with the host's draws: every token inside the host's support,
//   counts within a chi-square bound of the host's distribution
//   (p < 1e-6 to fail by chance), and, since both invert the same draw,
//   nearly every draw choosing the host's token;
// - top-k / top-p on full-size random rows: the token is in the host's
//   support and equals the host's choice for the same draw;
// - rows with NaN or +inf logits: the host's kNonFiniteLogitsToken;
// - forwardSample on a fixture model: greedy equals the argmax of
//   forward()'s logits, with graphs and eagerly.
//
//===----------------------------------------------------------------------===//

#include "runtime/backend/FiniteLogits.h"
#include "runtime/backend/Sampling.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/SamplingKernels.h"
#include "tests/runtime/cuda/DeviceArray.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

namespace infer::testing {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

cuda::DeviceRowSampling toDevice(const RowSampling &row) {
  cuda::DeviceRowSampling d;
  d.uniform = row.uniform;
  d.temperature = static_cast<float>(row.temperature);
  d.topP = static_cast<float>(row.topP);
  d.minP = static_cast<float>(row.minP);
  d.topK = static_cast<int32_t>(row.topK);
  d.numMaskedIds = row.numMaskedIds;
  std::copy_n(row.maskedIds.begin(), cuda::kMaxSampleMaskedIds, d.maskedIds);
  return d;
}

/// The device's token for each row of `logits` [rows.size(), vocab].
std::vector<int32_t> sampleOnDevice(const std::vector<float> &logits,
                                    int64_t vocab,
                                    const std::vector<RowSampling> &rows) {
  std::vector<cuda::DeviceRowSampling> params;
  for (const RowSampling &r : rows)
    params.push_back(toDevice(r));
  DeviceArray<float> dLogits(logits);
  DeviceArray<cuda::DeviceRowSampling> dParams(params);
  auto dTokens = DeviceArray<int32_t>::poisoned(rows.size());
  EXPECT_EQ(cuda::launchSampleRows(dLogits.get(),
                                   static_cast<int64_t>(rows.size()), vocab,
                                   dParams.get(), dTokens.get(), nullptr),
            cudaSuccess);
  return dTokens.download();
}

class CudaSamplingTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!cuda::cudaDeviceAvailable(&why))
      GTEST_SKIP() << "CUDA sampling tests need a GPU: " << why;
  }

  std::vector<float> random(size_t n, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float &x : v)
      x = dist(rng_);
    return v;
  }
  double uniform() { return std::uniform_real_distribution<double>()(rng_); }

  std::mt19937_64 rng_{2024};
};

TEST_F(CudaSamplingTest, GreedyEqualsTheHostOnTiesMasksAndInfinities) {
  for (int64_t vocab : {1, 7, 1000, 4099, 128256}) {
    const int64_t rows = 24;
    std::vector<float> logits = random(rows * vocab, 3.0f);
    std::vector<RowSampling> params(rows);
    std::uniform_int_distribution<int64_t> id(0, vocab - 1);
    for (int64_t r = 0; r < rows; ++r) {
      float *row = logits.data() + r * vocab;
      // Rounded logits tie often; some rows tie their maximum on purpose.
      if (r % 3 == 0)
        for (int64_t i = 0; i < vocab; ++i)
          row[i] = std::round(row[i]);
      if (r % 4 == 1) {
        const float top = *std::max_element(row, row + vocab);
        for (int k = 0; k < 3; ++k)
          row[id(rng_)] = top;
      }
      if (r % 5 == 2) {
        RowSampling &p = params[r];
        p.numMaskedIds = 3;
        for (int k = 0; k < p.numMaskedIds; ++k)
          p.maskedIds[k] = static_cast<int32_t>(
              std::max_element(row, row + vocab) - row + k);
      }
      if (r == 7)
        std::fill(row, row + vocab, kNegInf);
      if (r == 8)
        row[id(rng_)] = kNegInf;
    }
    const std::vector<int32_t> tokens = sampleOnDevice(logits, vocab, params);
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_EQ(tokens[r],
                sampleRow(logits.data() + r * vocab, vocab, params[r]))
          << "vocab " << vocab << " row " << r;
  }
}

TEST_F(CudaSamplingTest, NonFiniteRowsGiveTheHostsErrorToken) {
  // NaN or +inf anywhere in a row, masked or not, greedy or sampled: the
  // host's sampleRow answers kNonFiniteLogitsToken and so must the device.
  // -inf alone is a masked token, not an error.
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float kPosInf = std::numeric_limits<float>::infinity();
  for (int64_t vocab : {1, 1000, 128256}) {
    const int64_t rows = 12;
    std::vector<float> logits = random(rows * vocab, 3.0f);
    std::vector<RowSampling> params(rows);
    std::uniform_int_distribution<int64_t> id(0, vocab - 1);
    for (int64_t r = 0; r < rows; ++r) {
      float *row = logits.data() + r * vocab;
      const int64_t at = r < 6 ? id(rng_) : vocab - 1;
      if (r % 3 == 0)
        row[at] = kNaN;
      else if (r % 3 == 1)
        row[at] = kPosInf;
      else
        row[at] = kNegInf;
      if (r % 2 == 1)
        params[r] = RowSampling();
      else {
        params[r].temperature = 0.8;
        params[r].topK = 50;
        params[r].topP = 0.9;
        params[r].uniform = 0.5;
      }
      if (r == 4) { // the NaN masked: still an error, as on the host
        params[r].numMaskedIds = 1;
        params[r].maskedIds[0] = static_cast<int32_t>(at);
      }
    }
    const std::vector<int32_t> tokens = sampleOnDevice(logits, vocab, params);
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t host =
          sampleRow(logits.data() + r * vocab, vocab, params[r]);
      EXPECT_EQ(host == kNonFiniteLogitsToken, r % 3 != 2)
          << "vocab " << vocab << " row " << r;
      ASSERT_EQ(tokens[r], host) << "vocab " << vocab << " row " << r;
    }
  }
}

RowSampling sampling(double temperature, int64_t topK, double topP,
                     double minP) {
  RowSampling r;
  r.temperature = temperature;
  r.topK = topK;
  r.topP = topP;
  r.minP = minP;
  return r;
}

TEST_F(CudaSamplingTest, TopKTopPDrawsFollowTheHostDistribution) {
  const int64_t vocab = 16;
  const int64_t draws = 20000;
  const std::vector<float> base = random(vocab, 1.5f);
  const std::vector<RowSampling> cases = {
      sampling(1.0, 0, 1.0, 0.0), sampling(0.7, 5, 1.0, 0.0),
      sampling(1.3, 0, 0.8, 0.0), sampling(1.0, 8, 0.9, 0.05),
      sampling(2.0, 3, 0.5, 0.0), sampling(0.8, 0, 1.0, 0.2),
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<float> logits;
    std::vector<RowSampling> rows(draws, cases[c]);
    for (RowSampling &r : rows) {
      r.uniform = uniform();
      logits.insert(logits.end(), base.begin(), base.end());
    }
    const std::vector<int32_t> tokens = sampleOnDevice(logits, vocab, rows);
    std::vector<double> expected = filteredWeights(
        std::vector<double>(base.begin(), base.end()), cases[c].temperature,
        cases[c].topK, cases[c].topP, cases[c].minP);
    double total = 0.0;
    for (double w : expected)
      total += w;
    std::vector<int64_t> counts(vocab, 0);
    int64_t sameAsHost = 0;
    for (int64_t d = 0; d < draws; ++d) {
      ASSERT_GE(tokens[d], 0);
      ASSERT_LT(tokens[d], vocab);
      ASSERT_GT(expected[tokens[d]], 0.0)
          << "case " << c << ": token " << tokens[d] << " outside the support";
      ++counts[tokens[d]];
      sameAsHost += tokens[d] == sampleRow(base.data(), vocab, rows[d]);
    }
    double chi2 = 0.0;
    int64_t support = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      if (expected[i] == 0.0)
        continue;
      const double e = draws * expected[i] / total;
      chi2 += (counts[i] - e) * (counts[i] - e) / e;
      ++support;
    }
    // Chi-square with df = support - 1 <= 15 exceeds 50 with p < 1e-6.
    EXPECT_LT(chi2, 50.0) << "case " << c << " over " << support << " tokens";
    EXPECT_GE(sameAsHost, draws - draws / 1000) << "case " << c;
  }
}

TEST_F(CudaSamplingTest, FullVocabularyRowsKeepTheHostSupport) {
  const int64_t vocab = 128256;
  const std::vector<RowSampling> cases = {
      sampling(1.0, 50, 1.0, 0.0),    sampling(0.8, 0, 0.9, 0.0),
      sampling(1.0, 1000, 0.95, 0.0), sampling(1.2, 0, 1.0, 0.1),
      sampling(1.0, 0, 1.0, 0.0),
  };
  const int64_t perCase = 6;
  std::vector<RowSampling> rows;
  for (const RowSampling &c : cases)
    for (int64_t k = 0; k < perCase; ++k) {
      rows.push_back(c);
      rows.back().uniform = uniform();
    }
  const int64_t n = static_cast<int64_t>(rows.size());
  const std::vector<float> logits = random(n * vocab, 4.0f);
  const std::vector<int32_t> tokens = sampleOnDevice(logits, vocab, rows);
  int64_t sameAsHost = 0;
  for (int64_t r = 0; r < n; ++r) {
    const float *row = logits.data() + r * vocab;
    const std::vector<double> w = filteredWeights(
        std::vector<double>(row, row + vocab), rows[r].temperature,
        rows[r].topK, rows[r].topP, rows[r].minP);
    ASSERT_GE(tokens[r], 0);
    ASSERT_LT(tokens[r], vocab);
    EXPECT_GT(w[tokens[r]], 0.0) << "row " << r << " outside the support";
    sameAsHost += tokens[r] == sampleRow(row, vocab, rows[r]);
  }
  EXPECT_GE(sameAsHost, n - 1);
}

TEST_F(CudaSamplingTest, ForwardSampleGreedyEqualsForwardArgmax) {
  const std::string dir = std::string(INFER_FIXTURES_DIR) + "/rand/llama-gqa";
  if (!std::filesystem::exists(dir + "/config.json"))
    GTEST_SKIP() << "fixture missing: " << dir;
  StatusOr<Artifact> artifact = buildLlamaArtifact(dir, 16, plan::DType::kBF16);
  ASSERT_TRUE(artifact.isOk()) << artifact.status().message();
  StatusOr<ParamTable> params = loadParams(*artifact, 0, dir);
  ASSERT_TRUE(params.isOk()) << params.status().message();
  const int64_t bs = artifact->plan.kvCache.blockSize;
  for (bool graphs : {true, false}) {
    cuda::CudaBackendOptions options;
    options.numBlocks = 16;
    options.maxGraphTokens = graphs ? 64 : 0;
    auto backend = cuda::createCudaBackend(artifact->plan, 0, *params, options);
    ASSERT_TRUE(backend.isOk()) << backend.status().message();
    // Two sequences: a prompt, then decode steps of both, twice over so
    // graphs are captured and replayed, sampled and not.
    std::vector<std::vector<int32_t>> seqs = {{196, 25, 502, 67}, {175, 3}};
    for (int step = 0; step < 6; ++step) {
      Batch batch;
      batch.queryStartLoc = {0};
      batch.maxBlocksPerSeq = 4;
      for (size_t s = 0; s < seqs.size(); ++s) {
        const int64_t total = static_cast<int64_t>(seqs[s].size());
        const int64_t first = step == 0 ? 0 : total - 1;
        for (int64_t p = first; p < total; ++p) {
          batch.tokenIds.push_back(seqs[s][p]);
          batch.positions.push_back(static_cast<int32_t>(p));
          batch.slotMapping.push_back(static_cast<int64_t>(s) * 4 * bs + p);
        }
        batch.logitsIndices.push_back(
            static_cast<int32_t>(batch.tokenIds.size() - 1));
        batch.queryStartLoc.push_back(
            static_cast<int32_t>(batch.tokenIds.size()));
        batch.contextLens.push_back(static_cast<int32_t>(total));
        for (int32_t b = 0; b < 4; ++b)
          batch.blockTables.push_back(static_cast<int32_t>(s) * 4 + b);
      }
      // forward() rewrites the same keys and values, so both see one cache.
      StatusOr<Logits> logits = (*backend)->forward(batch);
      ASSERT_TRUE(logits.isOk()) << logits.status().message();
      SamplingBatch greedy;
      greedy.rows.resize(seqs.size());
      StatusOr<std::vector<int32_t>> tokens =
          (*backend)->forwardSample(batch, greedy);
      ASSERT_TRUE(tokens.isOk()) << tokens.status().message();
      ASSERT_EQ(tokens->size(), seqs.size());
      for (size_t s = 0; s < seqs.size(); ++s) {
        EXPECT_EQ((*tokens)[s],
                  sampleRow(logits->row(s), logits->vocab, greedy.rows[s]))
            << "graphs " << graphs << " step " << step << " seq " << s;
        seqs[s].push_back((*tokens)[s]);
      }
    }
  }
}

} // namespace
} // namespace infer::testing
