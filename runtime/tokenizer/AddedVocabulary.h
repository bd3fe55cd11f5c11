//===- AddedVocabulary.h - added_tokens of tokenizer.json -------*- C++ -*-===//
//
// Added tokens (special ones such as <|eot_id|> and ordinary ones such as
// <tool_call>) are found in the text before pre-tokenization and become one
// id each. Tokens flagged "normalized" are matched in normalized text, the
// others in the raw input.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_TOKENIZER_ADDEDVOCABULARY_H
#define INFER_RUNTIME_TOKENIZER_ADDEDVOCABULARY_H

#include "runtime/support/Status.h"
#include "runtime/tokenizer/JsonUtil.h"
#include "runtime/tokenizer/Normalizer.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace infer::tokenizer {

/// One entry of "added_tokens".
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool singleWord = false;
};

/// A piece of input: either text still to tokenize or a matched added token.
struct Segment {
  std::string text;
  std::optional<int32_t> tokenId;
  bool atInputStart = false;
};

/// Finds added tokens in text, leftmost first and longest on ties.
class AddedTokenMatcher {
public:
  void add(std::string_view content, size_t tokenIndex);
  bool empty() const { return nodes_.size() <= 1; }
  /// Longest token starting at `pos`: (index, length), if any.
  std::optional<std::pair<size_t, size_t>> longestAt(std::string_view text,
                                                     size_t pos) const;

private:
  struct Node {
    std::unordered_map<unsigned char, int32_t> children;
    std::optional<size_t> tokenIndex;
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);
};

/// The added tokens of a tokenizer and the splitting they drive.
class AddedVocabulary {
public:
  /// Reads "added_tokens"; `normalizer` (may be null) prepares the contents
  /// of normalized tokens.
  static StatusOr<AddedVocabulary> create(const Json &addedTokens,
                                          const Normalizer *normalizer);

  /// Splits `text` into added tokens and the text between them, normalizing
  /// the text pieces on the way (Hugging Face's extract_and_normalize).
  std::vector<Segment> split(std::string_view text,
                             const Normalizer *normalizer) const;

  const AddedToken *findById(int32_t id) const;
  const AddedToken *findByContent(std::string_view content) const;
  const std::vector<AddedToken> &tokens() const { return tokens_; }

private:
  /// Cuts one text segment at the matches of `matcher`.
  void splitSegment(Segment segment, const AddedTokenMatcher &matcher,
                    std::vector<Segment> &out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> byId_;
  std::unordered_map<std::string, size_t> byContent_;
  AddedTokenMatcher rawMatcher_;
  AddedTokenMatcher normalizedMatcher_;
};

} // namespace infer::tokenizer

#endif // INFER_RUNTIME_TOKENIZER_ADDEDVOCABULARY_H
