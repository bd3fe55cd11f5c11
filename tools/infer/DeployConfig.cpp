//===- DeployConfig.cpp - Every option of `infer compile` in one file -----===//

#include "tools/infer/DeployConfig.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <variant>

namespace infer::tool {

namespace {

using nlohmann::json;

/// A config key, the flag that sets it, and where it lives. A bool key's
/// flag takes no value and sets `flagSets` (--no-fuse sets fuse false);
/// `inverse` sets the other value, so a command line can undo the file
/// either way (--fuse over "fuse": false, --no-pack-weights over
/// "pack_weights": true).
struct Field {
  const char *key;
  const char *flag;
  std::variant<std::string DeployConfig::*, int64_t DeployConfig::*,
               bool DeployConfig::*>
      member;
  bool flagSets = true;
  const char *inverse = nullptr;
};

const std::vector<Field> &fields() {
  static const std::vector<Field> table = {
      {"target", "--target", &DeployConfig::target},
      {"cuda_arch", "--cuda-arch", &DeployConfig::cudaArch},
      {"dtype", "--dtype", &DeployConfig::dtype},
      {"block_size", "--block-size", &DeployConfig::blockSize},
      {"fuse", "--no-fuse", &DeployConfig::fuse, false, "--fuse"},
      {"plan_memory", "--no-plan-memory", &DeployConfig::planMemory, false,
       "--plan-memory"},
      {"tp", "--tp", &DeployConfig::tp},
      {"quant", "--quant", &DeployConfig::quant},
      {"quant_granularity", "--quant-granularity",
       &DeployConfig::quantGranularity},
      {"kv_cache_dtype", "--kv-cache-dtype", &DeployConfig::kvCacheDtype},
      {"sink_tokens", "--sink-tokens", &DeployConfig::sinkTokens},
      {"window", "--window", &DeployConfig::window},
      {"pack_weights", "--pack-weights", &DeployConfig::packWeights, true,
       "--no-pack-weights"},
  };
  return table;
}

std::string knownKeys() {
  std::string keys;
  for (const Field &f : fields())
    keys += std::string(keys.empty() ? "" : ", ") + f.key;
  return keys;
}

} // namespace

StatusOr<DeployConfig> parseDeployConfig(std::string_view text,
                                         const std::string &where) {
  json j = json::parse(text.begin(), text.end(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalidArgument(where + ": not a JSON object");
  DeployConfig config;
  for (const auto &[key, value] : j.items()) {
    auto field = std::find_if(fields().begin(), fields().end(),
                              [&](const Field &f) { return key == f.key; });
    if (field == fields().end())
      return invalidArgument(where + ": unknown key '" + key +
                             "' (known: " + knownKeys() + ")");
    auto wrongType = [&](const char *type) {
      return invalidArgument(where + ": '" + key + "' must be " + type);
    };
    if (auto *s = std::get_if<std::string DeployConfig::*>(&field->member)) {
      if (!value.is_string())
        return wrongType("a string");
      config.*(*s) = value.get<std::string>();
    } else if (auto *i = std::get_if<int64_t DeployConfig::*>(&field->member)) {
      if (!value.is_number_integer())
        return wrongType("an integer");
      config.*(*i) = value.get<int64_t>();
    } else {
      if (!value.is_boolean())
        return wrongType("true or false");
      config.*std::get<bool DeployConfig::*>(field->member) = value.get<bool>();
    }
  }
  return config;
}

StatusOr<DeployConfig> readDeployConfig(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return notFound("cannot read the config " + path);
  std::stringstream text;
  text << in.rdbuf();
  return parseDeployConfig(text.str(), path);
}

std::vector<OptionSpec> deployConfigFlags() {
  std::vector<OptionSpec> specs;
  for (const Field &f : fields()) {
    specs.push_back(
        {f.flag, !std::holds_alternative<bool DeployConfig::*>(f.member)});
    if (f.inverse)
      specs.push_back({f.inverse, false});
  }
  return specs;
}

Status applyDeployConfigFlags(const ParsedArgs &args, DeployConfig &config) {
  for (const Field &f : fields()) {
    if (auto *b = std::get_if<bool DeployConfig::*>(&f.member)) {
      // A flag and its inverse: the last one given wins.
      for (const auto &[name, value] : args.options)
        if (name == f.flag || (f.inverse && name == f.inverse))
          config.*(*b) = name == f.flag ? f.flagSets : !f.flagSets;
      continue;
    }
    if (!args.has(f.flag))
      continue;
    if (auto *s = std::get_if<std::string DeployConfig::*>(&f.member)) {
      config.*(*s) = *args.get(f.flag);
    } else {
      INFER_ASSIGN_OR_RETURN(config.*
                                 std::get<int64_t DeployConfig::*>(f.member),
                             args.getInt(f.flag, 0));
    }
  }
  return Status::ok();
}

Status validateDeployConfig(const DeployConfig &c, const ParsedArgs &args) {
  if (c.blockSize <= 0)
    return invalidArgument("--block-size must be > 0");
  if (c.target != "cpu" && c.target != "cuda")
    return invalidArgument("--target must be cpu or cuda");
  if (c.tp < 1)
    return invalidArgument("--tp must be >= 1");
  if (c.window < 0 || c.sinkTokens < 0)
    return invalidArgument("--window and --sink-tokens must be >= 0");
  if (args.has("--sink-tokens") && c.window == 0)
    return invalidArgument("--sink-tokens needs --window N (N > 0)");
  if (c.dtype != "auto" && c.dtype != "bfloat16" && c.dtype != "float16" &&
      c.dtype != "float32")
    return invalidArgument("--dtype must be auto, bfloat16, float16 or "
                           "float32");
  if (c.quant != "none" && c.quant != "fp8")
    return invalidArgument("--quant must be none or fp8");
  if (c.quantGranularity != "per-tensor" && c.quantGranularity != "per-channel")
    return invalidArgument("--quant-granularity must be per-tensor or "
                           "per-channel");
  if (args.has("--quant-granularity") && c.quant == "none")
    return invalidArgument("--quant-granularity needs --quant fp8");
  if (c.kvCacheDtype != "auto" && c.kvCacheDtype != "fp8_e5m2" &&
      c.kvCacheDtype != "fp8_e4m3")
    return invalidArgument("--kv-cache-dtype must be auto, fp8_e5m2 or "
                           "fp8_e4m3");
  return Status::ok();
}

std::string deployConfigToJson(const DeployConfig &config) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const Field &f : fields())
    std::visit([&](auto member) { j[f.key] = config.*member; }, f.member);
  return j.dump();
}

} // namespace infer::tool
