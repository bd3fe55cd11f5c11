//===- ChatTemplate.cpp - tokenizer_config.json chat templates ------------===//

#include "runtime/serving/chat/ChatTemplate.h"
#include "runtime/serving/jinja/Template.h"

#include <fstream>
#include <sstream>

namespace infer::serving {

using nlohmann::json;

namespace {

/// Whether arrays and objects nest in `j` at most `limit` deep (a scalar is
/// 0 deep), found without recursion: copying a json and turning it into
/// template values recurse, and a request's messages may nest 100,000 deep.
bool nestsAtMost(const json &j, int limit) {
  std::vector<std::pair<const json *, int>> stack{{&j, 0}};
  while (!stack.empty()) {
    const auto [node, depth] = stack.back();
    stack.pop_back();
    if (!node->is_structured())
      continue;
    if (depth + 1 > limit)
      return false;
    for (const json &child : *node)
      stack.emplace_back(&child, depth + 1);
  }
  return true;
}

/// The message of raise_exception(value): str(value), cut at 4 KiB.
std::string exceptionMessage(const jinja::ValueList &args) {
  if (args.empty())
    return "raise_exception()";
  constexpr size_t kMaxBytes = 4096;
  std::string message;
  if (!args[0].print(message, false, kMaxBytes))
    message += "...";
  return message;
}

} // namespace

StatusOr<std::unique_ptr<ChatTemplate>>
ChatTemplate::create(const std::string &source, const json &specialTokens) {
  StatusOr<std::unique_ptr<jinja::Template>> parsed =
      jinja::Template::parse(source);
  if (!parsed.isOk())
    return parsed.status().withContext("chat template");
  if (!nestsAtMost(specialTokens, jinja::kMaxValueDepth))
    return invalidArgument("chat template: the special tokens nest more "
                           "than " +
                           std::to_string(jinja::kMaxValueDepth) + " deep");
  auto t = std::unique_ptr<ChatTemplate>(new ChatTemplate());
  t->template_ = std::move(parsed).value();
  t->globals_ = specialTokens.is_object() ? specialTokens : json::object();
  return t;
}

StatusOr<std::unique_ptr<ChatTemplate>>
ChatTemplate::fromTokenizerConfig(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return notFound("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  json config = json::parse(text.str(), nullptr, false);
  if (config.is_discarded() || !config.is_object())
    return invalidArgument(path + " is not a JSON object");
  std::string source;
  const auto it = config.find("chat_template");
  if (it != config.end() && it->is_string()) {
    source = it->get<std::string>();
  } else if (it != config.end() && it->is_array()) {
    for (const json &named : *it)
      if (named.is_object() && named.value("name", "") == "default" &&
          named.contains("template") && named["template"].is_string())
        source = named["template"].get<std::string>();
  }
  if (source.empty())
    return notFound(path + " has no chat_template");
  // HF passes the special tokens map: each token's text, whether written
  // as a string or as an AddedToken object.
  json tokens = json::object();
  for (const char *name : {"bos_token", "eos_token", "unk_token", "pad_token",
                           "sep_token", "cls_token", "mask_token"}) {
    const auto t = config.find(name);
    if (t == config.end())
      continue;
    if (t->is_string())
      tokens[name] = *t;
    else if (t->is_object() && t->contains("content") &&
             (*t)["content"].is_string())
      tokens[name] = (*t)["content"];
  }
  return create(source, tokens);
}

ChatTemplate::~ChatTemplate() = default;

StatusOr<std::string> ChatTemplate::render(const json &messages,
                                           bool addGenerationPrompt) const {
  if (!nestsAtMost(messages, jinja::kMaxValueDepth))
    return invalidArgument("the messages nest more than " +
                           std::to_string(jinja::kMaxValueDepth) +
                           " deep (lists and objects in lists and objects)");
  // Content given as parts becomes the text of its text parts.
  json flat = messages;
  for (json &m : flat) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array())
      continue;
    std::string text;
    bool first = true;
    for (const json &part : m["content"])
      if (part.is_object() && part.value("type", "") == "text" &&
          part.contains("text") && part["text"].is_string()) {
        text += (first ? "" : "\n") + part["text"].get<std::string>();
        first = false;
      }
    m["content"] = text;
  }
  jinja::ValueDict globals;
  for (auto it = globals_.begin(); it != globals_.end(); ++it)
    globals.emplace_back(it.key(), jinja::Value::fromJson(it.value()));
  globals.emplace_back("messages", jinja::Value::fromJson(flat));
  globals.emplace_back("add_generation_prompt",
                       jinja::Value::boolean(addGenerationPrompt));
  // apply_chat_template passes tools and documents, None when not given.
  globals.emplace_back("tools", jinja::Value::none());
  globals.emplace_back("documents", jinja::Value::none());
  globals.emplace_back("raise_exception",
                       jinja::Value::function(
                           [](const jinja::ValueList &args,
                              const jinja::KwArgs &) -> StatusOr<jinja::Value> {
                             return invalidArgument(exceptionMessage(args));
                           }));
  return template_->render(globals);
}

} // namespace infer::serving
