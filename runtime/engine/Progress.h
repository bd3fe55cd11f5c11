//===- Progress.h - Progress of long operations on stderr -------*- C++ -*-===//
//
// Compiling, packing and loading weights take seconds to minutes on real
// models. On a terminal a bar is redrawn in place:
//
//   loading weights [##########..........]  52%  8.3/16.0 GB  5.1 GB/s
//
// otherwise (logs, CI) plain lines: one per quarter of a run that lasts
// over a second, and one at the end with the time taken.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_ENGINE_PROGRESS_H
#define INFER_RUNTIME_ENGINE_PROGRESS_H

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace infer {

/// Reports `total` bytes of work named `label` on stderr; advance() may be
/// called from several threads. Does nothing when disabled.
class Progress {
public:
  Progress(std::string label, uint64_t total, bool enabled = true);
  ~Progress();
  Progress(const Progress &) = delete;
  Progress &operator=(const Progress &) = delete;

  void advance(uint64_t bytes);
  /// Prints the final line (once). A Progress destroyed unfinished (the
  /// work failed) prints nothing more.
  void finish();

private:
  void draw(bool last);

  std::string label_;
  uint64_t total_;
  uint64_t done_ = 0;
  bool enabled_;
  bool terminal_;
  bool finished_ = false;
  int quartersLogged_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point lastDraw_;
  std::mutex mutex_;
};

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_PROGRESS_H
