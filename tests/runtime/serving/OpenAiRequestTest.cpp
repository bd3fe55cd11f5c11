//===- OpenAiRequestTest.cpp - Reading OpenAI request bodies --------------===//
//
// Bodies infer-fuzz-openai-request found the reader accepting wrongly, and
// what it must answer instead. tests/serving/serve_test.py covers the
// endpoints end to end.
//
//===----------------------------------------------------------------------===//

#include "runtime/serving/OpenAiRequest.h"

#include <gtest/gtest.h>

#include <string>

namespace infer::serving {
namespace {

/// A model of 4,096 tokens and a context of 2,048, without a tokenizer
/// (token-id prompts only) unless a test gives one.
ServedModel tinyModel() {
  ServedModel model;
  model.name = "tiny";
  model.maxModelLen = 2048;
  model.vocabSize = 4096;
  return model;
}

/// The error `body` gets from /v1/completions, or "" when it is accepted.
std::string errorOf(const std::string &body,
                    const ServedModel &model = tinyModel(),
                    CompletionCall *accepted = nullptr) {
  CompletionCall call;
  std::optional<ApiError> e = readCompletionRequest(body, false, model, call);
  if (accepted)
    *accepted = call;
  if (!e)
    return "";
  EXPECT_EQ(e->status, 400) << e->message;
  return e->param + ": " + e->message;
}

TEST(OpenAiRequestTest, TokenIdsAreCheckedBeforeTheyBecomeInt32) {
  // 2^32 + 5 was read as token 5, and accepted.
  EXPECT_EQ(errorOf(R"({"prompt": [4294967301]})"),
            "prompt: token id 4294967301 is outside the vocabulary of 4096 "
            "tokens");
  EXPECT_EQ(errorOf(R"({"prompt": [[1, 2], [18446744073709551615]]})"),
            "prompt: token id 18446744073709551615 is outside the vocabulary "
            "of 4096 tokens");
  EXPECT_EQ(errorOf(R"({"prompt": [1], "stop_token_ids": [4294967298]})"),
            "stop_token_ids: token id 4294967298 is outside the vocabulary of "
            "4096 tokens");
  // Without a known vocabulary: int32's range, and never negative (the
  // engine refuses a negative id).
  ServedModel unknown = tinyModel();
  unknown.vocabSize = 0;
  EXPECT_EQ(errorOf(R"({"prompt": [-5]})", unknown),
            "prompt: token id -5 is not in [0, 2^31)");
  EXPECT_EQ(errorOf(R"({"prompt": [77777777777777775, 0]})", unknown),
            "prompt: token id 77777777777777775 is not in [0, 2^31)");
  CompletionCall call;
  EXPECT_EQ(errorOf(R"({"prompt": [[0, 4095], [2147483647]],
                        "stop_token_ids": [7]})",
                    unknown, &call),
            "");
  ASSERT_EQ(call.requests.size(), 2u);
  EXPECT_EQ(call.requests[1].promptTokenIds,
            std::vector<int32_t>({2147483647}));
  EXPECT_EQ(call.requests[0].sampling.stopTokenIds, std::vector<int32_t>({7}));
}

TEST(OpenAiRequestTest, StopStringsNeedATokenizer) {
  // The engine refuses them without one, after the server had answered
  // 200 (a stream then ended in an error event).
  ServedModel model = tinyModel();
  EXPECT_EQ(errorOf(R"({"prompt": [5], "stop": "x"})", model),
            "stop: 'stop' strings need the model's tokenizer (send "
            "'stop_token_ids')");
  EXPECT_EQ(errorOf(R"({"prompt": [5], "stop_token_ids": [2]})", model), "");
}

TEST(OpenAiRequestTest, ACallAsksForAtMost2048Completions) {
  // 6 KB of '[1],' made a call of 1,500 prompts times n = 128: 192,000
  // completions, each an engine request's state; a 4 MiB body held a
  // million prompts.
  std::string many = "[1]";
  for (int i = 1; i < 1500; ++i)
    many += ",[1]";
  EXPECT_EQ(errorOf(R"({"prompt": [)" + many + R"(], "n": 128})"),
            "n: a request may ask for at most 2048 completions; this one asks "
            "for 1500 prompts times n = 192000");
  EXPECT_EQ(errorOf(R"({"prompt": [)" + many + "," + many + "]}"),
            "prompt: a request may hold at most 2048 prompts; this one holds "
            "3000");
  CompletionCall call;
  EXPECT_EQ(errorOf(R"({"prompt": [)" + many + "]}", tinyModel(), &call), "");
  EXPECT_EQ(call.requests.size(), 1500u);
  EXPECT_EQ(errorOf(R"({"prompt": [1], "n": 128})"), "");
}

TEST(OpenAiRequestTest, TextTheTokenizerGivesUpOnIsRefusedNotCut) {
  // A backtracking pre-tokenizer regex hits PCRE2's match limit on a long
  // run of 'a's: encode() returned the ids before that point, a prompt
  // silently cut; the server now says so.
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::fromJson(R"({
    "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a+)+$"},
                      "behavior": "Isolated"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})");
  ASSERT_TRUE(tokenizer.isOk()) << tokenizer.status().message();
  ServedModel model = tinyModel();
  model.tokenizer = tokenizer->get();
  const std::string hostile = std::string(5000, 'a') + "b";
  ASSERT_FALSE((*tokenizer)->tryEncode(hostile, true).isOk())
      << "the regex no longer gives up; pick a harder text";
  const std::string error =
      errorOf(R"({"prompt": ")" + hostile + R"("})", model);
  EXPECT_EQ(error.rfind("prompt: the tokenizer gave up on the text: ", 0), 0u)
      << error;
  std::vector<int32_t> tokens;
  std::optional<ApiError> e =
      readTokenizeRequest(R"({"prompt": ")" + hostile + R"("})", model, tokens);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "prompt");
  EXPECT_EQ(errorOf(R"({"prompt": "ab"})", model), "");
}

} // namespace
} // namespace infer::serving
