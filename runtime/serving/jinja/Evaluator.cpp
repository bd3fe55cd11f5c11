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

std::string replaceAll(std::string s, const std::string &from,
                       const std::string &to, int64_t count) {
  if (from.empty())
    return s;
  size_t at = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    at = s.find(from, at);
    if (at == std::string::npos)
      break;
    s.replace(at, from.size(), to);
    at += to.size();
  }
  return s;
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

/// The UTF-8 characters of `s` (Python indexes strings by code point).
std::vector<std::string> characters(const std::string &s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0xF0)
      len = 4;
    else if (c >= 0xE0)
      len = 3;
    else if (c >= 0xC0)
      len = 2;
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
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
      : scopes_(globals), limits_(limits) {
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

  void defineGlobals() {
    if (scopes_.lookup("range").isUndefined())
      scopes_.set(
          "range", Value::function([](const ValueList &args,
                                      const KwArgs &) -> StatusOr<Value> {
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
            if (n > 1000000)
              return invalidArgument("range() too large");
            ValueList items;
            for (uint64_t i = 0; i < n; ++i)
              items.push_back(Value::integer(rangeItem(start, step, i)));
            return Value::list(std::move(items));
          }));
    scopes_.set("namespace",
                Value::function([](const ValueList &args,
                                   const KwArgs &kw) -> StatusOr<Value> {
                  ValueDict items;
                  for (const Value &a : args)
                    if (a.isDict())
                      for (const auto &[k, v] : a.entries())
                        items.emplace_back(k, v);
                  for (const auto &[k, v] : kw) {
                    INFER_RETURN_IF_ERROR(checkStorable(v));
                    items.emplace_back(k, v);
                  }
                  return Value::ns(std::move(items));
                }));
    scopes_.set("dict",
                Value::function(
                    [](const ValueList &, const KwArgs &kw) -> StatusOr<Value> {
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
    return executeStatement(s, out);
  }

  StatusOr<Flow> executeStatement(const Stmt &s, std::string &out) {
    switch (s.kind) {
    case Stmt::Kind::kText:
      out += s.text;
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
    out += v.str();
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
      if (Status st = checkStorable(value); !st.isOk())
        return error(s.line, st.message());
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

  StatusOr<ValueList> iterate(int line, const Value &v) {
    if (v.isList())
      return v.items();
    if (v.isDict()) {
      ValueList keys;
      for (const auto &[k, value] : v.entries())
        keys.push_back(Value::string(k));
      return keys;
    }
    if (v.isString()) {
      ValueList chars;
      for (std::string &c : characters(v.asString()))
        chars.push_back(Value::string(std::move(c)));
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

  StatusOr<Value> eval(const Expr &e) {
    Level level(depth_);
    INFER_RETURN_IF_ERROR(checkDepth(e.line));
    StatusOr<Value> v = evalExpression(e);
    if (v.isOk() && v->depth() > kMaxValueDepth)
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
      if (Status st = checkStorable(v); !st.isOk())
        return error(e.line, st.message());
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
      if (Status st = checkStorable(v); !st.isOk())
        return error(e.line, st.message());
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
    StatusOr<Value> result = callee.callable()(args, kw);
    if (!result.isOk())
      return result.status().message().rfind("line ", 0) == 0
                 ? result.status()
                 : error(e.line, result.status().message());
    return result;
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
      const Value *v = object.find(key.asString());
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
      const std::vector<std::string> chars = characters(object.asString());
      if (!normalizeIndex(i, static_cast<int64_t>(chars.size())))
        return Value();
      return Value::string(chars[static_cast<size_t>(i)]);
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
    std::vector<std::string> chars;
    if (object.isList()) {
      size = static_cast<int64_t>(object.items().size());
    } else if (object.isString()) {
      chars = characters(object.asString());
      size = static_cast<int64_t>(chars.size());
    } else
      return error(e.line, std::string("cannot slice ") + object.typeName());
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
    std::vector<int64_t> picks;
    const uint64_t n = rangeLength(start, stop, step);
    for (uint64_t i = 0; i < n; ++i)
      picks.push_back(rangeItem(start, step, i));
    if (object.isList()) {
      ValueList items;
      for (int64_t i : picks)
        items.push_back(object.items()[static_cast<size_t>(i)]);
      return Value::list(std::move(items));
    }
    std::string s;
    for (int64_t i : picks)
      s += chars[static_cast<size_t>(i)];
    return Value::string(std::move(s));
  }

  StatusOr<Value> attribute(int line, const Value &object,
                            const std::string &name) {
    if (object.isDict()) {
      if (const Value *v = object.find(name))
        return *v;
      if (!object.isNamespace())
        if (std::optional<Value> m = dictMethod(object, name))
          return *m;
      return Value();
    }
    if (object.isString())
      if (std::optional<Value> m = stringMethod(object.asString(), name))
        return *m;
    if (object.isUndefined())
      return error(line, "'" + name + "' of an undefined value");
    return Value();
  }

  static std::optional<Value> dictMethod(const Value &dict,
                                         const std::string &name) {
    if (name == "items" || name == "keys" || name == "values")
      return Value::function(
          [dict, name](const ValueList &, const KwArgs &) -> StatusOr<Value> {
            ValueList out;
            for (const auto &[k, v] : dict.entries()) {
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
      return Value::function(
          [dict](const ValueList &args, const KwArgs &) -> StatusOr<Value> {
            if (args.empty())
              return invalidArgument("get() needs a key");
            const Value *v =
                args[0].isString() ? dict.find(args[0].asString()) : nullptr;
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

  static std::optional<Value> stringMethod(const std::string &s,
                                           const std::string &name) {
    auto method = [](auto body) { return Value::function(body); };
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return method(
          [s, name](const ValueList &args, const KwArgs &) -> StatusOr<Value> {
            return Value::string(strip(s, optionalString(args, 0),
                                       name != "rstrip", name != "lstrip"));
          });
    if (name == "startswith" || name == "endswith")
      return method(
          [s, name](const ValueList &args, const KwArgs &) -> StatusOr<Value> {
            if (args.empty())
              return invalidArgument(name + "() needs an argument");
            ValueList options =
                args[0].isList() ? args[0].items() : ValueList{args[0]};
            for (const Value &o : options) {
              if (!o.isString())
                return invalidArgument(name + "() needs strings");
              const std::string &p = o.asString();
              if (p.size() <= s.size() &&
                  (name == "startswith"
                       ? s.compare(0, p.size(), p) == 0
                       : s.compare(s.size() - p.size(), p.size(), p) == 0))
                return Value::boolean(true);
            }
            return Value::boolean(false);
          });
    if (name == "split")
      return method(
          [s](const ValueList &args, const KwArgs &kw) -> StatusOr<Value> {
            int64_t maxSplit = -1;
            if (args.size() > 1 && args[1].kind() == Value::Kind::kInt)
              maxSplit = args[1].asInt();
            for (const auto &[k, v] : kw)
              if (k == "maxsplit" && v.kind() == Value::Kind::kInt)
                maxSplit = v.asInt();
            const std::string *sep = optionalString(args, 0);
            if (sep && sep->empty())
              return invalidArgument("empty separator");
            ValueList parts;
            for (std::string &p : split(s, sep, maxSplit))
              parts.push_back(Value::string(std::move(p)));
            return Value::list(std::move(parts));
          });
    if (name == "upper" || name == "lower" || name == "title" ||
        name == "capitalize")
      return method(
          [s, name](const ValueList &, const KwArgs &) -> StatusOr<Value> {
            return Value::string(name == "upper"   ? upper(s)
                                 : name == "lower" ? lower(s)
                                 : name == "title" ? title(s)
                                                   : capitalize(s));
          });
    if (name == "replace")
      return method(
          [s](const ValueList &args, const KwArgs &) -> StatusOr<Value> {
            if (args.size() < 2 || !args[0].isString() || !args[1].isString())
              return invalidArgument("replace() needs two strings");
            const int64_t count = args.size() > 2 ? args[2].asInt() : -1;
            return Value::string(
                replaceAll(s, args[0].asString(), args[1].asString(), count));
          });
    if (name == "find")
      return method(
          [s](const ValueList &args, const KwArgs &) -> StatusOr<Value> {
            if (args.empty() || !args[0].isString())
              return invalidArgument("find() needs a string");
            const size_t at = s.find(args[0].asString());
            return Value::integer(
                at == std::string::npos ? -1 : static_cast<int64_t>(at));
          });
    if (name == "join")
      return method(
          [s](const ValueList &args, const KwArgs &) -> StatusOr<Value> {
            if (args.empty() || !args[0].isList())
              return invalidArgument("join() needs a list");
            std::string out;
            for (size_t i = 0; i < args[0].items().size(); ++i)
              out += (i ? s : "") + args[0].items()[i].str();
            return Value::string(std::move(out));
          });
    return std::nullopt;
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
    if (op == "~")
      return Value::string(a.str() + b.str());
    if (op == "==")
      return Value::boolean(a.equals(b));
    if (op == "!=")
      return Value::boolean(!a.equals(b));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.isString() && a.isString())
        found = b.asString().find(a.asString()) != std::string::npos;
      else if (b.isList())
        found = std::any_of(b.items().begin(), b.items().end(),
                            [&](const Value &v) { return v.equals(a); });
      else if (b.isDict())
        found = a.isString() && b.find(a.asString());
      else
        return error(e.line, std::string("'in' needs a string, list or dict, "
                                         "not ") +
                                 b.typeName());
      return Value::boolean(found == (op == "in"));
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp = 0;
      if (a.isNumber() && b.isNumber())
        cmp = a.asDouble() < b.asDouble() ? -1 : a.asDouble() > b.asDouble();
      else if (a.isString() && b.isString())
        cmp = a.asString().compare(b.asString());
      else
        return error(e.line, "cannot compare " + std::string(a.typeName()) +
                                 " and " + b.typeName());
      return Value::boolean(op == "<"    ? cmp < 0
                            : op == ">"  ? cmp > 0
                            : op == "<=" ? cmp <= 0
                                         : cmp >= 0);
    }
    if (op == "+") {
      if (a.isString() && b.isString())
        return Value::string(a.asString() + b.asString());
      if (a.isList() && b.isList()) {
        ValueList items = a.items();
        items.insert(items.end(), b.items().begin(), b.items().end());
        return Value::list(std::move(items));
      }
    }
    if (op == "*" && a.isString() && b.kind() == Value::Kind::kInt) {
      std::string out;
      for (int64_t i = 0; i < b.asInt(); ++i)
        out += a.asString();
      return Value::string(std::move(out));
    }
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

  StatusOr<Value> filter(int line, const std::string &name, const Value &v,
                         const ValueList &args, const KwArgs &kw) {
    auto kwarg = [&](const char *key, size_t position) -> const Value * {
      for (const auto &[k, value] : kw)
        if (k == key)
          return &value;
      return position < args.size() ? &args[position] : nullptr;
    };
    if (name == "trim") {
      const std::string *chars = optionalString(args, 0);
      return Value::string(strip(v.str(), chars, true, true));
    }
    if (name == "length" || name == "count") {
      if (v.isString())
        return Value::integer(
            static_cast<int64_t>(characters(v.asString()).size()));
      if (v.isList())
        return Value::integer(static_cast<int64_t>(v.items().size()));
      if (v.isDict())
        return Value::integer(static_cast<int64_t>(v.entries().size()));
      return error(line, std::string("length of ") + v.typeName());
    }
    if (name == "tojson") {
      int indent = -1;
      if (const Value *i = kwarg("indent", 0); i && i->isNumber())
        indent = static_cast<int>(i->asInt());
      StatusOr<std::string> text = v.toJson(indent);
      if (!text.isOk())
        return error(line, text.status().message());
      return Value::string(*text);
    }
    if (name == "upper")
      return Value::string(upper(v.str()));
    if (name == "lower")
      return Value::string(lower(v.str()));
    if (name == "capitalize")
      return Value::string(capitalize(v.str()));
    if (name == "title")
      return Value::string(title(v.str()));
    if (name == "string")
      return Value::string(v.str());
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
        char *end = nullptr;
        const long long i = std::strtoll(v.asString().c_str(), &end, 10);
        return Value::integer(end && *end == 0 ? i : 0);
      }
      return Value::integer(0);
    }
    if (name == "float") {
      if (v.isNumber())
        return Value::floating(v.asDouble());
      if (v.isString())
        return Value::floating(std::strtod(v.asString().c_str(), nullptr));
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
      const Value *sep = kwarg("d", 0);
      INFER_ASSIGN_OR_RETURN(ValueList items, iterate(line, v));
      std::string out;
      for (size_t i = 0; i < items.size(); ++i)
        out += (i && sep ? sep->str() : "") + items[i].str();
      return Value::string(std::move(out));
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
        std::vector<std::string> chars = characters(v.asString());
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it)
          out += *it;
        return Value::string(std::move(out));
      }
      INFER_ASSIGN_OR_RETURN(ValueList items, iterate(line, v));
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    }
    if (name == "unique") {
      INFER_ASSIGN_OR_RETURN(ValueList items, iterate(line, v));
      ValueList out;
      for (const Value &item : items)
        if (std::none_of(out.begin(), out.end(),
                         [&](const Value &o) { return o.equals(item); }))
          out.push_back(item);
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
      return Value::string(replaceAll(v.str(), args[0].asString(),
                                      args[1].asString(),
                                      args.size() > 2 ? args[2].asInt() : -1));
    }
    return error(line, "unsupported Jinja filter '" + name + "'");
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
    if (name == "lower")
      return v.isString() && lower(v.asString()) == v.asString();
    if (name == "upper")
      return v.isString() && upper(v.asString()) == v.asString();
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
      return v.equals(args[0]) == (name == "eq" || name == "==");
    }
    return error(line, "unsupported Jinja test '" + name + "'");
  }

  Scopes scopes_;
  const RenderLimits &limits_;
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
