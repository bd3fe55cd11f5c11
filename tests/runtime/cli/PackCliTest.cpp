//===- PackCliTest.cpp - Packed artifacts and deploy configs, end to end --===//
//
// `infer pack` and `infer compile --pack-weights`: a packed artifact gives
// the tokens of the unpacked one with its checkpoint moved away, and a
// damaged packed file is an error naming it. `infer compile --config`:
// round trip through the manifest, flags over the file, unknown keys.
// Every model is copied to a temporary directory first (the fixtures are
// read-only and shared).
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"
#include "tests/runtime/support/InferTool.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kFixtures = INFER_FIXTURES_DIR;

ToolRun runInfer(const std::vector<std::string> &args) {
  return runTool(INFER_TOOL_PATH, args);
}

/// A fresh directory under the test's temporary directory.
std::string freshDir(const std::string &name) {
  const std::string dir = ::testing::TempDir() + "/pack_cli_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

/// A writable copy of a fixture model directory.
std::string copyModel(const std::string &from, const std::string &to) {
  fs::copy(from, to, fs::copy_options::recursive);
  for (const auto &entry : fs::recursive_directory_iterator(to))
    fs::permissions(entry.path(), fs::perms::owner_write,
                    fs::perm_options::add);
  return to;
}

/// The output token ids of `infer generate --json` with greedy decoding.
std::vector<json> generate(const std::string &model,
                           std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {
      "generate",    model,   "--token-ids",  "5,17,42,99",
      "--token-ids", "7,8",   "--ignore-eos", "--max-new-tokens",
      "12",          "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  ToolRun run = runInfer(args);
  EXPECT_EQ(run.exitCode, 0) << run.err;
  std::vector<json> tokens;
  for (const json &line : jsonLines(run.out))
    tokens.push_back(line["output_token_ids"]);
  EXPECT_EQ(tokens.size(), 2u) << run.out;
  return tokens;
}

json readManifest(const std::string &artifact) {
  std::ifstream in(artifact + "/manifest.json");
  return json::parse(in);
}

void expectFailureNaming(const std::vector<std::string> &args,
                         const std::string &file, const std::string &what) {
  ToolRun run = runInfer(args);
  EXPECT_NE(run.exitCode, 0);
  EXPECT_NE(run.err.find(file), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(what), std::string::npos) << run.err;
}

/// `infer pack` on an artifact written without the compiler.
TEST(PackCli, PackedArtifactRunsWithoutItsCheckpoint) {
  if (!fs::exists(kFixtures + "/rand/llama-gqa/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string dir = freshDir("hand_built");
  const std::string model =
      copyModel(kFixtures + "/rand/llama-gqa", dir + "/model");
  StatusOr<Artifact> built = buildLlamaArtifact(model);
  ASSERT_TRUE(built.isOk()) << built.status().message();
  const std::string artifact = dir + "/artifact";
  ASSERT_TRUE(writeTestArtifact(*built, artifact).isOk());
  const std::vector<json> unpacked = generate(artifact);

  ToolRun run = runInfer({"pack", artifact});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  fs::rename(model, dir + "/moved");
  EXPECT_EQ(generate(artifact), unpacked);
  // --weights still reads a checkpoint, transforming it at load.
  EXPECT_EQ(generate(artifact, {"--weights", dir + "/moved"}), unpacked);
  run = runInfer({"inspect", artifact});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NE(run.out.find("packed weights: rank 0 weights/rank0.safetensors"),
            std::string::npos)
      << run.out;

  const std::string file = artifact + "/weights/rank0.safetensors";
  {
    // One bit of a weight flipped: the lowest bit of any byte of a float
    // leaves it finite (the run below must not stop at non-finite logits).
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    const char byte = static_cast<char>(f.get());
    f.seekp(-5, std::ios::end);
    f.put(static_cast<char>(byte ^ 0x01));
  }
  expectFailureNaming({"generate", artifact, "--token-ids", "1"}, file,
                      "content hash");
  run = runInfer({"generate", artifact, "--token-ids", "1", "--max-new-tokens",
                  "1", "--skip-weight-check"});
  EXPECT_EQ(run.exitCode, 0) << run.err;
  fs::resize_file(file, fs::file_size(file) / 2);
  expectFailureNaming({"generate", artifact, "--token-ids", "1"}, file,
                      "truncated");
}

#ifdef INFER_HAS_COMPILER

/// tiny-pycode (bf16 checkpoint), compiled by `infer compile` with and
/// without --pack-weights: bf16 and fp8 weights, and two tensor-parallel
/// ranks.
TEST(PackCli, CompiledPackedArtifactMatchesUnpacked) {
  const std::string source = kFixtures + "/models/tiny-pycode-target";
  if (!fs::exists(source + "/config.json"))
    GTEST_SKIP() << "tiny-pycode fixture missing";
  const std::string dir = freshDir("tiny_pycode");
  const std::string model = copyModel(source, dir + "/model");
  const std::map<std::string, std::vector<std::string>> configs = {
      {"bf16", {"--dtype", "bfloat16"}},
      {"fp8", {"--dtype", "bfloat16", "--quant", "fp8"}},
      {"tp2", {"--dtype", "bfloat16", "--tp", "2"}}};
  for (const auto &[name, flags] : configs) {
    std::vector<std::string> compile = {"compile", model, "-o",
                                        dir + "/" + name};
    compile.insert(compile.end(), flags.begin(), flags.end());
    ToolRun run = runInfer(compile);
    ASSERT_EQ(run.exitCode, 0) << run.err;
    compile[3] += "-packed";
    compile.push_back("--pack-weights");
    run = runInfer(compile);
    ASSERT_EQ(run.exitCode, 0) << run.err;
    EXPECT_EQ(readManifest(compile[3])["deploy_config"]["pack_weights"], true);
  }
  std::map<std::string, std::vector<json>> unpacked;
  for (const auto &[name, flags] : configs)
    unpacked[name] = generate(dir + "/" + name);

  fs::rename(model, dir + "/moved");
  for (const auto &[name, flags] : configs) {
    EXPECT_EQ(generate(dir + "/" + name + "-packed"), unpacked[name]) << name;
    // The checkpoint is really gone: the unpacked artifact cannot load.
    ToolRun run = runInfer({"generate", dir + "/" + name, "--token-ids", "1"});
    EXPECT_NE(run.exitCode, 0);
    EXPECT_NE(run.err.find("missing"), std::string::npos) << run.err;
  }

  // The ranks' files swapped: the hash, or without it the rank, says so.
  const std::string weights = dir + "/tp2-packed/weights/";
  fs::rename(weights + "rank0.safetensors", weights + "swap");
  fs::rename(weights + "rank1.safetensors", weights + "rank0.safetensors");
  fs::rename(weights + "swap", weights + "rank1.safetensors");
  expectFailureNaming({"generate", dir + "/tp2-packed", "--token-ids", "1"},
                      weights + "rank0.safetensors", "content hash");
  expectFailureNaming({"generate", dir + "/tp2-packed", "--token-ids", "1",
                       "--skip-weight-check"},
                      weights + "rank0.safetensors",
                      "holds the weights of rank 1");
}

/// `infer compile --config`: the manifest records the options, reading them
/// back compiles the same artifact, flags win over the file (booleans both
/// ways), and an unknown key or a mistyped value is an error naming it.
TEST(DeployConfigCli, RoundTripOverrideAndUnknownKeys) {
  const std::string model = kFixtures + "/rand/llama-gqa";
  if (!fs::exists(model + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string dir = freshDir("config");
  auto writeConfig = [&](const std::string &name, const std::string &text) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    return path;
  };
  const std::string config = writeConfig(
      "deploy.json", R"({"block_size": 32, "fuse": false, "quant": "fp8",
                         "quant_granularity": "per-channel"})");
  ToolRun run =
      runInfer({"compile", model, "--config", config, "-o", dir + "/first"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const json first = readManifest(dir + "/first");
  const json recorded = first["deploy_config"];
  EXPECT_EQ(recorded["block_size"], 32);
  EXPECT_EQ(recorded["fuse"], false);
  EXPECT_EQ(recorded["quant"], "fp8");
  EXPECT_EQ(recorded["quant_granularity"], "per-channel");
  EXPECT_EQ(recorded["target"], "cpu");
  EXPECT_EQ(recorded["pack_weights"], false);
  EXPECT_EQ(first["kv_cache"]["block_size"], 32);
  run = runInfer({"inspect", dir + "/first"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_NE(run.out.find("deploy config: {\"block_size\":32,"),
            std::string::npos)
      << run.out;

  // Round trip: the recorded config compiles the same artifact.
  const std::string again = writeConfig("again.json", recorded.dump());
  run = runInfer({"compile", model, "--config", again, "-o", dir + "/second"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const json second = readManifest(dir + "/second");
  EXPECT_EQ(second["deploy_config"], recorded);
  EXPECT_EQ(second["compile_options"], first["compile_options"]);
  std::ifstream plan1(dir + "/first/plan.json"),
      plan2(dir + "/second/plan.json");
  std::stringstream text1, text2;
  text1 << plan1.rdbuf();
  text2 << plan2.rdbuf();
  EXPECT_TRUE(text1.str() == text2.str());

  // Flags override the file.
  run = runInfer({"compile", model, "--config", config, "--block-size", "8",
                  "--quant", "none", "-o", dir + "/override"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const json overridden = readManifest(dir + "/override");
  EXPECT_EQ(overridden["deploy_config"]["block_size"], 8);
  EXPECT_EQ(overridden["deploy_config"]["quant"], "none");
  EXPECT_EQ(overridden["deploy_config"]["fuse"], false);
  EXPECT_EQ(overridden["kv_cache"]["block_size"], 8);

  // A boolean key either way: --fuse over "fuse": false, --no-pack-weights
  // over "pack_weights": true; of a flag and its inverse the last wins.
  const std::string packing =
      writeConfig("packing.json", R"({"fuse": false, "pack_weights": true})");
  run = runInfer({"compile", model, "--config", packing, "--fuse",
                  "--no-pack-weights", "-o", dir + "/flipped"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const json flipped = readManifest(dir + "/flipped");
  EXPECT_EQ(flipped["deploy_config"]["fuse"], true);
  EXPECT_EQ(flipped["deploy_config"]["pack_weights"], false);
  // (operator[] of a const json with a missing key is undefined.)
  EXPECT_TRUE(!flipped.contains("packed_weights") ||
              flipped.at("packed_weights").empty())
      << flipped.dump();
  EXPECT_FALSE(fs::exists(dir + "/flipped/weights"));
  run = runInfer({"compile", model, "--no-fuse", "--fuse", "--no-plan-memory",
                  "--plan-memory", "--no-fuse", "-o", dir + "/last"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const json last = readManifest(dir + "/last");
  EXPECT_EQ(last["deploy_config"]["fuse"], false);
  EXPECT_EQ(last["deploy_config"]["plan_memory"], true);

  const std::string unknown =
      writeConfig("unknown.json", R"({"block_size": 16, "blok_size": 8})");
  run = runInfer({"compile", model, "--config", unknown, "-o", dir + "/x"});
  EXPECT_NE(run.exitCode, 0);
  EXPECT_NE(run.err.find(unknown + ": unknown key 'blok_size'"),
            std::string::npos)
      << run.err;
  const std::string mistyped = writeConfig("mistyped.json", R"({"tp": "2"})");
  run = runInfer({"compile", model, "--config", mistyped, "-o", dir + "/x"});
  EXPECT_NE(run.exitCode, 0);
  EXPECT_NE(run.err.find("'tp' must be an integer"), std::string::npos)
      << run.err;
  const std::string invalid =
      writeConfig("invalid.json", R"({"quant": "int4"})");
  run = runInfer({"compile", model, "--config", invalid, "-o", dir + "/x"});
  EXPECT_NE(run.exitCode, 0);
  EXPECT_NE(run.err.find("--quant must be none or fp8"), std::string::npos)
      << run.err;
  EXPECT_FALSE(fs::exists(dir + "/x"));
}

#endif // INFER_HAS_COMPILER

} // namespace
} // namespace infer::testing
