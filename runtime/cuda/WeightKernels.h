//===- WeightKernels.h - Weight transforms on the device --------*- C++ -*-===//
//
// Launchers of kernels/WeightQuantize.cu: the quantize_fp8_e4m3 weight
// transform on the device, in the three steps of the host quantizer
// (runtime/engine/Artifact.cpp, fp8RowScales in runtime/backend/
// ParamSource.h) and with the same float arithmetic, so the codes and
// scales are the host's byte for byte:
//
//   rowAmax[r]   = max |x[r, :]|, NaN when the row holds a NaN
//   rowScales[r] = amax(rowAmax over r's group) / 448   (group: rows
//                  [groupEnds[g-1], groupEnds[g]); a non-finite group sets
//                  *nonFinite to 1)
//   codes[r, c]  = scale == 0 ? 0 : e4m3_satfinite(x[r, c] / scale)
//
// Each returns the launch's cudaError_t; none allocates or synchronises.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_WEIGHTKERNELS_H
#define INFER_RUNTIME_CUDA_WEIGHTKERNELS_H

#include "runtime/cuda/Kernels.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace infer::cuda {

/// x: [rows, cols] of `type`; rowAmax: [rows].
cudaError_t launchWeightRowAmax(const void *x, ElementType type, int64_t rows,
                                int64_t cols, float *rowAmax,
                                cudaStream_t stream);

/// groupEnds: [groups] increasing row indices, the last == rows.
cudaError_t launchWeightGroupScales(const float *rowAmax,
                                    const int64_t *groupEnds, int64_t groups,
                                    float *rowScales, int *nonFinite,
                                    cudaStream_t stream);

/// codes: [rows, cols].
cudaError_t launchWeightEncodeFp8(const void *x, ElementType type, int64_t rows,
                                  int64_t cols, const float *rowScales,
                                  uint8_t *codes, cudaStream_t stream);

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_WEIGHTKERNELS_H
