//===- Template.h - A parsed Jinja template ---------------------*- C++ -*-===//
//
// The entry point of the Jinja subset interpreter:
//
//   source ─lex─▶ tokens ─parse─▶ statements ─render(globals)─▶ text
//
// Rendering follows jinja2's semantics where chat templates depend on
// them: loop-scoped `set`, the `loop` object, Python truthiness and
// equality, str() of values, string and dict methods, and the filters and
// tests listed in Evaluator.cpp. An error names its line and the construct.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SERVING_JINJA_TEMPLATE_H
#define INFER_RUNTIME_SERVING_JINJA_TEMPLATE_H

#include "runtime/serving/jinja/Parser.h"

#include <memory>
#include <string>

namespace infer::serving::jinja {

/// What one render may spend: past a limit the render fails with an error
/// that names it. jinja2 trusts its templates (they are Python code); here
/// the template is a file the server was given and the values are a
/// client's messages, so neither may take the server's stack.
struct RenderLimits {
  /// The work of one render, in steps: one per statement run, expression
  /// evaluated and loop iteration, per list item or dict entry made, copied
  /// or compared, and per kBytesPerStep (64) bytes of text made, copied or
  /// searched. It bounds time, and memory with it: what a render holds it
  /// made, and paid for.
  int64_t maxSteps = 2'000'000;
  /// Bytes of the output and of any one string the template makes.
  size_t maxStringBytes = 16u << 20;
  /// Statements and expressions being evaluated inside one another, macro
  /// calls included: the evaluator's recursion, so its stack. Parsing
  /// bounds a template's own nesting (kMaxNesting); this bounds recursion
  /// through macros.
  int64_t maxDepth = 1000;
};

class Template {
public:
  static StatusOr<std::unique_ptr<Template>> parse(const std::string &source,
                                                   LexOptions options = {});

  /// The output for `globals` (name -> value).
  StatusOr<std::string> render(const ValueDict &globals,
                               const RenderLimits &limits = {}) const;

private:
  Body body_;
};

} // namespace infer::serving::jinja

#endif // INFER_RUNTIME_SERVING_JINJA_TEMPLATE_H
