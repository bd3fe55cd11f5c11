//===- Tokenizer.cpp - Hugging Face tokenizer.json tokenizer --------------===//
//
// Loading and the encode/decode pipelines; the components live in their own
// files.
//
//===----------------------------------------------------------------------===//

#include "runtime/tokenizer/Tokenizer.h"

#include "runtime/support/InputLimits.h"
#include "runtime/tokenizer/AddedVocabulary.h"
#include "runtime/tokenizer/BpeModel.h"
#include "runtime/tokenizer/Decoder.h"
#include "runtime/tokenizer/EncodeLimits.h"
#include "runtime/tokenizer/JsonUtil.h"
#include "runtime/tokenizer/Normalizer.h"
#include "runtime/tokenizer/PostProcessor.h"
#include "runtime/tokenizer/PreTokenizer.h"
#include "runtime/tokenizer/Utf8.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace infer {

using tokenizer::Json;

namespace {

StatusOr<std::string> readFile(const std::string &path) {
  return readBoundedFile(path);
}

StatusOr<Json> parseJson(std::string_view text, const std::string &what) {
  // The component readers recurse per Sequence level.
  INFER_RETURN_IF_ERROR(checkJsonDepth(text, what));
  Json parsed = Json::parse(text.begin(), text.end(), nullptr,
                            /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    return invalidArgument(what + " is not valid JSON");
  if (!parsed.is_object())
    return invalidArgument(what + " is not a JSON object");
  return parsed;
}

/// A token named in tokenizer_config.json: a string or an AddedToken object.
std::string configTokenString(const Json &config, const std::string &key) {
  auto it = config.find(key);
  if (it == config.end())
    return "";
  if (it->is_string())
    return it->get<std::string>();
  if (it->is_object())
    return tokenizer::stringOr(*it, "content", "");
  return "";
}

std::string directoryOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

} // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

StatusOr<std::unique_ptr<Tokenizer>>
Tokenizer::fromFile(const std::string &tokenizerJsonPath) {
  INFER_ASSIGN_OR_RETURN(std::string tokenizerJson,
                         readFile(tokenizerJsonPath));
  std::string dir = directoryOf(tokenizerJsonPath);
  std::string config, generationConfig;
  if (std::ifstream(dir + "/tokenizer_config.json")) {
    INFER_ASSIGN_OR_RETURN(config, readFile(dir + "/tokenizer_config.json"));
  }
  if (std::ifstream(dir + "/generation_config.json")) {
    INFER_ASSIGN_OR_RETURN(generationConfig,
                           readFile(dir + "/generation_config.json"));
  }
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      fromJson(tokenizerJson, config, generationConfig);
  if (!tokenizer.isOk())
    return tokenizer.status().withContext("loading '" + tokenizerJsonPath +
                                          "'");
  return tokenizer;
}

StatusOr<std::unique_ptr<Tokenizer>>
Tokenizer::fromJson(std::string_view tokenizerJson,
                    std::string_view tokenizerConfigJson,
                    std::string_view generationConfigJson) {
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  // The field readers check types before reading; this guard only turns a
  // case they missed into a Status instead of an escaping exception.
  try {
    INFER_RETURN_IF_ERROR(tokenizer->loadTokenizerJson(tokenizerJson));
    if (!tokenizerConfigJson.empty())
      INFER_RETURN_IF_ERROR(
          tokenizer->loadTokenizerConfig(tokenizerConfigJson));
    if (!generationConfigJson.empty())
      INFER_RETURN_IF_ERROR(
          tokenizer->loadGenerationConfig(generationConfigJson));
  } catch (const Json::exception &error) {
    return invalidArgument(std::string("unexpected JSON content: ") +
                           error.what());
  }
  return tokenizer;
}

Status Tokenizer::loadTokenizerJson(std::string_view text) {
  INFER_ASSIGN_OR_RETURN(Json root, parseJson(text, "tokenizer.json"));

  auto present = [&](const char *key) {
    return root.contains(key) && !root[key].is_null();
  };
  if (present("normalizer")) {
    INFER_ASSIGN_OR_RETURN(normalizer_,
                           tokenizer::createNormalizer(root["normalizer"]));
  }
  if (present("pre_tokenizer")) {
    INFER_ASSIGN_OR_RETURN(
        preTokenizer_, tokenizer::createPreTokenizer(root["pre_tokenizer"]));
  }
  if (!present("model"))
    return invalidArgument("tokenizer.json has no 'model'");
  const Json &model = root["model"];
  std::string modelType =
      model.is_object() ? tokenizer::stringOr(model, "type", "BPE") : "";
  if (modelType != "BPE")
    return unimplemented("unsupported model type '" + modelType +
                         "' (only BPE is supported)");
  INFER_ASSIGN_OR_RETURN(model_, tokenizer::BpeModel::create(model));
  if (present("post_processor")) {
    INFER_ASSIGN_OR_RETURN(
        postProcessor_, tokenizer::createPostProcessor(root["post_processor"]));
  }
  if (present("decoder")) {
    INFER_ASSIGN_OR_RETURN(decoder_, tokenizer::createDecoder(root["decoder"]));
  }
  INFER_ASSIGN_OR_RETURN(
      tokenizer::AddedVocabulary added,
      tokenizer::AddedVocabulary::create(
          root.contains("added_tokens") ? root["added_tokens"] : Json(),
          normalizer_.get()));
  added_ = std::make_unique<tokenizer::AddedVocabulary>(std::move(added));
  return Status::ok();
}

Status Tokenizer::loadTokenizerConfig(std::string_view text) {
  INFER_ASSIGN_OR_RETURN(Json config, parseJson(text, "tokenizer_config.json"));
  bosToken_ = configTokenString(config, "bos_token");
  eosToken_ = configTokenString(config, "eos_token");

  auto chatTemplate = config.find("chat_template");
  if (chatTemplate != config.end() && chatTemplate->is_string()) {
    chatTemplate_ = chatTemplate->get<std::string>();
  } else if (chatTemplate != config.end() && chatTemplate->is_array()) {
    for (const Json &named : *chatTemplate) {
      std::string body = tokenizer::stringOr(named, "template", "");
      if (chatTemplate_.empty() ||
          tokenizer::stringOr(named, "name", "") == "default")
        chatTemplate_ = body;
    }
  }

  // add_bos_token / add_eos_token ask for what the post-processor may
  // already do; probe it so the token is never added twice.
  std::vector<int32_t> probe;
  if (postProcessor_)
    postProcessor_->process(probe);
  std::optional<int32_t> bos = bosTokenId();
  std::optional<int32_t> eos = tokenToId(eosToken_);
  prependBos_ = tokenizer::boolOr(config, "add_bos_token", false) && bos &&
                (probe.empty() || probe.front() != *bos);
  appendEos_ = tokenizer::boolOr(config, "add_eos_token", false) && eos &&
               (probe.empty() || probe.back() != *eos);
  return Status::ok();
}

Status Tokenizer::loadGenerationConfig(std::string_view text) {
  INFER_ASSIGN_OR_RETURN(Json config,
                         parseJson(text, "generation_config.json"));
  auto eos = config.find("eos_token_id");
  if (eos == config.end())
    return Status::ok();
  if (eos->is_number_integer()) {
    generationEosIds_.push_back(eos->get<int32_t>());
  } else if (eos->is_array()) {
    for (const Json &id : *eos)
      if (id.is_number_integer())
        generationEosIds_.push_back(id.get<int32_t>());
  }
  return Status::ok();
}

std::vector<int32_t> Tokenizer::encode(std::string_view text,
                                       bool addSpecialTokens) const {
  tokenizer::EncodeScope scope(text.size());
  return encodeWithinLimits(text, addSpecialTokens);
}

StatusOr<std::vector<int32_t>>
Tokenizer::tryEncode(std::string_view text, bool addSpecialTokens) const {
  tokenizer::EncodeScope scope(text.size());
  std::vector<int32_t> ids = encodeWithinLimits(text, addSpecialTokens);
  if (!scope.error().isOk())
    return scope.error().withContext(
        "encoding a " + std::to_string(text.size()) + "-byte text");
  return ids;
}

std::vector<int32_t>
Tokenizer::encodeWithinLimits(std::string_view text,
                              bool addSpecialTokens) const {
  std::string input = tokenizer::toValidUtf8Lossy(text);
  std::vector<int32_t> ids;
  std::vector<tokenizer::Word> words;
  for (tokenizer::Segment &segment : added_->split(input, normalizer_.get())) {
    if (segment.tokenId) {
      ids.push_back(*segment.tokenId);
      continue;
    }
    words.clear();
    words.push_back({std::move(segment.text), segment.atInputStart});
    if (preTokenizer_)
      preTokenizer_->preTokenize(words);
    for (const tokenizer::Word &word : words)
      model_->tokenize(word.text, ids);
  }
  if (addSpecialTokens) {
    if (postProcessor_)
      postProcessor_->process(ids);
    if (prependBos_)
      ids.insert(ids.begin(), *bosTokenId());
    if (appendEos_)
      ids.push_back(*tokenToId(eosToken_));
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t> &ids,
                              bool skipSpecialTokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const tokenizer::AddedToken *added = added_->findById(id)) {
      if (!(skipSpecialTokens && added->special))
        tokens.push_back(added->content);
      continue;
    }
    if (const std::string *token = model_->idToToken(id))
      tokens.push_back(*token);
  }
  if (!decoder_) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i)
      joined.append(i ? " " : "").append(tokens[i]);
    return joined;
  }
  decoder_->decodeChain(tokens);
  std::string text;
  for (const std::string &token : tokens)
    text.append(token);
  return text;
}

std::string Tokenizer::decodeIncremental(const std::vector<int32_t> &ids,
                                         DetokenizerState &state,
                                         bool skipSpecialTokens) const {
  size_t readOffset = std::min(state.readOffset, ids.size());
  size_t prefixOffset = std::min(state.prefixOffset, readOffset);
  if (readOffset == ids.size())
    return "";
  auto begin = ids.begin() + static_cast<std::ptrdiff_t>(prefixOffset);
  std::string prefixText =
      decode(std::vector<int32_t>(
                 begin, ids.begin() + static_cast<std::ptrdiff_t>(readOffset)),
             skipSpecialTokens);
  std::string fullText =
      decode(std::vector<int32_t>(begin, ids.end()), skipSpecialTokens);
  // A trailing U+FFFD means the last tokens end inside a UTF-8 character.
  bool incomplete =
      fullText.size() >= tokenizer::kReplacementChar.size() &&
      fullText.compare(fullText.size() - tokenizer::kReplacementChar.size(),
                       tokenizer::kReplacementChar.size(),
                       tokenizer::kReplacementChar) == 0;
  if (incomplete || fullText.size() <= prefixText.size())
    return "";
  state.prefixOffset = readOffset;
  state.readOffset = ids.size();
  return fullText.substr(prefixText.size());
}

std::optional<int32_t> Tokenizer::tokenToId(std::string_view token) const {
  if (token.empty())
    return std::nullopt;
  if (const tokenizer::AddedToken *added = added_->findByContent(token))
    return added->id;
  return model_->tokenToId(token);
}

std::string Tokenizer::idToToken(int32_t id) const {
  if (const tokenizer::AddedToken *added = added_->findById(id))
    return added->content;
  const std::string *token = model_->idToToken(id);
  return token ? *token : std::string();
}

bool Tokenizer::isSpecialToken(int32_t id) const {
  const tokenizer::AddedToken *added = added_->findById(id);
  return added && added->special;
}

int64_t Tokenizer::vocabSize() const {
  int64_t size = model_->idLimit();
  for (const tokenizer::AddedToken &token : added_->tokens())
    size = std::max<int64_t>(size, static_cast<int64_t>(token.id) + 1);
  return size;
}

std::optional<int32_t> Tokenizer::bosTokenId() const {
  return tokenToId(bosToken_);
}

std::vector<int32_t> Tokenizer::eosTokenIds() const {
  std::vector<int32_t> ids;
  if (std::optional<int32_t> eos = tokenToId(eosToken_))
    ids.push_back(*eos);
  for (int32_t id : generationEosIds_)
    if (std::find(ids.begin(), ids.end(), id) == ids.end())
      ids.push_back(id);
  return ids;
}

} // namespace infer
