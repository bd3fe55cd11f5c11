//===- Regex.cpp - PCRE2 regular expressions for the tokenizer ------------===//
//
// Implements Regex on top of the 8-bit PCRE2 library.
//
//===----------------------------------------------------------------------===//

#define PCRE2_CODE_UNIT_WIDTH 8
#include "runtime/tokenizer/Regex.h"
#include "runtime/tokenizer/EncodeLimits.h"

#include "runtime/tokenizer/Utf8.h"

#include <pcre2.h>

namespace infer::tokenizer {

struct Regex::Code {
  pcre2_code *code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

StatusOr<Regex> Regex::compile(std::string_view pattern) {
  int errorCode = 0;
  PCRE2_SIZE errorOffset = 0;
  pcre2_code *code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                                   pattern.size(), PCRE2_UTF | PCRE2_UCP,
                                   &errorCode, &errorOffset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(errorCode, message, sizeof(message));
    return invalidArgument("cannot compile regex '" + std::string(pattern) +
                           "' at offset " + std::to_string(errorOffset) + ": " +
                           reinterpret_cast<const char *>(message));
  }
  // JIT is an optimisation only: the interpreter gives the same matches.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  auto owned = std::make_shared<Code>();
  owned->code = code;
  return Regex(std::move(owned));
}

std::vector<Span> Regex::findAll(std::string_view text) const {
  std::vector<Span> matches;
  pcre2_match_data *data =
      pcre2_match_data_create_from_pattern(code_->code, nullptr);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(code_->code, subject, text.size(), pos,
                         PCRE2_NO_UTF_CHECK, data, nullptr);
    // The JIT's fixed stack can run out where the interpreter's heap does
    // not; retry there rather than lose the rest of the matches.
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
      rc = pcre2_match(code_->code, subject, text.size(), pos,
                       PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH)
      break;
    if (rc < 0) {
      // A match or depth limit (a backtracking pattern like '(a+)+$'): the
      // rest of the text would go unmatched, so the encode fails.
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      recordEncodeError(resourceExhausted(
          "a tokenizer regex failed at byte " + std::to_string(pos) + " of a " +
          std::to_string(text.size()) +
          "-byte text: " + reinterpret_cast<const char *>(message)));
      break;
    }
    PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(data);
    size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches.push_back({begin, end});
      pos = end;
      continue;
    }
    // An empty match: step over one character so the scan makes progress.
    if (begin >= text.size())
      break;
    pos = begin + charLength(text, begin);
  }
  pcre2_match_data_free(data);
  return matches;
}

StatusOr<Pattern> Pattern::regex(std::string_view pattern) {
  INFER_ASSIGN_OR_RETURN(Regex compiled, Regex::compile(pattern));
  return Pattern(std::string(), std::move(compiled));
}

std::vector<Span> Pattern::findAll(std::string_view text) const {
  if (regex_)
    return regex_->findAll(text);
  std::vector<Span> matches;
  if (literal_.empty())
    return matches;
  size_t pos = text.find(literal_);
  while (pos != std::string_view::npos) {
    matches.push_back({pos, pos + literal_.size()});
    pos = text.find(literal_, pos + literal_.size());
  }
  return matches;
}

std::string Pattern::replaceAll(std::string_view text,
                                std::string_view content) const {
  std::string out;
  size_t last = 0;
  const size_t limit = maxNormalizedBytes();
  for (Span match : findAll(text)) {
    out.append(text.substr(last, match.begin - last));
    out.append(content);
    last = match.end;
    if (out.size() > limit) {
      recordEncodeError(resourceExhausted(
          "a tokenizer Replace grew the text past " + std::to_string(limit) +
          " bytes (the limit for this input)"));
      return std::string(text);
    }
  }
  out.append(text.substr(last));
  return out;
}

} // namespace infer::tokenizer
