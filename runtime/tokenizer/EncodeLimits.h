//===- EncodeLimits.h - Cost bounds of one encode call ----------*- C++ -*-===//
//
// A tokenizer.json is input: a tiny one can make encoding unbounded (a
// Sequence of Replace normalizers that each multiply the text) or make a
// regex give up (PCRE2's match limits on a backtracking pattern such as
// '(a+)+$'). The component interfaces (Normalizer::normalize, ...) return no
// Status, so the encode in progress on this thread keeps its limits and its
// first error here: Tokenizer::tryEncode opens an EncodeScope, components
// report through recordEncodeError, and tryEncode returns the error.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_TOKENIZER_ENCODELIMITS_H
#define INFER_RUNTIME_TOKENIZER_ENCODELIMITS_H

#include "runtime/support/Status.h"

#include <cstddef>

namespace infer::tokenizer {

/// How much larger than its input normalized text may grow: a normalizer
/// maps a character to a few at most (NFKC, a Replace of one character by a
/// word); 64 times plus 64 KiB leaves room for any real tokenizer.
inline constexpr size_t kMaxNormalizedGrowth = 64;
inline constexpr size_t kNormalizedSlackBytes = size_t(64) << 10;

/// The limits and first error of the encode call in progress on this
/// thread; nests (the inner scope wins until it ends).
class EncodeScope {
public:
  explicit EncodeScope(size_t inputBytes);
  ~EncodeScope();
  EncodeScope(const EncodeScope &) = delete;
  EncodeScope &operator=(const EncodeScope &) = delete;

  /// The first error recorded while this scope was open.
  const Status &error() const { return error_; }

private:
  friend void recordEncodeError(Status error);
  friend size_t maxNormalizedBytes();
  size_t maxNormalizedBytes_;
  Status error_;
  EncodeScope *outer_;
};

/// Records `error` on the open scope, if any, unless it has one already.
void recordEncodeError(Status error);

/// The most bytes normalized text may take in the open scope (no limit
/// outside one).
size_t maxNormalizedBytes();

} // namespace infer::tokenizer

#endif // INFER_RUNTIME_TOKENIZER_ENCODELIMITS_H
