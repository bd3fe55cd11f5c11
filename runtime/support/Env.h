//===- Env.h - The runtime's environment switches ---------------*- C++ -*-===//
//
// The runtime's off switches for comparisons (INFER_PDL, INFER_SM90_PINGPONG,
// INFER_SM90_TILE_MAP, INFER_FUSE_FP8_QUANTIZE, INFER_FP8_UNSTORED_ROWS,
// INFER_FP8_FAST_ACCUM, INFER_CUDA_GRAPH_WARMUP): each is on unless its
// variable is "0".
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SUPPORT_ENV_H
#define INFER_RUNTIME_SUPPORT_ENV_H

#include <cstdlib>
#include <cstring>

namespace infer {

/// Whether the switch `name` is on: true unless the environment variable
/// `name` is "0".
inline bool envSwitchOn(const char *name) {
  const char *value = std::getenv(name);
  return !(value && std::strcmp(value, "0") == 0);
}

} // namespace infer

#endif // INFER_RUNTIME_SUPPORT_ENV_H
