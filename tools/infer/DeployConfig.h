//===- DeployConfig.h - The options of `infer compile` ----------*- C++ -*-===//
//
// `infer compile MODEL --config deploy.json -o ARTIFACT` reads the options
// from a JSON object whose keys are the flags' names in snake_case; flags
// given as well override it, and the manifest records the result
// ("deploy_config", shown by `infer inspect`), so a deployment is one
// reviewed file and an artifact says how it was made:
//
//   {"target": "cuda", "cuda_arch": "sm_90a", "dtype": "bfloat16",
//    "block_size": 16, "fuse": true, "plan_memory": true, "tp": 1,
//    "quant": "fp8", "quant_granularity": "per-channel",
//    "kv_cache_dtype": "auto", "sink_tokens": 4, "window": 0,
//    "pack_weights": true}
//
// Keys may be left out (their defaults apply); an unknown key or a value of
// the wrong type is an error naming it.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_TOOLS_INFER_DEPLOYCONFIG_H
#define INFER_TOOLS_INFER_DEPLOYCONFIG_H

#include "runtime/support/Status.h"
#include "tools/infer/Args.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace infer::tool {

struct DeployConfig {
  std::string target = "cpu";
  std::string cudaArch = "sm_90a";
  std::string dtype = "auto";
  int64_t blockSize = 16;
  bool fuse = true;
  bool planMemory = true;
  int64_t tp = 1;
  std::string quant = "none";
  std::string quantGranularity = "per-tensor";
  std::string kvCacheDtype = "auto";
  int64_t sinkTokens = 4;
  int64_t window = 0;
  bool packWeights = false;
};

/// Parses a config's JSON text; `where` (its path) starts every error.
StatusOr<DeployConfig> parseDeployConfig(std::string_view text,
                                         const std::string &where);
StatusOr<DeployConfig> readDeployConfig(const std::string &path);

/// The options of `infer compile` that set config keys.
std::vector<OptionSpec> deployConfigFlags();

/// Applies the flags of `args` over `config`.
Status applyDeployConfigFlags(const ParsedArgs &args, DeployConfig &config);

/// Checks values (the same messages whether they came from flags or the
/// file); `args` says which flags were given, for the options that only
/// make sense with another one.
Status validateDeployConfig(const DeployConfig &config, const ParsedArgs &args);

/// Every key, as a one-line JSON object (parseDeployConfig reads it back).
std::string deployConfigToJson(const DeployConfig &config);

} // namespace infer::tool

#endif // INFER_TOOLS_INFER_DEPLOYCONFIG_H
