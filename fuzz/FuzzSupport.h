//===- FuzzSupport.h - Shared pieces of the libFuzzer harnesses -*- C++ -*-===//

#ifndef INFER_FUZZ_FUZZSUPPORT_H
#define INFER_FUZZ_FUZZSUPPORT_H

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <unistd.h>

namespace infer::fuzz {

/// A directory of this process for files the readers under test open.
inline const std::string &scratchDir() {
  // Never destroyed: the exit handler that removes it runs after static
  // destructors.
  static const std::string *dir = [] {
    auto *d = new std::string(std::filesystem::temp_directory_path().string() +
                              "/infer_fuzz." + std::to_string(::getpid()));
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code error;
      std::filesystem::remove_all(scratchDir(), error);
    });
    return d;
  }();
  return *dir;
}

/// Writes `bytes` to `name` in the scratch directory; returns its path.
inline std::string writeScratchFile(const std::string &name,
                                    std::string_view bytes) {
  const std::string path = scratchDir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

} // namespace infer::fuzz

#endif // INFER_FUZZ_FUZZSUPPORT_H
