//===- FuzzOpenAiRequest.cpp - libFuzzer: OpenAI request bodies -----------===//
//
// The first byte picks the endpoint (its bits 0-1: 0 /v1/completions,
// 1 /v1/chat/completions, 2 /tokenize, 3 /detokenize), the rest is the
// POST body, read as OpenAiServer reads it (OpenAiRequest.h), without
// sockets, for each of four models: tiny-pycode's tokenizer
// (INFER_FUZZ_TOKENIZER) with Qwen3's chat template
// (INFER_FUZZ_CHAT_TEMPLATE), or neither (token-id prompts only); with a
// context of 2,048 and a vocabulary of 4,096, or neither known (0). Every
// body must end in a request the engine would run or a clean 4xx error;
// the checks below trap (abort) otherwise. Every body meets every model:
// a model picked by a bit of the input was one bit flip away from each
// seed, and 4 million inputs never made that flip.
//
//===----------------------------------------------------------------------===//

#include "runtime/serving/OpenAiRequest.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>

namespace {

using infer::serving::ApiError;
using infer::serving::CompletionCall;
using infer::serving::GenerationRequest;
using infer::serving::ServedModel;
using nlohmann::json;

constexpr int64_t kContext = 2048;
constexpr int64_t kVocab = 4096;

/// Aborts with `what` when `ok` is false: libFuzzer keeps the input.
void check(bool ok, const char *what) {
  if (ok)
    return;
  std::fprintf(stderr, "infer-fuzz-openai-request: %s\n", what);
  std::abort();
}

const infer::Tokenizer *fixtureTokenizer() {
  static std::unique_ptr<infer::Tokenizer> tokenizer = [] {
    auto t = infer::Tokenizer::fromFile(INFER_FUZZ_TOKENIZER);
    return t.isOk() ? std::move(t).value() : nullptr;
  }();
  return tokenizer.get();
}

const infer::serving::ChatTemplate *fixtureTemplate() {
  static std::unique_ptr<infer::serving::ChatTemplate> chatTemplate = [] {
    auto t = infer::serving::ChatTemplate::fromTokenizerConfig(
        INFER_FUZZ_CHAT_TEMPLATE);
    return t.isOk() ? std::move(t).value() : nullptr;
  }();
  return chatTemplate.get();
}

/// The fields a request body may name, and so an error's `param` (before
/// any `.` or `[`).
bool isField(const std::string &param) {
  static const std::set<std::string> fields = {"model",
                                               "prompt",
                                               "messages",
                                               "temperature",
                                               "top_p",
                                               "top_k",
                                               "min_p",
                                               "presence_penalty",
                                               "frequency_penalty",
                                               "repetition_penalty",
                                               "n",
                                               "ignore_eos",
                                               "seed",
                                               "stop",
                                               "stop_token_ids",
                                               "best_of",
                                               "echo",
                                               "suffix",
                                               "max_tokens",
                                               "max_completion_tokens",
                                               "priority",
                                               "stream",
                                               "stream_options",
                                               "logprobs",
                                               "top_logprobs",
                                               "add_generation_prompt",
                                               "add_special_tokens",
                                               "tokens"};
  return fields.count(param.substr(0, param.find_first_of(".["))) > 0;
}

/// An error is a 4xx whose body is OpenAI's error object naming the field
/// at fault; only a body that is not a JSON object, or a tokenizer the
/// model lacks, names none.
void checkError(const ApiError &e) {
  check(e.status >= 400 && e.status < 500, "an error that is not a 4xx");
  const json body = json::parse(infer::serving::errorBody(e), nullptr, false);
  check(body.is_object() && body.contains("error"),
        "an error body that is not JSON");
  const json &error = body["error"];
  check(error.is_object() && error.contains("message") &&
            error["message"].is_string() && !error["message"].empty() &&
            error.contains("type") && error["type"].is_string() &&
            error.contains("code") && error.contains("param"),
        "an error object without message, type, code and param");
  if (e.param.empty()) {
    check(error["param"].is_null(), "an empty param that is not null");
    check(e.message == "the body is not valid JSON" ||
              e.message == "the body must be a JSON object" ||
              e.message == "the model has no tokenizer",
          "an error that names no field");
  } else {
    check(isField(e.param), "an error naming a field requests do not have");
  }
}

/// The integers of a JSON list, or nullopt when it holds anything else.
std::optional<std::vector<int64_t>> integers(const json &list) {
  if (!list.is_array())
    return std::nullopt;
  std::vector<int64_t> out;
  for (const json &v : list) {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() &&
         v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
      return std::nullopt;
    out.push_back(v.get<int64_t>());
  }
  return out;
}

bool sameIds(const std::vector<int32_t> &ids,
             const std::vector<int64_t> &sent) {
  return std::equal(ids.begin(), ids.end(), sent.begin(), sent.end(),
                    [](int32_t a, int64_t b) { return a == b; });
}

/// An accepted completions call is one the engine runs as the client
/// asked: parameters in their documented ranges, SamplingParams::validate
/// passing, prompts of the ids sent, within the vocabulary and the context.
void checkCall(const CompletionCall &call, bool chat, const ServedModel &model,
               const json &body) {
  check(!call.requests.empty(), "an accepted call without requests");
  check(!chat || call.requests.size() == 1, "a chat call of many prompts");
  check(call.logprobs >= -1 && call.logprobs <= 20, "logprobs outside [0, 20]");
  check(call.stream || (!call.includeUsage && !call.continuousUsage),
        "stream_options without stream");
  const int64_t n = call.requests.front().sampling.n;
  check(static_cast<int64_t>(call.requests.size()) * n <=
            infer::serving::kMaxCompletionsPerCall,
        "more completions than a call may ask for");
  for (const GenerationRequest &g : call.requests) {
    const infer::SamplingParams &p = g.sampling;
    check(p.validate().isOk(), "sampling parameters the engine refuses");
    check(p.n == n, "prompts of one call with different n");
    check(p.temperature >= 0 && p.temperature <= 100,
          "temperature outside [0, 100]");
    check(p.topP > 0 && p.topP <= 1, "top_p outside (0, 1]");
    check(p.topK >= 0 && p.topK <= (int64_t(1) << 31), "top_k out of range");
    check(p.minP >= 0 && p.minP <= 1, "min_p outside [0, 1]");
    check(p.presencePenalty >= -2 && p.presencePenalty <= 2 &&
              p.frequencyPenalty >= -2 && p.frequencyPenalty <= 2,
          "a penalty outside [-2, 2]");
    check(p.repetitionPenalty > 0 && p.repetitionPenalty <= 100,
          "repetition_penalty outside (0, 100]");
    check(p.n >= 1 && p.n <= 128, "n outside [1, 128]");
    check(p.logprobs ==
              (call.logprobs >= 0 ? std::max<int64_t>(call.logprobs, 1) : 0),
          "sampling logprobs that differ from the call's");
    check(p.maxNewTokens >= 1 && p.maxNewTokens <= INT32_MAX,
          "max_new_tokens outside [1, 2^31)");
    check(g.priority >= INT32_MIN && g.priority <= INT32_MAX,
          "priority outside int32");
    check(p.stopStrings.empty() || model.tokenizer,
          "stop strings without a tokenizer (the engine refuses them)");
    for (const std::string &s : p.stopStrings)
      check(!s.empty(), "an empty stop string");
    const int64_t length = static_cast<int64_t>(g.promptTokenIds.size());
    check(length > 0, "an empty prompt");
    for (int32_t id : g.promptTokenIds) {
      check(id >= 0, "a negative token id (the engine refuses it)");
      check(model.vocabSize == 0 || id < model.vocabSize,
            "a token id outside the vocabulary");
    }
    check(model.maxModelLen == 0 ||
              length + p.maxNewTokens <= model.maxModelLen,
          "a prompt and completion over the context");
    if (const auto it = body.find("stop_token_ids");
        it != body.end() && !it->is_null()) {
      const auto sent = integers(*it);
      check(sent && sameIds(p.stopTokenIds, *sent),
            "stop_token_ids other than those sent");
    }
  }
  // Token-id prompts reach the engine as sent.
  const auto prompt = body.find("prompt");
  if (chat || prompt == body.end() || !prompt->is_array())
    return;
  if (const auto ids = integers(*prompt)) {
    check(call.requests.size() == 1 &&
              sameIds(call.requests[0].promptTokenIds, *ids),
          "prompt token ids other than those sent");
    return;
  }
  check(call.requests.size() == prompt->size(), "prompts lost or added");
  for (size_t i = 0; i < prompt->size(); ++i)
    if (const auto ids = integers((*prompt)[i]))
      check(sameIds(call.requests[i].promptTokenIds, *ids),
            "prompt token ids other than those sent");
}

/// Reads `text` at `endpoint` for `model` and checks the outcome.
void readAs(int endpoint, const std::string &text, const ServedModel &model) {
  if (endpoint <= 1) {
    CompletionCall call;
    const bool chat = endpoint == 1;
    if (std::optional<ApiError> e =
            infer::serving::readCompletionRequest(text, chat, model, call)) {
      checkError(*e);
      check(call.requests.empty(), "an error with requests");
      return;
    }
    checkCall(call, chat, model, json::parse(text));
    return;
  }
  std::vector<int32_t> tokens;
  const std::optional<ApiError> e =
      endpoint == 2
          ? infer::serving::readTokenizeRequest(text, model, tokens)
          : infer::serving::readDetokenizeRequest(text, model, tokens);
  if (e) {
    checkError(*e);
    return;
  }
  check(model.tokenizer != nullptr, "tokens without a tokenizer");
  for (int32_t id : tokens)
    check(id >= 0 && id < model.tokenizer->vocabSize(),
          "a token id outside the tokenizer's vocabulary");
  if (endpoint == 3) {
    const auto sent = integers(json::parse(text)["tokens"]);
    check(sent && sameIds(tokens, *sent), "tokens other than those sent");
  }
  // What the server answers with.
  (void)model.tokenizer->decode(tokens, false);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const std::string text(reinterpret_cast<const char *>(data) + 1, size - 1);
  for (bool limits : {true, false})
    for (bool tokenizer : {true, false}) {
      ServedModel model;
      model.name = "tiny";
      if (limits) {
        model.maxModelLen = kContext;
        model.vocabSize = kVocab;
      }
      if (tokenizer) {
        model.tokenizer = fixtureTokenizer();
        model.chatTemplate = fixtureTemplate();
        check(model.tokenizer && model.chatTemplate,
              "the fixture tokenizer or chat template did not load");
      }
      readAs(data[0] & 3, text, model);
    }
  return 0;
}
