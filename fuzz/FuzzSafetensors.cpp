//===- FuzzSafetensors.cpp - libFuzzer: the safetensors reader ------------===//
//
// Any bytes as a .safetensors file: open (header parse and validation),
// then read every tensor it declares as fp32. Errors are fine; crashes,
// leaks and out-of-bounds reads are not.
//
//===----------------------------------------------------------------------===//

#include "fuzz/FuzzSupport.h"
#include "runtime/safetensors/Safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path = infer::fuzz::writeScratchFile(
      "input.safetensors",
      std::string_view(reinterpret_cast<const char *>(data), size));
  auto file = infer::safetensors::File::open(path);
  if (!file.isOk())
    return 0;
  for (const infer::safetensors::TensorInfo &t : (*file)->header().tensors) {
    (void)(*file)->tensorBytes(t.name);
    (void)(*file)->readAsF32(t.name);
  }
  return 0;
}
