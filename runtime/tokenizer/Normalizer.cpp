//===- Normalizer.cpp - tokenizer.json normalizers ------------------------===//
//
// Unicode normalization forms come from ICU (Debian libicu-dev), which
// implements the same UAX #15 algorithm as the Rust crate Hugging Face uses.
//
//===----------------------------------------------------------------------===//

#include "runtime/tokenizer/Normalizer.h"

#include "runtime/tokenizer/Utf8.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <vector>

namespace infer::tokenizer {

namespace {

class SequenceNormalizer final : public Normalizer {
public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void normalize(std::string &text) const override {
    for (const auto &step : steps_)
      step->normalize(text);
  }

private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

/// Prepends a string to non-empty text (SentencePiece's leading U+2581).
class PrependNormalizer final : public Normalizer {
public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string &text) const override {
    if (!text.empty())
      text.insert(0, prefix_);
  }

private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string &text) const override {
    text = pattern_.replaceAll(text, content_);
  }

private:
  Pattern pattern_;
  std::string content_;
};

/// Converts UTF-8 to UTF-16, applies `transform`, converts back. Text that
/// ICU rejects is left unchanged: the input was already validated.
template <typename Transform>
void transformUtf16(std::string &text, Transform transform) {
  UErrorCode status = U_ZERO_ERROR;
  std::vector<UChar> utf16(text.size() + 1);
  int32_t utf16Len = 0;
  u_strFromUTF8(utf16.data(), static_cast<int32_t>(utf16.size()), &utf16Len,
                text.data(), static_cast<int32_t>(text.size()), &status);
  if (U_FAILURE(status))
    return;
  std::vector<UChar> result;
  if (!transform(utf16.data(), utf16Len, result))
    return;
  int32_t utf8Len = 0;
  status = U_ZERO_ERROR;
  u_strToUTF8(nullptr, 0, &utf8Len, result.data(),
              static_cast<int32_t>(result.size()), &status);
  std::string out(static_cast<size_t>(utf8Len), '\0');
  status = U_ZERO_ERROR;
  u_strToUTF8(out.data(), utf8Len, nullptr, result.data(),
              static_cast<int32_t>(result.size()), &status);
  if (U_SUCCESS(status))
    text = std::move(out);
}

class UnicodeNormalizer final : public Normalizer {
public:
  explicit UnicodeNormalizer(const UNormalizer2 *form) : form_(form) {}
  void normalize(std::string &text) const override {
    transformUtf16(text, [this](const UChar *src, int32_t len,
                                std::vector<UChar> &out) {
      UErrorCode status = U_ZERO_ERROR;
      int32_t needed = unorm2_normalize(form_, src, len, nullptr, 0, &status);
      if (status != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(status))
        return false;
      out.resize(static_cast<size_t>(needed));
      status = U_ZERO_ERROR;
      unorm2_normalize(form_, src, len, out.data(), needed, &status);
      return U_SUCCESS(status) != 0;
    });
  }

private:
  const UNormalizer2 *form_;
};

class LowercaseNormalizer final : public Normalizer {
public:
  void normalize(std::string &text) const override {
    transformUtf16(
        text, [](const UChar *src, int32_t len, std::vector<UChar> &out) {
          UErrorCode status = U_ZERO_ERROR;
          int32_t needed = u_strToLower(nullptr, 0, src, len, "", &status);
          if (status != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(status))
            return false;
          out.resize(static_cast<size_t>(needed));
          status = U_ZERO_ERROR;
          u_strToLower(out.data(), needed, src, len, "", &status);
          return U_SUCCESS(status) != 0;
        });
  }
};

/// Removes leading and/or trailing Unicode whitespace.
class StripNormalizer final : public Normalizer {
public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string &text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end && isUnicodeWhitespace(decodeChar(text, begin)))
        begin += charLength(text, begin);
    }
    if (right_) {
      while (end > begin) {
        size_t last = end - 1;
        while (last > begin &&
               (static_cast<uint8_t>(text[last]) & 0xC0) == 0x80)
          --last;
        if (!isUnicodeWhitespace(decodeChar(text, last)))
          break;
        end = last;
      }
    }
    text = text.substr(begin, end - begin);
  }

private:
  bool left_;
  bool right_;
};

StatusOr<std::unique_ptr<Normalizer>>
createUnicodeNormalizer(const std::string &type) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2 *form = nullptr;
  if (type == "NFC")
    form = unorm2_getNFCInstance(&status);
  else if (type == "NFD")
    form = unorm2_getNFDInstance(&status);
  else if (type == "NFKC")
    form = unorm2_getNFKCInstance(&status);
  else
    form = unorm2_getNFKDInstance(&status);
  if (U_FAILURE(status) || !form)
    return internalError(std::string("ICU has no ") + type +
                         " data: " + u_errorName(status));
  return std::unique_ptr<Normalizer>(new UnicodeNormalizer(form));
}

} // namespace

StatusOr<std::unique_ptr<Normalizer>> createNormalizer(const Json &config) {
  INFER_ASSIGN_OR_RETURN(std::string type, componentType(config, "normalizer"));
  if (type == "Sequence") {
    INFER_ASSIGN_OR_RETURN(const Json *list,
                           requireArray(config, "normalizers", "Sequence"));
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const Json &step : *list) {
      INFER_ASSIGN_OR_RETURN(auto normalizer, createNormalizer(step));
      steps.push_back(std::move(normalizer));
    }
    return std::unique_ptr<Normalizer>(
        new SequenceNormalizer(std::move(steps)));
  }
  if (type == "Prepend") {
    INFER_ASSIGN_OR_RETURN(std::string prefix,
                           requireString(config, "prepend", "Prepend"));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(prefix));
  }
  if (type == "Replace") {
    auto patternIt = config.find("pattern");
    if (patternIt == config.end())
      return invalidArgument("Replace normalizer has no 'pattern'");
    INFER_ASSIGN_OR_RETURN(Pattern pattern,
                           parsePattern(*patternIt, "Replace normalizer"));
    INFER_ASSIGN_OR_RETURN(std::string content,
                           requireString(config, "content", "Replace"));
    return std::unique_ptr<Normalizer>(
        new ReplaceNormalizer(std::move(pattern), content));
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
    return createUnicodeNormalizer(type);
  if (type == "Lowercase")
    return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "Strip")
    return std::unique_ptr<Normalizer>(
        new StripNormalizer(boolOr(config, "strip_left", true),
                            boolOr(config, "strip_right", true)));
  return unimplemented("unsupported normalizer type '" + type + "'");
}

} // namespace infer::tokenizer
