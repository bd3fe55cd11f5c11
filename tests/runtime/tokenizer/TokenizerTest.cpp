//===- TokenizerTest.cpp - Tests of the tokenizer.json tokenizer ----------===//
//
// Checks encode/decode against outputs of Hugging Face tokenizers recorded in
// the shared fixtures (golden/tokenizers.json, golden/tiny-pycode.json), the
// incremental detokenizer, and error reporting for bad inputs.
//
//===----------------------------------------------------------------------===//

#include "runtime/tokenizer/Tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace infer {
namespace {

using Json = nlohmann::json;

const std::string kFixtures = INFER_FIXTURES_DIR;

std::string tokenizerPath(const std::string &name) {
  if (name == "tiny-pycode")
    return kFixtures + "/models/tiny-pycode-target/tokenizer.json";
  return kFixtures + "/tokenizers/" + name + "/tokenizer.json";
}

bool exists(const std::string &path) { return std::filesystem::exists(path); }

Json readJson(const std::string &path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return Json::parse(contents.str(), nullptr, /*allow_exceptions=*/false);
}

/// Loads a tokenizer once per test binary; fixtures are large.
const Tokenizer *loadTokenizer(const std::string &name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end())
    return it->second.get();
  StatusOr<std::unique_ptr<Tokenizer>> loaded =
      Tokenizer::fromFile(tokenizerPath(name));
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  if (!loaded.isOk())
    return nullptr;
  return (cache[name] = std::move(loaded).value()).get();
}

#define LOAD_OR_SKIP(var, name)                                                \
  if (!exists(tokenizerPath(name)))                                            \
    GTEST_SKIP() << "fixture missing: " << tokenizerPath(name);                \
  const Tokenizer *var = loadTokenizer(name);                                  \
  ASSERT_NE(var, nullptr)

std::string printable(const std::string &text) { return Json(text).dump(); }

//===----------------------------------------------------------------------===//
// Golden encode/decode of real tokenizers
//===----------------------------------------------------------------------===//

class GoldenTokenizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTokenizerTest, MatchesHuggingFace) {
  const std::string name = GetParam();
  std::string goldenPath = kFixtures + "/golden/tokenizers.json";
  if (!exists(goldenPath))
    GTEST_SKIP() << "fixture missing: " << goldenPath;
  Json golden = readJson(goldenPath);
  ASSERT_FALSE(golden.is_discarded());
  if (!golden.contains(name))
    GTEST_SKIP() << "no golden cases for " << name;
  LOAD_OR_SKIP(tokenizer, name);

  const Json &cases = golden[name]["cases"];
  size_t encodeOk = 0, decodeOk = 0;
  for (const Json &testCase : cases) {
    std::string text = testCase["text"].get<std::string>();
    std::vector<int32_t> expected = testCase["ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> ids = tokenizer->encode(text, false);
    EXPECT_EQ(ids, expected) << name << " encode " << printable(text);
    encodeOk += ids == expected;
    // The golden decodes with skip_special_tokens=False: cases that contain
    // special tokens keep them in `decoded`.
    std::string decoded = tokenizer->decode(expected, false);
    std::string expectedText = testCase["decoded"].get<std::string>();
    EXPECT_EQ(decoded, expectedText) << name << " decode " << printable(text);
    decodeOk += decoded == expectedText;
  }
  std::printf("[ golden   ] %s: encode %zu/%zu, decode %zu/%zu\n", name.c_str(),
              encodeOk, cases.size(), decodeOk, cases.size());
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, GoldenTokenizerTest,
                         ::testing::Values("llama3", "qwen3", "llama2",
                                           "deepseek_v3"),
                         [](const auto &info) { return info.param; });

//===----------------------------------------------------------------------===//
// tiny-pycode model pair
//===----------------------------------------------------------------------===//

TEST(TinyPycodeTest, PromptsAndContinuations) {
  std::string goldenPath = kFixtures + "/golden/tiny-pycode.json";
  if (!exists(goldenPath))
    GTEST_SKIP() << "fixture missing: " << goldenPath;
  Json golden = readJson(goldenPath);
  ASSERT_FALSE(golden.is_discarded());
  for (const char *model : {"tiny-pycode-target", "tiny-pycode-draft"}) {
    std::string path =
        kFixtures + "/models/" + std::string(model) + "/tokenizer.json";
    if (!exists(path))
      GTEST_SKIP() << "fixture missing: " << path;
    StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::fromFile(path);
    ASSERT_TRUE(tokenizer.isOk()) << tokenizer.status().message();
    ASSERT_TRUE(golden.contains(model));
    ASSERT_FALSE(golden[model].empty());
    for (const Json &testCase : golden[model]) {
      std::string prompt = testCase["prompt"].get<std::string>();
      std::vector<int32_t> inputIds =
          testCase["input_ids"].get<std::vector<int32_t>>();
      // The post-processor prepends <|bos|> (id 0).
      EXPECT_EQ((*tokenizer)->encode(prompt, true), inputIds)
          << model << " " << printable(prompt);
      std::vector<int32_t> withoutBos(inputIds.begin() + 1, inputIds.end());
      EXPECT_EQ((*tokenizer)->encode(prompt, false), withoutBos);
      // text_fp32 is the decoded continuation alone (no prompt).
      std::vector<int32_t> greedy =
          testCase["greedy_fp32"].get<std::vector<int32_t>>();
      EXPECT_EQ((*tokenizer)->decode(greedy, true),
                testCase["text_fp32"].get<std::string>())
          << model << " " << printable(prompt);
    }
  }
}

TEST(TinyPycodeTest, SpecialTokenIds) {
  LOAD_OR_SKIP(tokenizer, "tiny-pycode");
  EXPECT_EQ(tokenizer->vocabSize(), 4096);
  EXPECT_EQ(tokenizer->bosTokenId(), std::optional<int32_t>(0));
  EXPECT_EQ(tokenizer->eosTokenIds(), std::vector<int32_t>({1}));
  EXPECT_EQ(tokenizer->idToToken(0), "<|bos|>");
  EXPECT_TRUE(tokenizer->isSpecialToken(1));
  EXPECT_EQ(tokenizer->decode({0, 1}, true), "");
  EXPECT_EQ(tokenizer->decode({0}, false), "<|bos|>");
}

//===----------------------------------------------------------------------===//
// Special tokens and configuration
//===----------------------------------------------------------------------===//

TEST(TokenizerConfigTest, Llama3) {
  LOAD_OR_SKIP(tokenizer, "llama3");
  EXPECT_EQ(tokenizer->vocabSize(), 128256);
  EXPECT_EQ(tokenizer->bosTokenId(), std::optional<int32_t>(128000));
  EXPECT_EQ(tokenizer->eosTokenIds(), std::vector<int32_t>({128001}));
  EXPECT_EQ(tokenizer->tokenToId("<|eot_id|>"), std::optional<int32_t>(128009));
  EXPECT_EQ(tokenizer->tokenToId("Hello"), std::optional<int32_t>(9906));
  EXPECT_EQ(tokenizer->idToToken(1917), "\xC4\xA0world"); // "Ġworld"
  EXPECT_FALSE(tokenizer->tokenToId("no such token").has_value());
  EXPECT_EQ(tokenizer->idToToken(-1), "");
  EXPECT_FALSE(tokenizer->chatTemplate().empty());
  // This tokenizer.json has a ByteLevel post-processor and no
  // add_bos_token: special tokens add nothing.
  EXPECT_EQ(tokenizer->encode("Hello world", true),
            std::vector<int32_t>({9906, 1917}));
  std::vector<int32_t> ids = {128000, 9906, 1917, 128009};
  EXPECT_EQ(tokenizer->decode(ids, true), "Hello world");
  EXPECT_EQ(tokenizer->decode(ids, false),
            "<|begin_of_text|>Hello world<|eot_id|>");
}

TEST(TokenizerConfigTest, Llama2AddsBosOnce) {
  LOAD_OR_SKIP(tokenizer, "llama2");
  EXPECT_EQ(tokenizer->bosTokenId(), std::optional<int32_t>(1));
  EXPECT_EQ(tokenizer->eosTokenIds(), std::vector<int32_t>({2}));
  EXPECT_EQ(tokenizer->encode("Hello world", true),
            std::vector<int32_t>({1, 22557, 1526}));
  EXPECT_EQ(tokenizer->decode({1, 22557, 1526}, true), "Hello world");
}

TEST(TokenizerConfigTest, DeepSeekAddBosToken) {
  LOAD_OR_SKIP(tokenizer, "deepseek_v3");
  // add_bos_token in tokenizer_config.json; the post-processor adds nothing.
  EXPECT_EQ(tokenizer->bosTokenId(), std::optional<int32_t>(0));
  EXPECT_EQ(tokenizer->encode("Hello world", true),
            std::vector<int32_t>({0, 19923, 2058}));
  EXPECT_EQ(tokenizer->eosTokenIds(), std::vector<int32_t>({1}));
}

TEST(TokenizerConfigTest, Qwen3) {
  LOAD_OR_SKIP(tokenizer, "qwen3");
  EXPECT_FALSE(tokenizer->bosTokenId().has_value());
  EXPECT_EQ(tokenizer->eosTokenIds(), std::vector<int32_t>({151645}));
  EXPECT_EQ(tokenizer->encode("Hello world", true),
            std::vector<int32_t>({9707, 1879}));
  // A non-special added token is matched in the text and kept by
  // skip_special_tokens.
  std::vector<int32_t> ids = tokenizer->encode("<tool_call>x", false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 151657);
  EXPECT_EQ(tokenizer->decode(ids, true), "<tool_call>x");
}

//===----------------------------------------------------------------------===//
// Incremental detokenization
//===----------------------------------------------------------------------===//

/// Feeds ids one at a time; the pieces must be valid text that adds up to
/// the full decode.
void expectStreamingMatchesDecode(const Tokenizer &tokenizer,
                                  const std::string &text) {
  std::vector<int32_t> ids = tokenizer.encode(text, false);
  std::vector<int32_t> prefix;
  DetokenizerState state;
  std::string streamed;
  for (int32_t id : ids) {
    prefix.push_back(id);
    std::string piece = tokenizer.decodeIncremental(prefix, state, false);
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos)
        << "incomplete UTF-8 emitted for " << printable(text);
    streamed += piece;
  }
  EXPECT_EQ(streamed, tokenizer.decode(ids, false)) << printable(text);
}

TEST(IncrementalDecodeTest, HoldsBackPartialCharacters) {
  const std::string text = "emoji \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 "
                           "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E and "
                           "\xD0\x9F\xD1\x80\xD0\xB8 def f(x):\n  return x";
  for (const char *name : {"llama3", "qwen3", "llama2", "deepseek_v3"}) {
    LOAD_OR_SKIP(tokenizer, name);
    expectStreamingMatchesDecode(*tokenizer, text);
  }
}

TEST(IncrementalDecodeTest, ContinuesAfterPrompt) {
  LOAD_OR_SKIP(tokenizer, "llama2");
  std::vector<int32_t> ids = tokenizer->encode("Hello world", false);
  DetokenizerState state;
  state.readOffset = ids.size();
  state.prefixOffset = 0;
  std::vector<int32_t> more = tokenizer->encode("Hello world again", false);
  // "▁again" must come out with its space, as it follows earlier text.
  EXPECT_EQ(tokenizer->decodeIncremental(more, state, false), " again");
  EXPECT_EQ(state.readOffset, more.size());
  EXPECT_EQ(tokenizer->decodeIncremental(more, state, false), "");
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST(TokenizerErrorTest, MissingFile) {
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::fromFile("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(tokenizer.isOk());
  EXPECT_EQ(tokenizer.status().code(), StatusCode::kNotFound);
  EXPECT_NE(tokenizer.status().message().find("/nonexistent/dir"),
            std::string::npos);
}

TEST(TokenizerErrorTest, MalformedJson) {
  std::string dir = ::testing::TempDir() + "/infer_tokenizer_malformed";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << "{\"model\": {\"type\": \"BPE\",";
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::fromFile(dir + "/tokenizer.json");
  ASSERT_FALSE(tokenizer.isOk());
  EXPECT_EQ(tokenizer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tokenizer.status().message().find("not valid JSON"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(TokenizerErrorTest, UnsupportedModelType) {
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::fromJson(
      R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})");
  ASSERT_FALSE(tokenizer.isOk());
  EXPECT_EQ(tokenizer.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(tokenizer.status().message().find("Unigram"), std::string::npos);
}

TEST(TokenizerErrorTest, UnsupportedComponentIsNamed) {
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::fromJson(
      R"({"pre_tokenizer": {"type": "BertPreTokenizer"},
          "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  ASSERT_FALSE(tokenizer.isOk());
  EXPECT_NE(tokenizer.status().message().find("BertPreTokenizer"),
            std::string::npos);
}

TEST(TokenizerErrorTest, BadFieldsAreErrors) {
  // Wrong types and dangling merges report errors instead of throwing.
  for (
      const char *json : {
          R"({"model": {"type": "BPE", "vocab": [], "merges": []}})",
          R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})",
          R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [7]}})",
          R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})",
          R"({"normalizer": {"type": "Replace"},
               "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
          R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "("},
                                 "behavior": "Isolated"},
               "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
          R"([1, 2, 3])",
          R"({"added_tokens": 5,
               "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
      }) {
    StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::fromJson(json);
    EXPECT_FALSE(tokenizer.isOk()) << json;
  }
}

//===----------------------------------------------------------------------===//
// Small hand-built tokenizers
//===----------------------------------------------------------------------===//

TEST(TokenizerUnitTest, MergesAsPairsAndRanks) {
  // "abc": "b c" (rank 0) beats "a b" (rank 1), then no merge of a+bc.
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::fromJson(R"({
    "model": {"type": "BPE",
              "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4},
              "merges": [["b", "c"], ["a", "b"]]}})");
  ASSERT_TRUE(tokenizer.isOk()) << tokenizer.status().message();
  EXPECT_EQ((*tokenizer)->encode("abc", false), std::vector<int32_t>({0, 4}));
  EXPECT_EQ((*tokenizer)->encode("abab", false), std::vector<int32_t>({3, 3}));
  EXPECT_EQ((*tokenizer)->vocabSize(), 5);
}

TEST(TokenizerUnitTest, MetaspaceAndDigits) {
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::fromJson(R"({
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Metaspace", "replacement": "\u2581",
         "prepend_scheme": "always", "split": true},
        {"type": "Digits", "individual_digits": true}]},
    "decoder": {"type": "Metaspace", "replacement": "\u2581",
                "prepend_scheme": "always", "split": true},
    "model": {"type": "BPE", "unk_token": "<unk>",
              "vocab": {"<unk>": 0, "\u2581": 1, "a": 2, "1": 3, "2": 4,
                        "\u2581a": 5},
              "merges": ["\u2581 a"]}})");
  ASSERT_TRUE(tokenizer.isOk()) << tokenizer.status().message();
  std::vector<int32_t> ids = (*tokenizer)->encode("a 12 z", false);
  EXPECT_EQ(ids, std::vector<int32_t>({5, 1, 3, 4, 1, 0}));
  EXPECT_EQ((*tokenizer)->decode({5, 1, 3, 4}, false), "a 12");
}

/// A tokenizer over {a, b, -} with one Split pre-tokenizer on "-".
std::unique_ptr<Tokenizer> splitTokenizer(const std::string &behavior,
                                          bool invert) {
  std::string json = R"({"pre_tokenizer": {"type": "Split",
      "pattern": {"String": "-"}, "behavior": ")" +
                     behavior + R"(", "invert": )" +
                     (invert ? "true" : "false") + R"(},
    "model": {"type": "BPE",
              "vocab": {"a": 0, "b": 1, "-": 2, "a-": 3, "b-": 4, "-b": 5},
              "merges": ["a -", "b -", "- b"]}})";
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::fromJson(json);
  EXPECT_TRUE(tokenizer.isOk()) << tokenizer.status().message();
  return tokenizer.isOk() ? std::move(tokenizer).value() : nullptr;
}

TEST(TokenizerUnitTest, SplitBehaviors) {
  const std::vector<std::pair<std::string, std::vector<int32_t>>> expected = {
      {"Isolated", {0, 2, 1, 2}},
      {"Removed", {0, 1}},
      {"MergedWithPrevious", {3, 4}},
      {"MergedWithNext", {0, 5, 2}},
  };
  for (const auto &[behavior, ids] : expected) {
    std::unique_ptr<Tokenizer> tokenizer = splitTokenizer(behavior, false);
    ASSERT_NE(tokenizer, nullptr);
    EXPECT_EQ(tokenizer->encode("a-b-", false), ids) << behavior;
  }
  // Inverted, the pattern names what to keep: Removed drops "a" and "b".
  std::unique_ptr<Tokenizer> inverted = splitTokenizer("Removed", true);
  ASSERT_NE(inverted, nullptr);
  EXPECT_EQ(inverted->encode("a-b-", false), std::vector<int32_t>({2, 2}));
}

TEST(TokenizerUnitTest, AddedTokenFlags) {
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::fromJson(R"({
    "added_tokens": [
      {"id": 3, "content": "<x>", "special": true, "lstrip": true,
       "rstrip": true, "normalized": false, "single_word": false},
      {"id": 4, "content": "ab", "special": false, "lstrip": false,
       "rstrip": false, "normalized": false, "single_word": true}],
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, " ": 2, "c": 5},
              "merges": []}})");
  ASSERT_TRUE(tokenizer.isOk()) << tokenizer.status().message();
  // lstrip/rstrip absorb the spaces around <x>.
  EXPECT_EQ((*tokenizer)->encode("a <x> b", false),
            std::vector<int32_t>({0, 3, 1}));
  // single_word: "ab" inside "cab" is not a match.
  EXPECT_EQ((*tokenizer)->encode("ab cab", false),
            std::vector<int32_t>({4, 2, 5, 0, 1}));
  EXPECT_EQ((*tokenizer)->decode({0, 3, 1}, true), "a b");
  EXPECT_EQ((*tokenizer)->decode({4}, true), "ab");
}

} // namespace
} // namespace infer
