//===- Fp8Artifacts.h - The fp8 test artifact of the GPU tests --*- C++ -*-===//
//
// tiny-pycode-target compiled with `--quant fp8 --quant-granularity
// per-channel` under $INFER_CUDA_FP8_ARTIFACTS (tests/runtime/cuda/
// gpu_check.sh makes it from artifacts.txt), loaded with its fixture's
// weights, for the GPU tests that run an fp8-weight model.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_TESTS_RUNTIME_CUDA_FP8ARTIFACTS_H
#define INFER_TESTS_RUNTIME_CUDA_FP8ARTIFACTS_H

#include "runtime/engine/Artifact.h"
#include "tests/runtime/support/FixtureCases.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace infer::testing {

struct Fp8TinyPycode {
  FixtureCase fixture;
  Artifact artifact;
  ParamTable params;
};

/// Loads the fp8 tiny-pycode-target into `out`. Returns why a test skips
/// ("" once loaded): no $INFER_CUDA_FP8_ARTIFACTS artifact or no fixture.
/// An artifact or weights that fail to load are a test failure too.
inline std::string loadFp8TinyPycode(std::optional<Fp8TinyPycode> &out) {
  const char *root = std::getenv("INFER_CUDA_FP8_ARTIFACTS");
  const std::string dir =
      root ? std::string(root) + "/tiny-pycode-target" : std::string();
  if (dir.empty() || !std::filesystem::is_directory(dir))
    return "INFER_CUDA_FP8_ARTIFACTS has no tiny-pycode-target";
  FixtureCase fixture;
  for (FixtureCase &c :
       loadFixtureCases(INFER_FIXTURES_DIR, INFER_PROJECT_FIXTURES_DIR))
    if (c.name == "tiny-pycode-target")
      fixture = c;
  if (fixture.name.empty())
    return "fixture tiny-pycode-target not found";
  StatusOr<Artifact> artifact = loadArtifact(dir);
  if (!artifact.isOk()) {
    ADD_FAILURE() << artifact.status().message();
    return "the fp8 artifact did not load";
  }
  StatusOr<ParamTable> params = loadParams(*artifact, 0, fixture.modelDir);
  if (!params.isOk()) {
    ADD_FAILURE() << params.status().message();
    return "the fp8 artifact's weights did not load";
  }
  out = Fp8TinyPycode{std::move(fixture), std::move(*artifact),
                      std::move(*params)};
  return "";
}

} // namespace infer::testing

#endif // INFER_TESTS_RUNTIME_CUDA_FP8ARTIFACTS_H
