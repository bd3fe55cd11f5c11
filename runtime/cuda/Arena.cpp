//===- Arena.cpp - First-fit ranges of one device buffer ------------------===//

#include "runtime/cuda/Arena.h"

#include <iterator>

namespace infer::cuda {

void Arena::reset(size_t capacity) {
  capacity_ = capacity;
  free_.clear();
  used_.clear();
  if (capacity)
    free_[0] = capacity;
}

std::optional<size_t> Arena::allocate(size_t bytes) {
  bytes = (bytes + 255) / 256 * 256;
  if (bytes == 0)
    bytes = 256;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes)
      continue;
    const size_t offset = it->first, left = it->second - bytes;
    free_.erase(it);
    if (left)
      free_[offset + bytes] = left;
    used_[offset] = bytes;
    return offset;
  }
  return std::nullopt;
}

void Arena::free(size_t offset) {
  auto used = used_.find(offset);
  if (used == used_.end())
    return;
  size_t bytes = used->second;
  used_.erase(used);
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_[offset] = bytes;
}

} // namespace infer::cuda
