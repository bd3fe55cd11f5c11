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

using ojson = nlohmann::ordered_json;

std::string dump(const ojson &j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

void sendError(HttpResponder &responder, const ApiError &e,
               const HttpHeaders &headers = {}) {
  responder.send(e.status, "application/json", errorBody(e), headers);
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
      options_(std::move(options)), model_{options_.servedModelName,
                                           options_.maxModelLen,
                                           options_.vocabSize, tokenizer,
                                           chatTemplate},
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

void OpenAiServer::completions(const HttpRequest &request,
                               const std::shared_ptr<HttpResponder> &responder,
                               bool chat) {
  auto fail = [&](const ApiError &e, const HttpHeaders &headers = {}) {
    engine_.metrics().countHttpResponse(e.status);
    sendError(*responder, e, headers);
  };
  CompletionCall parsed;
  if (std::optional<ApiError> e =
          readCompletionRequest(request.body, chat, model_, parsed))
    return fail(*e);

  auto call = std::make_shared<Call>();
  const size_t numPrompts = parsed.requests.size();
  const int64_t n = parsed.requests.front().sampling.n;
  call->responder = responder;
  call->engine = &engine_;
  call->tokenizer = tokenizer_;
  call->chat = chat;
  call->stream = parsed.stream;
  call->includeUsage = parsed.includeUsage;
  call->continuousUsage = parsed.continuousUsage;
  call->logprobs = parsed.logprobs;
  call->n = n;
  call->id = randomId(chat ? "chatcmpl-" : "cmpl-");
  call->model = options_.servedModelName;
  call->created = static_cast<int64_t>(std::time(nullptr));
  call->choices.resize(numPrompts * static_cast<size_t>(n));
  call->promptTokens.assign(numPrompts, 0);
  call->cachedTokens.assign(numPrompts, 0);
  for (size_t i = 0; i < numPrompts; ++i)
    call->promptTokens[i] =
        static_cast<int64_t>(parsed.requests[i].promptTokenIds.size());

  responder->onClose([call] { call->abortAll(); });
  std::lock_guard<std::mutex> lock(call->mutex);
  for (size_t i = 0; i < numPrompts; ++i) {
    StatusOr<AsyncEngine::Handle> handle = engine_.submit(
        std::move(parsed.requests[i]),
        [call, i](StreamEvent event) { call->onEvent(i, std::move(event)); });
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
  if (parsed.stream)
    responder->startStream("text/event-stream; charset=utf-8");
}

void OpenAiServer::tokenize(const HttpRequest &request,
                            const std::shared_ptr<HttpResponder> &responder) {
  std::vector<int32_t> tokens;
  if (std::optional<ApiError> e =
          readTokenizeRequest(request.body, model_, tokens)) {
    engine_.metrics().countHttpResponse(e->status);
    return sendError(*responder, *e);
  }
  engine_.metrics().countHttpResponse(200);
  responder->send(200, "application/json",
                  dump(ojson{{"count", tokens.size()},
                             {"max_model_len", options_.maxModelLen},
                             {"tokens", tokens}}));
}

void OpenAiServer::detokenize(const HttpRequest &request,
                              const std::shared_ptr<HttpResponder> &responder) {
  std::vector<int32_t> tokens;
  if (std::optional<ApiError> e =
          readDetokenizeRequest(request.body, model_, tokens)) {
    engine_.metrics().countHttpResponse(e->status);
    return sendError(*responder, *e);
  }
  engine_.metrics().countHttpResponse(200);
  responder->send(200, "application/json",
                  dump(ojson{{"prompt", tokenizer_->decode(tokens, false)}}));
}

} // namespace infer::serving
