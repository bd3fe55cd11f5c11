//===- BpeModel.h - Byte-pair-encoding model of tokenizer.json --*- C++ -*-===//
//
// The "model" section of tokenizer.json with type BPE. Covers both families
// in use: byte-level BPE (GPT-2, Llama-3, Qwen, DeepSeek; words arrive as
// byte-level characters, `ignore_merges` looks whole words up first) and
// SentencePiece-style BPE (Llama-2, Mistral; characters missing from the
// vocabulary fall back to <0xXX> byte tokens, unknowns fuse).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_TOKENIZER_BPEMODEL_H
#define INFER_RUNTIME_TOKENIZER_BPEMODEL_H

#include "runtime/support/Status.h"
#include "runtime/tokenizer/JsonUtil.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace infer::tokenizer {

/// A BPE vocabulary with ranked merges.
class BpeModel {
public:
  /// Builds the model from the "model" object; merges may be "a b" strings
  /// or ["a", "b"] pairs.
  static StatusOr<std::unique_ptr<BpeModel>> create(const Json &config);

  /// Appends the ids of one pre-tokenized word to `ids`. Thread-safe.
  void tokenize(std::string_view word, std::vector<int32_t> &ids) const;

  std::optional<int32_t> tokenToId(std::string_view token) const;
  /// The token of `id`, or nullptr when the vocabulary has no such id.
  const std::string *idToToken(int32_t id) const;
  /// One more than the largest id in the vocabulary.
  int64_t idLimit() const { return static_cast<int64_t>(idToToken_.size()); }

private:
  struct MergeResult {
    int32_t rank;
    int32_t newId;
  };

  BpeModel() = default;

  Status addMerge(const std::string &left, const std::string &right,
                  int32_t rank);
  /// The initial symbols of a word: one per character, or byte tokens / the
  /// unknown token for characters missing from the vocabulary.
  std::vector<int32_t> initialSymbols(std::string_view word) const;
  /// Applies merges lowest rank first (leftmost on ties) until none applies.
  void mergeSymbols(std::vector<int32_t> &symbols) const;
  const MergeResult *findMerge(int32_t left, int32_t right) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> idToToken_;
  std::vector<bool> hasId_;
  std::unordered_map<uint64_t, MergeResult> merges_;
  std::optional<int32_t> unkId_;
  std::string continuingSubwordPrefix_;
  std::string endOfWordSuffix_;
  bool fuseUnk_ = false;
  bool byteFallback_ = false;
  bool ignoreMerges_ = false;
  /// Byte-fallback token ids for <0x00>..<0xFF>, -1 where missing.
  std::vector<int32_t> byteTokenIds_;

  mutable std::mutex cacheMutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

} // namespace infer::tokenizer

#endif // INFER_RUNTIME_TOKENIZER_BPEMODEL_H
