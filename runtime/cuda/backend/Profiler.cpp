//===- Profiler.cpp - Per-step timings of eager forward calls -------------===//
//
// With CudaBackendOptions::profileSteps every forward call runs eagerly with
// a CUDA event before each step and one after the last; the intervals are
// summed per label (the op, GEMMs by weight shape and dtype, since the path
// they take depends on both) for stepProfileReport.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/backend/CudaBackendImpl.h"

#include <algorithm>
#include <cstdio>

namespace infer::cuda {

Status CudaBackend::recordStepStart(size_t index) {
  if (profileEvents_.empty()) {
    profileEvents_.resize(steps_.size() + 1);
    for (cudaEvent_t &event : profileEvents_)
      INFER_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
    profileLabels_.assign(steps_.size(), "");
  }
  INFER_CUDA_RETURN_IF_ERROR(cudaEventRecord(profileEvents_[index], stream_));
  const PreparedStep &s = steps_[index];
  std::string label = rank_.steps[index].op;
  if (s.step.op == plan::StepOp::kLinear ||
      s.step.op == plan::StepOp::kLinearResidual ||
      s.step.op == plan::StepOp::kLinearSwiGlu ||
      s.step.op == plan::StepOp::kLogits) {
    const Tensor &w = params_[s.step.operands[1]];
    label += " " + std::to_string(w.rows) + "x" + std::to_string(w.cols) +
             (w.fp8 ? " fp8" : " bf16");
  }
  profileLabels_[index] = std::move(label);
  return Status::ok();
}

Status CudaBackend::collectStepProfile() {
  for (size_t i = 0; i < profileLabels_.size(); ++i) {
    float ms = 0;
    INFER_CUDA_RETURN_IF_ERROR(
        cudaEventElapsedTime(&ms, profileEvents_[i], profileEvents_[i + 1]));
    StepTime &t = profile_[profileLabels_[i]];
    ++t.calls;
    t.ms += ms;
  }
  ++profiledForwards_;
  return Status::ok();
}

std::string CudaBackend::stepProfileReport() const {
  std::vector<std::pair<std::string, StepTime>> rows(profile_.begin(),
                                                     profile_.end());
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
    return a.second.ms > b.second.ms;
  });
  double total = 0;
  for (const auto &row : rows)
    total += row.second.ms;
  const double forwards = std::max<int64_t>(profiledForwards_, 1);
  std::string out = "| step (op, GEMM weight shape) | steps per call | ms per "
                    "call | % |\n|---|---|---|---|\n";
  char line[256];
  for (const auto &[label, t] : rows) {
    std::snprintf(line, sizeof(line), "| %s | %.0f | %.3f | %.1f%% |\n",
                  label.c_str(), t.calls / forwards, t.ms / forwards,
                  total > 0 ? 100.0 * t.ms / total : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof(line),
                "| all steps | | %.3f | over %lld forward calls |\n",
                total / forwards, static_cast<long long>(profiledForwards_));
  return out + line;
}

} // namespace infer::cuda
