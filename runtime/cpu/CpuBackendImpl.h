//===- CpuBackendImpl.h - The CPU backend's class, for its parts -*- C++
//-*-===//
//
// Private to runtime/cpu. The backend is split by job:
//   CpuBackend.cpp  preparation (params, workspace, decoded steps), the KV
//                   pool, forward(): the step loop and the dtype of results
//   CpuSteps.cpp    one run##Name function per step op of StepOps.def
//
// Every value is computed in fp32; a result whose plan dtype is bf16 or f16
// is rounded to it (round to nearest even) as soon as its step ends, and a
// bf16 / f16 KV cache stores rounded values, so the CPU backend computes
// the numbers a GPU that stores those dtypes computes.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CPU_CPUBACKENDIMPL_H
#define INFER_RUNTIME_CPU_CPUBACKENDIMPL_H

#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/plan/StepAttrs.h"

#include <optional>
#include <string>
#include <vector>

namespace infer::cpu {

/// A step decoded once (plan::decodeStep) with what this backend adds.
struct PreparedStep {
  plan::DecodedStep step;
  std::string where;
  /// rope, rope_kv_cache_write, rope_qkv_cache_write: the inverse
  /// frequencies.
  std::vector<float> ropeInvFreq;
  /// embedding: the scale rounded to the result's dtype (Gemma's normalizer
  /// is a tensor of the activation dtype).
  float embeddingScale = 1.0f;
  /// paged_attention: the attributes as the attention kernel takes them.
  AttentionParams attention;
  /// Activations whose last use is this step (freed after it).
  std::vector<int> release;
};

/// A dense fp32 matrix: owned, borrowed (parameters), or placed in the
/// workspace (f32 activations the memory plan gave an offset). An FP8 weight
/// has codes and row scales instead of data (HostTensor::isFp8).
struct Matrix {
  const float *data = nullptr;
  const uint8_t *fp8Codes = nullptr;
  const float *rowScales = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  /// Set by allocate: the step that defines it has run (rows may be 0).
  bool computed = false;
  std::vector<float> storage;
  /// Workspace slot of `capacity` floats the result is computed into.
  float *placement = nullptr;
  int64_t capacity = 0;

  int64_t size() const { return rows * cols; }
  float *allocate(int64_t r, int64_t c);
  float *mutableData() { return const_cast<float *>(data); }
};

class CpuBackend final : public Backend {
public:
  CpuBackend(const plan::KVCacheLayout &layout, int64_t numBlocks,
             int numThreads, Communicator *communicator);

  std::string_view name() const override { return "cpu"; }
  int64_t numBlocks() const override { return numBlocks_; }
  StatusOr<Logits> forward(const Batch &batch) override;
  Status
  copyBlocks(const std::vector<std::pair<int32_t, int32_t>> &copies) override;

  /// Copies the rank's values and steps (the caller's plan may go away);
  /// `params` as createCpuBackend says.
  Status prepare(const plan::RankPlan &plan, const ParamTable &params);

private:
  Status prepareParams(const ParamTable &params);
  Status prepareWorkspace();
  Status runStep(const PreparedStep &step, const Batch &batch,
                 std::vector<Matrix> &values);
  /// The batch-contract array an input value binds, as i32, and its length.
  StatusOr<const int32_t *> intInput(int id, const Batch &batch,
                                     int64_t &length) const;

  // One function per step op (StepOps.def), in CpuSteps.cpp.
#define INFER_STEP_OP(Name, ...)                                               \
  Status run##Name(const PreparedStep &s, const Batch &batch,                  \
                   std::vector<Matrix> &values);
#include "runtime/plan/StepOps.def"

  ThreadPool pool_;
  CacheGeometry geometry_;
  int64_t numBlocks_;
  /// The rank's collectives; null for a one-rank plan.
  Communicator *communicator_;
  /// The KV pool: fp32 values (bf16 / f16 layouts store values rounded to
  /// their dtype), or fp8 codes and (E4M3) scales; kv_ points at whichever
  /// this plan's layout uses.
  std::vector<float> cache_;
  std::vector<uint8_t> codes_;
  std::vector<float> scales_;
  int64_t scalesPerBlock_ = 0;
  KVPool kv_;
  plan::RankPlan rank_;
  /// Param value id -> its fp32 elements (or fp8 codes) as Matrix views;
  /// the HostTensors they point into.
  std::vector<Matrix> params_;
  ParamTable paramData_;
  std::vector<std::vector<float>> paramFloats_;
  std::vector<PreparedStep> steps_;
  /// Per value: workspace offset and width in floats per token row, or -1.
  std::vector<int64_t> workspaceOffset_;
  std::vector<int64_t> workspaceWidth_;
  int64_t workspaceFloatsPerRow_ = 0;
  int output_ = -1;
};

} // namespace infer::cpu

#endif // INFER_RUNTIME_CPU_CPUBACKENDIMPL_H
