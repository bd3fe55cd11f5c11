//===- ChatTemplateTest.cpp - Chat templates against HF and jinja2 --------===//
//
// The fixtures' chat goldens (HF apply_chat_template with
// add_generation_prompt=True) byte for byte, then many message shapes and
// template features against Python's jinja2 in HF's configuration
// (jinja_oracle.py); that part skips when python3-jinja2 is missing.
//
//===----------------------------------------------------------------------===//

#include "runtime/serving/chat/ChatTemplate.h"
#include "runtime/serving/jinja/Template.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

namespace infer::serving {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kFixtures = INFER_FIXTURES_DIR;
const std::string kGolden = kFixtures + "/golden/tokenizers.json";

json readJson(const std::string &path) {
  std::ifstream in(path);
  return json::parse(in);
}

std::string configPath(const std::string &name) {
  return kFixtures + "/tokenizers/" + name + "/tokenizer_config.json";
}

TEST(ChatTemplateTest, RendersTheFixtureGoldensByteForByte) {
  if (!fs::exists(kGolden))
    GTEST_SKIP() << "fixture missing: " << kGolden;
  const json golden = readJson(kGolden);
  int checked = 0;
  for (auto it = golden.begin(); it != golden.end(); ++it) {
    if (!it.value().contains("chat"))
      continue;
    StatusOr<std::unique_ptr<ChatTemplate>> t =
        ChatTemplate::fromTokenizerConfig(configPath(it.key()));
    ASSERT_TRUE(t.isOk()) << it.key() << ": " << t.status().message();
    const json &chat = it.value()["chat"];
    StatusOr<std::string> text = (*t)->render(chat["messages"], true);
    ASSERT_TRUE(text.isOk()) << it.key() << ": " << text.status().message();
    EXPECT_EQ(*text, chat["rendered"].get<std::string>()) << it.key();
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST(ChatTemplateTest, ATokenizerWithoutATemplateSaysSo) {
  if (!fs::exists(configPath("llama2")))
    GTEST_SKIP() << "fixture missing: llama2";
  StatusOr<std::unique_ptr<ChatTemplate>> t =
      ChatTemplate::fromTokenizerConfig(configPath("llama2"));
  ASSERT_FALSE(t.isOk());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
}

TEST(ChatTemplateTest, UnsupportedConstructsAreNamed) {
  for (const auto &[source, expected] :
       std::vector<std::pair<std::string, std::string>>{
           {"{% include 'x' %}", "unsupported Jinja construct '{% include %}'"},
           {"{{ x | wordwrap }}", "unsupported Jinja filter 'wordwrap'"},
           {"{{ x is sameas y }}", "unsupported Jinja test 'sameas'"},
           {"{% if x %}", "missing '{% endif %}'"},
           {"{{ 'a' + }}", "line 1: unexpected '}}'"}}) {
    StatusOr<std::unique_ptr<jinja::Template>> t =
        jinja::Template::parse(source);
    Status status = t.isOk() ? (*t)->render({}).status() : t.status();
    ASSERT_FALSE(status.isOk()) << source;
    EXPECT_NE(status.message().find(expected), std::string::npos)
        << source << " -> " << status.message();
  }
  StatusOr<std::unique_ptr<ChatTemplate>> t = ChatTemplate::create(
      "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation "
      "must start with a user') }}{% endif %}",
      json::object());
  ASSERT_TRUE(t.isOk());
  StatusOr<std::string> text = (*t)->render(
      json::array({{{"role", "assistant"}, {"content", "x"}}}), true);
  ASSERT_FALSE(text.isOk());
  EXPECT_NE(text.status().message().find("Conversation must start with a user"),
            std::string::npos);
}

TEST(ChatTemplateTest, LongChatsRenderWithinTheLimits) {
  // The fixtures' templates take about 80 (Llama 3) to 150 (Qwen3) steps a
  // message: 4,000 messages (over a megabyte of text) stay well inside
  // RenderLimits::maxSteps.
  json messages = json::array({{{"role", "system"}, {"content", "Be brief."}}});
  for (int i = 0; i < 4000; ++i)
    messages.push_back(
        {{"role", i % 2 ? "assistant" : "user"},
         {"content", std::string(300, 'x') + std::to_string(i)}});
  int rendered = 0;
  for (const char *name : {"llama3", "qwen3", "deepseek_v3"}) {
    if (!fs::exists(configPath(name)))
      continue;
    StatusOr<std::unique_ptr<ChatTemplate>> t =
        ChatTemplate::fromTokenizerConfig(configPath(name));
    ASSERT_TRUE(t.isOk()) << name << ": " << t.status().message();
    StatusOr<std::string> text = (*t)->render(messages, true);
    ASSERT_TRUE(text.isOk()) << name << ": " << text.status().message();
    EXPECT_GT(text->size(), 4000u * 300u) << name;
    ++rendered;
  }
  EXPECT_GE(rendered, 1);
}

TEST(ChatTemplateTest, DeeplyNestedMessagesAreRefusedNotRecursedInto) {
  // A request's message may carry any JSON; 100,000 nested lists made the
  // copy and the conversion to template values overflow the stack.
  StatusOr<std::unique_ptr<ChatTemplate>> t =
      ChatTemplate::create("{{ messages[0].role }}", json::object());
  ASSERT_TRUE(t.isOk());
  json deep = json::array();
  for (int i = 0; i < 100000; ++i)
    deep = json::array({std::move(deep)});
  json messages = json::array(
      {{{"role", "user"}, {"content", "hi"}, {"extra", std::move(deep)}}});
  StatusOr<std::string> text = (*t)->render(messages, true);
  ASSERT_FALSE(text.isOk());
  EXPECT_NE(text.status().message().find("the messages nest more than 100 "
                                         "deep"),
            std::string::npos)
      << text.status().message();
  // At the limit they render.
  json atLimit = "leaf";
  for (int i = 0; i < 97; ++i)
    atLimit = json::array({std::move(atLimit)});
  text = (*t)->render(json::array({{{"role", "user"}, {"x", atLimit}}}), true);
  ASSERT_TRUE(text.isOk()) << text.status().message();
  EXPECT_EQ(*text, "user");
  // Special tokens are checked when the template is made.
  json deepToken = json::array();
  for (int i = 0; i < 200; ++i)
    deepToken = json::array({std::move(deepToken)});
  EXPECT_FALSE(
      ChatTemplate::create("x", json{{"bos_token", std::move(deepToken)}})
          .isOk());
}

TEST(ChatTemplateTest, RaiseExceptionMessagesAreCut) {
  StatusOr<std::unique_ptr<ChatTemplate>> t =
      ChatTemplate::create("{{ raise_exception(messages) }}", json::object());
  ASSERT_TRUE(t.isOk());
  json messages = json::array();
  for (int i = 0; i < 1000; ++i)
    messages.push_back({{"role", "user"}, {"content", std::string(1000, 'x')}});
  StatusOr<std::string> text = (*t)->render(messages, true);
  ASSERT_FALSE(text.isOk());
  EXPECT_LT(text.status().message().size(), 4200u);
  EXPECT_EQ(text.status().message().substr(text.status().message().size() - 3),
            "...");
}

/// Message lists of many shapes.
std::vector<json> messageShapes() {
  auto msg = [](const char *role, std::string content) {
    return json{{"role", role}, {"content", content}};
  };
  std::vector<json> shapes;
  shapes.push_back(json::array({msg("user", "Hello!")}));
  shapes.push_back(
      json::array({msg("system", "Be brief."), msg("user", "Hi")}));
  json longChat = json::array({msg("system", "You answer in French.")});
  for (int i = 0; i < 12; ++i)
    longChat.push_back(msg(i % 2 ? "assistant" : "user",
                           "turn " + std::to_string(i) + " text"));
  longChat.push_back(msg("user", "last"));
  shapes.push_back(longChat);
  shapes.push_back(json::array(
      {msg("user", ""), msg("assistant", ""), msg("user", "empty before")}));
  shapes.push_back(json::array(
      {msg("user", "Grüße, 世界! 🚀 \"quotes\" 'single' \\ back"),
       msg("assistant", "ünïcödé ✓"), msg("user", "tab\there\nnewline")}));
  shapes.push_back(
      json::array({msg("user", "  padded  \n\n"),
                   msg("assistant", "\n\nreply with space  "),
                   msg("user", "{{ not a tag }} {% nor this %}")}));
  shapes.push_back(json::array(
      {msg("user", "think?"),
       msg("assistant", "<think>\nreasoning here\n</think>\n\nThe answer."),
       msg("user", "again")}));
  shapes.push_back(
      json::array({msg("system", "sys one"), msg("system", "sys two"),
                   msg("user", "two systems")}));
  shapes.push_back(json::array(
      {msg("user", "ends with assistant"), msg("assistant", "partial")}));
  return shapes;
}

/// Templates exercising the interpreter beyond the fixtures'.
std::vector<std::string> featureTemplates() {
  return {
      // Llama-2 / Mistral style: role alternation enforced.
      "{% if messages[0]['role'] == 'system' %}{% set loop_messages = "
      "messages[1:] %}{% set system_message = messages[0]['content'] %}{% "
      "else %}{% set loop_messages = messages %}{% set system_message = false "
      "%}{% endif %}{% for message in loop_messages %}{% if (message['role'] "
      "== 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
      "roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
      "{% if loop.index0 == 0 and system_message != false %}{% set content = "
      "'<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + "
      "message['content'] %}{% else %}{% set content = message['content'] %}"
      "{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' "
      "+ content.strip() + ' [/INST]' }}{% elif message['role'] == "
      "'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif "
      "%}{% endfor %}",
      // Whitespace control, loop variables, filters, tests, slices.
      "{%- for m in messages %}\n"
      "  {%- if loop.first %}[{{ loop.length }}]{% endif %}\n"
      "  {{ loop.index }}/{{ loop.revindex }} {{ m.role | upper }}: "
      "{{ m.content | trim | length }} {{ m['content'][:3] }}{{ "
      "m.content[-2:] }}\n"
      "  {% if m.content is string and m.content %}{{ m.content.split(' ') | "
      "join('|') }}{% endif %}\n"
      "{%- endfor %}\n"
      "{{ messages | length }} {{ messages[::-1][0].role }} {{ "
      "(messages|last).content | tojson }}\n"
      "{% if add_generation_prompt %}GEN{% endif %}",
      // namespace, macros, dicts, arithmetic, ternaries, break/continue.
      "{% set ns = namespace(n=0, roles=[]) %}{% macro tag(r, x='!') %}<{{ r "
      "}}{{ x }}>{% endmacro %}"
      "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% "
      "endif %}{% set ns.n = ns.n + 1 %}{% set ns.roles = ns.roles + [m.role] "
      "%}{{ tag(m.role) }}{{ m.content.replace('e', 'E') }}{{ '#' ~ ns.n }}"
      "{% if ns.n >= 6 %}{% break %}{% endif %}{% endfor %}"
      "{{ ns.roles | tojson }} {{ {'a': 1, 'b': [1, 2.5, none, true]} | "
      "tojson }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 5 }} {{ 1 / "
      "4 }} {{ 'yes' if ns.n > 2 else 'no' }} {{ [1, 'a', none] }} {{ "
      "range(3) | list }} {{ 'x' in 'xyz' }} {{ 'q' not in ['a'] }}"
      "{% for k, v in {'k1': 'v1', 'k2': 'v2'}.items() %}{{ k }}={{ v }};"
      "{% endfor %}{{ messages[0].get('name', 'anon') }}",
  };
}

TEST(ChatTemplateTest, MatchesPythonJinja2OnManyMessageShapes) {
  const std::string oracle =
      std::string(INFER_SOURCE_DIR) + "/tests/runtime/serving/jinja_oracle.py";
  if (std::system("python3 -c 'import jinja2' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3-jinja2 is not installed: the oracle test skips";
  struct Case {
    std::string templateSource;
    json globals;
    json messages;
    bool addGenerationPrompt;
  };
  std::vector<Case> cases;
  std::vector<std::pair<std::string, json>> templates;
  for (const char *name : {"llama3", "qwen3", "deepseek_v3"}) {
    if (!fs::exists(configPath(name)))
      continue;
    const json config = readJson(configPath(name));
    json globals = json::object();
    for (const char *token : {"bos_token", "eos_token"}) {
      if (!config.contains(token))
        continue;
      const json &t = config[token];
      if (t.is_string())
        globals[token] = t;
      else if (t.is_object())
        globals[token] = t["content"];
    }
    templates.emplace_back(config["chat_template"].get<std::string>(), globals);
  }
  for (const std::string &source : featureTemplates())
    templates.emplace_back(source,
                           json{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  for (const auto &[source, globals] : templates)
    for (const json &messages : messageShapes())
      for (bool gen : {true, false})
        cases.push_back({source, globals, messages, gen});

  json request{{"cases", json::array()}};
  for (const Case &c : cases)
    request["cases"].push_back(
        {{"template", c.templateSource},
         {"globals", c.globals},
         {"messages", c.messages},
         {"add_generation_prompt", c.addGenerationPrompt}});
  const std::string input = ::testing::TempDir() + "/jinja_oracle_in.json";
  const std::string output = ::testing::TempDir() + "/jinja_oracle_out.json";
  std::ofstream(input) << request.dump();
  const int rc = std::system(
      ("python3 " + oracle + " < " + input + " > " + output).c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77)
    GTEST_SKIP() << "python3-jinja2 is not installed";
  ASSERT_EQ(rc, 0) << "jinja_oracle.py failed";
  const json expected = readJson(output);
  ASSERT_EQ(expected.size(), cases.size());
  int errors = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case &c = cases[i];
    StatusOr<std::unique_ptr<ChatTemplate>> t =
        ChatTemplate::create(c.templateSource, c.globals);
    ASSERT_TRUE(t.isOk()) << t.status().message();
    StatusOr<std::string> text =
        (*t)->render(c.messages, c.addGenerationPrompt);
    if (expected[i].contains("error")) {
      ++errors;
      ASSERT_FALSE(text.isOk())
          << "case " << i << ": jinja2 failed with " << expected[i]["error"]
          << ", we rendered " << (text.isOk() ? *text : "");
      EXPECT_NE(
          text.status().message().find(expected[i]["error"].get<std::string>()),
          std::string::npos)
          << text.status().message();
      continue;
    }
    ASSERT_TRUE(text.isOk()) << "case " << i << ": " << text.status().message()
                             << "\nmessages: " << c.messages.dump();
    EXPECT_EQ(*text, expected[i]["text"].get<std::string>())
        << "case " << i << " messages: " << c.messages.dump()
        << "\ntemplate: " << c.templateSource.substr(0, 200);
  }
  // The alternation template refuses some shapes, as jinja2 does.
  EXPECT_GT(errors, 0);
}

} // namespace
} // namespace infer::serving
