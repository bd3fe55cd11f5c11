//===- Evaluator.cpp - Rendering a Jinja template -------------------------===//
//
// Filters: abs capitalize count d default first float int items join last
// length list lower replace reverse safe string title tojson trim unique
// upper. Tests: boolean callable defined divisibleby eq even false float
// integer iterable lower mapping ne none number odd sequence string true
// undefined upper, == != < > <= >=. Globals: range, namespace, dict,
// raise_exception (added by the caller), strftime_now. String methods:
// capitalize endswith find format-free join lower lstrip replace rstrip
// split startswith strip title upper; dict methods: get items keys values.
//
// Every operation pays for its work from RenderLimits::maxSteps before (or,
// walking a value, while) it does it: a step per statement, expression and
// loop iteration, per list item or dict entry made, copied or compared,
// and per kBytesPerStep bytes of text made, copied or searched. Strings
// the template makes, the output among them, stop at maxStringBytes.
//
//===----------------------------------------------------------------------===//

#include "runtime/serving/jinja/Template.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>
#include <optional>
#include <unordered_map>

namespace infer::serving::jinja {

namespace {

enum class Flow { kNormal, kBreak, kContinue };

bool isWhitespace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}

/// The steps of `bytes` bytes of text.
int64_t stepsOf(size_t bytes) {
  return static_cast<int64_t>(bytes / kBytesPerStep) + 1;
}

std::string strip(const std::string &s, const std::string *chars, bool left,
                  bool right) {
  auto strippable = [&](char c) {
    return chars ? chars->find(c) != std::string::npos : isWhitespace(c);
  };
  size_t begin = 0, end = s.size();
  if (left)
    while (begin < end && strippable(s[begin]))
      ++begin;
  if (right)
    while (end > begin && strippable(s[end - 1]))
      --end;
  return s.substr(begin, end - begin);
}

/// How many parts split() makes, counted without making them.
int64_t splitCount(const std::string &s, const std::string *sep,
                   int64_t maxSplit) {
  int64_t n = 0;
  if (sep) {
    for (size_t at = s.find(*sep);
         at != std::string::npos && (maxSplit < 0 || n < maxSplit);
         at = s.find(*sep, at + sep->size()))
      ++n;
    return n + 1;
  }
  for (size_t i = 0; i < s.size();) {
    while (i < s.size() && isWhitespace(s[i]))
      ++i;
    if (i >= s.size())
      break;
    ++n;
    if (maxSplit >= 0 && n > maxSplit)
      break;
    while (i < s.size() && !isWhitespace(s[i]))
      ++i;
  }
  return n;
}

std::vector<std::string> split(const std::string &s, const std::string *sep,
                               int64_t maxSplit) {
  std::vector<std::string> parts;
  if (sep) {
    size_t start = 0;
    while (maxSplit < 0 || static_cast<int64_t>(parts.size()) < maxSplit) {
      const size_t at = s.find(*sep, start);
      if (at == std::string::npos)
        break;
      parts.push_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    parts.push_back(s.substr(start));
    return parts;
  }
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && isWhitespace(s[i]))
      ++i;
    if (i >= s.size())
      break;
    if (maxSplit >= 0 && static_cast<int64_t>(parts.size()) >= maxSplit) {
      parts.push_back(strip(s.substr(i), nullptr, false, true));
      return parts;
    }
    size_t j = i;
    while (j < s.size() && !isWhitespace(s[j]))
      ++j;
    parts.push_back(s.substr(i, j - i));
    i = j;
  }
  return parts;
}

/// `s` with the first `count` (< 0: all) `from` replaced by `to`, or
/// nullopt once it would pass `limit` bytes. One pass: replacing in place
/// moved the rest of the string each time.
std::optional<std::string> replaceAll(const std::string &s,
                                      const std::string &from,
                                      const std::string &to, int64_t count,
                                      size_t limit) {
  if (from.empty())
    return s;
  std::string out;
  size_t start = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos)
      break;
    if (out.size() + (at - start) + to.size() > limit)
      return std::nullopt;
    out.append(s, start, at - start);
    out += to;
    start = at + from.size();
  }
  if (out.size() + (s.size() - start) > limit)
    return std::nullopt;
  out.append(s, start, std::string::npos);
  return out;
}

std::string upper(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string lower(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string capitalize(const std::string &s) {
  std::string out = lower(s);
  if (!out.empty())
    out[0] =
        static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::string title(const std::string &s) {
  std::string out = s;
  bool start = true;
  for (char &c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
      start = false;
    } else {
      start = true;
    }
  }
  return out;
}

/// The bytes of the UTF-8 character that starts with `lead` (Python
/// indexes strings by code point; a malformed sequence still counts as
/// one character of the length its first byte says).
size_t characterBytes(unsigned char lead) {
  return lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
}

/// The characters of `s`, counted without making them.
int64_t characterCount(const std::string &s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size(); i += characterBytes(s[i]))
    ++n;
  return n;
}

/// Where each character of `s` starts, then s.size().
std::vector<size_t> characterStarts(const std::string &s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); i += characterBytes(s[i]))
    starts.push_back(i);
  starts.push_back(s.size());
  return starts;
}

/// Character `i` of `s`, whose characters start at `starts`.
std::string character(const std::string &s, const std::vector<size_t> &starts,
                      size_t i) {
  return s.substr(starts[i], starts[i + 1] - starts[i]);
}

/// len(range(start, stop, step)), `step` != 0, without overflow.
uint64_t rangeLength(int64_t start, int64_t stop, int64_t step) {
  // Differences and steps as unsigned magnitudes: each fits in 64 bits.
  if (step > 0 ? start >= stop : start <= stop)
    return 0;
  const uint64_t span =
      step > 0 ? static_cast<uint64_t>(stop) - static_cast<uint64_t>(start)
               : static_cast<uint64_t>(start) - static_cast<uint64_t>(stop);
  const uint64_t stride =
      step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
  return (span - 1) / stride + 1;
}

/// Item `i` of range(start, stop, step), for i < its length.
int64_t rangeItem(int64_t start, int64_t step, uint64_t i) {
  // Two's complement wraps back into range: the item lies in [start, stop).
  return static_cast<int64_t>(static_cast<uint64_t>(start) +
                              i * static_cast<uint64_t>(step));
}

/// Python's index normalization for a sequence of `size`.
bool normalizeIndex(int64_t &i, int64_t size) {
  if (i < 0)
    i += size;
  return i >= 0 && i < size;
}

/// Python's `x op y` on integers (`y` > 0 for **, != 0 for // and %),
/// or nullopt where the result leaves int64 (Python's integers do not).
std::optional<int64_t> integerArithmetic(const std::string &op, int64_t x,
                                         int64_t y) {
  int64_t r = 0;
  if (op == "+")
    return __builtin_add_overflow(x, y, &r) ? std::nullopt
                                            : std::optional<int64_t>(r);
  if (op == "-")
    return __builtin_sub_overflow(x, y, &r) ? std::nullopt
                                            : std::optional<int64_t>(r);
  if (op == "*")
    return __builtin_mul_overflow(x, y, &r) ? std::nullopt
                                            : std::optional<int64_t>(r);
  if (op == "**") {
    // By squaring: 63 multiplications at most, whatever `y`.
    int64_t result = 1, base = x;
    for (int64_t e = y; e > 0; e >>= 1) {
      if ((e & 1) && __builtin_mul_overflow(result, base, &result))
        return std::nullopt;
      if (e > 1 && __builtin_mul_overflow(base, base, &base))
        return std::nullopt;
    }
    return result;
  }
  // Floor division and modulo; INT64_MIN // -1 is the one overflow.
  if (y == -1)
    return op == "%" ? std::optional<int64_t>(0)
           : x == std::numeric_limits<int64_t>::min()
               ? std::nullopt
               : std::optional<int64_t>(-x);
  if (op == "//") {
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0)))
      --q;
    return q;
  }
  int64_t m = x % y;
  if (m != 0 && ((m < 0) != (y < 0)))
    m += y;
  return m;
}

/// Whether `v` may go into a list, dict or namespace: anything but a
/// namespace, the one value that changes, so that no value can come to
/// contain itself (Value.h).
Status checkStorable(const Value &v) {
  if (v.isNamespace())
    return invalidArgument(
        "a namespace cannot be put in a list, dict or namespace");
  return Status::ok();
}

/// Scopes: the globals, then one per loop iteration or macro call.
class Scopes {
public:
  explicit Scopes(const ValueDict &globals) {
    frames_.emplace_back();
    for (const auto &[k, v] : globals)
      frames_.back()[k] = v;
  }
  Value lookup(const std::string &name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end())
        return found->second;
    }
    return Value();
  }
  /// Frames a lookup may read.
  int64_t size() const { return static_cast<int64_t>(frames_.size()); }
  void set(const std::string &name, Value value) {
    frames_.back()[name] = std::move(value);
  }
  void push() { frames_.emplace_back(); }
  void pop() { frames_.pop_back(); }

private:
  std::vector<std::unordered_map<std::string, Value>> frames_;
};

class Evaluator {
public:
  Evaluator(const ValueDict &globals, const RenderLimits &limits)
      : scopes_(globals), limits_(limits), stepsLeft_(limits.maxSteps) {
    defineGlobals();
  }

  StatusOr<Flow> render(const Body &body, std::string &out) {
    for (const StmtPtr &s : body) {
      INFER_ASSIGN_OR_RETURN(Flow flow, execute(*s, out));
      if (flow != Flow::kNormal)
        return flow;
    }
    return Flow::kNormal;
  }

private:
  Status error(int line, const std::string &message) const {
    return invalidArgument("line " + std::to_string(line) + ": " + message);
  }

  /// `status` with the line where it happened, unless it has one.
  Status atLine(int line, const Status &status) const {
    if (status.isOk() || status.message().rfind("line ", 0) == 0)
      return status;
    return error(line, status.message());
  }

  //===--------------------------------------------------------------------===//
  // What a render may spend (RenderLimits)
  //===--------------------------------------------------------------------===//

  Status outOfSteps() const {
    return invalidArgument(
        "the template takes more than " + std::to_string(limits_.maxSteps) +
        " steps (RenderLimits::maxSteps: statements, expressions, loop "
        "iterations, list items, and " +
        std::to_string(kBytesPerStep) + " bytes of text each)");
  }
  Status tooLong() const {
    return invalidArgument("a string or the output passes " +
                           std::to_string(limits_.maxStringBytes) +
                           " bytes (RenderLimits::maxStringBytes)");
  }

  /// Spends `steps` of the render's work.
  Status spend(int64_t steps) {
    stepsLeft_ -= steps;
    return stepsLeft_ >= 0 ? Status::ok() : outOfSteps();
  }
  /// Spends for `bytes` bytes of text made, copied or searched.
  Status spendBytes(size_t bytes) { return spend(stepsOf(bytes)); }
  /// For a string of `bytes` bytes about to be made.
  Status allowString(size_t bytes) {
    if (bytes > limits_.maxStringBytes)
      return tooLong();
    return spendBytes(bytes);
  }
  /// Appends `text` to `out`, the output or a string being made.
  Status append(std::string &out, const std::string &text) {
    if (text.size() >
        limits_.maxStringBytes - std::min(out.size(), limits_.maxStringBytes))
      return tooLong();
    INFER_RETURN_IF_ERROR(spendBytes(text.size()));
    out += text;
    return Status::ok();
  }
  /// Appends str(v) (`quoted`: repr(v)) to `out`.
  Status appendText(std::string &out, const Value &v, bool quoted = false) {
    if (v.isString() && !quoted)
      return append(out, v.asString());
    if (!v.print(out, quoted, limits_.maxStringBytes, &stepsLeft_))
      return stepsLeft_ < 0 ? outOfSteps() : tooLong();
    return Status::ok();
  }
  /// str(v).
  StatusOr<std::string> text(const Value &v) {
    std::string out;
    INFER_RETURN_IF_ERROR(appendText(out, v));
    return out;
  }
  /// a == b.
  StatusOr<bool> equal(const Value &a, const Value &b) {
    const bool same = a.equals(b, &stepsLeft_);
    if (stepsLeft_ < 0)
      return outOfSteps();
    return same;
  }
  /// A dict's entry `key`, which find() looks for among all its keys.
  StatusOr<const Value *> entry(const Value &dict, const std::string &key) {
    INFER_RETURN_IF_ERROR(
        spend(static_cast<int64_t>(dict.entries().size()) + 1));
    return dict.find(key);
  }

  //===--------------------------------------------------------------------===//
  // Globals
  //===--------------------------------------------------------------------===//

  void defineGlobals() {
    if (scopes_.lookup("range").isUndefined())
      scopes_.set("range", Value::function(
                               [this](const ValueList &args, const KwArgs &) {
                                 return range(args);
                               }));
    scopes_.set("namespace",
                Value::function([this](const ValueList &args,
                                       const KwArgs &kw) -> StatusOr<Value> {
                  ValueDict items;
                  for (const Value &a : args)
                    if (a.isDict()) {
                      INFER_RETURN_IF_ERROR(
                          spend(static_cast<int64_t>(a.entries().size())));
                      for (const auto &[k, v] : a.entries())
                        items.emplace_back(k, v);
                    }
                  INFER_RETURN_IF_ERROR(spend(static_cast<int64_t>(kw.size())));
                  for (const auto &[k, v] : kw) {
                    INFER_RETURN_IF_ERROR(checkStorable(v));
                    items.emplace_back(k, v);
                  }
                  return Value::ns(std::move(items));
                }));
    scopes_.set("dict",
                Value::function([this](const ValueList &,
                                       const KwArgs &kw) -> StatusOr<Value> {
                  INFER_RETURN_IF_ERROR(spend(static_cast<int64_t>(kw.size())));
                  for (const auto &[k, v] : kw)
                    INFER_RETURN_IF_ERROR(checkStorable(v));
                  return Value::dict(ValueDict(kw.begin(), kw.end()));
                }));
    scopes_.set(
        "strftime_now", Value::function([](const ValueList &args,
                                           const KwArgs &) -> StatusOr<Value> {
          if (args.size() != 1 || !args[0].isString())
            return invalidArgument("strftime_now(format) needs a "
                                   "format string");
          std::time_t now = std::time(nullptr);
          std::tm tm{};
          localtime_r(&now, &tm);
          char buf[256];
          const size_t n =
              std::strftime(buf, sizeof(buf), args[0].asString().c_str(), &tm);
          return Value::string(std::string(buf, n));
        }));
  }

  StatusOr<Value> range(const ValueList &args) {
    int64_t start = 0, stop = 0, step = 1;
    for (const Value &a : args)
      if (a.kind() != Value::Kind::kInt)
        return invalidArgument("range() needs integers");
    if (args.size() == 1) {
      stop = args[0].asInt();
    } else if (args.size() >= 2) {
      start = args[0].asInt();
      stop = args[1].asInt();
      if (args.size() == 3)
        step = args[2].asInt();
    } else {
      return invalidArgument("range() needs 1 to 3 arguments");
    }
    if (step == 0)
      return invalidArgument("range() step must not be zero");
    const uint64_t n = rangeLength(start, stop, step);
    if (n > static_cast<uint64_t>(std::max<int64_t>(stepsLeft_, 0)))
      return outOfSteps();
    INFER_RETURN_IF_ERROR(spend(static_cast<int64_t>(n)));
    ValueList items;
    items.reserve(n);
    for (uint64_t i = 0; i < n; ++i)
      items.push_back(Value::integer(rangeItem(start, step, i)));
    return Value::list(std::move(items));
  }

  //===--------------------------------------------------------------------===//
  // Statements
  //===--------------------------------------------------------------------===//

  /// One more level of the evaluator's recursion while it lives.
  class Level {
  public:
    explicit Level(int64_t &depth) : depth_(depth) { ++depth_; }
    ~Level() { --depth_; }
    Level(const Level &) = delete;
    Level &operator=(const Level &) = delete;

  private:
    int64_t &depth_;
  };
  Status checkDepth(int line) const {
    if (depth_ <= limits_.maxDepth)
      return Status::ok();
    return error(line, "statements and expressions evaluated more than " +
                           std::to_string(limits_.maxDepth) +
                           " deep (a macro that calls itself?)");
  }

  StatusOr<Flow> execute(const Stmt &s, std::string &out) {
    Level level(depth_);
    INFER_RETURN_IF_ERROR(checkDepth(s.line));
    INFER_RETURN_IF_ERROR(atLine(s.line, spend(1)));
    StatusOr<Flow> flow = executeStatement(s, out);
    if (!flow.isOk())
      return atLine(s.line, flow.status());
    return flow;
  }

  StatusOr<Flow> executeStatement(const Stmt &s, std::string &out) {
    switch (s.kind) {
    case Stmt::Kind::kText:
      INFER_RETURN_IF_ERROR(append(out, s.text));
      return Flow::kNormal;
    case Stmt::Kind::kOutput:
      return executeOutput(s, out);
    case Stmt::Kind::kIf:
      return executeIf(s, out);
    case Stmt::Kind::kFor:
      return executeFor(s, out);
    case Stmt::Kind::kSet:
      return executeSet(s);
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
    case Stmt::Kind::kMacro: {
      const Stmt *macro = &s;
      scopes_.set(
          s.text,
          Value::function([this, macro](const ValueList &args,
                                        const KwArgs &kw) -> StatusOr<Value> {
            return callMacro(*macro, args, kw);
          }));
      return Flow::kNormal;
    }
    }
    return Flow::kNormal;
  }

  [[gnu::noinline]] StatusOr<Flow> executeOutput(const Stmt &s,
                                                 std::string &out) {
    INFER_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
    INFER_RETURN_IF_ERROR(appendText(out, v));
    return Flow::kNormal;
  }

  [[gnu::noinline]] StatusOr<Flow> executeIf(const Stmt &s, std::string &out) {
    for (const auto &[cond, body] : s.branches) {
      bool take = true;
      if (cond) {
        INFER_ASSIGN_OR_RETURN(Value c, eval(*cond));
        take = c.truthy();
      }
      if (take)
        return render(body, out);
    }
    return Flow::kNormal;
  }

  [[gnu::noinline]] StatusOr<Flow> executeSet(const Stmt &s) {
    Value value;
    if (s.expr) {
      INFER_ASSIGN_OR_RETURN(value, eval(*s.expr));
    } else {
      std::string captured;
      INFER_ASSIGN_OR_RETURN(Flow flow, render(s.body, captured));
      (void)flow;
      value = Value::string(std::move(captured));
    }
    if (!s.attribute.empty()) {
      Value target = scopes_.lookup(s.targets[0]);
      if (!target.isNamespace())
        return error(s.line, "cannot set attribute '" + s.attribute + "' of '" +
                                 s.targets[0] + "', which is not a namespace");
      INFER_RETURN_IF_ERROR(checkStorable(value));
      // set() looks for the attribute among the namespace's entries.
      INFER_RETURN_IF_ERROR(
          spend(static_cast<int64_t>(target.entries().size()) + 1));
      target.set(s.attribute, std::move(value));
    } else if (s.targets.size() == 1) {
      scopes_.set(s.targets[0], std::move(value));
    } else {
      INFER_RETURN_IF_ERROR(unpack(s.line, s.targets, value));
    }
    return Flow::kNormal;
  }

  [[gnu::noinline]] StatusOr<Value>
  callMacro(const Stmt &macro, const ValueList &args, const KwArgs &kw) {
    if (args.size() > macro.params.size())
      return invalidArgument("macro '" + macro.text + "' takes " +
                             std::to_string(macro.params.size()) +
                             " arguments");
    INFER_RETURN_IF_ERROR(
        spend(static_cast<int64_t>(macro.params.size() * (kw.size() + 1))));
    scopes_.push();
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const auto &[name, fallback] = macro.params[i];
      Value value;
      if (i < args.size()) {
        value = args[i];
      } else {
        auto it = std::find_if(kw.begin(), kw.end(),
                               [&](const auto &p) { return p.first == name; });
        if (it != kw.end()) {
          value = it->second;
        } else if (fallback) {
          StatusOr<Value> v = eval(*fallback);
          if (!v.isOk()) {
            scopes_.pop();
            return v.status();
          }
          value = *v;
        }
      }
      scopes_.set(name, std::move(value));
    }
    std::string out;
    StatusOr<Flow> flow = render(macro.body, out);
    scopes_.pop();
    if (!flow.isOk())
      return flow.status();
    return Value::string(std::move(out));
  }

  Status unpack(int line, const std::vector<std::string> &targets,
                const Value &value) {
    if (!value.isList() || value.items().size() != targets.size())
      return error(line, "cannot unpack " + std::string(value.typeName()) +
                             " into " + std::to_string(targets.size()) +
                             " names");
    for (size_t i = 0; i < targets.size(); ++i)
      scopes_.set(targets[i], value.items()[i]);
    return Status::ok();
  }

  /// The items a for loop (or a filter) walks: a list's items, a dict's
  /// keys, a string's characters.
  StatusOr<ValueList> iterate(int line, const Value &v) {
    if (v.isList()) {
      INFER_RETURN_IF_ERROR(spend(static_cast<int64_t>(v.items().size())));
      return v.items();
    }
    if (v.isDict()) {
      ValueList keys;
      for (const auto &[k, value] : v.entries()) {
        INFER_RETURN_IF_ERROR(spend(1 + stepsOf(k.size())));
        keys.push_back(Value::string(k));
      }
      return keys;
    }
    if (v.isString()) {
      const std::string &s = v.asString();
      INFER_RETURN_IF_ERROR(spend(characterCount(s) + stepsOf(s.size())));
      const std::vector<size_t> starts = characterStarts(s);
      ValueList chars;
      chars.reserve(starts.size() - 1);
      for (size_t i = 0; i + 1 < starts.size(); ++i)
        chars.push_back(Value::string(character(s, starts, i)));
      return chars;
    }
    if (v.isUndefined() || v.isNone())
      return error(line, std::string("cannot iterate over ") +
                             (v.isNone() ? "None" : "an undefined value"));
    return error(line, std::string("cannot iterate over ") + v.typeName());
  }

  [[gnu::noinline]] StatusOr<Flow> executeFor(const Stmt &s, std::string &out) {
    INFER_ASSIGN_OR_RETURN(Value iterable, eval(*s.expr));
    INFER_ASSIGN_OR_RETURN(ValueList all, iterate(s.line, iterable));
    ValueList items;
    if (s.filter) {
      for (const Value &item : all) {
        INFER_RETURN_IF_ERROR(spend(1));
        scopes_.push();
        Status st = bind(s, item);
        StatusOr<Value> keep =
            st.isOk() ? eval(*s.filter) : StatusOr<Value>(st);
        scopes_.pop();
        if (!keep.isOk())
          return keep.status();
        if (keep->truthy())
          items.push_back(item);
      }
    } else {
      items = std::move(all);
    }
    if (items.empty())
      return render(s.elseBody, out);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      // The scope and the loop object's nine entries.
      INFER_RETURN_IF_ERROR(spend(10));
      scopes_.push();
      Value loop = Value::dict(
          {{"index0", Value::integer(i)},
           {"index", Value::integer(i + 1)},
           {"revindex0", Value::integer(n - i - 1)},
           {"revindex", Value::integer(n - i)},
           {"first", Value::boolean(i == 0)},
           {"last", Value::boolean(i == n - 1)},
           {"length", Value::integer(n)},
           {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value()},
           {"nextitem",
            i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value()}});
      scopes_.set("loop", loop);
      Status st = bind(s, items[static_cast<size_t>(i)]);
      StatusOr<Flow> flow =
          st.isOk() ? render(s.body, out) : StatusOr<Flow>(st);
      scopes_.pop();
      if (!flow.isOk())
        return flow.status();
      if (*flow == Flow::kBreak)
        break;
    }
    return Flow::kNormal;
  }

  Status bind(const Stmt &s, const Value &item) {
    if (s.targets.size() == 1) {
      scopes_.set(s.targets[0], item);
      return Status::ok();
    }
    return unpack(s.line, s.targets, item);
  }

  //===--------------------------------------------------------------------===//
  // Expressions
  //===--------------------------------------------------------------------===//

  StatusOr<Value> eval(const Expr &e) {
    Level level(depth_);
    INFER_RETURN_IF_ERROR(checkDepth(e.line));
    INFER_RETURN_IF_ERROR(atLine(e.line, spend(1)));
    StatusOr<Value> v = evalExpression(e);
    if (!v.isOk())
      return atLine(e.line, v.status());
    if (v->depth() > kMaxValueDepth)
      return error(e.line, "lists and dicts nested more than " +
                               std::to_string(kMaxValueDepth) + " deep");
    return v;
  }

  // Each kind of node is evaluated by a function of its own, kept out of
  // line: the recursion then holds only the frames of the kinds on its
  // path, not one frame with every kind's locals (about 17 KB each under
  // ASan), and RenderLimits::maxDepth stays within the stack.
  StatusOr<Value> evalExpression(const Expr &e) {
    switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      INFER_RETURN_IF_ERROR(spend(scopes_.size()));
      return scopes_.lookup(e.name);
    case Expr::Kind::kList:
      return evalList(e);
    case Expr::Kind::kDict:
      return evalDict(e);
    case Expr::Kind::kAttribute:
    case Expr::Kind::kIndex:
      return evalSubscript(e);
    case Expr::Kind::kSlice:
      return slice(e);
    case Expr::Kind::kCall:
      return evalCall(e);
    case Expr::Kind::kFilter:
    case Expr::Kind::kTest:
      return evalFilterOrTest(e);
    case Expr::Kind::kUnary:
      return evalUnary(e);
    case Expr::Kind::kBinary:
      return binary(e);
    case Expr::Kind::kTernary:
      return evalTernary(e);
    }
    return Value();
  }

  [[gnu::noinline]] StatusOr<Value> evalList(const Expr &e) {
    ValueList items;
    for (const ExprPtr &a : e.args) {
      INFER_ASSIGN_OR_RETURN(Value v, eval(*a));
      INFER_RETURN_IF_ERROR(checkStorable(v));
      items.push_back(std::move(v));
    }
    return Value::list(std::move(items));
  }

  [[gnu::noinline]] StatusOr<Value> evalDict(const Expr &e) {
    Value d = Value::dict();
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      INFER_ASSIGN_OR_RETURN(Value k, eval(*e.args[i]));
      INFER_ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1]));
      if (!k.isString())
        return error(e.line, "dict keys must be strings");
      INFER_RETURN_IF_ERROR(checkStorable(v));
      INFER_RETURN_IF_ERROR(
          spend(static_cast<int64_t>(d.entries().size()) + 1));
      d.set(k.asString(), std::move(v));
    }
    // Made again from its entries: set() leaves the depth as it was.
    return Value::dict(std::move(d.entries()));
  }

  [[gnu::noinline]] StatusOr<Value> evalSubscript(const Expr &e) {
    INFER_ASSIGN_OR_RETURN(Value object, eval(*e.args[0]));
    if (e.kind == Expr::Kind::kAttribute)
      return attribute(e.line, object, e.name);
    INFER_ASSIGN_OR_RETURN(Value key, eval(*e.args[1]));
    return index(e.line, object, key);
  }

  [[gnu::noinline]] StatusOr<Value> evalCall(const Expr &e) {
    INFER_ASSIGN_OR_RETURN(Value callee, eval(*e.args[0]));
    if (callee.kind() != Value::Kind::kFunction)
      return error(e.line, std::string("cannot call ") +
                               (callee.isUndefined() ? "an undefined value"
                                                     : callee.typeName()));
    ValueList args;
    KwArgs kw;
    INFER_RETURN_IF_ERROR(arguments(e, 1, args, kw));
    return callee.callable()(args, kw);
  }

  [[gnu::noinline]] StatusOr<Value> evalFilterOrTest(const Expr &e) {
    INFER_ASSIGN_OR_RETURN(Value value, eval(*e.args[0]));
    ValueList args;
    KwArgs kw;
    INFER_RETURN_IF_ERROR(arguments(e, 1, args, kw));
    if (e.kind == Expr::Kind::kFilter)
      return filter(e.line, e.name, value, args, kw);
    INFER_ASSIGN_OR_RETURN(bool result, test(e.line, e.name, value, args));
    return Value::boolean(result != e.negate);
  }

  [[gnu::noinline]] StatusOr<Value> evalUnary(const Expr &e) {
    INFER_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
    if (e.name == "not")
      return Value::boolean(!v.truthy());
    if (v.kind() == Value::Kind::kInt) {
      if (e.name == "-" && v.asInt() == std::numeric_limits<int64_t>::min())
        return error(e.line, "integer overflow in -" + v.repr());
      return Value::integer(e.name == "-" ? -v.asInt() : v.asInt());
    }
    if (v.kind() == Value::Kind::kFloat)
      return Value::floating(e.name == "-" ? -v.asDouble() : v.asDouble());
    return error(e.line,
                 "bad operand type for unary " + e.name + ": " + v.typeName());
  }

  [[gnu::noinline]] StatusOr<Value> evalTernary(const Expr &e) {
    INFER_ASSIGN_OR_RETURN(Value cond, eval(*e.args[1]));
    if (cond.truthy())
      return eval(*e.args[0]);
    if (e.args[2])
      return eval(*e.args[2]);
    return Value();
  }

  Status arguments(const Expr &e, size_t first, ValueList &args, KwArgs &kw) {
    for (size_t i = first; i < e.args.size(); ++i) {
      INFER_ASSIGN_OR_RETURN(Value v, eval(*e.args[i]));
      args.push_back(std::move(v));
    }
    for (const auto &[name, expr] : e.kwargs) {
      INFER_ASSIGN_OR_RETURN(Value v, eval(*expr));
      kw.emplace_back(name, std::move(v));
    }
    return Status::ok();
  }

  StatusOr<Value> index(int line, const Value &object, const Value &key) {
    if (object.isDict()) {
      if (!key.isString())
        return Value();
      INFER_ASSIGN_OR_RETURN(const Value *v, entry(object, key.asString()));
      return v ? *v : Value();
    }
    if (key.kind() == Value::Kind::kInt &&
        (object.isList() || object.isString())) {
      int64_t i = key.asInt();
      if (object.isList()) {
        if (!normalizeIndex(i, static_cast<int64_t>(object.items().size())))
          return Value();
        return object.items()[static_cast<size_t>(i)];
      }
      // Walked to, not indexed: characters have different lengths.
      const std::string &s = object.asString();
      INFER_RETURN_IF_ERROR(spend(2 * stepsOf(s.size())));
      if (!normalizeIndex(i, i < 0 ? characterCount(s) : INT64_MAX))
        return Value();
      size_t at = 0;
      for (; at < s.size() && i > 0; --i)
        at += characterBytes(s[at]);
      if (at >= s.size())
        return Value();
      return Value::string(s.substr(at, characterBytes(s[at])));
    }
    if (key.isString())
      return attribute(line, object, key.asString());
    if (object.isUndefined())
      return error(line, "cannot index an undefined value");
    return Value();
  }

  [[gnu::noinline]] StatusOr<Value> slice(const Expr &e) {
    INFER_ASSIGN_OR_RETURN(Value object, eval(*e.args[0]));
    std::optional<int64_t> parts[3];
    for (int i = 0; i < 3; ++i) {
      if (!e.args[i + 1])
        continue;
      INFER_ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1]));
      if (v.isNone())
        continue;
      if (v.kind() != Value::Kind::kInt)
        return error(e.line, "slice indices must be integers");
      parts[i] = v.asInt();
    }
    const int64_t step = parts[2].value_or(1);
    if (step == 0)
      return error(e.line, "slice step cannot be zero");
    int64_t size = 0;
    std::vector<size_t> starts;
    if (object.isList()) {
      size = static_cast<int64_t>(object.items().size());
    } else if (object.isString()) {
      // Where each character starts: 8 bytes a character, paid for.
      const std::string &s = object.asString();
      INFER_RETURN_IF_ERROR(spend(characterCount(s) / 8 + stepsOf(s.size())));
      starts = characterStarts(s);
      size = static_cast<int64_t>(starts.size() - 1);
    } else {
      return error(e.line, std::string("cannot slice ") + object.typeName());
    }
    auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
      if (!v)
        return fallback;
      int64_t i = *v < 0 ? *v + size : *v;
      if (step > 0)
        return std::clamp<int64_t>(i, 0, size);
      return std::clamp<int64_t>(i, -1, size - 1);
    };
    const int64_t start = clamp(parts[0], step > 0 ? 0 : size - 1);
    const int64_t stop = clamp(parts[1], step > 0 ? size : -1);
    const uint64_t n = rangeLength(start, stop, step);
    INFER_RETURN_IF_ERROR(spend(static_cast<int64_t>(n)));
    if (object.isList()) {
      ValueList items;
      items.reserve(n);
      for (uint64_t i = 0; i < n; ++i)
        items.push_back(
            object.items()[static_cast<size_t>(rangeItem(start, step, i))]);
      return Value::list(std::move(items));
    }
    std::string s;
    for (uint64_t i = 0; i < n; ++i)
      s += character(object.asString(), starts,
                     static_cast<size_t>(rangeItem(start, step, i)));
    return Value::string(std::move(s));
  }

  StatusOr<Value> attribute(int line, const Value &object,
                            const std::string &name) {
    if (object.isDict()) {
      INFER_ASSIGN_OR_RETURN(const Value *v, entry(object, name));
      if (v)
        return *v;
      if (!object.isNamespace())
        if (std::optional<Value> m = dictMethod(object, name))
          return *m;
      return Value();
    }
    if (object.isString())
      if (std::optional<Value> m = stringMethod(object, name))
        return *m;
    if (object.isUndefined())
      return error(line, "'" + name + "' of an undefined value");
    return Value();
  }

  std::optional<Value> dictMethod(const Value &dict, const std::string &name) {
    if (name == "items" || name == "keys" || name == "values")
      return Value::function(
          [this, dict, name](const ValueList &,
                             const KwArgs &) -> StatusOr<Value> {
            ValueList out;
            for (const auto &[k, v] : dict.entries()) {
              INFER_RETURN_IF_ERROR(spend(1 + stepsOf(k.size())));
              if (name == "items")
                out.push_back(Value::list({Value::string(k), v}));
              else if (name == "keys")
                out.push_back(Value::string(k));
              else
                out.push_back(v);
            }
            return Value::list(std::move(out));
          });
    if (name == "get")
      return Value::function([this, dict](const ValueList &args,
                                          const KwArgs &) -> StatusOr<Value> {
        if (args.empty())
          return invalidArgument("get() needs a key");
        const Value *v = nullptr;
        if (args[0].isString()) {
          INFER_ASSIGN_OR_RETURN(v, entry(dict, args[0].asString()));
        }
        if (v)
          return *v;
        return args.size() > 1 ? args[1] : Value::none();
      });
    return std::nullopt;
  }

  static const std::string *optionalString(const ValueList &args, size_t i) {
    return i < args.size() && args[i].isString() ? &args[i].asString()
                                                 : nullptr;
  }

  /// The string `str`'s method `name`, holding `str` (a shared string).
  std::optional<Value> stringMethod(const Value &str, const std::string &name) {
    auto method = [](auto body) { return Value::function(body); };
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return method([this, str, name](const ValueList &args,
                                      const KwArgs &) -> StatusOr<Value> {
        INFER_RETURN_IF_ERROR(spendBytes(str.asString().size()));
        return Value::string(strip(str.asString(), optionalString(args, 0),
                                   name != "rstrip", name != "lstrip"));
      });
    if (name == "startswith" || name == "endswith")
      return method([this, str, name](const ValueList &args,
                                      const KwArgs &) -> StatusOr<Value> {
        const std::string &s = str.asString();
        if (args.empty())
          return invalidArgument(name + "() needs an argument");
        const ValueList options =
            args[0].isList() ? args[0].items() : ValueList{args[0]};
        for (const Value &o : options) {
          if (!o.isString())
            return invalidArgument(name + "() needs strings");
          const std::string &p = o.asString();
          INFER_RETURN_IF_ERROR(spendBytes(p.size()));
          if (p.size() <= s.size() &&
              (name == "startswith"
                   ? s.compare(0, p.size(), p) == 0
                   : s.compare(s.size() - p.size(), p.size(), p) == 0))
            return Value::boolean(true);
        }
        return Value::boolean(false);
      });
    if (name == "split")
      return method([this, str](const ValueList &args,
                                const KwArgs &kw) -> StatusOr<Value> {
        const std::string &s = str.asString();
        int64_t maxSplit = -1;
        if (args.size() > 1 && args[1].kind() == Value::Kind::kInt)
          maxSplit = args[1].asInt();
        for (const auto &[k, v] : kw)
          if (k == "maxsplit" && v.kind() == Value::Kind::kInt)
            maxSplit = v.asInt();
        const std::string *sep = optionalString(args, 0);
        if (sep && sep->empty())
          return invalidArgument("empty separator");
        // Counted first, then paid for, then made: the parts are the cost.
        INFER_RETURN_IF_ERROR(
            spend(stepsOf(s.size()) * (sep ? stepsOf(sep->size()) : 1)));
        INFER_RETURN_IF_ERROR(spend(splitCount(s, sep, maxSplit)));
        std::vector<std::string> pieces = split(s, sep, maxSplit);
        ValueList parts;
        for (std::string &p : pieces)
          parts.push_back(Value::string(std::move(p)));
        return Value::list(std::move(parts));
      });
    if (name == "upper" || name == "lower" || name == "title" ||
        name == "capitalize")
      return method([this, str, name](const ValueList &,
                                      const KwArgs &) -> StatusOr<Value> {
        const std::string &s = str.asString();
        INFER_RETURN_IF_ERROR(allowString(s.size()));
        return Value::string(name == "upper"   ? upper(s)
                             : name == "lower" ? lower(s)
                             : name == "title" ? title(s)
                                               : capitalize(s));
      });
    if (name == "replace")
      return method([this, str](const ValueList &args,
                                const KwArgs &) -> StatusOr<Value> {
        if (args.size() < 2 || !args[0].isString() || !args[1].isString())
          return invalidArgument("replace() needs two strings");
        return replace(str.asString(), args[0].asString(), args[1].asString(),
                       args.size() > 2 ? args[2].asInt() : -1);
      });
    if (name == "find")
      return method([this, str](const ValueList &args,
                                const KwArgs &) -> StatusOr<Value> {
        const std::string &s = str.asString();
        if (args.empty() || !args[0].isString())
          return invalidArgument("find() needs a string");
        INFER_RETURN_IF_ERROR(search(s, args[0].asString()));
        const size_t at = s.find(args[0].asString());
        return Value::integer(
            at == std::string::npos ? -1 : static_cast<int64_t>(at));
      });
    if (name == "join")
      return method([this, str](const ValueList &args,
                                const KwArgs &) -> StatusOr<Value> {
        if (args.empty() || !args[0].isList())
          return invalidArgument("join() needs a list");
        return join(args[0].items(), str.asString());
      });
    return std::nullopt;
  }

  /// Spends for looking for `needle` in `haystack`, which std::string::find
  /// does in up to |haystack| * |needle| comparisons.
  Status search(const std::string &haystack, const std::string &needle) {
    return spend(stepsOf(haystack.size()) * stepsOf(needle.size()));
  }

  /// str.replace(from, to, count).
  StatusOr<Value> replace(const std::string &s, const std::string &from,
                          const std::string &to, int64_t count) {
    INFER_RETURN_IF_ERROR(search(s, from));
    std::optional<std::string> out =
        replaceAll(s, from, to, count, limits_.maxStringBytes);
    if (!out)
      return tooLong();
    INFER_RETURN_IF_ERROR(spendBytes(out->size()));
    return Value::string(std::move(*out));
  }

  /// The str() of `items` joined by `separator`.
  StatusOr<Value> join(const ValueList &items, const std::string &separator) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i)
        INFER_RETURN_IF_ERROR(append(out, separator));
      INFER_RETURN_IF_ERROR(appendText(out, items[i]));
    }
    return Value::string(std::move(out));
  }

  [[gnu::noinline]] StatusOr<Value> binary(const Expr &e) {
    INFER_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
    if (e.name == "and")
      return a.truthy() ? eval(*e.args[1]) : StatusOr<Value>(a);
    if (e.name == "or")
      return a.truthy() ? StatusOr<Value>(a) : eval(*e.args[1]);
    INFER_ASSIGN_OR_RETURN(Value b, eval(*e.args[1]));
    return applyBinary(e, a, b);
  }

  /// `a op b` of evaluated operands.
  [[gnu::noinline]] StatusOr<Value> applyBinary(const Expr &e, const Value &a,
                                                const Value &b) {
    const std::string &op = e.name;
    if (op == "~") {
      std::string out;
      INFER_RETURN_IF_ERROR(appendText(out, a));
      INFER_RETURN_IF_ERROR(appendText(out, b));
      return Value::string(std::move(out));
    }
    if (op == "==" || op == "!=") {
      INFER_ASSIGN_OR_RETURN(bool same, equal(a, b));
      return Value::boolean(same == (op == "=="));
    }
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.isString() && a.isString()) {
        INFER_RETURN_IF_ERROR(search(b.asString(), a.asString()));
        found = b.asString().find(a.asString()) != std::string::npos;
      } else if (b.isList()) {
        for (const Value &item : b.items()) {
          INFER_ASSIGN_OR_RETURN(found, equal(item, a));
          if (found)
            break;
        }
      } else if (b.isDict()) {
        if (a.isString()) {
          INFER_ASSIGN_OR_RETURN(const Value *v, entry(b, a.asString()));
          found = v != nullptr;
        }
      } else {
        return error(e.line, std::string("'in' needs a string, list or dict, "
                                         "not ") +
                                 b.typeName());
      }
      return Value::boolean(found == (op == "in"));
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp = 0;
      if (a.isNumber() && b.isNumber()) {
        cmp = a.asDouble() < b.asDouble() ? -1 : a.asDouble() > b.asDouble();
      } else if (a.isString() && b.isString()) {
        INFER_RETURN_IF_ERROR(
            spendBytes(std::min(a.asString().size(), b.asString().size())));
        cmp = a.asString().compare(b.asString());
      } else {
        return error(e.line, "cannot compare " + std::string(a.typeName()) +
                                 " and " + b.typeName());
      }
      return Value::boolean(op == "<"    ? cmp < 0
                            : op == ">"  ? cmp > 0
                            : op == "<=" ? cmp <= 0
                                         : cmp >= 0);
    }
    if (op == "+") {
      if (a.isString() && b.isString()) {
        std::string out;
        INFER_RETURN_IF_ERROR(append(out, a.asString()));
        INFER_RETURN_IF_ERROR(append(out, b.asString()));
        return Value::string(std::move(out));
      }
      if (a.isList() && b.isList()) {
        INFER_RETURN_IF_ERROR(
            spend(static_cast<int64_t>(a.items().size() + b.items().size())));
        ValueList items = a.items();
        items.insert(items.end(), b.items().begin(), b.items().end());
        return Value::list(std::move(items));
      }
    }
    if (op == "*" && a.isString() && b.kind() == Value::Kind::kInt)
      return repeat(a.asString(), b.asInt());
    auto isNumeric = [](const Value &v) {
      return v.isNumber() || v.kind() == Value::Kind::kBool;
    };
    if (!isNumeric(a) || !isNumeric(b))
      return error(e.line, "unsupported operand types for " + op + ": " +
                               a.typeName() + " and " + b.typeName());
    auto num = [](const Value &v) {
      return v.kind() == Value::Kind::kBool ? static_cast<double>(v.asBool())
                                            : v.asDouble();
    };
    auto integral = [](const Value &v) {
      return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool;
    };
    auto intOf = [](const Value &v) {
      return v.kind() == Value::Kind::kBool ? static_cast<int64_t>(v.asBool())
                                            : v.asInt();
    };
    const bool ints = integral(a) && integral(b);
    if (op == "/") {
      if (num(b) == 0)
        return error(e.line, "division by zero");
      return Value::floating(num(a) / num(b));
    }
    if ((op == "//" || op == "%") && num(b) == 0)
      return error(e.line, "division by zero");
    if (ints && (op != "**" || intOf(b) >= 0)) {
      std::optional<int64_t> r = integerArithmetic(op, intOf(a), intOf(b));
      if (!r)
        return error(e.line, "integer overflow in " + a.repr() + " " + op +
                                 " " + b.repr());
      return Value::integer(*r);
    }
    const double x = num(a), y = num(b);
    if (op == "+")
      return Value::floating(x + y);
    if (op == "-")
      return Value::floating(x - y);
    if (op == "*")
      return Value::floating(x * y);
    if (op == "//")
      return Value::floating(std::floor(x / y));
    if (op == "%")
      return Value::floating(x - std::floor(x / y) * y);
    if (op == "**")
      return Value::floating(std::pow(x, y));
    return error(e.line, "unsupported operator " + op);
  }

  /// `s * times`: its size checked before it is made.
  StatusOr<Value> repeat(const std::string &s, int64_t times) {
    if (times <= 0 || s.empty())
      return Value::string("");
    if (static_cast<uint64_t>(times) > limits_.maxStringBytes / s.size())
      return tooLong();
    const size_t bytes = s.size() * static_cast<size_t>(times);
    INFER_RETURN_IF_ERROR(allowString(bytes));
    std::string out;
    out.reserve(bytes);
    for (int64_t i = 0; i < times; ++i)
      out += s;
    return Value::string(std::move(out));
  }

  [[gnu::noinline]] StatusOr<Value> filter(int line, const std::string &name,
                                           const Value &v,
                                           const ValueList &args,
                                           const KwArgs &kw) {
    auto kwarg = [&](const char *key, size_t position) -> const Value * {
      for (const auto &[k, value] : kw)
        if (k == key)
          return &value;
      return position < args.size() ? &args[position] : nullptr;
    };
    if (name == "trim") {
      const std::string *chars = optionalString(args, 0);
      INFER_ASSIGN_OR_RETURN(std::string s, text(v));
      return Value::string(strip(s, chars, true, true));
    }
    if (name == "length" || name == "count") {
      if (v.isString()) {
        INFER_RETURN_IF_ERROR(spendBytes(v.asString().size()));
        return Value::integer(characterCount(v.asString()));
      }
      if (v.isList())
        return Value::integer(static_cast<int64_t>(v.items().size()));
      if (v.isDict())
        return Value::integer(static_cast<int64_t>(v.entries().size()));
      return error(line, std::string("length of ") + v.typeName());
    }
    if (name == "tojson")
      return toJson(line, v, kwarg("indent", 0));
    if (name == "upper" || name == "lower" || name == "capitalize" ||
        name == "title" || name == "string") {
      INFER_ASSIGN_OR_RETURN(std::string s, text(v));
      INFER_RETURN_IF_ERROR(spendBytes(s.size()));
      return Value::string(name == "upper"        ? upper(std::move(s))
                           : name == "lower"      ? lower(std::move(s))
                           : name == "capitalize" ? capitalize(s)
                           : name == "title"      ? title(s)
                                                  : std::move(s));
    }
    if (name == "safe")
      return v;
    if (name == "int") {
      if (v.kind() == Value::Kind::kInt)
        return v;
      if (v.kind() == Value::Kind::kFloat) {
        // Python's int() of a float, which truncates; NaN is jinja2's
        // default 0. 2^63 is the first double past int64.
        const double f = v.asDouble();
        if (std::isnan(f))
          return Value::integer(0);
        if (!(f > -9223372036854775808.0 - 1024 && f < 9223372036854775808.0))
          return error(line, "integer overflow in int(" + v.repr() + ")");
        return Value::integer(static_cast<int64_t>(f));
      }
      if (v.isString()) {
        INFER_RETURN_IF_ERROR(spendBytes(v.asString().size()));
        char *end = nullptr;
        const long long i = std::strtoll(v.asString().c_str(), &end, 10);
        return Value::integer(end && *end == 0 ? i : 0);
      }
      return Value::integer(0);
    }
    if (name == "float") {
      if (v.isNumber())
        return Value::floating(v.asDouble());
      if (v.isString()) {
        INFER_RETURN_IF_ERROR(spendBytes(v.asString().size()));
        return Value::floating(std::strtod(v.asString().c_str(), nullptr));
      }
      return Value::floating(0.0);
    }
    if (name == "abs") {
      if (v.kind() == Value::Kind::kInt) {
        if (v.asInt() == std::numeric_limits<int64_t>::min())
          return error(line, "integer overflow in abs(" + v.repr() + ")");
        return Value::integer(std::llabs(v.asInt()));
      }
      if (v.kind() == Value::Kind::kFloat)
        return Value::floating(std::fabs(v.asDouble()));
      return error(line, std::string("abs of ") + v.typeName());
    }
    if (name == "default" || name == "d") {
      const Value *fallback = kwarg("default_value", 0);
      const Value *boolean = kwarg("boolean", 1);
      const bool useFallback =
          boolean && boolean->truthy() ? !v.truthy() : v.isUndefined();
      if (useFallback)
        return fallback ? *fallback : Value::string("");
      return v;
    }
    if (name == "join") {
      std::string separator;
      if (const Value *sep = kwarg("d", 0)) {
        INFER_ASSIGN_OR_RETURN(separator, text(*sep));
      }
      INFER_ASSIGN_OR_RETURN(ValueList items, iterate(line, v));
      return join(items, separator);
    }
    if (name == "first" || name == "last") {
      INFER_ASSIGN_OR_RETURN(ValueList items, iterate(line, v));
      if (items.empty())
        return Value();
      return name == "first" ? items.front() : items.back();
    }
    if (name == "list") {
      INFER_ASSIGN_OR_RETURN(ValueList items, iterate(line, v));
      return Value::list(std::move(items));
    }
    if (name == "reverse") {
      if (v.isString()) {
        const std::string &s = v.asString();
        INFER_RETURN_IF_ERROR(
            spend(characterCount(s) / 8 + 2 * stepsOf(s.size())));
        const std::vector<size_t> starts = characterStarts(s);
        std::string out;
        out.reserve(s.size());
        for (size_t i = starts.size() - 1; i > 0; --i)
          out += character(s, starts, i - 1);
        return Value::string(std::move(out));
      }
      INFER_ASSIGN_OR_RETURN(ValueList items, iterate(line, v));
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    }
    if (name == "unique") {
      INFER_ASSIGN_OR_RETURN(ValueList items, iterate(line, v));
      ValueList out;
      for (const Value &item : items) {
        bool seen = false;
        for (const Value &o : out) {
          INFER_ASSIGN_OR_RETURN(seen, equal(o, item));
          if (seen)
            break;
        }
        if (!seen)
          out.push_back(item);
      }
      return Value::list(std::move(out));
    }
    if (name == "items") {
      if (!v.isDict())
        return error(line, std::string("items of ") + v.typeName());
      return dictMethod(v, "items")->callable()({}, {});
    }
    if (name == "replace") {
      if (args.size() < 2 || !args[0].isString() || !args[1].isString())
        return error(line, "replace needs two strings");
      INFER_ASSIGN_OR_RETURN(std::string s, text(v));
      return replace(s, args[0].asString(), args[1].asString(),
                     args.size() > 2 ? args[2].asInt() : -1);
    }
    return error(line, "unsupported Jinja filter '" + name + "'");
  }

  /// v | tojson(indent).
  StatusOr<Value> toJson(int line, const Value &v, const Value *indentArg) {
    // Past maxStringBytes an indent could only make too long a text.
    int indent = -1;
    if (indentArg && indentArg->isNumber())
      indent = static_cast<int>(
          std::clamp<int64_t>(indentArg->asInt(), -1,
                              static_cast<int64_t>(std::min<size_t>(
                                  limits_.maxStringBytes, 1 << 30))));
    std::string out;
    Status st = v.toJson(out, indent, limits_.maxStringBytes, &stepsLeft_);
    if (st.code() == StatusCode::kResourceExhausted)
      return stepsLeft_ < 0 ? outOfSteps() : tooLong();
    if (!st.isOk())
      return error(line, st.message());
    return Value::string(std::move(out));
  }

  StatusOr<bool> test(int line, const std::string &name, const Value &v,
                      const ValueList &args) {
    using K = Value::Kind;
    if (name == "defined")
      return !v.isUndefined();
    if (name == "undefined")
      return v.isUndefined();
    if (name == "none")
      return v.isNone();
    if (name == "string")
      return v.isString();
    if (name == "number")
      return v.isNumber();
    if (name == "integer")
      return v.kind() == K::kInt;
    if (name == "float")
      return v.kind() == K::kFloat;
    if (name == "boolean")
      return v.kind() == K::kBool;
    if (name == "true")
      return v.kind() == K::kBool && v.asBool();
    if (name == "false")
      return v.kind() == K::kBool && !v.asBool();
    if (name == "mapping")
      return v.isDict();
    if (name == "sequence")
      return v.isList() || v.isString() || v.isDict();
    if (name == "iterable")
      return v.isList() || v.isString() || v.isDict();
    if (name == "callable")
      return v.kind() == K::kFunction;
    if (name == "lower" || name == "upper") {
      if (!v.isString())
        return false;
      INFER_RETURN_IF_ERROR(spendBytes(v.asString().size()));
      return (name == "lower" ? lower(v.asString()) : upper(v.asString())) ==
             v.asString();
    }
    if (name == "odd" || name == "even") {
      if (v.kind() != K::kInt)
        return error(line, "'" + name + "' needs an integer");
      return (v.asInt() % 2 != 0) == (name == "odd");
    }
    if (name == "divisibleby") {
      if (v.kind() != K::kInt || args.empty() || args[0].kind() != K::kInt ||
          args[0].asInt() == 0)
        return error(line, "'divisibleby' needs integers");
      return args[0].asInt() == -1 || v.asInt() % args[0].asInt() == 0;
    }
    if (name == "eq" || name == "==" || name == "ne" || name == "!=") {
      if (args.empty())
        return error(line, "'" + name + "' needs an argument");
      INFER_ASSIGN_OR_RETURN(bool same, equal(v, args[0]));
      return same == (name == "eq" || name == "==");
    }
    return error(line, "unsupported Jinja test '" + name + "'");
  }

  Scopes scopes_;
  const RenderLimits &limits_;
  /// What is left of RenderLimits::maxSteps (below zero: spent).
  int64_t stepsLeft_;
  /// execute() and eval() calls in progress.
  int64_t depth_ = 0;
};

} // namespace

StatusOr<std::unique_ptr<Template>> Template::parse(const std::string &source,
                                                    LexOptions options) {
  // jinja2 drops a single trailing newline (keep_trailing_newline=False).
  std::string text = source;
  if (!text.empty() && text.back() == '\n') {
    text.pop_back();
    if (!text.empty() && text.back() == '\r')
      text.pop_back();
  }
  INFER_ASSIGN_OR_RETURN(std::vector<Token> tokens, lex(text, options));
  auto t = std::unique_ptr<Template>(new Template());
  INFER_ASSIGN_OR_RETURN(t->body_, jinja::parse(tokens));
  return t;
}

StatusOr<std::string> Template::render(const ValueDict &globals,
                                       const RenderLimits &limits) const {
  Evaluator evaluator(globals, limits);
  std::string out;
  INFER_ASSIGN_OR_RETURN(Flow flow, evaluator.render(body_, out));
  (void)flow;
  return out;
}

} // namespace infer::serving::jinja
