//===- Parser.h - The syntax tree of a Jinja template -----------*- C++ -*-===//
//
// Expressions and statements of the Jinja subset chat templates use:
//
//   {{ expr }}   {% if / elif / else / endif %}   {% for x in e [if c] %}
//   {% set x = e %}  {% set ns.attr = e %}  {% set x %}...{% endset %}
//   {% break %} {% continue %} {% generation %}  {% macro %} / call
//
// expressions: literals (str, int, float, bool, none, list, dict), names,
// .attr, [index], [a:b:c], calls with keyword arguments, filters `|f(...)`,
// tests `is [not] t`, `not and or`, comparisons, `in` / `not in`,
// `+ - * / // % ** ~`, and `a if c else b`, with Jinja's precedence.
// Anything else is an error naming the construct and its line.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SERVING_JINJA_PARSER_H
#define INFER_RUNTIME_SERVING_JINJA_PARSER_H

#include "runtime/serving/jinja/Lexer.h"
#include "runtime/serving/jinja/Value.h"

#include <memory>
#include <string>
#include <vector>

namespace infer::serving::jinja {

/// How deep blocks (a for in an if ...) and expressions (brackets,
/// operators, filters, attributes) may nest; deeper is a parse error. The
/// parser, the evaluator and the tree's destructor recurse along both.
/// jinja2 templates meet CPython's limits sooner (200 nested brackets).
constexpr int kMaxNesting = 100;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   ///< value
    kName,      ///< name
    kList,      ///< args
    kDict,      ///< args as key, value pairs
    kAttribute, ///< args[0].name
    kIndex,     ///< args[0][args[1]]
    kSlice,     ///< args[0][args[1]:args[2]:args[3]] (null parts allowed)
    kCall,      ///< args[0](args[1..], kwargs)
    kFilter,    ///< name(args[0], args[1..], kwargs)
    kTest,      ///< args[0] is [not: negate] name(args[1..])
    kUnary,     ///< op args[0]: "not", "-", "+"
    kBinary,    ///< args[0] op args[1]
    kTernary,   ///< args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  /// Nodes on the longest path from here to a leaf (at most kMaxNesting).
  int depth = 1;
  Value value;
  std::string name;
  bool negate = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,   ///< text
    kOutput, ///< {{ expr }}
    kIf,     ///< branches: (cond, body)...; a null cond is else
    kFor,    ///< for targets in expr [if filter]: body else elseBody
    kSet,    ///< targets (or target.attr) = expr, or a block set (body)
    kBreak,
    kContinue,
    kMacro, ///< name(params with defaults): body
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  /// set ns.attr: the attribute.
  std::string attribute;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body elseBody;
  std::vector<std::pair<std::string, ExprPtr>> params;
};

/// The statements of a whole template.
StatusOr<Body> parse(const std::vector<Token> &tokens);

} // namespace infer::serving::jinja

#endif // INFER_RUNTIME_SERVING_JINJA_PARSER_H
