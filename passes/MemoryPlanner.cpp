//===- MemoryPlanner.cpp - buffer placement in one workspace --------------===//
//
// Greedy by size over the interference graph (as TensorFlow Lite's arena
// planner and the "greedy by size" offset calculation of Pisarchyk & Lee,
// 2020): large buffers claim space first, small ones fill the gaps between
// neighbours that are alive at the same time.
//
//===----------------------------------------------------------------------===//

#include "passes/MemoryPlanner.h"

#include <boost/graph/adjacency_list.hpp>

#include <algorithm>
#include <numeric>
#include <utility>

namespace infer::memory {

namespace {

using InterferenceGraph =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS>;

int64_t alignUp(int64_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

InterferenceGraph buildInterferenceGraph(const std::vector<Buffer> &buffers) {
  InterferenceGraph graph(buffers.size());
  for (size_t a = 0; a < buffers.size(); ++a)
    for (size_t b = a + 1; b < buffers.size(); ++b)
      if (buffers[a].firstStep <= buffers[b].lastStep &&
          buffers[b].firstStep <= buffers[a].lastStep)
        boost::add_edge(a, b, graph);
  return graph;
}

} // namespace

Placement placeBuffers(const std::vector<Buffer> &buffers) {
  InterferenceGraph graph = buildInterferenceGraph(buffers);
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return buffers[a].bytes > buffers[b].bytes;
  });

  Placement placement;
  placement.offsets.assign(buffers.size(), -1);
  for (size_t v : order) {
    const int64_t size = alignUp(buffers[v].bytes);
    std::vector<std::pair<int64_t, int64_t>> taken;
    auto [begin, end] = boost::adjacent_vertices(v, graph);
    for (auto it = begin; it != end; ++it)
      if (int64_t offset = placement.offsets[*it]; offset >= 0)
        taken.emplace_back(offset, offset + alignUp(buffers[*it].bytes));
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;
    for (const auto &[lo, hi] : taken) {
      if (lo - offset >= size)
        break;
      offset = std::max(offset, hi);
    }
    placement.offsets[v] = offset;
    placement.peakBytes = std::max(placement.peakBytes, offset + size);
  }
  return placement;
}

} // namespace infer::memory
