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
                             const ValueDict &globals = {}) {
  INFER_ASSIGN_OR_RETURN(std::unique_ptr<Template> t, Template::parse(source));
  return t->render(globals);
}

/// Expects `source` to fail with a message containing `expected`.
void expectError(const std::string &source, const std::string &expected) {
  StatusOr<std::string> out = render(source);
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

} // namespace
} // namespace infer::serving::jinja
