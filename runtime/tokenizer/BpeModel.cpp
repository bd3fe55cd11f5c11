//===- BpeModel.cpp - Byte-pair-encoding model of tokenizer.json ----------===//
//
// The merge loop mirrors Hugging Face's Word::merge_all: a min-heap of
// candidate pairs keyed by (rank, position) over a doubly linked list of
// symbols, with stale heap entries detected lazily. Results of short words
// are cached, since natural text repeats words constantly.
//
//===----------------------------------------------------------------------===//

#include "runtime/tokenizer/BpeModel.h"

#include "runtime/tokenizer/Utf8.h"

#include <cstdio>
#include <functional>
#include <queue>

namespace infer::tokenizer {

namespace {

/// Words longer than this (bytes) are not cached; nor is anything once the
/// cache holds kMaxCacheEntries words.
constexpr size_t kMaxCachedWordLength = 256;
constexpr size_t kMaxCacheEntries = 100000;
/// How far vocab ids may run past the number of entries (unused ids).
constexpr int64_t kMaxVocabIdGap = 1 << 16;

uint64_t pairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
         static_cast<uint32_t>(right);
}

} // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::create(const Json &config) {
  std::unique_ptr<BpeModel> model(new BpeModel());
  auto vocabIt = config.find("vocab");
  if (vocabIt == config.end() || !vocabIt->is_object())
    return invalidArgument("BPE model: 'vocab' must be an object");
  int32_t maxId = -1;
  for (auto it = vocabIt->begin(); it != vocabIt->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX)
      return invalidArgument("BPE model: vocab entry '" + it.key() +
                             "' has no valid id");
    auto id = it.value().get<int32_t>();
    model->vocab_.emplace(it.key(), id);
    maxId = std::max(maxId, id);
  }
  // The id table is sized by the largest id: a few sparse ids are fine, one
  // huge id in a tiny file must not cost gigabytes.
  const int64_t idLimit =
      static_cast<int64_t>(model->vocab_.size()) + kMaxVocabIdGap;
  if (maxId >= idLimit)
    return invalidArgument("BPE model: vocab id " + std::to_string(maxId) +
                           " is out of range for a vocab of " +
                           std::to_string(model->vocab_.size()) +
                           " entries (ids must be below " +
                           std::to_string(idLimit) + ")");
  model->idToToken_.resize(static_cast<size_t>(maxId + 1));
  model->hasId_.assign(static_cast<size_t>(maxId + 1), false);
  for (const auto &[token, id] : model->vocab_) {
    model->idToToken_[id] = token;
    model->hasId_[id] = true;
  }

  model->continuingSubwordPrefix_ =
      stringOr(config, "continuing_subword_prefix", "");
  model->endOfWordSuffix_ = stringOr(config, "end_of_word_suffix", "");
  model->fuseUnk_ = boolOr(config, "fuse_unk", false);
  model->byteFallback_ = boolOr(config, "byte_fallback", false);
  model->ignoreMerges_ = boolOr(config, "ignore_merges", false);
  if (config.contains("dropout") && !config["dropout"].is_null() &&
      config["dropout"] != 0.0)
    return unimplemented("BPE dropout is not supported (inference only)");
  std::string unk = stringOr(config, "unk_token", "");
  if (!unk.empty()) {
    model->unkId_ = model->tokenToId(unk);
    if (!model->unkId_)
      return invalidArgument("BPE model: unk_token '" + unk +
                             "' is not in the vocabulary");
  }
  model->byteTokenIds_.assign(256, -1);
  for (int byte = 0; byte < 256; ++byte) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", byte);
    if (auto id = model->tokenToId(name))
      model->byteTokenIds_[byte] = *id;
  }

  INFER_ASSIGN_OR_RETURN(const Json *merges,
                         requireArray(config, "merges", "BPE model"));
  model->merges_.reserve(merges->size());
  int32_t rank = 0;
  for (const Json &merge : *merges) {
    std::string left, right;
    if (merge.is_string()) {
      const auto &text = merge.get_ref<const std::string &>();
      size_t space = text.find(' ');
      if (space == std::string::npos ||
          text.find(' ', space + 1) != std::string::npos)
        return invalidArgument("BPE model: merge '" + text +
                               "' is not two tokens separated by a space");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return invalidArgument("BPE model: merge #" + std::to_string(rank) +
                             " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    INFER_RETURN_IF_ERROR(model->addMerge(left, right, rank));
    ++rank;
  }
  return model;
}

Status BpeModel::addMerge(const std::string &left, const std::string &right,
                          int32_t rank) {
  std::optional<int32_t> leftId = tokenToId(left);
  std::optional<int32_t> rightId = tokenToId(right);
  std::string merged = left;
  merged.append(right, std::min(continuingSubwordPrefix_.size(), right.size()),
                std::string::npos);
  std::optional<int32_t> mergedId = tokenToId(merged);
  if (!leftId || !rightId || !mergedId)
    return invalidArgument("BPE model: merge '" + left + " " + right +
                           "' uses a token missing from the vocabulary");
  // A repeated pair keeps its last rank, as in Hugging Face's merge map.
  merges_[pairKey(*leftId, *rightId)] = MergeResult{rank, *mergedId};
  return Status::ok();
}

std::optional<int32_t> BpeModel::tokenToId(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end())
    return std::nullopt;
  return it->second;
}

const std::string *BpeModel::idToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= idToToken_.size() || !hasId_[id])
    return nullptr;
  return &idToToken_[id];
}

const BpeModel::MergeResult *BpeModel::findMerge(int32_t left,
                                                 int32_t right) const {
  auto it = merges_.find(pairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

std::vector<int32_t> BpeModel::initialSymbols(std::string_view word) const {
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  std::optional<int32_t> pendingUnk;
  std::string piece;
  for (size_t pos = 0; pos < word.size();) {
    size_t len = charLength(word, pos);
    piece.clear();
    if (pos > 0)
      piece = continuingSubwordPrefix_;
    piece.append(word.substr(pos, len));
    if (pos + len == word.size())
      piece.append(endOfWordSuffix_);
    std::string_view bytes = word.substr(pos, len);
    pos += len;

    if (std::optional<int32_t> id = tokenToId(piece)) {
      if (pendingUnk) {
        symbols.push_back(*pendingUnk);
        pendingUnk.reset();
      }
      symbols.push_back(*id);
      continue;
    }
    if (byteFallback_) {
      bool allBytesKnown = true;
      for (char c : bytes)
        allBytesKnown &= byteTokenIds_[static_cast<uint8_t>(c)] >= 0;
      if (allBytesKnown) {
        for (char c : bytes)
          symbols.push_back(byteTokenIds_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unkId_) {
      if (pendingUnk && !fuseUnk_)
        symbols.push_back(*pendingUnk);
      pendingUnk = unkId_;
    }
  }
  if (pendingUnk)
    symbols.push_back(*pendingUnk);
  return symbols;
}

void BpeModel::mergeSymbols(std::vector<int32_t> &symbols) const {
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t newId;
    bool operator>(const Candidate &other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  const int32_t n = static_cast<int32_t>(symbols.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>,
                      std::greater<Candidate>>
      queue;
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const MergeResult *merge = findMerge(symbols[i], symbols[i + 1]))
      queue.push({merge->rank, i, merge->newId});

  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    if (!alive[top.pos] || next[top.pos] < 0)
      continue;
    int32_t right = next[top.pos];
    const MergeResult *current = findMerge(symbols[top.pos], symbols[right]);
    if (!current || current->newId != top.newId)
      continue;
    symbols[top.pos] = top.newId;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0)
      prev[next[right]] = top.pos;
    if (prev[top.pos] >= 0)
      if (const MergeResult *merge =
              findMerge(symbols[prev[top.pos]], symbols[top.pos]))
        queue.push({merge->rank, prev[top.pos], merge->newId});
    if (next[top.pos] >= 0)
      if (const MergeResult *merge =
              findMerge(symbols[top.pos], symbols[next[top.pos]]))
        queue.push({merge->rank, top.pos, merge->newId});
  }
  size_t kept = 0;
  for (int32_t i = 0; i < n; ++i)
    if (alive[i])
      symbols[kept++] = symbols[i];
  symbols.resize(kept);
}

void BpeModel::tokenize(std::string_view word,
                        std::vector<int32_t> &ids) const {
  if (word.empty())
    return;
  if (ignoreMerges_) {
    if (std::optional<int32_t> id = tokenToId(word)) {
      ids.push_back(*id);
      return;
    }
  }
  bool cacheable = word.size() <= kMaxCachedWordLength;
  std::string key;
  if (cacheable) {
    key.assign(word);
    std::lock_guard<std::mutex> lock(cacheMutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols = initialSymbols(word);
  mergeSymbols(symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cacheMutex_);
    if (cache_.size() < kMaxCacheEntries)
      cache_.emplace(std::move(key), std::move(symbols));
  }
}

} // namespace infer::tokenizer
