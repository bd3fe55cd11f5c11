//===- Normalizer.h - tokenizer.json normalizers ----------------*- C++ -*-===//
//
// A normalizer rewrites the text before pre-tokenization (Unicode
// normalization, SentencePiece's space -> U+2581 replacement, ...). Offsets
// are not tracked: the runtime needs token ids, not alignments.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_TOKENIZER_NORMALIZER_H
#define INFER_RUNTIME_TOKENIZER_NORMALIZER_H

#include "runtime/support/Status.h"
#include "runtime/tokenizer/JsonUtil.h"

#include <memory>
#include <string>

namespace infer::tokenizer {

/// One "normalizer" of tokenizer.json.
class Normalizer {
public:
  virtual ~Normalizer() = default;
  /// Rewrites `text` (valid UTF-8) in place.
  virtual void normalize(std::string &text) const = 0;
};

/// Builds the normalizer described by `config`. Supported types: Sequence,
/// Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip.
StatusOr<std::unique_ptr<Normalizer>> createNormalizer(const Json &config);

} // namespace infer::tokenizer

#endif // INFER_RUNTIME_TOKENIZER_NORMALIZER_H
