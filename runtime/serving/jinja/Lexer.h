//===- Lexer.h - Tokens of a Jinja template ---------------------*- C++ -*-===//
//
// Splits a template into text and the tokens inside {{ }} and {% %} tags
// (comments are dropped), with Jinja's whitespace control as Hugging Face
// configures it for chat templates: `-` on a tag strips the whitespace on
// that side, trim_blocks drops the first newline after a block tag and
// lstrip_blocks the spaces and tabs before a block tag that starts a line.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SERVING_JINJA_LEXER_H
#define INFER_RUNTIME_SERVING_JINJA_LEXER_H

#include "runtime/support/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace infer::serving::jinja {

enum class TokenKind {
  kText,
  kVariableBegin, ///< {{
  kVariableEnd,   ///< }}
  kBlockBegin,    ///< {%
  kBlockEnd,      ///< %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEnd,
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  /// Text, name, operator, or the unescaped string literal.
  std::string text;
  int64_t integer = 0;
  double floating = 0.0;
  int line = 1;
};

struct LexOptions {
  bool trimBlocks = true;
  bool lstripBlocks = true;
};

StatusOr<std::vector<Token>> lex(const std::string &source,
                                 LexOptions options = {});

} // namespace infer::serving::jinja

#endif // INFER_RUNTIME_SERVING_JINJA_LEXER_H
