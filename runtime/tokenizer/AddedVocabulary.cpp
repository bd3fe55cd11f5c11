//===- AddedVocabulary.cpp - added_tokens of tokenizer.json ---------------===//
//
// Matching follows Hugging Face's AddedVocabulary::find_matches, including
// the lstrip/rstrip whitespace absorption and single_word boundaries.
//
//===----------------------------------------------------------------------===//

#include "runtime/tokenizer/AddedVocabulary.h"

#include "runtime/tokenizer/Regex.h"
#include "runtime/tokenizer/Utf8.h"

namespace infer::tokenizer {

namespace {

/// Start of the character that ends at `end` (exclusive).
size_t previousCharStart(std::string_view text, size_t end) {
  size_t pos = end - 1;
  while (pos > 0 && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80)
    --pos;
  return pos;
}

/// Whether the character at `pos` is a word character (\w) for single_word.
bool isWordCharAt(std::string_view text, size_t pos) {
  static const StatusOr<Regex> wordChar = Regex::compile(R"(^\w)");
  return wordChar.isOk() &&
         !wordChar->findAll(text.substr(pos, charLength(text, pos))).empty();
}

} // namespace

void AddedTokenMatcher::add(std::string_view content, size_t tokenIndex) {
  int32_t node = 0;
  for (char c : content) {
    auto key = static_cast<unsigned char>(c);
    auto it = nodes_[node].children.find(key);
    if (it == nodes_[node].children.end()) {
      nodes_.emplace_back();
      int32_t child = static_cast<int32_t>(nodes_.size() - 1);
      nodes_[node].children.emplace(key, child);
      node = child;
    } else {
      node = it->second;
    }
  }
  if (!nodes_[node].tokenIndex)
    nodes_[node].tokenIndex = tokenIndex;
}

std::optional<std::pair<size_t, size_t>>
AddedTokenMatcher::longestAt(std::string_view text, size_t pos) const {
  std::optional<std::pair<size_t, size_t>> best;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = nodes_[node].children.find(static_cast<unsigned char>(text[i]));
    if (it == nodes_[node].children.end())
      break;
    node = it->second;
    if (nodes_[node].tokenIndex)
      best = std::make_pair(*nodes_[node].tokenIndex, i + 1 - pos);
  }
  return best;
}

StatusOr<AddedVocabulary>
AddedVocabulary::create(const Json &addedTokens, const Normalizer *normalizer) {
  AddedVocabulary vocabulary;
  if (addedTokens.is_null())
    return vocabulary;
  if (!addedTokens.is_array())
    return invalidArgument("'added_tokens' must be an array");
  for (const Json &entry : addedTokens) {
    if (!entry.is_object() || !entry.contains("id") ||
        !entry["id"].is_number_integer())
      return invalidArgument("added token without an integer 'id'");
    AddedToken token;
    token.id = entry["id"].get<int32_t>();
    INFER_ASSIGN_OR_RETURN(token.content,
                           requireString(entry, "content", "added token"));
    token.special = boolOr(entry, "special", false);
    token.lstrip = boolOr(entry, "lstrip", false);
    token.rstrip = boolOr(entry, "rstrip", false);
    token.normalized = boolOr(entry, "normalized", !token.special);
    token.singleWord = boolOr(entry, "single_word", false);
    if (token.content.empty())
      continue;
    size_t index = vocabulary.tokens_.size();
    vocabulary.byId_[token.id] = index;
    vocabulary.byContent_[token.content] = index;
    if (token.normalized && normalizer) {
      std::string normalizedContent = token.content;
      normalizer->normalize(normalizedContent);
      vocabulary.normalizedMatcher_.add(normalizedContent, index);
    } else if (token.normalized) {
      vocabulary.normalizedMatcher_.add(token.content, index);
    } else {
      vocabulary.rawMatcher_.add(token.content, index);
    }
    vocabulary.tokens_.push_back(std::move(token));
  }
  return vocabulary;
}

void AddedVocabulary::splitSegment(Segment segment,
                                   const AddedTokenMatcher &matcher,
                                   std::vector<Segment> &out) const {
  const std::string &text = segment.text;
  if (matcher.empty()) {
    out.push_back(std::move(segment));
    return;
  }
  size_t emitted = 0;
  auto emitText = [&](size_t begin, size_t end) {
    if (end > begin)
      out.push_back({text.substr(begin, end - begin), std::nullopt,
                     segment.atInputStart && begin == 0});
  };
  for (size_t pos = 0; pos < text.size();) {
    auto match = matcher.longestAt(text, pos);
    if (!match) {
      pos += charLength(text, pos);
      continue;
    }
    const AddedToken &token = tokens_[match->first];
    size_t start = pos, stop = pos + match->second;
    if (token.singleWord) {
      bool wordBefore =
          start > 0 && isWordCharAt(text, previousCharStart(text, start));
      bool wordAfter = stop < text.size() && isWordCharAt(text, stop);
      if (wordBefore || wordAfter) {
        pos += charLength(text, pos);
        continue;
      }
    }
    if (token.lstrip) {
      while (start > emitted) {
        size_t prevStart = previousCharStart(text, start);
        if (!isUnicodeWhitespace(decodeChar(text, prevStart)))
          break;
        start = prevStart;
      }
    }
    if (token.rstrip) {
      while (stop < text.size() && isUnicodeWhitespace(decodeChar(text, stop)))
        stop += charLength(text, stop);
    }
    emitText(emitted, start);
    out.push_back({text.substr(start, stop - start), token.id,
                   segment.atInputStart && start == 0});
    emitted = stop;
    pos = stop;
  }
  emitText(emitted, text.size());
}

std::vector<Segment>
AddedVocabulary::split(std::string_view text,
                       const Normalizer *normalizer) const {
  std::vector<Segment> raw;
  splitSegment({std::string(text), std::nullopt, true}, rawMatcher_, raw);
  std::vector<Segment> out;
  for (Segment &segment : raw) {
    if (segment.tokenId) {
      out.push_back(std::move(segment));
      continue;
    }
    if (normalizer)
      normalizer->normalize(segment.text);
    if (segment.text.empty())
      continue;
    splitSegment(std::move(segment), normalizedMatcher_, out);
  }
  return out;
}

const AddedToken *AddedVocabulary::findById(int32_t id) const {
  auto it = byId_.find(id);
  return it == byId_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken *
AddedVocabulary::findByContent(std::string_view content) const {
  auto it = byContent_.find(std::string(content));
  return it == byContent_.end() ? nullptr : &tokens_[it->second];
}

} // namespace infer::tokenizer
