//===- OpenAiServer.h - The OpenAI-compatible HTTP API ----------*- C++ -*-===//
//
// Routes HTTP requests to the AsyncEngine in OpenAI's protocol:
//
//   POST /v1/completions, /v1/chat/completions   whole or streamed (SSE)
//   GET  /v1/models, /health, /metrics           the model, liveness and
//                                                Prometheus metrics
//   POST /tokenize, /detokenize                  the model's tokenizer
//   GET  /, /index.html                          the chat page (ChatPage.h)
//
// HEAD is answered wherever GET is. The chat page needs no API key: it holds
// no secret, and asks for the key when the API answers 401 (as llama.cpp's
// web UI does).
//
// Every error is OpenAI's error object {"error": {message, type, param,
// code}} with the field at fault in `param`: 400 for bad JSON or fields and
// prompts over the context, 401 without the API key (compared in constant
// time), 404 for an unknown model or path, 429 with Retry-After when the
// engine's queue is full, 503 from /health once the engine failed. A client
// that disconnects aborts its requests, so their KV blocks return at once.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SERVING_OPENAISERVER_H
#define INFER_RUNTIME_SERVING_OPENAISERVER_H

#include "runtime/serving/AsyncEngine.h"
#include "runtime/serving/HttpServer.h"
#include "runtime/serving/OpenAiRequest.h"
#include "runtime/serving/chat/ChatTemplate.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <cstdint>
#include <memory>
#include <string>

namespace infer::serving {

struct OpenAiServerOptions {
  /// The model name clients send and /v1/models lists.
  std::string servedModelName;
  /// Required as "Authorization: Bearer KEY" on /v1/* when not empty.
  std::string apiKey;
  /// The model's context (0: unlimited).
  int64_t maxModelLen = 0;
  /// Token ids must be below this (0: unchecked).
  int64_t vocabSize = 0;
  /// Seconds a refused client is told to wait (Retry-After).
  int retryAfterSeconds = 1;
  /// Whether GET / serves the chat page (otherwise it is a 404).
  bool chatPage = true;
};

class OpenAiServer {
public:
  /// `tokenizer` may be null (then only token-id prompts are served) and
  /// `chatTemplate` too (then chat completions answer 400).
  OpenAiServer(AsyncEngine &engine, const Tokenizer *tokenizer,
               const ChatTemplate *chatTemplate, OpenAiServerOptions options);

  /// The HttpServer handler.
  void handle(HttpRequest request, std::shared_ptr<HttpResponder> responder);

private:
  struct Call;
  void completions(const HttpRequest &request,
                   const std::shared_ptr<HttpResponder> &responder, bool chat);
  void tokenize(const HttpRequest &request,
                const std::shared_ptr<HttpResponder> &responder);
  void detokenize(const HttpRequest &request,
                  const std::shared_ptr<HttpResponder> &responder);
  bool authorized(const HttpRequest &request) const;

  AsyncEngine &engine_;
  const Tokenizer *tokenizer_;
  const ChatTemplate *chatTemplate_;
  OpenAiServerOptions options_;
  ServedModel model_;
  int64_t created_;
};

/// Whether `a` equals `b`, in time that depends on their lengths only.
bool constantTimeEquals(const std::string &a, const std::string &b);

} // namespace infer::serving

#endif // INFER_RUNTIME_SERVING_OPENAISERVER_H
