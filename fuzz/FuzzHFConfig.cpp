//===- FuzzHFConfig.cpp - libFuzzer: the Hugging Face config.json reader --===//
//
// The first byte says whether a generation_config.json follows the
// config.json (split at the first NUL byte); both are written to a scratch
// model directory and read by parseModelConfig, as `infer compile` does.
//
//===----------------------------------------------------------------------===//

#include "frontend/HFConfig.h"
#include "fuzz/FuzzSupport.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <filesystem>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  static mlir::MLIRContext context;
  mlir::ScopedDiagnosticHandler quiet(
      &context, [](mlir::Diagnostic &) { return mlir::success(); });
  std::string_view rest(reinterpret_cast<const char *>(data) + 1, size - 1);
  std::string_view config = rest.substr(0, rest.find('\0'));
  infer::fuzz::writeScratchFile("config.json", config);
  const std::string generation =
      infer::fuzz::scratchDir() + "/generation_config.json";
  if (data[0] % 2 && config.size() < rest.size())
    infer::fuzz::writeScratchFile("generation_config.json",
                                  rest.substr(config.size() + 1));
  else
    std::filesystem::remove(generation);
  (void)infer::frontend::parseModelConfig(infer::fuzz::scratchDir(), context);
  return 0;
}
