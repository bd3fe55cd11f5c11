//===- Progress.cpp - Progress of long operations on stderr ---------------===//

#include "runtime/engine/Progress.h"

#include <algorithm>

#include <unistd.h>

namespace infer {

namespace {

std::string formatBytes(double bytes) {
  char text[32];
  if (bytes >= 1e9)
    std::snprintf(text, sizeof(text), "%.1f GB", bytes / 1e9);
  else
    std::snprintf(text, sizeof(text), "%.1f MB", bytes / 1e6);
  return text;
}

} // namespace

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled),
      terminal_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()), lastDraw_(start_) {}

Progress::~Progress() {
  // Unfinished (an error): end a drawn bar's line, claim nothing more.
  std::lock_guard<std::mutex> lock(mutex_);
  if (enabled_ && !finished_ && terminal_ && done_ > 0)
    std::fprintf(stderr, "\n");
}

void Progress::advance(uint64_t bytes) {
  if (!enabled_)
    return;
  std::lock_guard<std::mutex> lock(mutex_);
  done_ = std::min(total_, done_ + bytes);
  draw(/*last=*/false);
}

void Progress::finish() {
  if (!enabled_)
    return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_)
    return;
  finished_ = true;
  done_ = total_;
  draw(/*last=*/true);
}

void Progress::draw(bool last) {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double fraction =
      total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  const double rate = seconds > 0 ? static_cast<double>(done_) / seconds : 0;
  if (terminal_) {
    // Redraw at most 10 times a second.
    if (!last && now - lastDraw_ < std::chrono::milliseconds(100))
      return;
    lastDraw_ = now;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(fraction * kWidth);
    std::fprintf(stderr, "\r%s [%s%s] %3d%%  %s/%s  %s/s%s", label_.c_str(),
                 std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(),
                 static_cast<int>(fraction * 100),
                 formatBytes(static_cast<double>(done_)).c_str(),
                 formatBytes(static_cast<double>(total_)).c_str(),
                 formatBytes(rate).c_str(), last ? "\n" : "");
    std::fflush(stderr);
    return;
  }
  if (last) {
    std::fprintf(stderr, "infer: %s: %s in %.2f s (%s/s)\n", label_.c_str(),
                 formatBytes(static_cast<double>(total_)).c_str(), seconds,
                 formatBytes(rate).c_str());
    return;
  }
  const int quarter = static_cast<int>(fraction * 4);
  if (seconds < 1.0 || quarter <= quartersLogged_ || quarter >= 4)
    return;
  quartersLogged_ = quarter;
  std::fprintf(stderr, "infer: %s: %d%% (%s of %s)\n", label_.c_str(),
               quarter * 25, formatBytes(static_cast<double>(done_)).c_str(),
               formatBytes(static_cast<double>(total_)).c_str());
}

} // namespace infer
