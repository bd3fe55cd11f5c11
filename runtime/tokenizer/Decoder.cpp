//===- Decoder.cpp - tokenizer.json decoders ------------------------------===//
//
// Invalid UTF-8 produced by byte-level or byte-fallback tokens becomes U+FFFD
// with the same rules as Hugging Face (one per maximal invalid subsequence
// for ByteLevel, one per byte token for ByteFallback).
//
//===----------------------------------------------------------------------===//

#include "runtime/tokenizer/Decoder.h"

#include "runtime/tokenizer/Utf8.h"

namespace infer::tokenizer {

namespace {

class SequenceDecoder final : public Decoder {
public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void decodeChain(std::vector<std::string> &tokens) const override {
    for (const auto &step : steps_)
      step->decodeChain(tokens);
  }

private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

/// Maps byte-level characters back to bytes; a token holding any other
/// character (an added token such as <｜User｜>) passes through as is.
class ByteLevelDecoder final : public Decoder {
public:
  void decodeChain(std::vector<std::string> &tokens) const override {
    std::string bytes;
    for (const std::string &token : tokens) {
      std::string mapped;
      bool allMapped = true;
      for (size_t pos = 0; pos < token.size(); pos += charLength(token, pos)) {
        std::optional<uint8_t> byte = unicodeToByte(decodeChar(token, pos));
        if (!byte) {
          allMapped = false;
          break;
        }
        mapped.push_back(static_cast<char>(*byte));
      }
      bytes.append(allMapped ? mapped : token);
    }
    tokens.assign(1, toValidUtf8Lossy(bytes));
  }
};

class ReplaceDecoder final : public Decoder {
public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decodeChain(std::vector<std::string> &tokens) const override {
    for (std::string &token : tokens)
      token = pattern_.replaceAll(token, content_);
  }

private:
  Pattern pattern_;
  std::string content_;
};

/// Turns runs of <0xXX> tokens into the text their bytes encode.
class ByteFallbackDecoder final : public Decoder {
public:
  void decodeChain(std::vector<std::string> &tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    size_t pendingTokens = 0;
    auto flush = [&] {
      if (pendingTokens == 0)
        return;
      std::string valid = toValidUtf8Lossy(pending);
      if (valid == pending) {
        out.push_back(std::move(pending));
      } else {
        std::string replacement;
        for (size_t i = 0; i < pendingTokens; ++i)
          replacement.append(kReplacementChar);
        out.push_back(std::move(replacement));
      }
      pending.clear();
      pendingTokens = 0;
    };
    for (std::string &token : tokens) {
      if (std::optional<uint8_t> byte = parseByteToken(token)) {
        pending.push_back(static_cast<char>(*byte));
        ++pendingTokens;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens = std::move(out);
  }

private:
  static std::optional<uint8_t> parseByteToken(const std::string &token) {
    if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>')
      return std::nullopt;
    int value = 0;
    for (size_t i = 3; i < 5; ++i) {
      char c = token[i];
      int digit = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : -1;
      if (digit < 0)
        return std::nullopt;
      value = value * 16 + digit;
    }
    return static_cast<uint8_t>(value);
  }
};

class FuseDecoder final : public Decoder {
public:
  void decodeChain(std::vector<std::string> &tokens) const override {
    std::string joined;
    for (const std::string &token : tokens)
      joined.append(token);
    tokens.assign(1, std::move(joined));
  }
};

/// Removes up to `start` leading and `stop` trailing copies of a character
/// from every token.
class StripDecoder final : public Decoder {
public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decodeChain(std::vector<std::string> &tokens) const override {
    for (std::string &token : tokens) {
      size_t begin = 0, end = token.size();
      for (size_t i = 0; i < start_ && begin < end &&
                         token.compare(begin, content_.size(), content_) == 0;
           ++i)
        begin += content_.size();
      for (size_t i = 0;
           i < stop_ && end >= begin + content_.size() &&
           token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i)
        end -= content_.size();
      token = token.substr(begin, end - begin);
    }
  }

private:
  std::string content_;
  size_t start_;
  size_t stop_;
};

/// Replaces the metaspace character by a space; in the first token it is
/// dropped instead when the pre-tokenizer prepends one.
class MetaspaceDecoder final : public Decoder {
public:
  MetaspaceDecoder(std::string replacement, bool dropInFirstToken)
      : replacement_(std::move(replacement)),
        dropInFirstToken_(dropInFirstToken) {}
  void decodeChain(std::vector<std::string> &tokens) const override {
    Pattern pattern = Pattern::literal(replacement_);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] =
          pattern.replaceAll(tokens[i], i == 0 && dropInFirstToken_ ? "" : " ");
  }

private:
  std::string replacement_;
  bool dropInFirstToken_;
};

} // namespace

StatusOr<std::unique_ptr<Decoder>> createDecoder(const Json &config) {
  INFER_ASSIGN_OR_RETURN(std::string type, componentType(config, "decoder"));
  if (type == "Sequence") {
    INFER_ASSIGN_OR_RETURN(const Json *list,
                           requireArray(config, "decoders", "Sequence"));
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const Json &step : *list) {
      INFER_ASSIGN_OR_RETURN(auto decoder, createDecoder(step));
      steps.push_back(std::move(decoder));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(steps)));
  }
  if (type == "ByteLevel")
    return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "Replace") {
    auto patternIt = config.find("pattern");
    if (patternIt == config.end())
      return invalidArgument("Replace decoder has no 'pattern'");
    INFER_ASSIGN_OR_RETURN(Pattern pattern,
                           parsePattern(*patternIt, "Replace decoder"));
    INFER_ASSIGN_OR_RETURN(std::string content,
                           requireString(config, "content", "Replace"));
    return std::unique_ptr<Decoder>(
        new ReplaceDecoder(std::move(pattern), content));
  }
  if (type == "ByteFallback")
    return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse")
    return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") {
    INFER_ASSIGN_OR_RETURN(std::string content,
                           requireString(config, "content", "Strip decoder"));
    int64_t start = intOr(config, "start", 0), stop = intOr(config, "stop", 0);
    if (start < 0 || stop < 0)
      return invalidArgument("Strip decoder: negative start or stop");
    return std::unique_ptr<Decoder>(new StripDecoder(
        content, static_cast<size_t>(start), static_cast<size_t>(stop)));
  }
  if (type == "Metaspace") {
    bool prepend = boolOr(config, "add_prefix_space", true);
    if (config.contains("prepend_scheme"))
      prepend = stringOr(config, "prepend_scheme", "always") != "never";
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(
        stringOr(config, "replacement", "\xE2\x96\x81"), prepend));
  }
  return unimplemented("unsupported decoder type '" + type + "'");
}

} // namespace infer::tokenizer
