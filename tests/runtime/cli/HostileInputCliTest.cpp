//===- HostileInputCliTest.cpp - infer on malformed inputs, end to end ----===//
//
// Each test feeds the `infer` binary one input a hostile user could give
// (issues 17 and 18) and checks a clear error with exit status 1, or the
// correct behaviour: never a signal, a hang, unbounded memory or lost data.
//
//===----------------------------------------------------------------------===//

#include "runtime/safetensors/Safetensors.h"
#include "tests/runtime/support/InferTool.h"
#include "tests/runtime/support/LlamaPlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

namespace infer::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kFixtures = INFER_FIXTURES_DIR;
const std::string kGqa = kFixtures + "/rand/llama-gqa";
const std::string kPycode = kFixtures + "/models/tiny-pycode-target";

ToolRun runInfer(const std::vector<std::string> &args) {
  return runTool(INFER_TOOL_PATH, args);
}

json readJson(const std::string &path) {
  std::ifstream in(path);
  return json::parse(in);
}

void writeText(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

/// Expects the clear error of a rejected input: exit status 1 and `needle`
/// in the message.
void expectError(const ToolRun &run, const std::string &needle) {
  EXPECT_EQ(run.exitCode, 1) << run.err;
  EXPECT_NE(run.err.find(needle), std::string::npos) << run.err;
}

class HostileInput : public ::testing::Test {
protected:
  void SetUp() override {
    const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = ::testing::TempDir() + "/infer_hostile_" + info->name();
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  /// A test artifact of `model` (hand-built plan, no compiler) in `name`.
  std::string artifact(const std::string &model, const std::string &name) {
    StatusOr<Artifact> a = buildLlamaArtifact(model);
    EXPECT_TRUE(a.isOk()) << a.status().message();
    const std::string dir = root_ + "/" + name;
    EXPECT_TRUE(writeTestArtifact(*a, dir).isOk());
    return dir;
  }

  /// A copy of a model directory: its JSON files copied (for editing), its
  /// weights linked.
  std::string modelCopy(const std::string &model) {
    const std::string dir = root_ + "/model";
    fs::create_directories(dir);
    for (const fs::directory_entry &e : fs::directory_iterator(model)) {
      const std::string name = e.path().filename().string();
      if (e.path().extension() == ".safetensors")
        fs::create_symlink(e.path(), dir + "/" + name);
      else
        fs::copy_file(e.path(), dir + "/" + name);
    }
    return dir;
  }

  std::string root_;
};

//===----------------------------------------------------------------------===//
// Model directories (infer compile)
//===----------------------------------------------------------------------===//

#ifdef INFER_HAS_COMPILER
TEST_F(HostileInput, ConfigNestedTooDeep) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string model = modelCopy(kGqa);
  json config = readJson(model + "/config.json");
  std::string text = config.dump();
  text.pop_back();
  text += ", \"x\": " + std::string(50000, '[') + std::string(50000, ']') + "}";
  writeText(model + "/config.json", text);
  expectError(runInfer({"compile", model, "-o", root_ + "/art"}),
              "deeper than 128 levels");
}

TEST_F(HostileInput, NegativeMaxWindowLayers) {
  const std::string qwen =
      std::string(INFER_PROJECT_FIXTURES_DIR) + "/qwen2-swa";
  const std::string model = modelCopy(qwen);
  json config = readJson(model + "/config.json");
  config.erase("layer_types");
  config["max_window_layers"] = -5;
  writeText(model + "/config.json", config.dump());
  expectError(runInfer({"compile", model, "-o", root_ + "/art"}),
              "'max_window_layers' must be >= 0");
}

TEST_F(HostileInput, NegativeRopeTheta) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string model = modelCopy(kGqa);
  json config = readJson(model + "/config.json");
  config.erase("rope_parameters");
  config["rope_theta"] = -1;
  writeText(model + "/config.json", config.dump());
  expectError(runInfer({"compile", model, "-o", root_ + "/art"}),
              "rope theta must be positive");
}

TEST_F(HostileInput, HugeLayerCount) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string model = modelCopy(kGqa);
  json config = readJson(model + "/config.json");
  config["num_hidden_layers"] = int64_t(1) << 50;
  writeText(model + "/config.json", config.dump());
  expectError(runInfer({"compile", model, "-o", root_ + "/art"}),
              "more than the limit");
}

TEST_F(HostileInput, WeightMapEntryOutsideTheModel) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string model = modelCopy(kGqa);
  fs::remove(model + "/model.safetensors");
  for (const char *file : {"../../etc/passwd", "."}) {
    writeText(
        model + "/model.safetensors.index.json",
        json{{"weight_map", {{"model.embed_tokens.weight", file}}}}.dump());
    expectError(runInfer({"compile", model, "-o", root_ + "/art"}),
                "must name a file inside");
  }
}

TEST_F(HostileInput, CompileIntoTheModelDirectoryLosesNothing) {
  if (!fs::exists(kPycode + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string model = modelCopy(kPycode);
  const auto size = fs::file_size(model + "/tokenizer.json");
  expectError(runInfer({"compile", model, "-o", model}),
              "is the model directory");
  expectError(runInfer({"compile", model, "-o", model + "/."}),
              "is the model directory");
  EXPECT_EQ(fs::file_size(model + "/tokenizer.json"), size);

  // An output directory whose tokenizer.json links to the model's: the copy
  // is skipped, the source keeps its bytes.
  const std::string out = root_ + "/art";
  fs::create_directories(out);
  fs::create_symlink(model + "/tokenizer.json", out + "/tokenizer.json");
  ToolRun run = runInfer({"compile", model, "-o", out});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(fs::file_size(model + "/tokenizer.json"), size);
  run = runInfer({"tokenize", out, "--text", "def f(x):"});
  EXPECT_EQ(run.exitCode, 0) << run.err;
}
#endif // INFER_HAS_COMPILER

//===----------------------------------------------------------------------===//
// Artifacts (manifest.json, plan.json)
//===----------------------------------------------------------------------===//

TEST_F(HostileInput, ManifestFilesOutsideTheArtifact) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string dir = artifact(kGqa, "art");
  const json manifest = readJson(dir + "/manifest.json");
  for (const char *key : {"program_file", "plan_file", "tokenizer_file"}) {
    for (const char *file : {"/etc/hostname", "../art/plan.json"}) {
      json edited = manifest;
      edited[key] = file;
      writeText(dir + "/manifest.json", edited.dump());
      expectError(runInfer({"inspect", dir}), "must name a file inside");
    }
  }
  json edited = manifest;
  edited["weight_files"][0]["name"] = "../llama-gqa/model.safetensors";
  writeText(dir + "/manifest.json", edited.dump());
  expectError(runInfer({"generate", dir, "--token-ids", "1"}),
              "must name a file inside");
}

TEST_F(HostileInput, DeviceFilesAreNotRead) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string dir = artifact(kGqa, "art");
  // A program.mlir that never ends: inspect used to stream it forever.
  fs::remove(dir + "/program.mlir");
  fs::create_symlink("/dev/zero", dir + "/program.mlir");
  expectError(runInfer({"inspect", dir}), "is not a regular file");
  fs::remove(dir + "/plan.json");
  fs::create_symlink("/dev/zero", dir + "/plan.json");
  expectError(runInfer({"generate", dir, "--token-ids", "1"}),
              "is not a regular file");
}

TEST_F(HostileInput, ZeroKVHeads) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string dir = artifact(kGqa, "art");
  json manifest = readJson(dir + "/manifest.json");
  manifest["kv_cache"]["num_kv_heads"] = 0;
  manifest["model"]["num_kv_heads"] = 0;
  writeText(dir + "/manifest.json", manifest.dump());
  json plan = readJson(dir + "/plan.json");
  plan["kv_cache"]["num_kv_heads"] = 0;
  writeText(dir + "/plan.json", plan.dump());
  expectError(runInfer({"generate", dir, "--token-ids", "1"}), "num_kv_heads");
}

TEST_F(HostileInput, PlanParamFromAnotherDirectory) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string dir = artifact(kGqa, "art");
  json plan = readJson(dir + "/plan.json");
  for (json &v : plan["ranks"][0]["values"])
    if (v["kind"] == "param") {
      v["source_file"] = kPycode + "/model.safetensors";
      break;
    }
  writeText(dir + "/plan.json", plan.dump());
  expectError(runInfer({"generate", dir, "--token-ids", "1"}),
              "must name a file inside the weights directory");
}

TEST_F(HostileInput, PlanSliceExtentsOverflow) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string dir = artifact(kGqa, "art");
  json plan = readJson(dir + "/plan.json");
  for (json &v : plan["ranks"][0]["values"])
    if (v["kind"] == "param" && v["shape"].size() == 2) {
      v["transforms"] =
          json::array({{{"kind", "slice"},
                        {"attrs",
                         {{"dim", 0},
                          {"begin", std::numeric_limits<int64_t>::max() - 2},
                          {"size", v["shape"][0]}}}}});
      break;
    }
  writeText(dir + "/plan.json", plan.dump());
  expectError(runInfer({"generate", dir, "--token-ids", "1"}),
              "begin in [0, 2^40]");
}

TEST_F(HostileInput, PlanWorkspaceTooLarge) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string dir = artifact(kGqa, "art");
  json plan = readJson(dir + "/plan.json");
  plan["ranks"][0]["workspace_bytes_per_row"] = int64_t(1) << 60;
  writeText(dir + "/plan.json", plan.dump());
  expectError(runInfer({"generate", dir, "--token-ids", "1"}),
              "workspace_bytes_per_row");
}

//===----------------------------------------------------------------------===//
// Tokenizers
//===----------------------------------------------------------------------===//

TEST_F(HostileInput, TokenizerSequenceNestedTooDeep) {
  if (!fs::exists(kPycode + "/tokenizer.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string dir = root_ + "/tok";
  fs::create_directories(dir);
  json tokenizer = readJson(kPycode + "/tokenizer.json");
  tokenizer["normalizer"] = "NESTED";
  std::string text = tokenizer.dump();
  std::string nested;
  for (int i = 0; i < 20000; ++i)
    nested += "{\"type\": \"Sequence\", \"normalizers\": [";
  nested += "{\"type\": \"Lowercase\"}";
  for (int i = 0; i < 20000; ++i)
    nested += "]}";
  text.replace(text.find("\"NESTED\""), 8, nested);
  writeText(dir + "/tokenizer.json", text);
  expectError(runInfer({"tokenize", dir, "--text", "hello world"}),
              "deeper than 128 levels");
}

TEST_F(HostileInput, TokenizerHugeVocabId) {
  if (!fs::exists(kPycode + "/tokenizer.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string dir = root_ + "/tok";
  fs::create_directories(dir);
  json tokenizer = readJson(kPycode + "/tokenizer.json");
  for (int64_t id : {int64_t(50000000), int64_t(2000000000)}) {
    tokenizer["model"]["vocab"]["zzz"] = id;
    writeText(dir + "/tokenizer.json", tokenizer.dump());
    expectError(runInfer({"tokenize", dir, "--text", "hello world"}),
                "is out of range for a vocab");
  }
}

/// A copy of the tiny-pycode tokenizer whose normalizer is `normalizer`.
std::string tokenizerWithNormalizer(const std::string &dir,
                                    const json &normalizer) {
  fs::create_directories(dir);
  json tokenizer = readJson(kPycode + "/tokenizer.json");
  tokenizer["normalizer"] = normalizer;
  writeText(dir + "/tokenizer.json", tokenizer.dump());
  return dir;
}

TEST_F(HostileInput, TokenizerRegexMatchLimit) {
  if (!fs::exists(kPycode + "/tokenizer.json"))
    GTEST_SKIP() << "fixture missing";
  // Catastrophic backtracking: PCRE2 stops at its match limit, which used
  // to read as "no more matches".
  const std::string dir = tokenizerWithNormalizer(
      root_ + "/tok", {{"type", "Replace"},
                       {"pattern", {{"Regex", "(a+)+$"}}},
                       {"content", "x"}});
  expectError(runInfer({"tokenize", dir, "--text", std::string(40, 'a') + "b"}),
              "a tokenizer regex failed");
}

TEST_F(HostileInput, TokenizerNormalizerGrowth) {
  if (!fs::exists(kPycode + "/tokenizer.json"))
    GTEST_SKIP() << "fixture missing";
  // A few hundred bytes of tokenizer.json that multiply the text by 8 per
  // step: 8^24 times the input without a bound.
  json steps = json::array();
  for (int i = 0; i < 24; ++i)
    steps.push_back({{"type", "Replace"},
                     {"pattern", {{"String", "a"}}},
                     {"content", "aaaaaaaa"}});
  const std::string dir = tokenizerWithNormalizer(
      root_ + "/tok", {{"type", "Sequence"}, {"normalizers", steps}});
  expectError(runInfer({"tokenize", dir, "--text", "hello a world"}),
              "grew the text past");
  // Text without an "a" is left as it is and encodes.
  ToolRun run = runInfer({"tokenize", dir, "--text", "hello world"});
  EXPECT_EQ(run.exitCode, 0) << run.err;
}

//===----------------------------------------------------------------------===//
// generate and bench options
//===----------------------------------------------------------------------===//

TEST_F(HostileInput, MaxNewTokensAsLargeAsInt64) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string dir = artifact(kGqa, "art");
  // Generation runs to the end of the context (4096 positions) instead of
  // stopping after one token (signed overflow).
  ToolRun run =
      runInfer({"generate", dir, "--token-ids", "1,2,3", "--max-new-tokens",
                "9223372036854775807", "--ignore-eos", "--json"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  std::vector<json> lines = jsonLines(run.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["output_token_ids"].size(), 4096u - 3u);
  expectError(runInfer({"bench", dir, "--input-len", "8", "--output-len",
                        "9223372036854775807", "--num-prompts", "1"}),
              "must be at most");
}

TEST_F(HostileInput, RequestRateThatNeverEnds) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string dir = artifact(kGqa, "art");
  expectError(runInfer({"bench", dir, "--input-len", "8", "--output-len", "2",
                        "--num-prompts", "4", "--request-rate", "1e-300"}),
              "more than a day");
}

TEST_F(HostileInput, ChunkedPrefillWithoutLogitsRows) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::string dir = artifact(kGqa, "art");
  // Prompts longer than the token budget: steps whose chunks reach no
  // prompt's end have no logits row.
  ToolRun run = runInfer({"bench", dir, "--input-len", "100", "--output-len",
                          "3", "--num-prompts", "2", "--max-num-batched-tokens",
                          "32", "--json"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(json::parse(run.out)["num_computed_tokens"], 2 * 100 + 2 * 2);
}

TEST_F(HostileInput, NonFiniteLogitsFailTheRequest) {
  if (!fs::exists(kGqa + "/config.json"))
    GTEST_SKIP() << "fixture missing";
  // A checkpoint whose final norm weight is NaN: every logit is NaN.
  const std::string model = root_ + "/model";
  fs::create_directories(model);
  for (const char *file : {"config.json", "generation_config.json"})
    fs::copy_file(kGqa + "/" + file, model + "/" + file);
  auto source = safetensors::File::open(kGqa + "/model.safetensors");
  ASSERT_TRUE(source.isOk()) << source.status().message();
  std::vector<safetensors::TensorToWrite> tensors;
  std::deque<std::string> storage;
  for (const safetensors::TensorInfo &info : (*source)->header().tensors) {
    StatusOr<std::string_view> bytes = (*source)->tensorBytes(info.name);
    ASSERT_TRUE(bytes.isOk());
    std::string &data = storage.emplace_back(*bytes);
    if (info.name == "model.norm.weight" &&
        info.dtype == safetensors::DType::kF32) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      for (size_t i = 0; i + 4 <= data.size(); i += 4)
        std::memcpy(data.data() + i, &nan, 4);
    }
    tensors.push_back({info.name, info.dtype, info.shape, data});
  }
  ASSERT_TRUE(
      safetensors::writeFile(model + "/model.safetensors", tensors).isOk());
  const std::string dir = artifact(model, "art");
  for (const char *temperature : {"0", "1"}) {
    ToolRun run =
        runInfer({"generate", dir, "--token-ids", "1,2,3", "--max-new-tokens",
                  "4", "--temperature", temperature});
    expectError(run, "are not finite");
  }
}

} // namespace
} // namespace infer::testing
