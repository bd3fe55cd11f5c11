//===- FuzzCpuPlan.cpp - libFuzzer: plans the verifier accepts, run -------===//
//
// Any bytes as plan.json; a plan that parses (and so verifies) and is small
// gets parameters of the shapes and dtypes it declares and runs on the CPU
// backend: a prefill of three tokens, then one decode step. The backend may
// reject the plan or the batch with an error; it must never read or write
// out of bounds (issue 17: "every plan the verifier accepts must run
// without a crash").
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuBackend.h"
#include "runtime/plan/Plan.h"
#include "runtime/support/Fp8.h"

#include <algorithm>
#include <optional>

namespace {

using namespace infer;

/// Elements a fuzzed plan may ask for, per param (and KV block, workspace
/// row) and in all: keeps each run fast (the verifier's own limits are far
/// larger). The llama-gqa seed plan fits.
constexpr int64_t kMaxElements = int64_t(1) << 16;
constexpr int64_t kMaxTotalElements = int64_t(1) << 20;

/// Parameters for every param value of the rank, or none when the plan is
/// too large to run quickly.
std::optional<ParamTable> makeParams(const plan::RankPlan &rank) {
  ParamTable params;
  int64_t total = 0;
  for (const plan::Value &v : rank.values) {
    if (v.kind != plan::ValueKind::kParam)
      continue;
    auto tensor = std::make_shared<HostTensor>();
    int64_t n = 1;
    for (const plan::Dim &d : v.shape) {
      tensor->shape.push_back(d.size);
      n *= d.size;
    }
    total += n;
    if (n > kMaxElements || total > kMaxTotalElements)
      return std::nullopt;
    tensor->data.resize(n);
    for (int64_t i = 0; i < n; ++i)
      tensor->data[i] = 0.125f * static_cast<float>(i % 7 - 3);
    if (v.dtype == plan::DType::kF8E4M3) {
      tensor->dtype = plan::DType::kF8E4M3;
      for (float x : tensor->data)
        tensor->fp8Codes.push_back(encodeFp8(x * 4.0f, Fp8Format::kE4M3));
      tensor->rowScales.assign(tensor->shape[0], 0.25f);
      tensor->data.clear();
    } else {
      tensor->convertTo(v.dtype);
    }
    params[v.id] = std::move(tensor);
  }
  return params;
}

/// One sequence of `tokens` new tokens after `cached` ones, logits for its
/// last; one block per block_size tokens.
Batch sequenceBatch(int64_t cached, int64_t tokens, int64_t blockSize) {
  Batch batch;
  const int64_t total = cached + tokens;
  for (int64_t p = cached; p < total; ++p) {
    batch.tokenIds.push_back(static_cast<int32_t>(p % 3));
    batch.positions.push_back(static_cast<int32_t>(p));
    batch.slotMapping.push_back(p);
  }
  batch.queryStartLoc = {0, static_cast<int32_t>(tokens)};
  batch.contextLens = {static_cast<int32_t>(total)};
  batch.maxBlocksPerSeq = (total + blockSize - 1) / blockSize;
  for (int64_t b = 0; b < batch.maxBlocksPerSeq; ++b)
    batch.blockTables.push_back(static_cast<int32_t>(b));
  batch.logitsIndices = {static_cast<int32_t>(tokens - 1)};
  return batch;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto plan = plan::parsePlanJson(
      std::string_view(reinterpret_cast<const char *>(data), size));
  if (!plan.isOk() || plan->numRanks != 1)
    return 0;
  const plan::KVCacheLayout &kv = plan->kvCache;
  if (kv.blockSize > 64 || kv.blockElements() > kMaxElements)
    return 0;
  for (const plan::Value &v : plan->ranks[0].values)
    for (const plan::Dim &d : v.shape)
      if (d.size > 4096)
        return 0;
  if (plan->ranks[0].workspaceBytesPerRow > kMaxElements)
    return 0;
  std::optional<ParamTable> params = makeParams(plan->ranks[0]);
  if (!params)
    return 0;
  cpu::CpuBackendOptions options;
  options.numBlocks = 4;
  options.numThreads = 1;
  auto backend = cpu::createCpuBackend(*plan, 0, std::move(*params), options);
  if (!backend.isOk())
    return 0;
  const int64_t blockSize = kv.blockSize;
  if (!(*backend)->forward(sequenceBatch(0, 3, blockSize)).isOk())
    return 0;
  (void)(*backend)->forward(sequenceBatch(3, 1, blockSize));
  return 0;
}
