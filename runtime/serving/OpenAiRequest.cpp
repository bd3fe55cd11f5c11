//===- OpenAiRequest.cpp - Reading OpenAI request bodies ------------------===//

#include "runtime/serving/OpenAiRequest.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <limits>
#include <random>

namespace infer::serving {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

uint64_t randomSeed() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return rng() >> 1;
}

/// Reads optional fields of a JSON body, keeping the first error.
class Fields {
public:
  explicit Fields(const json &body) : body_(body) {}

  const json *find(const char *name) const {
    auto it = body_.find(name);
    if (it == body_.end() || it->is_null())
      return nullptr;
    return &*it;
  }

  void number(const char *name, double &out, double lo, double hi) {
    const json *v = find(name);
    if (!v || error)
      return;
    if (!v->is_number() || !(v->get<double>() >= lo) ||
        !(v->get<double>() <= hi)) {
      fail(name, "'" + std::string(name) + "' must be a number in [" +
                     trim(lo) + ", " + trim(hi) + "]");
      return;
    }
    out = v->get<double>();
  }

  void integer(const char *name, int64_t &out, int64_t lo, int64_t hi) {
    const json *v = find(name);
    if (!v || error)
      return;
    if (!v->is_number_integer() || v->get<int64_t>() < lo ||
        v->get<int64_t>() > hi) {
      fail(name, "'" + std::string(name) + "' must be an integer in [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]");
      return;
    }
    out = v->get<int64_t>();
  }

  void boolean(const char *name, bool &out) {
    const json *v = find(name);
    if (!v || error)
      return;
    if (!v->is_boolean()) {
      fail(name, "'" + std::string(name) + "' must be a boolean");
      return;
    }
    out = v->get<bool>();
  }

  void fail(const std::string &param, const std::string &message) {
    if (!error)
      error = badField(param, message);
  }

  std::optional<ApiError> error;

private:
  static std::string trim(double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return buf;
  }
  const json &body_;
};

/// A token id of `field`, checked before it becomes an int32: in
/// [0, vocabSize), or [0, 2^31) when the vocabulary is not known.
std::optional<ApiError> tokenId(const json &id, const std::string &field,
                                int64_t vocabSize, int32_t &out) {
  const int64_t end = vocabSize > 0 ? vocabSize : int64_t(1) << 31;
  // An integer past int64 reads as unsigned; any such id is out of range.
  const bool inRange = !id.is_number_unsigned()
                           ? id.get<int64_t>() >= 0 && id.get<int64_t>() < end
                           : id.get<uint64_t>() < static_cast<uint64_t>(end);
  if (!inRange)
    return badField(field, "token id " + id.dump() +
                               (vocabSize > 0
                                    ? " is outside the vocabulary of " +
                                          std::to_string(vocabSize) + " tokens"
                                    : " is not in [0, 2^31)"));
  out = static_cast<int32_t>(id.get<int64_t>());
  return std::nullopt;
}

/// Sampling fields shared by both endpoints.
void readSampling(Fields &f, SamplingParams &p, bool chat, int64_t vocabSize) {
  p.temperature = 1.0;
  f.number("temperature", p.temperature, 0.0, 100.0);
  f.number("top_p", p.topP, 1e-9, 1.0);
  int64_t topK = 0;
  f.integer("top_k", topK, -1, int64_t(1) << 31);
  p.topK = topK < 0 ? 0 : topK;
  f.number("min_p", p.minP, 0.0, 1.0);
  f.number("presence_penalty", p.presencePenalty, -2.0, 2.0);
  f.number("frequency_penalty", p.frequencyPenalty, -2.0, 2.0);
  f.number("repetition_penalty", p.repetitionPenalty, 1e-9, 100.0);
  f.integer("n", p.n, 1, 128);
  f.boolean("ignore_eos", p.ignoreEos);
  int64_t seed = -1;
  f.integer("seed", seed, std::numeric_limits<int64_t>::min(),
            std::numeric_limits<int64_t>::max());
  p.seed = f.find("seed") ? static_cast<uint64_t>(seed) : randomSeed();
  if (const json *stop = f.find("stop")) {
    if (stop->is_string()) {
      p.stopStrings = {stop->get<std::string>()};
    } else if (stop->is_array()) {
      for (const json &s : *stop) {
        if (!s.is_string()) {
          f.fail("stop", "'stop' must be a string or a list of strings");
          break;
        }
        p.stopStrings.push_back(s.get<std::string>());
      }
    } else {
      f.fail("stop", "'stop' must be a string or a list of strings");
    }
    for (const std::string &s : p.stopStrings)
      if (s.empty())
        f.fail("stop", "'stop' strings must not be empty");
  }
  if (const json *ids = f.find("stop_token_ids")) {
    if (!ids->is_array())
      f.fail("stop_token_ids", "'stop_token_ids' must be a list of integers");
    else
      for (const json &id : *ids) {
        int32_t token = 0;
        if (!id.is_number_integer()) {
          f.fail("stop_token_ids",
                 "'stop_token_ids' must be a list of integers");
          break;
        }
        if (std::optional<ApiError> e =
                tokenId(id, "stop_token_ids", vocabSize, token)) {
          f.fail(e->param, e->message);
          break;
        }
        p.stopTokenIds.push_back(token);
      }
  }
  if (const json *bestOf = f.find("best_of"))
    if (!bestOf->is_number_integer() || bestOf->get<int64_t>() != p.n)
      f.fail("best_of", "'best_of' other than n is not supported");
  bool echo = false;
  f.boolean("echo", echo);
  if (echo)
    f.fail("echo", "'echo' is not supported");
  if (const json *suffix = f.find("suffix"); suffix && !chat)
    f.fail("suffix", "'suffix' is not supported");
}

/// The JSON object of a request body, or the 400 that says why not.
std::optional<ApiError> parseBody(const std::string &text, json &body) {
  body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded())
    return ApiError{400, "the body is not valid JSON", ""};
  if (!body.is_object())
    return ApiError{400, "the body must be a JSON object", ""};
  return std::nullopt;
}

/// Messages as the template expects them, checked.
std::optional<ApiError> checkMessages(const json &messages) {
  if (!messages.is_array() || messages.empty())
    return badField("messages", "'messages' must be a non-empty list");
  for (size_t i = 0; i < messages.size(); ++i) {
    const json &m = messages[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return badField(at + ".role",
                      "'" + at + "' must be an object with a string 'role'");
    if (m.contains("content") && !m["content"].is_string() &&
        !m["content"].is_array() && !m["content"].is_null())
      return badField(at + ".content", "'" + at +
                                           ".content' must be a string or a "
                                           "list of content parts");
    if (m.contains("content") && m["content"].is_array())
      for (const json &part : m["content"])
        if (!part.is_object() || part.value("type", "") != "text" ||
            !part.contains("text") || !part["text"].is_string())
          return badField(at + ".content",
                          "only text content parts are supported");
  }
  return std::nullopt;
}

/// `text` as token ids, or a 400 for `field` when the tokenizer gave up on
/// it (a cost limit, a regex's match limit): encode() would return the ids
/// up to there, a prompt silently cut.
std::optional<ApiError> encode(const Tokenizer &tokenizer,
                               const std::string &text, bool addSpecialTokens,
                               const char *field, std::vector<int32_t> &out) {
  StatusOr<std::vector<int32_t>> ids =
      tokenizer.tryEncode(text, addSpecialTokens);
  if (!ids.isOk())
    return badField(field, "the tokenizer gave up on the text: " +
                               ids.status().message());
  out = std::move(ids).value();
  return std::nullopt;
}

/// The prompts of a completions body, as token ids.
std::optional<ApiError> readPrompts(json &body, const ServedModel &model,
                                    std::vector<std::vector<int32_t>> &out) {
  const json *prompt = body.contains("prompt") ? &body["prompt"] : nullptr;
  const ApiError badPrompt =
      badField("prompt", "'prompt' must be a string, a list of strings, a "
                         "list of token ids or a list of lists of token ids");
  auto ids = [&](const json &list,
                 std::vector<int32_t> &ids) -> std::optional<ApiError> {
    for (const json &id : list) {
      int32_t token = 0;
      if (!id.is_number_integer())
        return badPrompt;
      if (std::optional<ApiError> e =
              tokenId(id, "prompt", model.vocabSize, token))
        return e;
      ids.push_back(token);
    }
    return std::nullopt;
  };
  if (!prompt || prompt->is_null())
    return badField("prompt", "'prompt' is required");
  if (prompt->is_string()) {
    if (!model.tokenizer)
      return badField("prompt", "the model has no tokenizer: send "
                                "token ids");
    out.emplace_back();
    if (std::optional<ApiError> e =
            encode(*model.tokenizer, prompt->get<std::string>(), true, "prompt",
                   out.back()))
      return e;
  } else if (prompt->is_array() && !prompt->empty() &&
             (*prompt)[0].is_number_integer()) {
    out.emplace_back();
    if (std::optional<ApiError> e = ids(*prompt, out.back()))
      return e;
  } else if (prompt->is_array() && !prompt->empty()) {
    // Counted before any is tokenized.
    if (static_cast<int64_t>(prompt->size()) > kMaxCompletionsPerCall)
      return badField("prompt", "a request may hold at most " +
                                    std::to_string(kMaxCompletionsPerCall) +
                                    " prompts; this one holds " +
                                    std::to_string(prompt->size()));
    for (const json &p : *prompt) {
      if (p.is_string() && model.tokenizer) {
        out.emplace_back();
        if (std::optional<ApiError> e =
                encode(*model.tokenizer, p.get<std::string>(), true, "prompt",
                       out.back()))
          return e;
      } else if (p.is_array()) {
        out.emplace_back();
        if (std::optional<ApiError> e = ids(p, out.back()))
          return e;
      } else {
        return badPrompt;
      }
    }
  } else {
    return badPrompt;
  }
  return std::nullopt;
}

/// The messages of a chat body through the chat template, as token ids;
/// `noTemplate` is the error of a model without one.
std::optional<ApiError> readMessages(json &body, const ServedModel &model,
                                     const char *noTemplate,
                                     std::vector<int32_t> &out) {
  if (std::optional<ApiError> e = checkMessages(body["messages"]))
    return e;
  if (!model.chatTemplate || !model.tokenizer)
    return badField("messages", noTemplate);
  bool addGenerationPrompt = true;
  Fields f(body);
  f.boolean("add_generation_prompt", addGenerationPrompt);
  if (f.error)
    return f.error;
  StatusOr<std::string> text =
      model.chatTemplate->render(body["messages"], addGenerationPrompt);
  if (!text.isOk())
    return badField("messages", "chat template: " + text.status().message());
  return encode(*model.tokenizer, *text, false, "messages", out);
}

/// The body of a /tokenize or /detokenize request, for a model that has a
/// tokenizer.
std::optional<ApiError> parseTokenizerBody(const std::string &text,
                                           const ServedModel &model,
                                           json &body) {
  if (std::optional<ApiError> e = parseBody(text, body))
    return e;
  if (!model.tokenizer)
    return ApiError{400, "the model has no tokenizer", ""};
  return std::nullopt;
}

} // namespace

std::string errorBody(const ApiError &e) {
  ojson error{{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? ojson() : ojson(e.param)},
              {"code", e.code.empty() ? ojson(e.status) : ojson(e.code)}};
  return ojson{{"error", error}}.dump(-1, ' ', false,
                                      ojson::error_handler_t::replace);
}

ApiError badField(const std::string &param, const std::string &message) {
  return {400, message, param};
}

std::optional<ApiError> readCompletionRequest(const std::string &text,
                                              bool chat,
                                              const ServedModel &model,
                                              CompletionCall &call) {
  json body;
  if (std::optional<ApiError> e = parseBody(text, body))
    return e;
  if (const auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string())
      return badField("model", "'model' must be a string");
    if (it->get<std::string>() != model.name)
      return ApiError{404,
                      "The model `" + it->get<std::string>() +
                          "` does not exist (this server serves `" +
                          model.name + "`)",
                      "model", "invalid_request_error", "model_not_found"};
  }

  // The prompts, as token ids.
  std::vector<std::vector<int32_t>> prompts;
  const char *promptField = chat ? "messages" : "prompt";
  if (chat) {
    if (!body.contains("messages"))
      return badField("messages", "'messages' is required");
    prompts.emplace_back();
    if (std::optional<ApiError> e =
            readMessages(body, model,
                         "the model has no chat template (start the server "
                         "with --chat-template FILE)",
                         prompts.back()))
      return e;
  } else if (std::optional<ApiError> e = readPrompts(body, model, prompts)) {
    return e;
  }

  // Sampling.
  Fields f(body);
  SamplingParams sampling;
  readSampling(f, sampling, chat, model.vocabSize);
  // The engine matches stop strings on detokenized text.
  if (!sampling.stopStrings.empty() && !model.tokenizer)
    f.fail("stop", "'stop' strings need the model's tokenizer (send "
                   "'stop_token_ids')");
  int64_t maxTokens = -1;
  const int64_t maxAllowed = std::numeric_limits<int32_t>::max();
  if (chat && f.find("max_completion_tokens"))
    f.integer("max_completion_tokens", maxTokens, 1, maxAllowed);
  else
    f.integer("max_tokens", maxTokens, 1, maxAllowed);
  int64_t priority = 0;
  f.integer("priority", priority, std::numeric_limits<int32_t>::min(),
            std::numeric_limits<int32_t>::max());
  f.boolean("stream", call.stream);
  if (const json *so = f.find("stream_options")) {
    if (!so->is_object()) {
      f.fail("stream_options", "'stream_options' must be an object");
    } else {
      Fields sf(*so);
      sf.boolean("include_usage", call.includeUsage);
      sf.boolean("continuous_usage_stats", call.continuousUsage);
      if (sf.error)
        f.fail("stream_options." + sf.error->param, sf.error->message);
      if (!call.stream)
        f.fail("stream_options",
               "'stream_options' is only allowed when 'stream' is true");
    }
  }
  if (chat) {
    bool want = false;
    f.boolean("logprobs", want);
    int64_t top = 0;
    f.integer("top_logprobs", top, 0, 20);
    if (f.find("top_logprobs") && !want)
      f.fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (want)
      call.logprobs = top;
  } else if (f.find("logprobs")) {
    f.integer("logprobs", call.logprobs, 0, 20);
  }
  if (f.error)
    return f.error;
  const int64_t completions = static_cast<int64_t>(prompts.size()) * sampling.n;
  if (completions > kMaxCompletionsPerCall)
    return badField("n",
                    "a request may ask for at most " +
                        std::to_string(kMaxCompletionsPerCall) +
                        " completions; this one asks for " +
                        std::to_string(prompts.size()) +
                        " prompts times n = " + std::to_string(completions));
  sampling.logprobs =
      call.logprobs >= 0 ? std::max<int64_t>(call.logprobs, 1) : 0;

  // Lengths against the context.
  const int64_t context = model.maxModelLen;
  for (const std::vector<int32_t> &p : prompts) {
    const int64_t length = static_cast<int64_t>(p.size());
    if (length == 0)
      return badField(promptField, "the prompt is empty");
    if (model.vocabSize > 0)
      for (int32_t id : p)
        if (id < 0 || id >= model.vocabSize)
          return badField(promptField, "token id " + std::to_string(id) +
                                           " is outside the vocabulary of " +
                                           std::to_string(model.vocabSize) +
                                           " tokens");
    if (context > 0 &&
        (length >= context || (maxTokens > 0 && length + maxTokens > context)))
      return badField(
          maxTokens > 0 && length < context ? (chat && f.find("max_completion_"
                                                              "tokens")
                                                   ? "max_completion_tokens"
                                                   : "max_tokens")
                                            : promptField,
          "This model's maximum context length is " + std::to_string(context) +
              " tokens. However, you requested " +
              std::to_string(length + std::max<int64_t>(maxTokens, 0)) +
              " tokens (" + std::to_string(length) + " in the " +
              (chat ? "messages" : "prompt") + ", " +
              std::to_string(std::max<int64_t>(maxTokens, 0)) +
              " in the completion). Please reduce the length of the " +
              (chat ? "messages" : "prompt") + " or completion.");
  }

  for (std::vector<int32_t> &p : prompts) {
    GenerationRequest g;
    const int64_t length = static_cast<int64_t>(p.size());
    g.promptTokenIds = std::move(p);
    g.sampling = sampling;
    g.sampling.maxNewTokens = maxTokens > 0         ? maxTokens
                              : chat && context > 0 ? context - length
                              : context > 0
                                  ? std::min<int64_t>(16, context - length)
                                  : 16;
    g.priority = priority;
    call.requests.push_back(std::move(g));
  }
  return std::nullopt;
}

std::optional<ApiError> readTokenizeRequest(const std::string &text,
                                            const ServedModel &model,
                                            std::vector<int32_t> &tokens) {
  json body;
  if (std::optional<ApiError> e = parseTokenizerBody(text, model, body))
    return e;
  if (body.contains("messages"))
    return readMessages(body, model, "the model has no chat template", tokens);
  Fields f(body);
  const json *prompt = f.find("prompt");
  if (!prompt || !prompt->is_string())
    return badField("prompt", "'prompt' (a string) or 'messages' is "
                              "required");
  bool addSpecialTokens = true;
  f.boolean("add_special_tokens", addSpecialTokens);
  if (f.error)
    return f.error;
  return encode(*model.tokenizer, prompt->get<std::string>(), addSpecialTokens,
                "prompt", tokens);
}

std::optional<ApiError> readDetokenizeRequest(const std::string &text,
                                              const ServedModel &model,
                                              std::vector<int32_t> &tokens) {
  json body;
  if (std::optional<ApiError> e = parseTokenizerBody(text, model, body))
    return e;
  const auto it = body.find("tokens");
  bool ok = it != body.end() && it->is_array();
  if (ok)
    for (const json &id : *it) {
      ok = id.is_number_integer() && id.get<int64_t>() >= 0 &&
           id.get<int64_t>() < model.tokenizer->vocabSize();
      if (!ok)
        break;
      tokens.push_back(id.get<int32_t>());
    }
  if (!ok)
    return badField("tokens", "'tokens' must be a list of token ids below " +
                                  std::to_string(model.tokenizer->vocabSize()));
  return std::nullopt;
}

} // namespace infer::serving
