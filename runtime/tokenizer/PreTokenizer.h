//===- PreTokenizer.h - tokenizer.json pre-tokenizers -----------*- C++ -*-===//
//
// A pre-tokenizer cuts normalized text into words that the model tokenizes
// independently (and caches): regex splits, digit splits, the byte-level
// byte -> character mapping, SentencePiece's metaspace.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_TOKENIZER_PRETOKENIZER_H
#define INFER_RUNTIME_TOKENIZER_PRETOKENIZER_H

#include "runtime/support/Status.h"
#include "runtime/tokenizer/JsonUtil.h"

#include <memory>
#include <string>
#include <vector>

namespace infer::tokenizer {

/// A piece of text on its way to the model.
struct Word {
  std::string text;
  /// Whether the piece starts at offset 0 of the input text (Metaspace's
  /// prepend_scheme "first" needs it).
  bool atInputStart = false;
};

/// One "pre_tokenizer" of tokenizer.json.
class PreTokenizer {
public:
  virtual ~PreTokenizer() = default;
  /// Replaces `words` by their pieces; empty pieces are dropped.
  virtual void preTokenize(std::vector<Word> &words) const = 0;
};

/// Builds the pre-tokenizer described by `config`. Supported types:
/// Sequence, Split, ByteLevel, Digits, Metaspace, Whitespace, WhitespaceSplit.
StatusOr<std::unique_ptr<PreTokenizer>> createPreTokenizer(const Json &config);

} // namespace infer::tokenizer

#endif // INFER_RUNTIME_TOKENIZER_PRETOKENIZER_H
