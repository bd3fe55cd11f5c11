//===- MemoryEstimate.cpp - Device memory needed by an artifact -----------===//

#include "runtime/engine/MemoryEstimate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace infer {
namespace {

int64_t fixedElements(const plan::Value &value) {
  int64_t n = 1;
  for (const plan::Dim &d : value.shape)
    if (!d.isDynamic())
      n *= d.size;
  return n;
}

bool hasTokenDim(const plan::Value &value) {
  return !value.shape.empty() && value.shape.front().symbol == "T";
}

std::string formatBytes(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", bytes,
                units[u]);
  return buf;
}

} // namespace

StatusOr<MemoryEstimate> estimateMemory(const plan::Manifest &manifest,
                                        const plan::Plan &plan,
                                        const MemoryEstimateOptions &options) {
  if (plan.ranks.empty())
    return invalidArgument("the plan has no ranks");
  if (options.deviceMemoryBytes <= 0 || options.utilization <= 0 ||
      options.utilization > 1 || options.maxNumBatchedTokens <= 0 ||
      options.maxNumSeqs <= 0 || options.kvElementBytes <= 0)
    return invalidArgument("memory estimate options must be positive (and "
                           "utilization at most 1)");
  MemoryEstimate e;
  e.numRanks = plan.numRanks;
  e.maxPositionEmbeddings = manifest.model.maxPositionEmbeddings;
  for (const plan::RankPlan &rank : plan.ranks) {
    int64_t weights = 0, rowBytes = 0;
    for (const plan::Value &v : rank.values) {
      int64_t bytes = fixedElements(v) * plan::dtypeSize(v.dtype);
      if (v.kind == plan::ValueKind::kParam) {
        weights += bytes;
        // FP8 weights: one byte per element and an fp32 scale per row.
        if (v.dtype == plan::DType::kF8E4M3 && !v.shape.empty())
          weights += v.shape.front().size * int64_t(sizeof(float));
      } else if (v.kind == plan::ValueKind::kActivation && hasTokenDim(v) &&
                 v.workspaceOffset < 0)
        rowBytes += bytes;
    }
    // Activations placed by infer-plan-memory share one workspace; the rest
    // (function results, or every activation without the pass) own theirs.
    rowBytes += rank.workspaceBytesPerRow;
    int64_t logits =
        options.maxNumSeqs * manifest.model.vocabSize * int64_t(sizeof(float));
    e.weightBytes = std::max(e.weightBytes, weights);
    e.activationBytes = std::max(
        e.activationBytes, rowBytes * options.maxNumBatchedTokens + logits);
  }
  const plan::KVCacheLayout &kv = plan.kvCache;
  // An fp8 cache stores one byte per element (and E4M3 an fp32 scale per
  // head); others are stored as options.kvElementBytes.
  const bool fp8 =
      kv.dtype == plan::DType::kF8E5M2 || kv.dtype == plan::DType::kF8E4M3;
  e.kvElementBytes = fp8 ? 1 : options.kvElementBytes;
  e.kvScaleBytesPerHead =
      kv.dtype == plan::DType::kF8E4M3 ? int64_t(sizeof(float)) : 0;
  e.kvBytesPerToken = kv.numLayers * 2 * kv.numKVHeads *
                      (kv.headDim * e.kvElementBytes + e.kvScaleBytesPerHead);
  e.usableBytes = static_cast<int64_t>(
      std::floor(double(options.deviceMemoryBytes) * options.utilization));
  e.kvCacheBytes =
      std::max<int64_t>(0, e.usableBytes - e.weightBytes - e.activationBytes);
  if (e.kvBytesPerToken > 0 && kv.blockSize > 0) {
    int64_t blocks = e.kvCacheBytes / (e.kvBytesPerToken * kv.blockSize);
    e.maxCachedTokens = blocks * kv.blockSize;
  }
  if (e.maxPositionEmbeddings > 0)
    e.maxFullContextSequences = e.maxCachedTokens / e.maxPositionEmbeddings;
  return e;
}

std::string formatMemoryEstimate(const MemoryEstimate &e,
                                 const MemoryEstimateOptions &options) {
  std::ostringstream os;
  os << "memory estimate per rank (" << e.numRanks << " rank"
     << (e.numRanks == 1 ? "" : "s") << ", device "
     << formatBytes(double(options.deviceMemoryBytes)) << " x "
     << options.utilization
     << " usable = " << formatBytes(double(e.usableBytes)) << "):\n";
  os << "  weights              " << formatBytes(double(e.weightBytes))
     << " (as stored: the checkpoint's dtype, fp8 with row scales)\n";
  os << "  activations          " << formatBytes(double(e.activationBytes))
     << " (" << options.maxNumBatchedTokens << " batched tokens, logits of "
     << options.maxNumSeqs << " sequences)\n";
  os << "  KV cache per token   " << formatBytes(double(e.kvBytesPerToken))
     << " (" << e.kvElementBytes << "-byte elements"
     << (e.kvScaleBytesPerHead ? ", an fp32 scale per head" : "") << ")\n";
  os << "  KV cache             " << formatBytes(double(e.kvCacheBytes))
     << "\n";
  os << "  max cached tokens    " << e.maxCachedTokens << "\n";
  os << "  max sequences        " << e.maxFullContextSequences << " of "
     << e.maxPositionEmbeddings << " tokens (max_position_embeddings)";
  if (e.maxCachedTokens == 0)
    os << "\n  the model does not fit: weights and activations exceed the "
          "usable memory";
  os << "\n";
  return os.str();
}

StatusOr<int64_t> parseByteSize(const std::string &text) {
  size_t i = 0;
  while (i < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0)
    return invalidArgument("'" + text + "' is not a size (e.g. 80GiB)");
  std::string number = text.substr(0, i);
  char *end = nullptr;
  double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size())
    return invalidArgument("'" + text + "' is not a size (e.g. 80GiB)");
  std::string unit = text.substr(i);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  for (char &c : unit)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "kib" || unit == "k")
    scale = 1024.0;
  else if (unit == "mib" || unit == "m")
    scale = 1024.0 * 1024;
  else if (unit == "gib" || unit == "g")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "kb")
    scale = 1e3;
  else if (unit == "mb")
    scale = 1e6;
  else if (unit == "gb")
    scale = 1e9;
  else if (unit == "tib" || unit == "t")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "tb")
    scale = 1e12;
  else
    return invalidArgument("'" + text + "': unknown unit '" + unit +
                           "' (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  double bytes = value * scale;
  if (!(bytes > 0) || bytes > 9.2e18)
    return invalidArgument("'" + text + "' is not a positive size");
  return static_cast<int64_t>(bytes);
}

} // namespace infer
