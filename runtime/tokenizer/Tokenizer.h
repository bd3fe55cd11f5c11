//===- Tokenizer.h - Hugging Face tokenizer.json tokenizer ------*- C++ -*-===//
//
// Reads a Hugging Face `tokenizer.json` (and the `tokenizer_config.json`
// beside it) and encodes/decodes text exactly as the `tokenizers` library
// does for the components it supports:
//
//   text ─▶ added tokens split ─▶ normalizer ─▶ pre-tokenizer ─▶ BPE model
//        ─▶ post-processor (only with special tokens) ─▶ ids
//   ids ─▶ token strings ─▶ decoder chain ─▶ text
//
// Unsupported component types are reported by name when loading. Encoding
// and decoding are const and thread-safe.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_TOKENIZER_TOKENIZER_H
#define INFER_RUNTIME_TOKENIZER_TOKENIZER_H

#include "runtime/support/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infer {

namespace tokenizer {
class AddedVocabulary;
class BpeModel;
class Decoder;
class Normalizer;
class PostProcessor;
class PreTokenizer;
} // namespace tokenizer

/// Where a stream of generated ids stands in incremental detokenization.
///
///   ids: [0 ...... prefixOffset ........ readOffset ........ ids.size())
///                   |<- emitted, decoded ->|<- not yet emitted ->|
///                   |   as context only    |
///
/// The tokens in [prefixOffset, readOffset) give the context that decoders
/// such as SentencePiece's need to render a following token's leading space.
/// For a continuation of a prompt, start with readOffset = prompt length and
/// prefixOffset a few tokens before it (vLLM uses 5).
struct DetokenizerState {
  size_t prefixOffset = 0;
  size_t readOffset = 0;
};

/// A tokenizer loaded from tokenizer.json.
class Tokenizer {
public:
  ~Tokenizer();
  Tokenizer(const Tokenizer &) = delete;
  Tokenizer &operator=(const Tokenizer &) = delete;

  /// Loads `tokenizerJsonPath`, plus tokenizer_config.json (BOS/EOS tokens,
  /// add_bos_token, chat template) and generation_config.json (extra EOS
  /// ids) from the same directory when present.
  static StatusOr<std::unique_ptr<Tokenizer>>
  fromFile(const std::string &tokenizerJsonPath);

  /// Builds a tokenizer from file contents; `tokenizerConfigJson` and
  /// `generationConfigJson` may be empty.
  static StatusOr<std::unique_ptr<Tokenizer>>
  fromJson(std::string_view tokenizerJson,
           std::string_view tokenizerConfigJson = {},
           std::string_view generationConfigJson = {});

  /// Token ids of `text`. Added tokens in the text (e.g. <|eot_id|>) always
  /// become their ids; `addSpecialTokens` additionally runs the
  /// post-processor and add_bos_token / add_eos_token. Invalid UTF-8 in
  /// `text` is read as U+FFFD. A tokenizer.json that makes the text
  /// exceed a cost limit (EncodeLimits.h) or a regex give up yields the ids
  /// up to there: text from users goes through tryEncode.
  std::vector<int32_t> encode(std::string_view text,
                              bool addSpecialTokens) const;
  /// encode(), or an error when the tokenizer exceeded a cost limit or one
  /// of its regexes gave up (PCRE2's match limits) on `text`.
  StatusOr<std::vector<int32_t>> tryEncode(std::string_view text,
                                           bool addSpecialTokens) const;

  /// Text of `ids`; unknown ids are ignored.
  std::string decode(const std::vector<int32_t> &ids,
                     bool skipSpecialTokens) const;

  /// Text that became complete since the last call for this stream, given
  /// all ids so far; an incomplete UTF-8 character at the end is held back
  /// until the tokens that complete it arrive. Updates `state`.
  std::string decodeIncremental(const std::vector<int32_t> &ids,
                                DetokenizerState &state,
                                bool skipSpecialTokens) const;

  std::optional<int32_t> tokenToId(std::string_view token) const;
  /// The token string of `id` (byte-level form for byte-level BPE), or ""
  /// for an id outside the vocabulary.
  std::string idToToken(int32_t id) const;
  /// Whether `id` is an added token flagged special.
  bool isSpecialToken(int32_t id) const;
  /// One more than the largest id, added tokens included.
  int64_t vocabSize() const;

  std::optional<int32_t> bosTokenId() const;
  /// EOS ids: tokenizer_config's eos_token, then generation_config's
  /// eos_token_id entries, without duplicates.
  std::vector<int32_t> eosTokenIds() const;
  /// Token strings as named by tokenizer_config.json ("" when absent).
  const std::string &bosToken() const { return bosToken_; }
  const std::string &eosToken() const { return eosToken_; }
  /// The Jinja chat template (the "default" one where several are named),
  /// or "" when the tokenizer has none.
  const std::string &chatTemplate() const { return chatTemplate_; }

private:
  Tokenizer();

  Status loadTokenizerJson(std::string_view text);
  /// encode() inside the EncodeScope its caller opened.
  std::vector<int32_t> encodeWithinLimits(std::string_view text,
                                          bool addSpecialTokens) const;
  Status loadTokenizerConfig(std::string_view text);
  Status loadGenerationConfig(std::string_view text);

  std::unique_ptr<tokenizer::AddedVocabulary> added_;
  std::unique_ptr<tokenizer::Normalizer> normalizer_;
  std::unique_ptr<tokenizer::PreTokenizer> preTokenizer_;
  std::unique_ptr<tokenizer::BpeModel> model_;
  std::unique_ptr<tokenizer::PostProcessor> postProcessor_;
  std::unique_ptr<tokenizer::Decoder> decoder_;

  std::string bosToken_;
  std::string eosToken_;
  std::string chatTemplate_;
  /// add_bos_token / add_eos_token of tokenizer_config.json, where the
  /// post-processor does not already add the token.
  bool prependBos_ = false;
  bool appendEos_ = false;
  std::vector<int32_t> generationEosIds_;
};

} // namespace infer

#endif // INFER_RUNTIME_TOKENIZER_TOKENIZER_H
