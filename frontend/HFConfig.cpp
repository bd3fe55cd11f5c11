//===- HFConfig.cpp - Hugging Face config.json as a typed model config ----===//

#include "frontend/HFConfig.h"
#include "runtime/support/InputLimits.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>

using llvm::StringRef;
using mlir::FailureOr;

namespace infer::frontend {
namespace {

/// The text of a JSON file, so that diagnostics can point at a key's line.
struct JsonFile {
  std::string path;
  std::string text;
  mlir::MLIRContext *context = nullptr;

  mlir::Location locAt(size_t offset) const {
    unsigned line = 1, column = 1;
    for (size_t i = 0; i < offset && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return mlir::FileLineColLoc::get(context, path, line, column);
  }

  /// Offset of the first `"key"` followed by a colon at or after `from`.
  std::optional<size_t> findKey(StringRef key, size_t from) const {
    std::string quoted = "\"" + key.str() + "\"";
    StringRef all(text);
    for (size_t pos = all.find(quoted, from); pos != StringRef::npos;
         pos = all.find(quoted, pos + 1)) {
      StringRef rest = all.drop_front(pos + quoted.size()).ltrim();
      if (rest.starts_with(":"))
        return pos;
    }
    return std::nullopt;
  }
};

std::string describeKind(const llvm::json::Value &value) {
  switch (value.kind()) {
  case llvm::json::Value::Null:
    return "null";
  case llvm::json::Value::Boolean:
    return "a boolean";
  case llvm::json::Value::Number:
    return "a number";
  case llvm::json::Value::String:
    return "a string";
  case llvm::json::Value::Array:
    return "an array";
  case llvm::json::Value::Object:
    return "an object";
  }
  llvm_unreachable("unknown JSON kind");
}

/// Typed access to one JSON object of a config file. A missing required key
/// or a value of the wrong type is an error naming the key (qualified by the
/// enclosing object, "rope_parameters.factor") at the key's line.
class ConfigReader {
public:
  ConfigReader(const JsonFile &file, const llvm::json::Object &object,
               std::string prefix = "", size_t searchFrom = 0)
      : file(file), object(object), prefix(std::move(prefix)),
        searchFrom(searchFrom) {}

  std::string qualified(StringRef key) const { return prefix + key.str(); }

  mlir::Location loc(StringRef key) const {
    if (std::optional<size_t> offset = file.findKey(key, searchFrom))
      return file.locAt(*offset);
    return file.locAt(searchFrom);
  }

  mlir::InFlightDiagnostic error(StringRef key) const {
    return mlir::emitError(loc(key));
  }

  /// Present and not null.
  bool has(StringRef key) const {
    const llvm::json::Value *value = object.get(key);
    return value && value->kind() != llvm::json::Value::Null;
  }

  const llvm::json::Value *get(StringRef key) const {
    const llvm::json::Value *value = object.get(key);
    if (value && value->kind() == llvm::json::Value::Null)
      return nullptr;
    return value;
  }

  FailureOr<int64_t> requireInt(StringRef key) const {
    if (!has(key)) {
      mlir::emitError(file.locAt(searchFrom))
          << "'" << qualified(key) << "' is missing from "
          << llvm::sys::path::filename(file.path);
      return mlir::failure();
    }
    return asInt(key, *get(key));
  }

  FailureOr<int64_t> getInt(StringRef key, int64_t defaultValue) const {
    if (!has(key))
      return defaultValue;
    return asInt(key, *get(key));
  }

  FailureOr<std::optional<int64_t>> getOptionalInt(StringRef key) const {
    if (!has(key))
      return std::optional<int64_t>();
    FailureOr<int64_t> value = asInt(key, *get(key));
    if (mlir::failed(value))
      return mlir::failure();
    return std::optional<int64_t>(*value);
  }

  FailureOr<double> requireNumber(StringRef key) const {
    if (!has(key)) {
      mlir::emitError(file.locAt(searchFrom))
          << "'" << qualified(key) << "' is missing from "
          << llvm::sys::path::filename(file.path);
      return mlir::failure();
    }
    return asNumber(key, *get(key));
  }

  FailureOr<double> getNumber(StringRef key, double defaultValue) const {
    if (!has(key))
      return defaultValue;
    return asNumber(key, *get(key));
  }

  FailureOr<bool> getBool(StringRef key, bool defaultValue) const {
    if (!has(key))
      return defaultValue;
    if (std::optional<bool> value = get(key)->getAsBoolean())
      return *value;
    return typeError(key, "a boolean");
  }

  FailureOr<std::optional<std::string>> getOptionalString(StringRef key) const {
    if (!has(key))
      return std::optional<std::string>();
    if (std::optional<StringRef> value = get(key)->getAsString())
      return std::optional<std::string>(value->str());
    return typeError(key, "a string");
  }

  /// An integer, a list of integers, or null/absent (empty).
  FailureOr<std::vector<int64_t>> getIntOrIntList(StringRef key) const {
    std::vector<int64_t> ids;
    const llvm::json::Value *value = get(key);
    if (!value)
      return ids;
    if (std::optional<int64_t> id = value->getAsInteger()) {
      ids.push_back(*id);
      return ids;
    }
    const llvm::json::Array *array = value->getAsArray();
    if (!array)
      return typeError(key, "an integer or a list of integers");
    for (const llvm::json::Value &element : *array) {
      std::optional<int64_t> id = element.getAsInteger();
      if (!id)
        return typeError(key, "an integer or a list of integers");
      ids.push_back(*id);
    }
    return ids;
  }

  /// A nested object (null/absent: none).
  FailureOr<std::optional<ConfigReader>> getObject(StringRef key) const {
    const llvm::json::Value *value = get(key);
    if (!value)
      return std::optional<ConfigReader>();
    const llvm::json::Object *nested = value->getAsObject();
    if (!nested)
      return typeError(key, "an object");
    size_t offset = file.findKey(key, searchFrom).value_or(searchFrom);
    return std::optional<ConfigReader>(
        ConfigReader(file, *nested, qualified(key) + ".", offset));
  }

private:
  FailureOr<int64_t> asInt(StringRef key,
                           const llvm::json::Value &value) const {
    if (std::optional<int64_t> integer = value.getAsInteger())
      return *integer;
    return typeError(key, "an integer");
  }

  FailureOr<double> asNumber(StringRef key,
                             const llvm::json::Value &value) const {
    if (std::optional<double> number = value.getAsNumber())
      return *number;
    return typeError(key, "a number");
  }

  mlir::LogicalResult typeError(StringRef key, StringRef expected) const {
    return error(key) << "'" << qualified(key) << "' in "
                      << llvm::sys::path::filename(file.path) << " must be "
                      << expected << ", not " << describeKind(*get(key));
  }

  const JsonFile &file;
  const llvm::json::Object &object;
  std::string prefix;
  size_t searchFrom;
};

/// Reads and parses a JSON file whose top level must be an object.
struct ParsedJson {
  JsonFile file;
  llvm::json::Value root = nullptr;
};

std::optional<ParsedJson> readJsonObject(StringRef path,
                                         mlir::MLIRContext &context) {
  ParsedJson parsed;
  parsed.file.path = path.str();
  parsed.file.context = &context;
  mlir::Location fileLoc = mlir::FileLineColLoc::get(&context, path, 1, 1);
  // A device (/dev/zero) or a huge file would be read forever.
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status(path, status) &&
      (!llvm::sys::fs::is_regular_file(status) ||
       status.getSize() > static_cast<uint64_t>(kMaxTextFileBytes))) {
    mlir::emitError(fileLoc) << path << " is not a regular file of at most "
                             << kMaxTextFileBytes << " bytes";
    return std::nullopt;
  }
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer) {
    mlir::emitError(fileLoc)
        << "cannot read " << path << ": " << buffer.getError().message();
    return std::nullopt;
  }
  parsed.file.text = (*buffer)->getBuffer().str();
  // llvm::json::parse recurses per nesting level: bound the depth first.
  if (std::optional<size_t> at = findJsonDepthExcess(parsed.file.text)) {
    mlir::emitError(fileLoc)
        << llvm::sys::path::filename(path)
        << " nests arrays and objects deeper than " << kMaxJsonDepth
        << " levels (at byte " << *at << ")";
    return std::nullopt;
  }
  llvm::Expected<llvm::json::Value> value = llvm::json::parse(parsed.file.text);
  if (!value) {
    mlir::emitError(fileLoc)
        << llvm::sys::path::filename(path)
        << " is not valid JSON: " << llvm::toString(value.takeError());
    return std::nullopt;
  }
  if (!value->getAsObject()) {
    mlir::emitError(fileLoc)
        << llvm::sys::path::filename(path) << " must hold a JSON object, not "
        << describeKind(*value);
    return std::nullopt;
  }
  parsed.root = std::move(*value);
  return parsed;
}

mlir::LogicalResult parseArchitecture(const ConfigReader &config,
                                      ModelConfig &model) {
  const llvm::json::Value *value = config.get("architectures");
  if (!value) {
    mlir::emitError(config.loc("architectures"))
        << "'architectures' is missing from config.json (supported: "
        << supportedArchitectureList() << ")";
    return mlir::failure();
  }
  const llvm::json::Array *list = value->getAsArray();
  std::optional<StringRef> name;
  if (list && !list->empty())
    name = (*list)[0].getAsString();
  if (!name)
    return config.error("architectures")
           << "'architectures' in config.json must be a non-empty list of "
              "strings";
  model.architecture = lookupArchitecture(*name);
  if (!model.architecture)
    return config.error("architectures")
           << "unsupported architecture '" << *name
           << "' (supported: " << supportedArchitectureList() << ")";
  return mlir::success();
}

FailureOr<RopeKind> parseRopeKind(const ConfigReader &reader, StringRef key,
                                  StringRef name) {
  if (name == "default")
    return RopeKind::kDefault;
  if (name == "linear")
    return RopeKind::kLinear;
  if (name == "llama3")
    return RopeKind::kLlama3;
  if (name == "yarn")
    return RopeKind::kYarn;
  // "su" is what the first Phi-3 128k configs called LongRoPE.
  if (name == "longrope" || name == "su")
    return RopeKind::kLongRope;
  if (name == "dynamic")
    return RopeKind::kDynamic;
  return reader.error(key) << "rope type '" << name << "' ('"
                           << reader.qualified(key)
                           << "') is not supported (supported: default, "
                              "linear, llama3, yarn, longrope, dynamic)";
}

/// A list of positive numbers with `count` entries.
FailureOr<std::vector<double>> requireFactorList(const ConfigReader &params,
                                                 StringRef key, int64_t count) {
  const llvm::json::Value *value = params.get(key);
  if (!value)
    return params.error(key) << "'" << params.qualified(key)
                             << "' is missing (longrope rope scaling)";
  const llvm::json::Array *array = value->getAsArray();
  std::vector<double> list;
  if (array)
    for (const llvm::json::Value &element : *array)
      if (std::optional<double> number = element.getAsNumber();
          number && *number > 0)
        list.push_back(*number);
  if (!array || list.size() != array->size())
    return params.error(key) << "'" << params.qualified(key)
                             << "' must be a list of positive numbers";
  if (static_cast<int64_t>(list.size()) != count)
    return params.error(key)
           << "'" << params.qualified(key) << "' has " << list.size()
           << " entries; longrope needs one per rotary frequency, "
              "head_dim * partial_rotary_factor / 2 = "
           << count;
  return list;
}

/// Reads the scaling parameters of `kind` from `params`, which is
/// `rope_parameters` (transformers 5.x) or `rope_scaling` (older); `config`
/// is the whole config.json (Phi-3 keeps original_max_position_embeddings
/// there).
mlir::LogicalResult parseRopeScaling(const ConfigReader &config,
                                     const ConfigReader &params,
                                     const ModelConfig &model,
                                     RopeConfig &rope) {
  if (rope.kind == RopeKind::kDefault)
    return mlir::success();
  if (rope.kind == RopeKind::kLongRope) {
    // HF _compute_longrope_parameters: the attention factor comes from the
    // ratio of max_position_embeddings to the original context when the
    // config has one at the top (Phi-3), else from `factor`.
    FailureOr<std::optional<int64_t>> topOriginal =
        config.getOptionalInt("original_max_position_embeddings");
    if (mlir::failed(topOriginal))
      return mlir::failure();
    FailureOr<int64_t> original =
        params.getInt("original_max_position_embeddings",
                      topOriginal->value_or(model.maxPositionEmbeddings));
    FailureOr<double> factor = params.getNumber("factor", 1.0);
    if (mlir::failed(original) || mlir::failed(factor))
      return mlir::failure();
    if (*original <= 0)
      return params.error("original_max_position_embeddings")
             << "'original_max_position_embeddings' must be positive for "
                "longrope rope scaling, got "
             << *original;
    int64_t half = model.rotaryDim / 2;
    FailureOr<std::vector<double>> shortFactor =
        requireFactorList(params, "short_factor", half);
    if (mlir::failed(shortFactor))
      return mlir::failure();
    FailureOr<std::vector<double>> longFactor =
        requireFactorList(params, "long_factor", half);
    if (mlir::failed(longFactor))
      return mlir::failure();
    rope.originalMaxPositionEmbeddings = *original;
    rope.shortFactor = std::move(*shortFactor);
    rope.longFactor = std::move(*longFactor);
    double scale = *topOriginal
                       ? static_cast<double>(model.maxPositionEmbeddings) /
                             static_cast<double>(**topOriginal)
                       : *factor;
    FailureOr<double> attentionFactor = params.getNumber(
        "attention_factor",
        scale <= 1.0
            ? 1.0
            : std::sqrt(1.0 + std::log(scale) /
                                  std::log(static_cast<double>(*original))));
    if (mlir::failed(attentionFactor))
      return mlir::failure();
    rope.attentionFactor = *attentionFactor;
    return mlir::success();
  }
  FailureOr<double> factor = params.requireNumber("factor");
  if (mlir::failed(factor))
    return mlir::failure();
  if (*factor <= 0)
    return params.error("factor") << "'" << params.qualified("factor")
                                  << "' must be positive, got " << *factor;
  rope.factor = *factor;
  if (rope.kind == RopeKind::kLinear)
    return mlir::success();
  if (rope.kind == RopeKind::kDynamic) {
    // HF _compute_dynamic_ntk_parameters: the base grows once a sequence
    // passes max_position_embeddings.
    rope.originalMaxPositionEmbeddings = model.maxPositionEmbeddings;
    return mlir::success();
  }
  if (rope.kind == RopeKind::kYarn) {
    FailureOr<int64_t> original = params.getInt(
        "original_max_position_embeddings", model.maxPositionEmbeddings);
    FailureOr<double> betaFast = params.getNumber("beta_fast", 32.0);
    FailureOr<double> betaSlow = params.getNumber("beta_slow", 1.0);
    FailureOr<bool> truncate = params.getBool("truncate", true);
    if (mlir::failed(original) || mlir::failed(betaFast) ||
        mlir::failed(betaSlow) || mlir::failed(truncate))
      return mlir::failure();
    if (!*truncate)
      return params.error("truncate")
             << "'" << params.qualified("truncate")
             << "' = false is not supported (yarn with truncate = true only)";
    if (*original <= 0 || *betaFast <= 0 || *betaSlow <= 0)
      return params.error("beta_fast")
             << "yarn rope scaling needs a positive "
                "original_max_position_embeddings, beta_fast and beta_slow";
    // HF get_mscale: 0.1 * mscale * ln(factor) + 1 (1 for factor <= 1);
    // with mscale and mscale_all_dim (DeepSeek) their ratio.
    auto getMscale = [&](double m) {
      return rope.factor <= 1.0 ? 1.0 : 0.1 * m * std::log(rope.factor) + 1.0;
    };
    FailureOr<double> m = params.getNumber("mscale", 0.0);
    FailureOr<double> mAllDim = params.getNumber("mscale_all_dim", 0.0);
    if (mlir::failed(m) || mlir::failed(mAllDim))
      return mlir::failure();
    double derived = (*m != 0 && *mAllDim != 0)
                         ? getMscale(*m) / getMscale(*mAllDim)
                         : getMscale(1.0);
    FailureOr<double> attentionFactor =
        params.getNumber("attention_factor", derived);
    if (mlir::failed(attentionFactor))
      return mlir::failure();
    rope.originalMaxPositionEmbeddings = *original;
    rope.betaFast = *betaFast;
    rope.betaSlow = *betaSlow;
    rope.attentionFactor = *attentionFactor;
    return mlir::success();
  }
  FailureOr<double> low = params.requireNumber("low_freq_factor");
  FailureOr<double> high = params.requireNumber("high_freq_factor");
  FailureOr<int64_t> original =
      params.requireInt("original_max_position_embeddings");
  if (mlir::failed(low) || mlir::failed(high) || mlir::failed(original))
    return mlir::failure();
  if (*high <= *low)
    return params.error("high_freq_factor")
           << "'" << params.qualified("high_freq_factor")
           << "' must exceed 'low_freq_factor' for llama3 rope scaling";
  if (*original <= 0)
    return params.error("original_max_position_embeddings")
           << "'" << params.qualified("original_max_position_embeddings")
           << "' must be positive";
  rope.lowFreqFactor = *low;
  rope.highFreqFactor = *high;
  rope.originalMaxPositionEmbeddings = *original;
  return mlir::success();
}

/// `partial_rotary_factor` (top level, or in `rope_parameters`) -> the
/// rotary dimension.
mlir::LogicalResult parsePartialRotary(const ConfigReader &reader,
                                       ModelConfig &model) {
  FailureOr<double> share =
      reader.getNumber("partial_rotary_factor", model.rope.partialRotaryFactor);
  if (mlir::failed(share))
    return mlir::failure();
  model.rope.partialRotaryFactor = *share;
  // HF: int(head_dim * partial_rotary_factor).
  model.rotaryDim = static_cast<int64_t>(static_cast<double>(model.headDim) *
                                         model.rope.partialRotaryFactor);
  if (!(*share > 0) || *share > 1 || model.rotaryDim <= 0 ||
      model.rotaryDim % 2 != 0)
    return reader.error("partial_rotary_factor")
           << "'" << reader.qualified("partial_rotary_factor")
           << "' = " << *share << " gives a rotary dimension of "
           << model.rotaryDim << " of head_dim " << model.headDim
           << "; it must be even and in (0, head_dim]";
  return mlir::success();
}

/// One transformers 5.x `rope_parameters` object into `rope`.
mlir::LogicalResult parseRopeParameters(const ConfigReader &config,
                                        const ConfigReader &params,
                                        ModelConfig &model, RopeConfig &rope) {
  if (mlir::failed(parsePartialRotary(params, model)))
    return mlir::failure();
  FailureOr<double> theta = params.getNumber("rope_theta", rope.theta);
  if (mlir::failed(theta))
    return mlir::failure();
  rope.theta = *theta;
  StringRef typeKey = params.has("rope_type") ? "rope_type" : "type";
  FailureOr<std::optional<std::string>> type =
      params.getOptionalString(typeKey);
  if (mlir::failed(type))
    return mlir::failure();
  FailureOr<RopeKind> kind =
      parseRopeKind(params, typeKey, type->value_or("default"));
  if (mlir::failed(kind))
    return mlir::failure();
  rope.kind = *kind;
  if (mlir::failed(parseRopeScaling(config, params, model, rope)))
    return mlir::failure();
  if (rope.theta <= 0)
    return params.error("rope_theta")
           << "rope theta must be positive, got " << rope.theta;
  return mlir::success();
}

mlir::LogicalResult parseRope(const ConfigReader &config, ModelConfig &model) {
  RopeConfig &rope = model.rope;
  FailureOr<std::optional<ConfigReader>> parameters =
      config.getObject("rope_parameters");
  if (mlir::failed(parameters))
    return mlir::failure();
  if (mlir::failed(parsePartialRotary(config, model)))
    return mlir::failure();

  if (*parameters && model.architecture->slidingLayerRope &&
      (*parameters)->has("full_attention")) {
    // transformers 5.x Gemma 3: one object per layer type.
    FailureOr<std::optional<ConfigReader>> full =
        (*parameters)->getObject("full_attention");
    FailureOr<std::optional<ConfigReader>> sliding =
        (*parameters)->getObject("sliding_attention");
    if (mlir::failed(full) || mlir::failed(sliding))
      return mlir::failure();
    if (mlir::failed(parseRopeParameters(config, **full, model, rope)))
      return mlir::failure();
    if (*sliding) {
      RopeConfig local;
      if (mlir::failed(parseRopeParameters(config, **sliding, model, local)))
        return mlir::failure();
      model.slidingRope = local;
    }
  } else if (*parameters) {
    // transformers 5.x: everything under `rope_parameters`.
    if (mlir::failed(parseRopeParameters(config, **parameters, model, rope)))
      return mlir::failure();
  } else {
    // Older configs: `rope_theta` at the top, `rope_scaling` (or null).
    FailureOr<double> theta = config.getNumber("rope_theta", rope.theta);
    if (mlir::failed(theta))
      return mlir::failure();
    rope.theta = *theta;
    FailureOr<std::optional<ConfigReader>> scaling =
        config.getObject("rope_scaling");
    if (mlir::failed(scaling))
      return mlir::failure();
    if (*scaling) {
      const ConfigReader &params = **scaling;
      StringRef typeKey = params.has("rope_type") ? "rope_type" : "type";
      FailureOr<std::optional<std::string>> type =
          params.getOptionalString(typeKey);
      if (mlir::failed(type))
        return mlir::failure();
      if (!*type)
        return config.error("rope_scaling")
               << "'rope_scaling' in config.json needs 'rope_type' or 'type'";
      FailureOr<RopeKind> kind = parseRopeKind(params, typeKey, **type);
      if (mlir::failed(kind))
        return mlir::failure();
      rope.kind = *kind;
      if (mlir::failed(parseRopeScaling(config, params, model, rope)))
        return mlir::failure();
    }
    if (rope.theta <= 0)
      return config.error("rope_theta")
             << "rope theta must be positive, got " << rope.theta;
  }
  if (model.architecture->slidingLayerRope && !model.slidingRope) {
    // Older Gemma 3 configs: the local layers' plain rope base.
    FailureOr<double> local = config.getNumber("rope_local_base_freq", 1e4);
    if (mlir::failed(local))
      return mlir::failure();
    if (!(*local > 0))
      return config.error("rope_local_base_freq")
             << "'rope_local_base_freq' must be positive, got " << *local;
    RopeConfig sliding;
    sliding.theta = *local;
    sliding.partialRotaryFactor = rope.partialRotaryFactor;
    model.slidingRope = sliding;
  }
  return mlir::success();
}

/// Gemma: query_pre_attn_scalar and the attention and final logit caps
/// (null or absent: none).
mlir::LogicalResult parseGemma(const ConfigReader &config, ModelConfig &model) {
  if (!model.architecture->gemma)
    return mlir::success();
  FailureOr<double> scalar = config.getNumber("query_pre_attn_scalar", 0.0);
  FailureOr<double> attnCap = config.getNumber("attn_logit_softcapping", 0.0);
  FailureOr<double> finalCap = config.getNumber("final_logit_softcapping", 0.0);
  if (mlir::failed(scalar) || mlir::failed(attnCap) || mlir::failed(finalCap))
    return mlir::failure();
  const std::pair<StringRef, double> values[] = {
      {"query_pre_attn_scalar", *scalar},
      {"attn_logit_softcapping", *attnCap},
      {"final_logit_softcapping", *finalCap}};
  for (auto [key, value] : values)
    if (value < 0 || (value == 0 && config.has(key)))
      return config.error(key)
             << "'" << key << "' must be positive (or null), got " << value;
  model.queryPreAttnScalar = *scalar;
  model.attnLogitSoftcap = *attnCap;
  model.finalLogitSoftcap = *finalCap;
  return mlir::success();
}

mlir::LogicalResult parseActivation(const ConfigReader &config,
                                    const Architecture &arch,
                                    Activation &activation) {
  // Gemma names it `hidden_activation` (gelu_pytorch_tanh by default).
  StringRef key = arch.gemma && !config.has("hidden_act") ? "hidden_activation"
                                                          : "hidden_act";
  FailureOr<std::optional<std::string>> name = config.getOptionalString(key);
  if (mlir::failed(name))
    return mlir::failure();
  // value_or returns a temporary: keep the string, not a view of it.
  const std::string act =
      name->value_or(arch.gemma ? "gelu_pytorch_tanh" : "silu");
  if (act == "silu" || act == "swish")
    activation = Activation::kSilu;
  else if (act == "gelu")
    activation = Activation::kGeluExact;
  else if (act == "gelu_pytorch_tanh" || act == "gelu_new")
    activation = Activation::kGeluTanh;
  else
    return config.error(key)
           << "unsupported '" << key << "' '" << act
           << "' (supported: silu, swish, gelu, gelu_pytorch_tanh, gelu_new)";
  return mlir::success();
}

mlir::LogicalResult parseBiases(const ConfigReader &config,
                                ModelConfig &model) {
  const Architecture &arch = *model.architecture;
  model.qkvBias = arch.alwaysQKVBias;
  if (!arch.configurableBias)
    return mlir::success();
  FailureOr<bool> attentionBias = config.getBool("attention_bias", false);
  FailureOr<bool> mlpBias = config.getBool("mlp_bias", false);
  if (mlir::failed(attentionBias) || mlir::failed(mlpBias))
    return mlir::failure();
  model.qkvBias = model.qkvBias || *attentionBias;
  model.outputBias = *attentionBias;
  model.mlpBias = *mlpBias;
  return mlir::success();
}

FailureOr<int64_t> parseWindow(const ConfigReader &config) {
  FailureOr<std::optional<int64_t>> window =
      config.getOptionalInt("sliding_window");
  if (mlir::failed(window))
    return mlir::failure();
  if (window->value_or(0) < 0)
    return config.error("sliding_window")
           << "'sliding_window' must not be negative, got " << **window;
  return window->value_or(0);
}

/// Per-layer windows, like HF: Mistral applies `sliding_window` everywhere;
/// Qwen2 only when `use_sliding_window`, to the layers `layer_types` marks
/// "sliding_attention" (derived as layers >= `max_window_layers` when absent).
mlir::LogicalResult parseSlidingWindows(const ConfigReader &config,
                                        ModelConfig &model) {
  model.slidingWindows.assign(model.numLayers, 0);
  switch (model.architecture->slidingWindow) {
  case SlidingWindowRule::kNone:
    return mlir::success();
  case SlidingWindowRule::kAllLayers: {
    FailureOr<int64_t> window = parseWindow(config);
    if (mlir::failed(window))
      return mlir::failure();
    model.slidingWindows.assign(model.numLayers, *window);
    return mlir::success();
  }
  case SlidingWindowRule::kQwen2:
  case SlidingWindowRule::kGemma2:
  case SlidingWindowRule::kGemma3:
    break;
  }

  const SlidingWindowRule rule = model.architecture->slidingWindow;
  FailureOr<bool> enabled =
      config.getBool("use_sliding_window", rule != SlidingWindowRule::kQwen2);
  FailureOr<int64_t> window = parseWindow(config);
  if (mlir::failed(enabled) || mlir::failed(window))
    return mlir::failure();
  if (!*enabled || *window == 0)
    return mlir::success();
  if (rule != SlidingWindowRule::kQwen2 && !config.has("layer_types")) {
    // Older Gemma configs: Gemma 2 slides on the even layers, Gemma 3 on all
    // but every sliding_window_pattern-th.
    FailureOr<int64_t> pattern = config.getInt("sliding_window_pattern", 6);
    if (mlir::failed(pattern))
      return mlir::failure();
    if (*pattern <= 0)
      return config.error("sliding_window_pattern")
             << "'sliding_window_pattern' must be positive, got " << *pattern;
    for (int64_t layer = 0; layer < model.numLayers; ++layer)
      if (rule == SlidingWindowRule::kGemma2 ? layer % 2 == 0
                                             : (layer + 1) % *pattern != 0)
        model.slidingWindows[layer] = *window;
    return mlir::success();
  }

  if (const llvm::json::Value *types = config.get("layer_types")) {
    const llvm::json::Array *list = types->getAsArray();
    if (!list || static_cast<int64_t>(list->size()) != model.numLayers)
      return config.error("layer_types")
             << "'layer_types' must be a list of " << model.numLayers
             << " strings (one per layer)";
    for (auto [layer, type] : llvm::enumerate(*list)) {
      std::optional<StringRef> name = type.getAsString();
      if (!name || (*name != "sliding_attention" && *name != "full_attention"))
        return config.error("layer_types")
               << "'layer_types' entries must be \"sliding_attention\" or "
                  "\"full_attention\" (layer "
               << layer << ")";
      if (*name == "sliding_attention")
        model.slidingWindows[layer] = *window;
    }
    return mlir::success();
  }

  FailureOr<int64_t> maxWindowLayers =
      config.getInt("max_window_layers", model.numLayers);
  if (mlir::failed(maxWindowLayers))
    return mlir::failure();
  if (*maxWindowLayers < 0)
    return config.error("max_window_layers")
           << "'max_window_layers' must be >= 0, got " << *maxWindowLayers;
  for (int64_t layer = *maxWindowLayers; layer < model.numLayers; ++layer)
    model.slidingWindows[layer] = *window;
  return mlir::success();
}

/// The most decoder layers a config may declare (the largest real models
/// have a few hundred).
constexpr int64_t kMaxLayers = 1 << 16;

mlir::LogicalResult checkDimensions(const ConfigReader &config,
                                    ModelConfig &model) {
  struct Positive {
    StringRef key;
    int64_t value;
  };
  for (const Positive &dim :
       {Positive{"vocab_size", model.vocabSize},
        Positive{"hidden_size", model.hiddenSize},
        Positive{"intermediate_size", model.intermediateSize},
        Positive{"num_hidden_layers", model.numLayers},
        Positive{"num_attention_heads", model.numHeads},
        Positive{"num_key_value_heads", model.numKVHeads},
        Positive{"max_position_embeddings", model.maxPositionEmbeddings}}) {
    if (dim.value <= 0)
      return config.error(dim.key)
             << "'" << dim.key << "' must be positive, got " << dim.value;
    // Sizes index int32 batches and kernels; layers size per-layer tables.
    const int64_t limit =
        dim.key == "num_hidden_layers" ? kMaxLayers : int64_t(INT32_MAX);
    if (dim.value > limit)
      return config.error(dim.key) << "'" << dim.key << "' is " << dim.value
                                   << ", more than the limit of " << limit;
  }
  if (model.numHeads % model.numKVHeads != 0)
    return config.error("num_key_value_heads")
           << "'num_attention_heads' (" << model.numHeads
           << ") must be a multiple of 'num_key_value_heads' ("
           << model.numKVHeads << ")";
  if (model.headDim <= 0 || model.headDim % 2 != 0 || model.headDim > 65536)
    return config.error("head_dim")
           << "head_dim must be positive, even (rotary embedding) and at most "
              "65536, got "
           << model.headDim;
  if (model.rmsNormEps <= 0)
    return config.error("rms_norm_eps")
           << "'rms_norm_eps' must be positive, got " << model.rmsNormEps;
  return mlir::success();
}

/// Token ids: config.json first, generation_config.json fills in and adds
/// eos ids (HF generate() stops on the union).
mlir::LogicalResult parseTokenIds(const ConfigReader &config,
                                  const ConfigReader *generation,
                                  ModelConfig &model) {
  FailureOr<std::optional<int64_t>> bos = config.getOptionalInt("bos_token_id");
  FailureOr<std::optional<int64_t>> pad = config.getOptionalInt("pad_token_id");
  FailureOr<std::vector<int64_t>> eos = config.getIntOrIntList("eos_token_id");
  if (mlir::failed(bos) || mlir::failed(pad) || mlir::failed(eos))
    return mlir::failure();
  model.bosTokenId = *bos;
  model.padTokenId = *pad;
  model.eosTokenIds = *eos;
  if (!generation)
    return mlir::success();

  FailureOr<std::optional<int64_t>> genBos =
      generation->getOptionalInt("bos_token_id");
  FailureOr<std::optional<int64_t>> genPad =
      generation->getOptionalInt("pad_token_id");
  FailureOr<std::vector<int64_t>> genEos =
      generation->getIntOrIntList("eos_token_id");
  if (mlir::failed(genBos) || mlir::failed(genPad) || mlir::failed(genEos))
    return mlir::failure();
  if (!model.bosTokenId)
    model.bosTokenId = *genBos;
  if (!model.padTokenId)
    model.padTokenId = *genPad;
  for (int64_t id : *genEos)
    if (!llvm::is_contained(model.eosTokenIds, id))
      model.eosTokenIds.push_back(id);
  return mlir::success();
}

} // namespace

std::optional<ModelConfig> parseModelConfig(StringRef modelDir,
                                            mlir::MLIRContext &context) {
  llvm::SmallString<256> configPath(modelDir);
  llvm::sys::path::append(configPath, "config.json");
  std::optional<ParsedJson> parsed = readJsonObject(configPath, context);
  if (!parsed)
    return std::nullopt;
  ConfigReader config(parsed->file, *parsed->root.getAsObject());

  ModelConfig model;
  if (mlir::failed(parseArchitecture(config, model)))
    return std::nullopt;

  FailureOr<int64_t> vocab = config.requireInt("vocab_size");
  FailureOr<int64_t> hidden = config.requireInt("hidden_size");
  FailureOr<int64_t> intermediate = config.requireInt("intermediate_size");
  FailureOr<int64_t> layers = config.requireInt("num_hidden_layers");
  FailureOr<int64_t> heads = config.requireInt("num_attention_heads");
  FailureOr<int64_t> maxPositions =
      config.requireInt("max_position_embeddings");
  if (mlir::failed(vocab) || mlir::failed(hidden) ||
      mlir::failed(intermediate) || mlir::failed(layers) ||
      mlir::failed(heads) || mlir::failed(maxPositions))
    return std::nullopt;
  model.vocabSize = *vocab;
  model.hiddenSize = *hidden;
  model.intermediateSize = *intermediate;
  model.numLayers = *layers;
  model.numHeads = *heads;
  model.maxPositionEmbeddings = *maxPositions;
  if (model.numHeads <= 0) {
    config.error("num_attention_heads")
        << "'num_attention_heads' must be positive, got " << model.numHeads;
    return std::nullopt;
  }

  FailureOr<int64_t> kvHeads =
      config.getInt("num_key_value_heads", model.numHeads);
  FailureOr<std::optional<int64_t>> headDim = config.getOptionalInt("head_dim");
  FailureOr<double> eps = config.getNumber("rms_norm_eps", 1e-6);
  FailureOr<bool> tied = config.getBool("tie_word_embeddings", false);
  if (mlir::failed(kvHeads) || mlir::failed(headDim) || mlir::failed(eps) ||
      mlir::failed(tied))
    return std::nullopt;
  model.numKVHeads = *kvHeads;
  model.rmsNormEps = *eps;
  model.tieWordEmbeddings = *tied;
  if (*headDim) {
    model.headDim = **headDim;
  } else if (model.hiddenSize % model.numHeads != 0) {
    config.error("hidden_size")
        << "'hidden_size' (" << model.hiddenSize
        << ") is not a multiple of 'num_attention_heads' (" << model.numHeads
        << ") and config.json has no 'head_dim'";
    return std::nullopt;
  } else {
    model.headDim = model.hiddenSize / model.numHeads;
  }

  if (mlir::failed(checkDimensions(config, model)) ||
      mlir::failed(
          parseActivation(config, *model.architecture, model.hiddenAct)) ||
      mlir::failed(parseBiases(config, model)) ||
      mlir::failed(parseSlidingWindows(config, model)) ||
      mlir::failed(parseRope(config, model)) ||
      mlir::failed(parseGemma(config, model)))
    return std::nullopt;

  llvm::SmallString<256> generationPath(modelDir);
  llvm::sys::path::append(generationPath, "generation_config.json");
  std::optional<ParsedJson> generation;
  std::optional<ConfigReader> generationReader;
  if (llvm::sys::fs::exists(generationPath)) {
    generation = readJsonObject(generationPath, context);
    if (!generation)
      return std::nullopt;
    generationReader.emplace(generation->file, *generation->root.getAsObject());
  }
  if (mlir::failed(parseTokenIds(
          config, generationReader ? &*generationReader : nullptr, model)))
    return std::nullopt;
  return model;
}

} // namespace infer::frontend
