//===- JsonUtil.h - Checked reads of tokenizer.json fields ------*- C++ -*-===//
//
// Every component reads its settings through these helpers, which turn a
// missing or mistyped field into a Status naming it instead of throwing.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_TOKENIZER_JSONUTIL_H
#define INFER_RUNTIME_TOKENIZER_JSONUTIL_H

#include "runtime/support/Status.h"
#include "runtime/tokenizer/Regex.h"

#include <nlohmann/json.hpp>

#include <string>

namespace infer::tokenizer {

using Json = nlohmann::json;

/// The "type" of a component object, e.g. "BPE" or "ByteLevel".
inline StatusOr<std::string> componentType(const Json &object,
                                           const std::string &what) {
  if (!object.is_object())
    return invalidArgument(what + " is not a JSON object");
  auto it = object.find("type");
  if (it == object.end() || !it->is_string())
    return invalidArgument(what + " has no string field 'type'");
  return it->get<std::string>();
}

inline StatusOr<std::string> requireString(const Json &object,
                                           const std::string &key,
                                           const std::string &what) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string())
    return invalidArgument(what + ": field '" + key + "' must be a string");
  return it->get<std::string>();
}

inline std::string stringOr(const Json &object, const std::string &key,
                            const std::string &fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>()
                                               : fallback;
}

inline bool boolOr(const Json &object, const std::string &key, bool fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

inline int64_t intOr(const Json &object, const std::string &key,
                     int64_t fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>()
                                                       : fallback;
}

/// An array field; a missing field is an error naming it.
inline StatusOr<const Json *> requireArray(const Json &object,
                                           const std::string &key,
                                           const std::string &what) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_array())
    return invalidArgument(what + ": field '" + key + "' must be an array");
  return &*it;
}

/// Reads a {"String": s} or {"Regex": r} pattern object.
inline StatusOr<Pattern> parsePattern(const Json &object,
                                      const std::string &what) {
  if (object.is_object()) {
    auto literal = object.find("String");
    if (literal != object.end() && literal->is_string())
      return Pattern::literal(literal->get<std::string>());
    auto regex = object.find("Regex");
    if (regex != object.end() && regex->is_string()) {
      StatusOr<Pattern> pattern = Pattern::regex(regex->get<std::string>());
      if (!pattern.isOk())
        return pattern.status().withContext(what);
      return pattern;
    }
  }
  return invalidArgument(what + ": pattern must be {\"String\": ...} or "
                                "{\"Regex\": ...}");
}

} // namespace infer::tokenizer

#endif // INFER_RUNTIME_TOKENIZER_JSONUTIL_H
