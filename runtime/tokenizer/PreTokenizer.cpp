//===- PreTokenizer.cpp - tokenizer.json pre-tokenizers -------------------===//
//
// Splitting follows Hugging Face's SplitDelimiterBehavior exactly: the text
// is cut into alternating (match, non-match) spans, which each behavior then
// keeps, drops or glues to a neighbour.
//
//===----------------------------------------------------------------------===//

#include "runtime/tokenizer/PreTokenizer.h"

#include "runtime/tokenizer/Utf8.h"

namespace infer::tokenizer {

namespace {

enum class SplitBehavior {
  Removed,
  Isolated,
  MergedWithPrevious,
  MergedWithNext,
  Contiguous,
};

struct FlaggedSpan {
  Span span;
  bool isMatch;
};

/// Covers all of `text` with spans, each a match of `pattern` or a gap.
std::vector<FlaggedSpan> coverWithMatches(const Pattern &pattern,
                                          std::string_view text, bool invert) {
  std::vector<FlaggedSpan> spans;
  size_t last = 0;
  for (Span match : pattern.findAll(text)) {
    if (match.begin > last)
      spans.push_back({{last, match.begin}, invert});
    spans.push_back({match, !invert});
    last = match.end;
  }
  if (last < text.size())
    spans.push_back({{last, text.size()}, invert});
  return spans;
}

/// Applies `behavior` to the spans; the result's flag says "drop it".
std::vector<FlaggedSpan> applyBehavior(std::vector<FlaggedSpan> spans,
                                       SplitBehavior behavior) {
  std::vector<FlaggedSpan> out;
  bool previousMatch = false;
  switch (behavior) {
  case SplitBehavior::Removed:
    return spans;
  case SplitBehavior::Isolated:
    for (FlaggedSpan &span : spans)
      span.isMatch = false;
    return spans;
  case SplitBehavior::MergedWithPrevious:
    for (const FlaggedSpan &span : spans) {
      if (span.isMatch && !previousMatch && !out.empty())
        out.back().span.end = span.span.end;
      else
        out.push_back({span.span, false});
      previousMatch = span.isMatch;
    }
    return out;
  case SplitBehavior::MergedWithNext:
    for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
      if (it->isMatch && !previousMatch && !out.empty())
        out.back().span.begin = it->span.begin;
      else
        out.push_back({it->span, false});
      previousMatch = it->isMatch;
    }
    return {out.rbegin(), out.rend()};
  case SplitBehavior::Contiguous:
    for (const FlaggedSpan &span : spans) {
      if (span.isMatch == previousMatch && !out.empty())
        out.back().span.end = span.span.end;
      else
        out.push_back({span.span, false});
      previousMatch = span.isMatch;
    }
    return out;
  }
  return out;
}

class SplitPreTokenizer final : public PreTokenizer {
public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}

  void preTokenize(std::vector<Word> &words) const override {
    std::vector<Word> out;
    for (const Word &word : words) {
      bool first = word.atInputStart;
      for (const FlaggedSpan &piece : applyBehavior(
               coverWithMatches(pattern_, word.text, invert_), behavior_)) {
        if (piece.isMatch || piece.span.end == piece.span.begin)
          continue;
        out.push_back({word.text.substr(piece.span.begin,
                                        piece.span.end - piece.span.begin),
                       first && piece.span.begin == 0});
      }
    }
    words = std::move(out);
  }

private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class SequencePreTokenizer final : public PreTokenizer {
public:
  explicit SequencePreTokenizer(
      std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void preTokenize(std::vector<Word> &words) const override {
    for (const auto &step : steps_)
      step->preTokenize(words);
  }

private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

/// GPT-2 byte-level: optional prefix space, optional GPT-2 regex split, then
/// every byte replaced by its printable stand-in character.
class ByteLevelPreTokenizer final : public PreTokenizer {
public:
  ByteLevelPreTokenizer(bool addPrefixSpace,
                        std::unique_ptr<PreTokenizer> split)
      : addPrefixSpace_(addPrefixSpace), split_(std::move(split)) {}

  void preTokenize(std::vector<Word> &words) const override {
    if (addPrefixSpace_) {
      for (Word &word : words)
        if (word.text.empty() || word.text[0] != ' ')
          word.text.insert(0, " ");
    }
    if (split_)
      split_->preTokenize(words);
    for (Word &word : words) {
      std::string mapped;
      mapped.reserve(word.text.size() * 2);
      for (char c : word.text)
        mapped.append(byteToUnicode(static_cast<uint8_t>(c)));
      word.text = std::move(mapped);
    }
  }

private:
  bool addPrefixSpace_;
  std::unique_ptr<PreTokenizer> split_;
};

enum class PrependScheme { Always, First, Never };

class MetaspacePreTokenizer final : public PreTokenizer {
public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme,
                        std::unique_ptr<PreTokenizer> split)
      : replacement_(std::move(replacement)), scheme_(scheme),
        split_(std::move(split)) {}

  void preTokenize(std::vector<Word> &words) const override {
    Pattern space = Pattern::literal(" ");
    for (Word &word : words) {
      word.text = space.replaceAll(word.text, replacement_);
      bool startsWithReplacement =
          word.text.compare(0, replacement_.size(), replacement_) == 0;
      bool prepend = scheme_ == PrependScheme::Always ||
                     (scheme_ == PrependScheme::First && word.atInputStart);
      if (prepend && !startsWithReplacement)
        word.text.insert(0, replacement_);
    }
    if (split_)
      split_->preTokenize(words);
  }

private:
  std::string replacement_;
  PrependScheme scheme_;
  std::unique_ptr<PreTokenizer> split_;
};

StatusOr<SplitBehavior> parseBehavior(const Json &config) {
  std::string name = stringOr(config, "behavior", "");
  if (name == "Removed")
    return SplitBehavior::Removed;
  if (name == "Isolated")
    return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious")
    return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext")
    return SplitBehavior::MergedWithNext;
  if (name == "Contiguous")
    return SplitBehavior::Contiguous;
  return unimplemented("unsupported Split behavior '" + name + "'");
}

StatusOr<std::unique_ptr<PreTokenizer>>
makeRegexSplit(std::string_view regex, SplitBehavior behavior, bool invert) {
  INFER_ASSIGN_OR_RETURN(Pattern pattern, Pattern::regex(regex));
  return std::unique_ptr<PreTokenizer>(
      new SplitPreTokenizer(std::move(pattern), behavior, invert));
}

/// The pattern of GPT-2's encoder.py, used by ByteLevel's use_regex.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+)"
    R"(| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

StatusOr<std::unique_ptr<PreTokenizer>> createMetaspace(const Json &config) {
  std::string replacement = stringOr(config, "replacement", "\xE2\x96\x81");
  PrependScheme scheme = boolOr(config, "add_prefix_space", true)
                             ? PrependScheme::Always
                             : PrependScheme::Never;
  if (config.contains("prepend_scheme")) {
    std::string name = stringOr(config, "prepend_scheme", "");
    if (name == "always")
      scheme = PrependScheme::Always;
    else if (name == "first")
      scheme = PrependScheme::First;
    else if (name == "never")
      scheme = PrependScheme::Never;
    else
      return unimplemented("unsupported Metaspace prepend_scheme '" + name +
                           "'");
  }
  std::unique_ptr<PreTokenizer> split;
  if (boolOr(config, "split", true))
    split.reset(new SplitPreTokenizer(Pattern::literal(replacement),
                                      SplitBehavior::MergedWithNext, false));
  return std::unique_ptr<PreTokenizer>(
      new MetaspacePreTokenizer(replacement, scheme, std::move(split)));
}

} // namespace

StatusOr<std::unique_ptr<PreTokenizer>> createPreTokenizer(const Json &config) {
  INFER_ASSIGN_OR_RETURN(std::string type,
                         componentType(config, "pre_tokenizer"));
  if (type == "Sequence") {
    INFER_ASSIGN_OR_RETURN(const Json *list,
                           requireArray(config, "pretokenizers", "Sequence"));
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const Json &step : *list) {
      INFER_ASSIGN_OR_RETURN(auto preTokenizer, createPreTokenizer(step));
      steps.push_back(std::move(preTokenizer));
    }
    return std::unique_ptr<PreTokenizer>(
        new SequencePreTokenizer(std::move(steps)));
  }
  if (type == "Split") {
    auto patternIt = config.find("pattern");
    if (patternIt == config.end())
      return invalidArgument("Split pre-tokenizer has no 'pattern'");
    INFER_ASSIGN_OR_RETURN(Pattern pattern,
                           parsePattern(*patternIt, "Split pre-tokenizer"));
    INFER_ASSIGN_OR_RETURN(SplitBehavior behavior, parseBehavior(config));
    return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(
        std::move(pattern), behavior, boolOr(config, "invert", false)));
  }
  if (type == "ByteLevel") {
    std::unique_ptr<PreTokenizer> split;
    if (boolOr(config, "use_regex", true)) {
      INFER_ASSIGN_OR_RETURN(
          split, makeRegexSplit(kGpt2Pattern, SplitBehavior::Isolated, false));
    }
    return std::unique_ptr<PreTokenizer>(new ByteLevelPreTokenizer(
        boolOr(config, "add_prefix_space", false), std::move(split)));
  }
  if (type == "Digits") {
    SplitBehavior behavior = boolOr(config, "individual_digits", false)
                                 ? SplitBehavior::Isolated
                                 : SplitBehavior::Contiguous;
    return makeRegexSplit(R"(\p{N})", behavior, false);
  }
  if (type == "Metaspace")
    return createMetaspace(config);
  if (type == "Whitespace")
    return makeRegexSplit(R"(\w+|[^\w\s]+)", SplitBehavior::Removed, true);
  if (type == "WhitespaceSplit")
    return makeRegexSplit(R"(\s)", SplitBehavior::Removed, false);
  return unimplemented("unsupported pre_tokenizer type '" + type + "'");
}

} // namespace infer::tokenizer
