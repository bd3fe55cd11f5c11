//===- Backend.h - The interface of execution backends ----------*- C++ -*-===//
//
// A backend owns a rank's parameters and KV-cache pool and runs the plan's
// forward function on one flat batch (DESIGN.md, "One batch contract"):
//
//   seq 0: 3 cached + 2 new     seq 1: 0 cached + 4 new (prefill)
//   token_ids        [a3 a4 | b0 b1 b2 b3]          T = 6
//   positions        [ 3  4 |  0  1  2  3]
//   query_start_loc  [0, 2, 6]                      B + 1
//   context_lens     [5, 4]                         cached + new
//   block_tables     [[7, -], [2, -]]               B x M (block_size 16)
//   slot_mapping     [7*16+3, 7*16+4, 2*16+0, ...]  T
//   logits_indices   [1, 5]                         S rows of logits
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_BACKEND_BACKEND_H
#define INFER_RUNTIME_BACKEND_BACKEND_H

#include "runtime/backend/Sampling.h"
#include "runtime/plan/Plan.h"
#include "runtime/support/Status.h"

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace infer {

/// The inputs of one forward call.
struct Batch {
  std::vector<int32_t> tokenIds;
  std::vector<int32_t> positions;
  std::vector<int32_t> queryStartLoc;
  std::vector<int32_t> contextLens;
  /// Row-major [numSeqs, maxBlocksPerSeq].
  std::vector<int32_t> blockTables;
  int64_t maxBlocksPerSeq = 0;
  std::vector<int64_t> slotMapping;
  std::vector<int32_t> logitsIndices;
  /// Token ids that the previous launchSample() chose (asynchronous
  /// scheduling): before the forward runs, tokenIds[tokenIndex] becomes the
  /// token that call sampled for its logits row `row`, taken where the
  /// tokens are (on the device) without waiting for that call's
  /// collectSample(). Only launchSample() resolves them; forward() and
  /// forwardSample() reject a batch that has any.
  struct SampledToken {
    int32_t tokenIndex = 0;
    int32_t row = 0;
  };
  std::vector<SampledToken> sampledTokens;

  int64_t numTokens() const { return static_cast<int64_t>(tokenIds.size()); }
  int64_t numSeqs() const { return static_cast<int64_t>(contextLens.size()); }

  /// Checks sizes and index ranges against a pool of `numBlocks` blocks of
  /// `blockSize` slots, so a backend never reads or writes out of bounds,
  /// and that every sequence has at least one new token. Sampled tokens
  /// must name distinct tokens; their rows are checked by launchSample().
  Status validate(int64_t numBlocks, int64_t blockSize) const;
  /// The error of forward() and forwardSample() for a batch with sampled
  /// tokens (ok without any).
  Status rejectSampledTokens(std::string_view backend) const;
};

/// Row-major fp32 logits [rows, vocab].
struct Logits {
  int64_t rows = 0;
  int64_t vocab = 0;
  std::vector<float> data;

  const float *row(int64_t r) const { return data.data() + r * vocab; }
};

/// Read-only bytes that tensors view instead of owning: a packed weight
/// file mapped into memory (runtime/engine/PackedWeights.h). The mapping
/// lives as long as a tensor holds it.
class HostMapping {
public:
  virtual ~HostMapping() = default;
  /// The path of the mapped file, for messages.
  virtual const std::string &name() const = 0;
};

struct ParamSource;

/// A parameter on the host as its plan value's dtype says, shared between
/// ranks or values that load the same source tensor through the same
/// transforms: f32 elements in `data`, bf16 or f16 bit patterns in `bits16`
/// (`dtype` says which), or, quantized at load (`quantize_fp8_e4m3`), FP8
/// E4M3 codes with one fp32 scale per row of dimension 0:
///
///   element (i, j) = decodeFp8(fp8Codes[i * cols + j], kE4M3) * rowScales[i]
///
/// A tensor of a packed artifact owns none of these vectors: it views the
/// same storage, in the same layout, inside `mapping` (`mappedElements`,
/// and `mappedRowScales` for fp8). Backends read every tensor through the
/// accessors (f32Data, bits16Data, fp8Data, rowScaleData), which serve both.
///
/// A deferred tensor (`source`, loaded for a backend that transforms at
/// upload: the CUDA backend) holds no elements yet: only how to gather them
/// from the checkpoint (ParamSource.h); it is never `consistent()`.
struct HostTensor {
  plan::DType dtype = plan::DType::kF32;
  std::vector<int64_t> shape;
  std::vector<float> data;
  std::vector<uint16_t> bits16;
  std::vector<uint8_t> fp8Codes;
  std::vector<float> rowScales;
  std::shared_ptr<const HostMapping> mapping;
  const void *mappedElements = nullptr;
  const float *mappedRowScales = nullptr;
  std::shared_ptr<const ParamSource> source;

  bool isFp8() const { return dtype == plan::DType::kF8E4M3; }
  bool isMapped() const { return mapping != nullptr; }
  bool isDeferred() const { return source != nullptr; }
  const float *f32Data() const;
  const uint16_t *bits16Data() const;
  const uint8_t *fp8Data() const;
  const float *rowScaleData() const;
  /// Bytes of the elements (without an fp8 tensor's row scales).
  int64_t elementBytes() const;
  int64_t numElements() const;
  /// Whether the storage is the one `dtype` names, with shape's elements.
  bool consistent() const;
  /// The elements as fp32: exact for f32, bf16 and f16; fp8 decoded and
  /// scaled.
  std::vector<float> toFloat() const;
  /// Rounds fp32 `data` to `to` (bf16 or f16: into bits16, nearest even);
  /// f32 keeps it.
  void convertTo(plan::DType to);
};
/// Plan value id -> parameter.
using ParamTable = std::map<int, std::shared_ptr<const HostTensor>>;

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  /// Blocks in the KV-cache pool.
  virtual int64_t numBlocks() const = 0;
  /// Runs one forward call; writes the new tokens' keys and values into the
  /// pool and returns the logits of the rows named by logits_indices.
  virtual StatusOr<Logits> forward(const Batch &batch) = 0;
  /// Runs one forward call like forward() and returns, instead of the
  /// logits, the token each logits row chooses under `sampling` (one row of
  /// parameters per logits index; Sampling.h). The default samples forward()'s
  /// logits on the host (sampleRow, the reference); a backend overrides it
  /// to sample where the logits are.
  virtual StatusOr<std::vector<int32_t>>
  forwardSample(const Batch &batch, const SamplingBatch &sampling);

  /// Asynchronous scheduling (EngineConfig::asyncScheduling): launchSample()
  /// starts what forwardSample() does and may return before the tokens are
  /// known, so that the host prepares the next call while the device runs
  /// this one:
  ///
  ///   host    launch(k) collect(k-1) [schedule, pack k+1] launch(k+1) ...
  ///   device  ...k-1...][.......k.......][.......k+1.......]
  ///
  /// collectSample() waits for the oldest launch not yet collected and
  /// returns its tokens, or the error it ended with. At most
  /// kMaxLaunchesInFlight launches are uncollected at a time. A launch
  /// resolves `batch.sampledTokens` from the tokens of the launch before it,
  /// collected or not (token 0 where that launch failed). An error from
  /// launchSample() means nothing was launched. The default runs
  /// forwardSample() at once and keeps the tokens until they are collected (a
  /// backend without a device queue).
  static constexpr int kMaxLaunchesInFlight = 2;
  virtual Status launchSample(const Batch &batch,
                              const SamplingBatch &sampling);
  virtual StatusOr<std::vector<int32_t>> collectSample();
  /// Device time spent idle between the end of one launch's work and the
  /// start of the next's, summed over the backend's life; negative where the
  /// backend does not measure it.
  virtual double deviceIdleSeconds() const { return -1.0; }
  /// Copies whole blocks of the pool, every layer's keys and values, from
  /// the first of each pair to the second (copy-on-write of a block that
  /// forked sequences share), after the forward calls already launched and
  /// before the next one: a backend may enqueue the copies in that order
  /// rather than finish them before it returns (the CUDA backend does).
  virtual Status
  copyBlocks(const std::vector<std::pair<int32_t, int32_t>> &copies) {
    return unimplemented(std::string(name()) +
                         " backend: copying KV-cache blocks");
  }

private:
  /// The default launchSample()'s tokens, oldest first, and the newest
  /// launch's (what the next launch's sampled tokens read).
  std::deque<StatusOr<std::vector<int32_t>>> launched_;
  std::vector<int32_t> lastSampled_;
  bool hasLastSampled_ = false;
  bool lastFailed_ = false;
};

} // namespace infer

#endif // INFER_RUNTIME_BACKEND_BACKEND_H
