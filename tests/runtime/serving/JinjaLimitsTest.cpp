//===- JinjaLimitsTest.cpp - The Jinja interpreter's limits ---------------===//
//
// Templates that would take unbounded time, memory or stack, or leave
// int64, end in an error that names the limit (Template.h), as
// infer-fuzz-chat-template requires of every input.
//
//===----------------------------------------------------------------------===//

#include "runtime/serving/jinja/Template.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace infer::serving::jinja {
namespace {

/// The output of `source`, or its parse or render error.
StatusOr<std::string> render(const std::string &source,
                             const RenderLimits &limits = {}) {
  INFER_ASSIGN_OR_RETURN(std::unique_ptr<Template> t, Template::parse(source));
  return t->render({}, limits);
}

/// Expects `source` to fail with a message containing `expected`.
void expectError(const std::string &source, const std::string &expected,
                 const RenderLimits &limits = {}) {
  StatusOr<std::string> out = render(source, limits);
  ASSERT_FALSE(out.isOk()) << source << " rendered " << out->size() << " bytes";
  EXPECT_NE(out.status().message().find(expected), std::string::npos)
      << source << " -> " << out.status().message();
}

TEST(JinjaLimitsTest, IntegerArithmeticStaysInInt64) {
  const std::string max = "9223372036854775807";
  const std::string min = "(-" + max + " - 1)";
  for (const std::string &source : std::vector<std::string>{
           "{{ " + max + " + 1 }}", "{{ " + min + " - 1 }}",
           "{{ 4611686018427387904 * 2 }}", "{{ 2 ** 63 }}", "{{ 3 ** 100 }}",
           "{{ -" + min + " }}", "{{ " + min + " // -1 }}",
           "{{ " + min + " | abs }}", "{{ 10000000000000000000.0 | int }}"})
    expectError(source, "integer overflow");
  expectError("{{ 9223372036854775808 }}", "is over 2^63 - 1");
  // ** by squaring: an exponent of 10^18 costs 60 multiplications.
  StatusOr<std::string> out =
      render("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 1 ** 1000000000000000000 }} "
             "{{ " +
             min + " % -1 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ " + min +
             " is divisibleby(-1) }} {{ (0.0 / 1) | int }}");
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(*out, "4611686018427387904 -9223372036854775808 1 0 -4 2 True 0");
  expectError("{{ 1.5 // 0 }}", "division by zero");
  expectError("{{ 1.5 % 0.0 }}", "division by zero");
}

TEST(JinjaLimitsTest, RangesAndSlicesWithHugeStepsDoNotOverflow) {
  StatusOr<std::string> out = render(
      "{{ range(1, " + std::string("9223372036854775807") +
      ", 4611686018427387904) | list }} {{ range(0, "
      "-9223372036854775807, -9223372036854775807) | list }} {{ "
      "'abc'[1::9223372036854775807] }} {{ [1, 2, 3][2::-9223372036854775807] "
      "}}");
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(*out, "[1, 4611686018427387905] [0] b [3]");
}

/// `n` copies of `s`.
std::string repeat(const std::string &s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i)
    out += s;
  return out;
}

TEST(JinjaLimitsTest, NestingDeeperThanTheLimitIsAParseError) {
  const int over = kMaxNesting + 1;
  // The parser's recursion: brackets, operators, blocks.
  for (const std::string &source : std::vector<std::string>{
           "{{ " + repeat("(", over) + "1" + repeat(")", over) + " }}",
           "{{ " + repeat("[", over) + repeat("]", over) + " }}",
           "{{ " + repeat("{'k': ", over) + "1" + repeat("}", over) + " }}",
           "{{ " + repeat("not ", over) + "x }}",
           "{{ " + repeat("-", over) + "1 }}",
           "{{ " + repeat("1 if x else ", over) + "2 }}",
           "{{ f(" + repeat("g(", over) + repeat(")", over) + ") }}",
           repeat("{% if x %}", over) + repeat("{% endif %}", over),
           repeat("{% for x in y %}", over) + repeat("{% endfor %}", over)})
    expectError(source, "nested more than 100 deep");
  // The tree's depth, which loops build: chains of operators, attributes,
  // subscripts, calls, filters and tests (100,000 long crashed; 1,000 is
  // past the limit as well, and quicker to lex).
  const int chain = 1000;
  for (const std::string &source :
       std::vector<std::string>{"{{ 1" + repeat(" + 1", chain) + " }}",
                                "{{ x" + repeat(" or x", chain) + " }}",
                                "{{ x" + repeat(".a", chain) + " }}",
                                "{{ x" + repeat("[0]", chain) + " }}",
                                "{{ x" + repeat("()", chain) + " }}",
                                "{{ x" + repeat(" | trim", chain) + " }}",
                                "{{ x" + repeat(" is defined", chain) + " }}",
                                "{{ 'a'" + repeat(" ~ 'a'", chain) + " }}"})
    expectError(source, "nested more than 100 deep");
  // At the limit, each renders.
  const int most = kMaxNesting - 2;
  StatusOr<std::string> out = render(
      "{{ " + repeat("(", most) + "1" + repeat(")", most) + " }}" + "{{ 1" +
      repeat(" + 1", most) + " }}" + repeat("{% if true %}", most) + "in" +
      repeat("{% endif %}", most));
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(*out, "1" + std::to_string(most + 1) + "in");
}

TEST(JinjaLimitsTest, MacroRecursionEndsAtTheDepthLimit) {
  // Unbounded: in the body, in a default argument, through another macro.
  for (const std::string &source : std::vector<std::string>{
           "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
           "{% macro f(a=f()) %}{% endmacro %}{{ f() }}",
           "{% macro f() %}{% for x in [1] %}{% if true %}{% set y %}{{ g() "
           "}}{% endset %}{% endif %}{% endfor %}{% endmacro %}{% macro g() "
           "%}{{ (1, f()) }}{% endmacro %}{{ f() }}"})
    expectError(source, "evaluated more than 1000 deep");
  // Bounded recursion renders: a countdown of 100 calls.
  StatusOr<std::string> out =
      render("{% macro down(n) %}{% if n > 0 %}{{ down(n - 1) }}{% else "
             "%}done{% endif %}{% endmacro %}{{ down(100) }}");
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(*out, "done");
}

TEST(JinjaLimitsTest, NoValueContainsItselfOrNestsPastTheLimit) {
  // A namespace inside itself was a reference cycle: leaked, and printing
  // or comparing it recursed without end.
  const std::string ns = "{% set ns = namespace(n=1) %}";
  for (const std::string &source : std::vector<std::string>{
           ns + "{% set ns.me = ns %}{{ ns }}",
           ns + "{% set ns.all = [ns] %}{{ ns == ns }}", ns + "{{ {'k': ns} }}",
           ns + "{{ namespace(inner=ns) }}", ns + "{{ dict(inner=ns) }}"})
    expectError(source, "a namespace cannot be put in a list, dict or "
                        "namespace");
  expectError("{% set ns = namespace(x=[]) %}{% for i in range(200) %}{% set "
              "ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
              "lists and dicts nested more than 100 deep");
  // Namespaces still hold anything else, and hand it on.
  StatusOr<std::string> out =
      render(ns + "{% set ns.l = [1, {'a': [2]}] %}{% set ns.n = ns.n + 1 "
                  "%}{{ ns.l | tojson }} {{ ns.n }}");
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(*out, "[1, {\"a\": [2]}] 2");
}

TEST(JinjaLimitsTest, StringsAreSharedNotCopied) {
  // A megabyte string looked up 20,000 times: 20 GB of copying when
  // each lookup copied it.
  StatusOr<std::string> out =
      render("{% set s = 'x' * 1000000 %}{% set ns = namespace(n=0) %}"
             "{% for i in range(20000) %}{% if s %}{% set ns.n = ns.n + 1 "
             "%}{% endif %}{% endfor %}{{ ns.n }} {{ [s, s] == [s, s] }}");
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(*out, "20000 True");
}

TEST(JinjaLimitsTest, WorkPastMaxStepsIsAnError) {
  // The default, paid before the list is made.
  expectError("{% for i in range(10 ** 9) %}{% endfor %}",
              "takes more than 2000000 steps");
  // Loops (huge, nested, over a string), quadratic lists, exponential
  // macros, splits and searches, against a smaller limit: the same
  // accounting, a twentieth of the work.
  RenderLimits limits;
  limits.maxSteps = 100000;
  for (const std::string &source : std::vector<std::string>{
           "{% for i in range(300) %}{% for j in range(300) %}{% endfor %}{% "
           "endfor %}",
           "{% for c in 'abcd' * 20000 %}{% endfor %}",
           "{% set ns = namespace(l=[]) %}{% for i in range(10000) %}{% set "
           "ns.l = ns.l + [i] %}{% endfor %}",
           "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% "
           "endif %}{% endmacro %}{{ f(40) }}",
           "{% set s = 'a b ' * 50000 %}{{ s.split() | length }}",
           "{% set s = 'a' * 100000 %}{% for i in range(10000) %}{{ 'b' in "
           "s }}{% endfor %}"})
    expectError(source, "takes more than 100000 steps", limits);
}

TEST(JinjaLimitsTest, StringsAndTheOutputStopAtMaxStringBytes) {
  // The default, checked before the string is made.
  expectError("{{ 'x' * 10 ** 12 }}", "passes 16777216 bytes");
  StatusOr<std::string> out = render("{{ ('x' * 16000000) | length }}");
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(*out, "16000000");
  // Each way of growing a string, against 1 MiB.
  RenderLimits limits;
  limits.maxStringBytes = 1 << 20;
  for (const std::string &source : std::vector<std::string>{
           "{{ 'xy' * 9223372036854775807 }}",
           // The output, grown by a loop.
           "{% for i in range(100) %}{{ 'x' * 100000 }}{% endfor %}",
           // Concatenation doubling a string.
           "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set "
           "ns.s = ns.s ~ ns.s %}{% endfor %}",
           // replace() and tojson growing a string each time.
           "{{ ('a' * 400000).replace('a', 'aaaaa') }}",
           "{% set ns = namespace(s='\\\\') %}{% for i in range(40) %}{% "
           "set ns.s = ns.s | tojson %}{% endfor %}",
           "{{ {'a': 1} | tojson(indent=1000000000) }}",
           // str() of a list holding one long string many times.
           "{% set s = 'x' * 100000 %}{{ [s, s, s, s, s, s, s, s, s, s, s] }}"})
    expectError(source, "passes 1048576 bytes", limits);
}

} // namespace
} // namespace infer::serving::jinja
