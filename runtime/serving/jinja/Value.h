//===- Value.h - Values of the Jinja interpreter ----------------*- C++ -*-===//
//
// Python's values as Jinja templates see them: undefined, None, booleans,
// integers, floats, strings, lists and dicts (shared, as Python objects
// are, so a namespace() assigned in a loop is the same object outside it;
// a copy of a Value costs the same whatever it holds) and callables. Dicts
// keep insertion order (tojson and items() follow it).
//
// Only a namespace changes after it is made, and a namespace is never
// inside a list, dict or namespace (the evaluator refuses to put it
// there): so no value contains itself, and a value's depth, fixed when it
// is made, bounds the recursion of str(), equals() and toJson() on it.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SERVING_JINJA_VALUE_H
#define INFER_RUNTIME_SERVING_JINJA_VALUE_H

#include "runtime/support/Status.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace infer::serving::jinja {

/// How deep lists and dicts may nest in a value (messages included).
constexpr int kMaxValueDepth = 100;
/// Bytes of text made, copied or searched that cost one step of a render.
constexpr int64_t kBytesPerStep = 64;

class Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;
using KwArgs = std::vector<std::pair<std::string, Value>>;
using Function =
    std::function<StatusOr<Value>(const ValueList &args, const KwArgs &kw)>;

class Value {
public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kFunction
  };

  Value() = default;
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value list(ValueList items = {});
  static Value dict(ValueDict items = {});
  /// A dict whose keys are also attributes (namespace()).
  static Value ns(ValueDict items = {});
  static Value function(Function f);
  static Value fromJson(const nlohmann::json &j);

  Kind kind() const { return kind_; }
  bool isUndefined() const { return kind_ == Kind::kUndefined; }
  bool isNone() const { return kind_ == Kind::kNone; }
  bool isString() const { return kind_ == Kind::kString; }
  bool isNumber() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool isList() const { return kind_ == Kind::kList; }
  bool isDict() const { return kind_ == Kind::kDict; }
  bool isNamespace() const { return kind_ == Kind::kDict && namespace_; }
  /// Lists and dicts nested in this value, itself included: 0 for a
  /// scalar, 1 for [1, 2].
  int depth() const { return depth_; }

  bool asBool() const { return b_; }
  int64_t asInt() const { return i_; }
  double asDouble() const {
    return kind_ == Kind::kInt ? static_cast<double>(i_) : f_;
  }
  const std::string &asString() const;
  ValueList &items() const { return *list_; }
  ValueDict &entries() const { return *dict_; }
  const Function &callable() const { return *fn_; }

  /// Python truthiness (undefined is false).
  bool truthy() const;
  /// The dict entry `key`, or null.
  Value *find(const std::string &key) const;
  /// Sets a dict entry, keeping the order of existing keys.
  void set(const std::string &key, Value value) const;
  // The operations below that walk a value take `steps`, the work left to
  // the render (RenderLimits::maxSteps): they spend one step per list item
  // and dict entry and one per kBytesPerStep bytes, and stop early once it
  // is below zero (the caller then fails the render). Null: unbounded.

  /// Python's ==; false when stopped early.
  bool equals(const Value &other, int64_t *steps = nullptr) const;
  /// Appends str(value) as Jinja prints it ("" for undefined), or with
  /// `quoted` repr(value) (strings quoted, as inside a printed list);
  /// false, with `out` cut short, when `out` would pass `limit` bytes or
  /// the steps ran out.
  bool print(std::string &out, bool quoted, size_t limit,
             int64_t *steps = nullptr) const;
  /// print(), whole.
  std::string str() const;
  std::string repr() const;
  /// The type's name, for error messages.
  const char *typeName() const;
  /// Appends JSON as HF's tojson writes it: json.dumps(ensure_ascii=False)
  /// with `indent` (< 0: one line with ", " and ": "). An error for
  /// undefined and functions; kResourceExhausted when `out` would pass
  /// `limit` bytes or the steps ran out.
  Status toJson(std::string &out, int indent, size_t limit,
                int64_t *steps = nullptr, int depth = 0) const;

private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool namespace_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  int depth_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<Function> fn_;
};

} // namespace infer::serving::jinja

#endif // INFER_RUNTIME_SERVING_JINJA_VALUE_H
