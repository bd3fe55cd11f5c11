//===- FuzzChatTemplate.cpp - libFuzzer: chat templates -------------------===//
//
// The input is a chat template, a NUL, and JSON: a list of messages, or an
// object with "messages", "add_generation_prompt" (default true) and any
// other keys as the special tokens (bos_token, eos_token, ...). The
// template is parsed and rendered as ChatTemplate does for the server
// (runtime/serving/jinja), so a template from a tokenizer_config.json and
// the messages of a request meet the interpreter's limits: every input
// must end in a rendered string or an error, in bounded time and memory.
// Without a NUL the whole input is the template, rendered for one message.
//
//===----------------------------------------------------------------------===//

#include "runtime/serving/chat/ChatTemplate.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using nlohmann::json;

/// Aborts with `what` when `ok` is false: libFuzzer keeps the input.
void check(bool ok, const char *what) {
  if (ok)
    return;
  std::fprintf(stderr, "infer-fuzz-chat-template: %s\n", what);
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = reinterpret_cast<const char *>(data);
  const char *nul = static_cast<const char *>(std::memchr(text, 0, size));
  const std::string source(text, nul ? nul : text + size);
  json variables = json::array({{{"role", "user"}, {"content", "Hi"}}});
  if (nul) {
    variables = json::parse(nul + 1, text + size, nullptr, false);
    if (variables.is_discarded())
      return 0;
  }
  // Moved, not copied: nlohmann::json copies recursively, and the deep
  // nesting of a hostile input is for the code under test to meet.
  json messages, specialTokens = json::object();
  bool addGenerationPrompt = true;
  if (variables.is_object()) {
    if (variables.contains("messages"))
      messages = std::move(variables["messages"]);
    if (variables.contains("add_generation_prompt"))
      addGenerationPrompt = variables["add_generation_prompt"].is_boolean() &&
                            variables["add_generation_prompt"].get<bool>();
    variables.erase("messages");
    variables.erase("add_generation_prompt");
    specialTokens = std::move(variables);
  } else {
    messages = std::move(variables);
  }
  auto chatTemplate =
      infer::serving::ChatTemplate::create(source, specialTokens);
  if (!chatTemplate.isOk()) {
    check(!chatTemplate.status().message().empty(), "an empty parse error");
    return 0;
  }
  infer::StatusOr<std::string> rendered =
      (*chatTemplate)->render(messages, addGenerationPrompt);
  if (!rendered.isOk())
    check(!rendered.status().message().empty(), "an empty render error");
  return 0;
}
