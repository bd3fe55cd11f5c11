//===- OpenAiRequest.h - Reading OpenAI request bodies ----------*- C++ -*-===//
//
// The bodies of POST /v1/completions, /v1/chat/completions, /tokenize and
// /detokenize, read and checked into what the engine runs, without HTTP:
//
//   body ─JSON─▶ model name ─▶ prompts as token ids ─▶ sampling fields
//        (chat: messages ─ChatTemplate─▶ text ─Tokenizer─▶ ids)
//                                 ─▶ lengths against the context
//                                 ─▶ one GenerationRequest per prompt
//
// A body that is not acceptable gives OpenAI's error object, a 4xx with the
// field at fault in `param` (null only for a body that is not a JSON
// object). OpenAiServer answers with it; the fuzz harness
// infer-fuzz-openai-request calls these functions as the server does.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SERVING_OPENAIREQUEST_H
#define INFER_RUNTIME_SERVING_OPENAIREQUEST_H

#include "runtime/serving/AsyncEngine.h"
#include "runtime/serving/chat/ChatTemplate.h"
#include "runtime/tokenizer/Tokenizer.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace infer::serving {

/// Completions one call may ask for, prompts times n: each is an engine
/// request's worth of state, and a 4 MiB body holds a million prompts.
constexpr int64_t kMaxCompletionsPerCall = 2048;

/// OpenAI's error object, with the HTTP status that carries it.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;
  std::string type = "invalid_request_error";
  std::string code;
};

/// {"error": {message, type, param, code}} of `e` (param null when empty,
/// code the status when empty).
std::string errorBody(const ApiError &e);

/// A 400 for `param`.
ApiError badField(const std::string &param, const std::string &message);

/// The model requests are read against.
struct ServedModel {
  /// The name a request's "model" must match.
  std::string name;
  /// The context (0: unlimited).
  int64_t maxModelLen = 0;
  /// Token ids must be below this (0: unchecked).
  int64_t vocabSize = 0;
  /// Null: only token-id prompts are served.
  const Tokenizer *tokenizer = nullptr;
  /// Null: chat completions are refused.
  const ChatTemplate *chatTemplate = nullptr;
};

/// A completions or chat completions call, as the engine runs it.
struct CompletionCall {
  /// One per prompt, each asking for `sampling.n` completions.
  std::vector<GenerationRequest> requests;
  bool stream = false;
  /// stream_options: a usage chunk at the end, usage in every chunk.
  bool includeUsage = false;
  bool continuousUsage = false;
  /// -1: no logprobs; otherwise the top-N asked for.
  int64_t logprobs = -1;
};

/// Reads a /v1/completions body (`chat`: /v1/chat/completions) into `call`.
std::optional<ApiError> readCompletionRequest(const std::string &body,
                                              bool chat,
                                              const ServedModel &model,
                                              CompletionCall &call);

/// Reads a /tokenize body ({prompt, add_special_tokens} or {messages,
/// add_generation_prompt}) into the token ids it asks for.
std::optional<ApiError> readTokenizeRequest(const std::string &body,
                                            const ServedModel &model,
                                            std::vector<int32_t> &tokens);

/// Reads a /detokenize body ({tokens}) into its token ids.
std::optional<ApiError> readDetokenizeRequest(const std::string &body,
                                              const ServedModel &model,
                                              std::vector<int32_t> &tokens);

} // namespace infer::serving

#endif // INFER_RUNTIME_SERVING_OPENAIREQUEST_H
