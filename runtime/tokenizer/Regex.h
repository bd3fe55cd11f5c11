//===- Regex.h - PCRE2 regular expressions for the tokenizer ----*- C++ -*-===//
//
// tokenizer.json patterns are written for Oniguruma (Hugging Face tokenizers
// compiles them with it). PCRE2 in UTF + UCP mode understands the same
// syntax for everything these files use (\p{..} classes, (?i:..), lookahead),
// so patterns are compiled exactly as written.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_TOKENIZER_REGEX_H
#define INFER_RUNTIME_TOKENIZER_REGEX_H

#include "runtime/support/Status.h"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infer::tokenizer {

/// A half-open byte range of a string.
struct Span {
  size_t begin;
  size_t end;
};

/// A compiled, immutable, thread-safe regular expression.
class Regex {
public:
  /// Compiles `pattern` (UTF-8, Unicode properties on, JIT when available).
  static StatusOr<Regex> compile(std::string_view pattern);

  /// All non-overlapping, non-empty matches in `text`, left to right. `text`
  /// must be valid UTF-8.
  std::vector<Span> findAll(std::string_view text) const;

private:
  struct Code;
  explicit Regex(std::shared_ptr<const Code> code) : code_(std::move(code)) {}

  std::shared_ptr<const Code> code_;
};

/// The {"String": ...} or {"Regex": ...} pattern of Split, Replace and
/// friends: a literal (matched as is) or a regular expression.
class Pattern {
public:
  static Pattern literal(std::string text) {
    return Pattern(std::move(text), std::nullopt);
  }
  static StatusOr<Pattern> regex(std::string_view pattern);

  /// Non-overlapping, non-empty matches, left to right.
  std::vector<Span> findAll(std::string_view text) const;

  /// `text` with every match replaced by `content`.
  std::string replaceAll(std::string_view text, std::string_view content) const;

private:
  Pattern(std::string literal, std::optional<Regex> regex)
      : literal_(std::move(literal)), regex_(std::move(regex)) {}

  std::string literal_;
  std::optional<Regex> regex_;
};

} // namespace infer::tokenizer

#endif // INFER_RUNTIME_TOKENIZER_REGEX_H
