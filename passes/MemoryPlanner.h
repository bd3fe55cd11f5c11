//===- MemoryPlanner.h - buffer placement in one workspace ------*- C++ -*-===//
//
// Places buffers with known live ranges in one workspace so that buffers
// alive at the same step never overlap, reusing the space of dead ones. Free
// of MLIR so it can be built with exceptions (Boost.Graph may throw) apart
// from the compiler.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_PASSES_MEMORYPLANNER_H
#define INFER_PASSES_MEMORYPLANNER_H

#include <cstdint>
#include <vector>

namespace infer::memory {

/// A buffer live from the step that defines it to its last reader, both
/// included.
struct Buffer {
  int64_t bytes = 0;
  int64_t firstStep = 0;
  int64_t lastStep = 0;
};

struct Placement {
  /// Byte offset of each buffer, in input order.
  std::vector<int64_t> offsets;
  /// Size of the workspace: the end of the highest buffer.
  int64_t peakBytes = 0;
};

/// Buffer sizes are rounded up to this many bytes, so offsets stay aligned.
inline constexpr int64_t kAlignment = 64;

/// Builds the interference graph of `buffers` (an edge between buffers whose
/// live ranges intersect) and places them largest first, each at the lowest
/// offset where it overlaps none of its already placed neighbours.
Placement placeBuffers(const std::vector<Buffer> &buffers);

} // namespace infer::memory

#endif // INFER_PASSES_MEMORYPLANNER_H
