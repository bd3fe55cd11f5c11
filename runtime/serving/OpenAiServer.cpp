//===- OpenAiServer.cpp - The OpenAI-compatible HTTP API ------------------===//

#include "runtime/serving/OpenAiServer.h"

#include "runtime/serving/ChatPage.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>

namespace infer::serving {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

/// OpenAI's error object, with the HTTP status that carries it.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;
  std::string type = "invalid_request_error";
  std::string code;
};

std::string dump(const ojson &j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string errorBody(const ApiError &e) {
  ojson error{{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? ojson() : ojson(e.param)},
              {"code", e.code.empty() ? ojson(e.status) : ojson(e.code)}};
  return dump(ojson{{"error", error}});
}

void sendError(HttpResponder &responder, const ApiError &e,
               const HttpHeaders &headers = {}) {
  responder.send(e.status, "application/json", errorBody(e), headers);
}

ApiError badField(const std::string &param, const std::string &message) {
  return {400, message, param};
}

/// The HTTP error of an engine Status.
ApiError engineError(const Status &status) {
  switch (status.code()) {
  case StatusCode::kInvalidArgument:
  case StatusCode::kOutOfRange:
  case StatusCode::kResourceExhausted:
    return {400, status.message(), ""};
  default:
    return {500, status.message(), "", "internal_server_error"};
  }
}

std::string randomId(const char *prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx",
                static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return std::string(prefix) + hex;
}

uint64_t randomSeed() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return rng() >> 1;
}

//===----------------------------------------------------------------------===//
// Request fields
//===----------------------------------------------------------------------===//

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

/// Sampling fields shared by both endpoints.
void readSampling(Fields &f, SamplingParams &p, bool chat) {
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
        if (!id.is_number_integer()) {
          f.fail("stop_token_ids",
                 "'stop_token_ids' must be a list of integers");
          break;
        }
        p.stopTokenIds.push_back(id.get<int32_t>());
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

//===----------------------------------------------------------------------===//
// Logprobs
//===----------------------------------------------------------------------===//

ojson bytesOf(const std::string &s) {
  ojson bytes = ojson::array();
  for (unsigned char c : s)
    bytes.push_back(static_cast<int>(c));
  return bytes;
}

} // namespace

bool constantTimeEquals(const std::string &a, const std::string &b) {
  // Every byte of the longer string is looked at, whatever matches.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

//===----------------------------------------------------------------------===//
// One completions call
//===----------------------------------------------------------------------===//

/// The state of one /v1/(chat/)completions call across its engine requests
/// (one per prompt); events arrive on the engine thread.
struct OpenAiServer::Call {
  struct Choice {
    std::string text;
    std::string finishReason;
    int64_t numTokens = 0;
    int64_t textOffset = 0;
    bool sentRole = false;
    ojson logprobs;
  };

  std::shared_ptr<HttpResponder> responder;
  AsyncEngine *engine = nullptr;
  const Tokenizer *tokenizer = nullptr;
  bool chat = false;
  bool stream = false;
  bool includeUsage = false;
  bool continuousUsage = false;
  /// -1: no logprobs; otherwise the top-N asked for.
  int64_t logprobs = -1;
  int64_t n = 1;
  std::string id;
  std::string model;
  int64_t created = 0;

  std::mutex mutex;
  std::vector<AsyncEngine::Handle> handles;
  std::vector<Choice> choices;
  std::vector<int64_t> promptTokens;
  std::vector<int64_t> cachedTokens;
  size_t numDone = 0;
  bool ended = false;

  std::string tokenText(int32_t token) const {
    return tokenizer ? tokenizer->decode({token}, false)
                     : std::to_string(token);
  }

  /// OpenAI's logprobs object of `delta`'s tokens.
  ojson logprobsOf(const CompletionDelta &delta, Choice &choice) const {
    if (chat) {
      ojson content = ojson::array();
      for (const TokenLogprobs &lp : delta.logprobs) {
        const std::string token = tokenText(lp.token);
        ojson top = ojson::array();
        for (int64_t i = 0;
             i < logprobs && i < static_cast<int64_t>(lp.top.size()); ++i) {
          const std::string t = tokenText(lp.top[i].first);
          top.push_back(ojson{{"token", t},
                              {"logprob", lp.top[i].second},
                              {"bytes", bytesOf(t)}});
        }
        content.push_back(ojson{{"token", token},
                                {"logprob", lp.logprob},
                                {"bytes", bytesOf(token)},
                                {"top_logprobs", top}});
      }
      return ojson{{"content", content}};
    }
    ojson tokens = ojson::array(), tokenLogprobs = ojson::array(),
          top = ojson::array(), offsets = ojson::array();
    for (const TokenLogprobs &lp : delta.logprobs) {
      const std::string token = tokenText(lp.token);
      tokens.push_back(token);
      tokenLogprobs.push_back(lp.logprob);
      ojson alternatives = ojson::object();
      for (int64_t i = 0;
           i < logprobs && i < static_cast<int64_t>(lp.top.size()); ++i)
        alternatives[tokenText(lp.top[i].first)] = lp.top[i].second;
      top.push_back(alternatives);
      offsets.push_back(choice.textOffset);
      choice.textOffset += static_cast<int64_t>(token.size());
    }
    return ojson{{"tokens", tokens},
                 {"token_logprobs", tokenLogprobs},
                 {"top_logprobs", top},
                 {"text_offset", offsets}};
  }

  ojson usage() const {
    int64_t prompt = 0, completion = 0, cached = 0;
    for (int64_t t : promptTokens)
      prompt += t;
    for (int64_t t : cachedTokens)
      cached += t;
    for (const Choice &c : choices)
      completion += c.numTokens;
    ojson u{{"prompt_tokens", prompt},
            {"total_tokens", prompt + completion},
            {"completion_tokens", completion}};
    if (cached > 0)
      u["prompt_tokens_details"] = ojson{{"cached_tokens", cached}};
    return u;
  }

  ojson chunkHead() const {
    return ojson{{"id", id},
                 {"object", chat ? "chat.completion.chunk" : "text_completion"},
                 {"created", created},
                 {"model", model}};
  }

  void writeEvent(const ojson &j) {
    responder->write("data: " + dump(j) + "\n\n");
  }

  void onEvent(size_t prompt, StreamEvent event) {
    std::lock_guard<std::mutex> lock(mutex);
    if (ended)
      return;
    if (!event.status.isOk()) {
      fail(event.status);
      return;
    }
    promptTokens[prompt] = event.numPromptTokens;
    cachedTokens[prompt] = event.numCachedTokens;
    const CompletionDelta &delta = event.delta;
    const size_t index =
        prompt * static_cast<size_t>(n) + static_cast<size_t>(delta.index);
    Choice &choice = choices[index];
    choice.numTokens += static_cast<int64_t>(delta.tokenIds.size());
    const char *reason = nullptr;
    if (delta.finished)
      reason = delta.finishReason == FinishReason::kStop     ? "stop"
               : delta.finishReason == FinishReason::kLength ? "length"
                                                             : "abort";
    if (stream) {
      if (chat && !choice.sentRole) {
        choice.sentRole = true;
        ojson chunk = chunkHead();
        chunk["choices"] = ojson::array(
            {ojson{{"index", index},
                   {"delta", ojson{{"role", "assistant"}, {"content", ""}}},
                   {"logprobs", nullptr},
                   {"finish_reason", nullptr}}});
        if (includeUsage)
          chunk["usage"] = nullptr;
        writeEvent(chunk);
      }
      if (!delta.text.empty() || delta.finished || !delta.logprobs.empty()) {
        ojson c{{"index", index}};
        if (chat)
          c["delta"] = delta.text.empty() ? ojson::object()
                                          : ojson{{"content", delta.text}};
        else
          c["text"] = delta.text;
        c["logprobs"] =
            logprobs >= 0 ? logprobsOf(delta, choice) : ojson(nullptr);
        c["finish_reason"] = reason ? ojson(reason) : ojson(nullptr);
        ojson chunk = chunkHead();
        chunk["choices"] = ojson::array({c});
        if (includeUsage)
          chunk["usage"] = continuousUsage ? usage() : ojson(nullptr);
        writeEvent(chunk);
      }
    } else {
      choice.text += delta.text;
      if (logprobs >= 0) {
        ojson part = logprobsOf(delta, choice);
        if (choice.logprobs.is_null()) {
          choice.logprobs = part;
        } else {
          for (auto &[key, value] : part.items())
            for (ojson &v : value)
              choice.logprobs[key].push_back(std::move(v));
        }
      }
    }
    if (reason)
      choice.finishReason = reason;
    if (event.done && ++numDone == promptTokens.size())
      finish();
  }

  void finish() {
    ended = true;
    if (stream) {
      if (includeUsage) {
        ojson chunk = chunkHead();
        chunk["choices"] = ojson::array();
        chunk["usage"] = usage();
        writeEvent(chunk);
      }
      responder->write("data: [DONE]\n\n");
      responder->endStream();
      return;
    }
    ojson out{{"id", id},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", model}};
    ojson list = ojson::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      Choice &c = choices[i];
      ojson choice{{"index", i}};
      if (chat)
        choice["message"] = ojson{{"role", "assistant"}, {"content", c.text}};
      else
        choice["text"] = c.text;
      choice["logprobs"] =
          logprobs >= 0 && !c.logprobs.is_null() ? c.logprobs : ojson(nullptr);
      choice["finish_reason"] = c.finishReason;
      list.push_back(std::move(choice));
    }
    out["choices"] = std::move(list);
    out["usage"] = usage();
    responder->send(200, "application/json", dump(out));
  }

  void fail(const Status &status) {
    ended = true;
    for (AsyncEngine::Handle h : handles)
      engine->abort(h);
    const ApiError e = engineError(status);
    if (stream) {
      responder->write("data: " + errorBody(e) + "\n\n");
      responder->write("data: [DONE]\n\n");
      responder->endStream();
    } else {
      sendError(*responder, e);
    }
  }

  /// The client went away: every engine request of the call stops.
  void abortAll() {
    std::lock_guard<std::mutex> lock(mutex);
    ended = true;
    for (AsyncEngine::Handle h : handles)
      engine->abort(h);
  }
};

//===----------------------------------------------------------------------===//
// OpenAiServer
//===----------------------------------------------------------------------===//

OpenAiServer::OpenAiServer(AsyncEngine &engine, const Tokenizer *tokenizer,
                           const ChatTemplate *chatTemplate,
                           OpenAiServerOptions options)
    : engine_(engine), tokenizer_(tokenizer), chatTemplate_(chatTemplate),
      options_(std::move(options)),
      created_(static_cast<int64_t>(std::time(nullptr))) {}

bool OpenAiServer::authorized(const HttpRequest &request) const {
  if (options_.apiKey.empty())
    return true;
  return constantTimeEquals(request.header("authorization"),
                            "Bearer " + options_.apiKey);
}

void OpenAiServer::handle(HttpRequest request,
                          std::shared_ptr<HttpResponder> responder) {
  const std::string &path = request.path;
  const bool get = request.method == "GET" || request.method == "HEAD";
  const bool post = request.method == "POST";
  struct Route {
    const char *path;
    bool post;
  };
  static const Route routes[] = {{"/", false},
                                 {"/index.html", false},
                                 {"/health", false},
                                 {"/metrics", false},
                                 {"/v1/models", false},
                                 {"/v1/completions", true},
                                 {"/v1/chat/completions", true},
                                 {"/tokenize", true},
                                 {"/detokenize", true}};
  const bool chatPage = path == "/" || path == "/index.html";
  const Route *route = nullptr;
  for (const Route &r : routes)
    if (path == r.path && (options_.chatPage || !chatPage))
      route = &r;
  int status = 200;
  auto fail = [&](const ApiError &e, const HttpHeaders &headers = {}) {
    status = e.status;
    sendError(*responder, e, headers);
  };
  if (!route) {
    fail({404, "no route " + request.method + " " + path, "", "not_found_error",
          "not_found"});
  } else if ((route->post && !post) || (!route->post && !get)) {
    fail({405,
          "method " + request.method + " is not allowed on " + path +
              (route->post ? " (use POST)" : " (use GET)"),
          "", "invalid_request_error", "method_not_allowed"});
  } else if (chatPage) {
    responder->send(200, "text/html; charset=utf-8",
                    std::string(chatPageHtml()),
                    {{"Content-Security-Policy",
                      std::string(chatPageContentSecurityPolicy())},
                     {"X-Content-Type-Options", "nosniff"},
                     {"Referrer-Policy", "no-referrer"},
                     {"Cache-Control", "no-cache"}});
  } else if (path == "/health") {
    Status health = engine_.health();
    if (health.isOk())
      responder->send(200, "text/plain", "");
    else
      fail({503, "the engine failed: " + health.message(), "",
            "service_unavailable", "engine_failed"});
  } else if (path == "/metrics") {
    EngineSnapshot s = engine_.snapshot();
    EngineGauges g;
    g.numRunning = s.numRunning;
    g.numWaiting = s.numWaiting;
    g.kvCacheUsage = s.numBlocks ? 1.0 - static_cast<double>(s.numFreeBlocks) /
                                             static_cast<double>(s.numBlocks)
                                 : 0.0;
    g.numPreemptions = s.stats.numPreemptions;
    g.numDraftTokens = s.stats.numDraftTokens;
    g.numAcceptedTokens = s.stats.numAcceptedTokens;
    g.numSteps = s.stats.numSteps;
    g.deviceIdleSeconds = s.stats.deviceIdleSeconds;
    responder->send(200, "text/plain; version=0.0.4; charset=utf-8",
                    engine_.metrics().render(g));
  } else if (!authorized(request)) {
    fail({401, "invalid or missing API key (Authorization: Bearer KEY)", "",
          "authentication_error", "invalid_api_key"},
         {{"WWW-Authenticate", "Bearer"}});
  } else if (path == "/v1/models") {
    ojson model{{"id", options_.servedModelName},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "infer"},
                {"root", options_.servedModelName},
                {"parent", nullptr},
                {"max_model_len", options_.maxModelLen}};
    responder->send(
        200, "application/json",
        dump(ojson{{"object", "list"}, {"data", ojson::array({model})}}));
  } else if (path == "/v1/completions" || path == "/v1/chat/completions") {
    completions(request, responder, path == "/v1/chat/completions");
    status = 0;
  } else if (path == "/tokenize") {
    tokenize(request, responder);
    status = 0;
  } else {
    detokenize(request, responder);
    status = 0;
  }
  if (status)
    engine_.metrics().countHttpResponse(status);
}

namespace {

/// The JSON object of a request body, or the 400 that says why not.
std::optional<ApiError> parseBody(const HttpRequest &request, json &body) {
  body = json::parse(request.body, nullptr, /*allow_exceptions=*/false);
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

} // namespace

void OpenAiServer::completions(const HttpRequest &request,
                               const std::shared_ptr<HttpResponder> &responder,
                               bool chat) {
  auto fail = [&](const ApiError &e, const HttpHeaders &headers = {}) {
    engine_.metrics().countHttpResponse(e.status);
    sendError(*responder, e, headers);
  };
  json body;
  if (std::optional<ApiError> e = parseBody(request, body))
    return fail(*e);
  if (const auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string())
      return fail(badField("model", "'model' must be a string"));
    if (it->get<std::string>() != options_.servedModelName)
      return fail({404,
                   "The model `" + it->get<std::string>() +
                       "` does not exist (this server serves `" +
                       options_.servedModelName + "`)",
                   "model", "invalid_request_error", "model_not_found"});
  }

  // The prompts, as token ids.
  std::vector<std::vector<int32_t>> prompts;
  const char *promptField = chat ? "messages" : "prompt";
  if (chat) {
    if (!body.contains("messages"))
      return fail(badField("messages", "'messages' is required"));
    if (std::optional<ApiError> e = checkMessages(body["messages"]))
      return fail(*e);
    if (!chatTemplate_ || !tokenizer_)
      return fail(badField("messages",
                           "the model has no chat template (start the server "
                           "with --chat-template FILE)"));
    bool addGenerationPrompt = true;
    Fields f(body);
    f.boolean("add_generation_prompt", addGenerationPrompt);
    if (f.error)
      return fail(*f.error);
    StatusOr<std::string> text =
        chatTemplate_->render(body["messages"], addGenerationPrompt);
    if (!text.isOk())
      return fail(
          badField("messages", "chat template: " + text.status().message()));
    prompts.push_back(tokenizer_->encode(*text, false));
  } else {
    const json *prompt = body.contains("prompt") ? &body["prompt"] : nullptr;
    auto badPrompt = [&] {
      return fail(badField("prompt", "'prompt' must be a string, a list of "
                                     "strings, a list of token ids or a "
                                     "list of lists of token ids"));
    };
    auto ids = [&](const json &list, std::vector<int32_t> &out) {
      for (const json &id : list) {
        if (!id.is_number_integer())
          return false;
        out.push_back(id.get<int32_t>());
      }
      return true;
    };
    if (!prompt || prompt->is_null())
      return fail(badField("prompt", "'prompt' is required"));
    if (prompt->is_string()) {
      if (!tokenizer_)
        return fail(badField("prompt", "the model has no tokenizer: send "
                                       "token ids"));
      prompts.push_back(tokenizer_->encode(prompt->get<std::string>(), true));
    } else if (prompt->is_array() && !prompt->empty() &&
               (*prompt)[0].is_number_integer()) {
      prompts.emplace_back();
      if (!ids(*prompt, prompts.back()))
        return badPrompt();
    } else if (prompt->is_array() && !prompt->empty()) {
      for (const json &p : *prompt) {
        if (p.is_string() && tokenizer_) {
          prompts.push_back(tokenizer_->encode(p.get<std::string>(), true));
        } else if (p.is_array()) {
          prompts.emplace_back();
          if (!ids(p, prompts.back()))
            return badPrompt();
        } else {
          return badPrompt();
        }
      }
    } else {
      return badPrompt();
    }
  }

  // Sampling.
  Fields f(body);
  SamplingParams sampling;
  readSampling(f, sampling, chat);
  int64_t maxTokens = -1;
  const int64_t maxAllowed = std::numeric_limits<int32_t>::max();
  if (chat && f.find("max_completion_tokens"))
    f.integer("max_completion_tokens", maxTokens, 1, maxAllowed);
  else
    f.integer("max_tokens", maxTokens, 1, maxAllowed);
  int64_t priority = 0;
  f.integer("priority", priority, std::numeric_limits<int32_t>::min(),
            std::numeric_limits<int32_t>::max());
  bool stream = false;
  f.boolean("stream", stream);
  bool includeUsage = false, continuousUsage = false;
  if (const json *so = f.find("stream_options")) {
    if (!so->is_object()) {
      f.fail("stream_options", "'stream_options' must be an object");
    } else {
      Fields sf(*so);
      sf.boolean("include_usage", includeUsage);
      sf.boolean("continuous_usage_stats", continuousUsage);
      if (sf.error)
        f.fail("stream_options." + sf.error->param, sf.error->message);
      if (!stream)
        f.fail("stream_options",
               "'stream_options' is only allowed when 'stream' is true");
    }
  }
  int64_t logprobs = -1;
  if (chat) {
    bool want = false;
    f.boolean("logprobs", want);
    int64_t top = 0;
    f.integer("top_logprobs", top, 0, 20);
    if (f.find("top_logprobs") && !want)
      f.fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (want)
      logprobs = top;
  } else if (f.find("logprobs")) {
    f.integer("logprobs", logprobs, 0, 20);
  }
  if (f.error)
    return fail(*f.error);
  sampling.logprobs = logprobs >= 0 ? std::max<int64_t>(logprobs, 1) : 0;

  // Lengths against the context.
  const int64_t context = options_.maxModelLen;
  for (const std::vector<int32_t> &p : prompts) {
    const int64_t length = static_cast<int64_t>(p.size());
    if (length == 0)
      return fail(badField(promptField, "the prompt is empty"));
    if (options_.vocabSize > 0)
      for (int32_t id : p)
        if (id < 0 || id >= options_.vocabSize)
          return fail(badField(
              promptField, "token id " + std::to_string(id) +
                               " is outside the vocabulary of " +
                               std::to_string(options_.vocabSize) + " tokens"));
    if (context > 0 &&
        (length >= context || (maxTokens > 0 && length + maxTokens > context)))
      return fail(badField(
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
              (chat ? "messages" : "prompt") + " or completion."));
  }

  auto call = std::make_shared<Call>();
  call->responder = responder;
  call->engine = &engine_;
  call->tokenizer = tokenizer_;
  call->chat = chat;
  call->stream = stream;
  call->includeUsage = includeUsage;
  call->continuousUsage = continuousUsage;
  call->logprobs = logprobs;
  call->n = sampling.n;
  call->id = randomId(chat ? "chatcmpl-" : "cmpl-");
  call->model = options_.servedModelName;
  call->created = static_cast<int64_t>(std::time(nullptr));
  call->choices.resize(prompts.size() * static_cast<size_t>(sampling.n));
  call->promptTokens.assign(prompts.size(), 0);
  call->cachedTokens.assign(prompts.size(), 0);
  for (size_t i = 0; i < prompts.size(); ++i)
    call->promptTokens[i] = static_cast<int64_t>(prompts[i].size());

  responder->onClose([call] { call->abortAll(); });
  std::lock_guard<std::mutex> lock(call->mutex);
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest g;
    g.promptTokenIds = std::move(prompts[i]);
    g.sampling = sampling;
    const int64_t length = static_cast<int64_t>(g.promptTokenIds.size());
    g.sampling.maxNewTokens = maxTokens > 0         ? maxTokens
                              : chat && context > 0 ? context - length
                              : context > 0
                                  ? std::min<int64_t>(16, context - length)
                                  : 16;
    g.priority = priority;
    StatusOr<AsyncEngine::Handle> handle =
        engine_.submit(std::move(g), [call, i](StreamEvent event) {
          call->onEvent(i, std::move(event));
        });
    if (!handle.isOk()) {
      call->ended = true;
      for (AsyncEngine::Handle h : call->handles)
        engine_.abort(h);
      if (handle.status().code() == StatusCode::kResourceExhausted)
        return fail(
            {429, handle.status().message() + "; retry later", "",
             "rate_limit_error", "rate_limit_exceeded"},
            {{"Retry-After", std::to_string(options_.retryAfterSeconds)}});
      return fail({503, handle.status().message(), "", "service_unavailable",
                   "unavailable"});
    }
    call->handles.push_back(*handle);
  }
  engine_.metrics().countHttpResponse(200);
  if (stream)
    responder->startStream("text/event-stream; charset=utf-8");
}

void OpenAiServer::tokenize(const HttpRequest &request,
                            const std::shared_ptr<HttpResponder> &responder) {
  auto fail = [&](const ApiError &e) {
    engine_.metrics().countHttpResponse(e.status);
    sendError(*responder, e);
  };
  json body;
  if (std::optional<ApiError> e = parseBody(request, body))
    return fail(*e);
  if (!tokenizer_)
    return fail({400, "the model has no tokenizer", ""});
  Fields f(body);
  std::vector<int32_t> tokens;
  if (body.contains("messages")) {
    if (std::optional<ApiError> e = checkMessages(body["messages"]))
      return fail(*e);
    if (!chatTemplate_)
      return fail(badField("messages", "the model has no chat template"));
    bool addGenerationPrompt = true;
    f.boolean("add_generation_prompt", addGenerationPrompt);
    if (f.error)
      return fail(*f.error);
    StatusOr<std::string> text =
        chatTemplate_->render(body["messages"], addGenerationPrompt);
    if (!text.isOk())
      return fail(
          badField("messages", "chat template: " + text.status().message()));
    tokens = tokenizer_->encode(*text, false);
  } else {
    const json *prompt = f.find("prompt");
    if (!prompt || !prompt->is_string())
      return fail(badField("prompt", "'prompt' (a string) or 'messages' is "
                                     "required"));
    bool addSpecialTokens = true;
    f.boolean("add_special_tokens", addSpecialTokens);
    if (f.error)
      return fail(*f.error);
    tokens = tokenizer_->encode(prompt->get<std::string>(), addSpecialTokens);
  }
  engine_.metrics().countHttpResponse(200);
  responder->send(200, "application/json",
                  dump(ojson{{"count", tokens.size()},
                             {"max_model_len", options_.maxModelLen},
                             {"tokens", tokens}}));
}

void OpenAiServer::detokenize(const HttpRequest &request,
                              const std::shared_ptr<HttpResponder> &responder) {
  auto fail = [&](const ApiError &e) {
    engine_.metrics().countHttpResponse(e.status);
    sendError(*responder, e);
  };
  json body;
  if (std::optional<ApiError> e = parseBody(request, body))
    return fail(*e);
  if (!tokenizer_)
    return fail({400, "the model has no tokenizer", ""});
  const auto it = body.find("tokens");
  std::vector<int32_t> tokens;
  bool ok = it != body.end() && it->is_array();
  if (ok)
    for (const json &id : *it) {
      ok = id.is_number_integer() && id.get<int64_t>() >= 0 &&
           id.get<int64_t>() < tokenizer_->vocabSize();
      if (!ok)
        break;
      tokens.push_back(id.get<int32_t>());
    }
  if (!ok)
    return fail(
        badField("tokens", "'tokens' must be a list of token ids "
                           "below " +
                               std::to_string(tokenizer_->vocabSize())));
  engine_.metrics().countHttpResponse(200);
  responder->send(200, "application/json",
                  dump(ojson{{"prompt", tokenizer_->decode(tokens, false)}}));
}

} // namespace infer::serving
