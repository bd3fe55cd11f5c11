//===- Lexer.cpp - Tokens of a Jinja template -----------------------------===//

#include "runtime/serving/jinja/Lexer.h"

#include <cctype>
#include <cerrno>
#include <cstring>

namespace infer::serving::jinja {

namespace {

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}

void appendUtf8(std::string &out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
public:
  Lexer(const std::string &source, LexOptions options)
      : src_(source), options_(options) {}

  StatusOr<std::vector<Token>> run() {
    bool lineStarting = true;
    bool stripNext = false;
    while (pos_ < src_.size()) {
      size_t tag = findTag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      if (stripNext) {
        size_t k = 0;
        while (k < text.size() && isSpace(text[k]))
          ++k;
        text.erase(0, k);
      }
      stripNext = false;
      if (tag == src_.size()) {
        emitText(text);
        break;
      }
      const char kind = src_[tag + 1];
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : 0;
      if (sign != '-' && sign != '+')
        sign = 0;
      // Whitespace before the tag.
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && isSpace(text[end - 1]))
          --end;
        text.resize(end);
      } else if (sign != '+' && options_.lstripBlocks && kind != '{') {
        const size_t newline = text.rfind('\n');
        const size_t lineStart = newline == std::string::npos ? 0 : newline + 1;
        if (newline != std::string::npos || lineStarting) {
          bool blank = lineStart < text.size();
          for (size_t k = lineStart; k < text.size(); ++k)
            blank &= text[k] == ' ' || text[k] == '\t';
          if (blank)
            text.resize(lineStart);
        }
      }
      emitText(text);
      line_ += countLines(pos_, tag);
      pos_ = tag + 2 + (sign ? 1 : 0);
      char endSign = 0;
      if (kind == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string::npos)
          return error("unclosed comment");
        endSign =
            close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+')
                ? src_[close - 1]
                : 0;
        line_ += countLines(pos_, close);
        pos_ = close + 2;
      } else {
        push(kind == '{' ? TokenKind::kVariableBegin : TokenKind::kBlockBegin,
             kind == '{' ? "{{" : "{%");
        INFER_ASSIGN_OR_RETURN(endSign, lexInside(kind == '{' ? '}' : '%'));
        push(kind == '{' ? TokenKind::kVariableEnd : TokenKind::kBlockEnd,
             kind == '{' ? "}}" : "%}");
      }
      lineStarting = false;
      if (endSign == '-') {
        stripNext = true;
      } else if (kind != '{' && endSign != '+' && options_.trimBlocks &&
                 pos_ < src_.size() && src_[pos_] == '\n') {
        ++pos_;
        ++line_;
        lineStarting = true;
      }
    }
    push(TokenKind::kEnd, "");
    return std::move(tokens_);
  }

private:
  size_t findTag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' &&
          (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return src_.size();
  }

  int countLines(size_t from, size_t to) const {
    int n = 0;
    for (size_t i = from; i < to && i < src_.size(); ++i)
      n += src_[i] == '\n';
    return n;
  }

  void emitText(const std::string &text) {
    if (!text.empty())
      push(TokenKind::kText, text);
  }

  void push(TokenKind kind, std::string text) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.line = line_;
    tokens_.push_back(std::move(t));
  }

  Status error(const std::string &message) const {
    return invalidArgument("line " + std::to_string(line_) + ": " + message);
  }

  /// Tokens up to the closing `close`} (or `close``close` for }}); returns
  /// the closing whitespace sign.
  StatusOr<char> lexInside(char close) {
    int depth = 0;
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      if (isSpace(c)) {
        line_ += c == '\n';
        ++pos_;
        continue;
      }
      // The end of the tag, with an optional sign.
      for (char sign : {'-', '+', '\0'}) {
        const size_t at = pos_ + (sign ? 1 : 0);
        if (depth == 0 && (!sign || c == sign) && at + 1 < src_.size() &&
            src_[at] == close && src_[at + 1] == '}') {
          pos_ = at + 2;
          return sign;
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos_;
        while (end < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[end])) ||
                src_[end] == '_'))
          ++end;
        push(TokenKind::kName, src_.substr(pos_, end - pos_));
        pos_ = end;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t end = pos_;
        bool isFloat = false;
        while (end < src_.size() &&
               (std::isdigit(static_cast<unsigned char>(src_[end])) ||
                src_[end] == '_' ||
                (src_[end] == '.' && !isFloat && end + 1 < src_.size() &&
                 std::isdigit(static_cast<unsigned char>(src_[end + 1]))))) {
          isFloat |= src_[end] == '.';
          ++end;
        }
        std::string digits;
        for (size_t k = pos_; k < end; ++k)
          if (src_[k] != '_')
            digits += src_[k];
        push(isFloat ? TokenKind::kFloat : TokenKind::kInteger, digits);
        if (isFloat) {
          tokens_.back().floating = std::strtod(digits.c_str(), nullptr);
        } else {
          errno = 0;
          tokens_.back().integer = std::strtoll(digits.c_str(), nullptr, 10);
          if (errno == ERANGE)
            return error("integer literal " + digits + " is over 2^63 - 1");
        }
        pos_ = end;
      } else if (c == '\'' || c == '"') {
        INFER_RETURN_IF_ERROR(lexString(c));
      } else {
        static const char *const kOperators[] = {
            "==", "!=", "<=", ">=", "//", "**", "<", ">", "+",
            "-",  "*",  "/",  "%",  "~",  "=",  ".", ",", ":",
            "|",  "(",  ")",  "[",  "]",  "{",  "}"};
        const char *match = nullptr;
        for (const char *op : kOperators)
          if (src_.compare(pos_, std::strlen(op), op) == 0) {
            match = op;
            break;
          }
        if (!match)
          return error(std::string("unexpected character '") + c + "'");
        const std::string op(match);
        if (op == "(" || op == "[" || op == "{")
          ++depth;
        if (op == ")" || op == "]" || op == "}")
          --depth;
        push(TokenKind::kOperator, op);
        pos_ += op.size();
      }
    }
    return error(close == '}' ? "unclosed '{{'" : "unclosed '{%'");
  }

  Status lexString(char quote) {
    std::string out;
    size_t i = pos_ + 1;
    while (i < src_.size() && src_[i] != quote) {
      char c = src_[i];
      if (c == '\n')
        ++line_;
      if (c != '\\' || i + 1 >= src_.size()) {
        out += c;
        ++i;
        continue;
      }
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '0':
        out += '\0';
        break;
      case '\\':
      case '\'':
      case '"':
        out += e;
        break;
      case '\n':
        break;
      case 'u':
      case 'x': {
        const size_t digits = e == 'u' ? 4 : 2;
        if (i + digits > src_.size())
          return error("bad escape in string");
        out.reserve(out.size() + 4);
        appendUtf8(out, static_cast<uint32_t>(std::strtoul(
                            src_.substr(i, digits).c_str(), nullptr, 16)));
        i += digits;
        break;
      }
      default:
        out += '\\';
        out += e;
      }
    }
    if (i >= src_.size())
      return error("unterminated string");
    push(TokenKind::kString, std::move(out));
    pos_ = i + 1;
    return Status::ok();
  }

  const std::string &src_;
  LexOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

} // namespace

StatusOr<std::vector<Token>> lex(const std::string &source,
                                 LexOptions options) {
  return Lexer(source, options).run();
}

} // namespace infer::serving::jinja
