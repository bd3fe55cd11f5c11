//===- Arena.h - First-fit ranges of one device buffer ----------*- C++ -*-===//
//
// Activations of a forward call live in one device buffer; this host-side
// bookkeeping hands out byte ranges of it (first fit, freed ranges merged).
// Allocation is then free of CUDA calls, so a captured CUDA graph holds
// kernels only, and replays of it see the same addresses:
//
//   buffer  [ h0 | q | k | v |   free    | logits |      free       ]
//            ^0   ^ offsets as returned                 ^capacity
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_ARENA_H
#define INFER_RUNTIME_CUDA_ARENA_H

#include <cstddef>
#include <map>
#include <optional>

namespace infer::cuda {

class Arena {
public:
  /// Every range free again, over `capacity` bytes.
  void reset(size_t capacity);
  /// The offset of `bytes` (rounded up to 256), or none when no free range
  /// is large enough.
  std::optional<size_t> allocate(size_t bytes);
  /// Returns a range allocate() handed out.
  void free(size_t offset);
  size_t capacity() const { return capacity_; }

private:
  size_t capacity_ = 0;
  std::map<size_t, size_t> free_; ///< offset -> bytes
  std::map<size_t, size_t> used_; ///< offset -> bytes
};

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_ARENA_H
