//===- ChatTemplate.h - tokenizer_config.json chat templates ----*- C++ -*-===//
//
// Renders a Hugging Face chat template as
// `tokenizer.apply_chat_template(messages, add_generation_prompt=...)` does:
// the template runs in the Jinja subset of runtime/serving/jinja with
// `messages`, `add_generation_prompt`, the special tokens of
// tokenizer_config.json (bos_token, eos_token, ...) and
// `raise_exception(message)`, whose message becomes the error.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SERVING_CHAT_CHATTEMPLATE_H
#define INFER_RUNTIME_SERVING_CHAT_CHATTEMPLATE_H

#include "runtime/support/Status.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace infer::serving::jinja {
class Template;
} // namespace infer::serving::jinja

namespace infer::serving {

class ChatTemplate {
public:
  /// Parses `source`; `specialTokens` maps names such as "bos_token" to
  /// their strings (the template's globals besides messages).
  static StatusOr<std::unique_ptr<ChatTemplate>>
  create(const std::string &source, const nlohmann::json &specialTokens);
  /// The template of a tokenizer_config.json (its "chat_template", a
  /// string or a list of {name, template}: the one named "default"), with
  /// its special tokens. notFound when it has none.
  static StatusOr<std::unique_ptr<ChatTemplate>>
  fromTokenizerConfig(const std::string &tokenizerConfigPath);
  ~ChatTemplate();

  /// The prompt text of `messages` (a JSON array of {role, content}); a
  /// content that is a list of parts becomes the text of its "text" parts
  /// joined by newlines. Errors name the template's complaint (its
  /// raise_exception message, cut at 4 KiB) or the limit it passed:
  /// messages nested more than jinja::kMaxValueDepth deep, or a
  /// jinja::RenderLimits limit.
  StatusOr<std::string> render(const nlohmann::json &messages,
                               bool addGenerationPrompt) const;

private:
  ChatTemplate() = default;
  std::unique_ptr<jinja::Template> template_;
  nlohmann::json globals_;
};

} // namespace infer::serving

#endif // INFER_RUNTIME_SERVING_CHAT_CHATTEMPLATE_H
