//===- Value.cpp - Values of the Jinja interpreter ------------------------===//

#include "runtime/serving/jinja/Value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace infer::serving::jinja {

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  for (const Value &item : items)
    v.depth_ = std::max(v.depth_, item.depth_);
  ++v.depth_;
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::dict(ValueDict items) {
  Value v;
  v.kind_ = Kind::kDict;
  for (const auto &[key, item] : items)
    v.depth_ = std::max(v.depth_, item.depth_);
  ++v.depth_;
  v.dict_ = std::make_shared<ValueDict>(std::move(items));
  return v;
}

Value Value::ns(ValueDict items) {
  Value v = dict(std::move(items));
  v.namespace_ = true;
  return v;
}

Value Value::function(Function f) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::make_shared<Function>(std::move(f));
  return v;
}

Value Value::fromJson(const nlohmann::json &j) {
  switch (j.type()) {
  case nlohmann::json::value_t::null:
    return none();
  case nlohmann::json::value_t::boolean:
    return boolean(j.get<bool>());
  case nlohmann::json::value_t::number_integer:
  case nlohmann::json::value_t::number_unsigned:
    return integer(j.get<int64_t>());
  case nlohmann::json::value_t::number_float:
    return floating(j.get<double>());
  case nlohmann::json::value_t::string:
    return string(j.get<std::string>());
  case nlohmann::json::value_t::array: {
    ValueList items;
    for (const nlohmann::json &e : j)
      items.push_back(fromJson(e));
    return list(std::move(items));
  }
  case nlohmann::json::value_t::object: {
    ValueDict items;
    for (auto it = j.begin(); it != j.end(); ++it)
      items.emplace_back(it.key(), fromJson(it.value()));
    return dict(std::move(items));
  }
  default:
    return Value();
  }
}

const std::string &Value::asString() const {
  static const std::string empty;
  return s_ ? *s_ : empty;
}

bool Value::truthy() const {
  switch (kind_) {
  case Kind::kUndefined:
  case Kind::kNone:
    return false;
  case Kind::kBool:
    return b_;
  case Kind::kInt:
    return i_ != 0;
  case Kind::kFloat:
    return f_ != 0.0;
  case Kind::kString:
    return !s_->empty();
  case Kind::kList:
    return !list_->empty();
  case Kind::kDict:
    return !dict_->empty();
  case Kind::kFunction:
    return true;
  }
  return false;
}

Value *Value::find(const std::string &key) const {
  if (kind_ != Kind::kDict)
    return nullptr;
  for (auto &[k, v] : *dict_)
    if (k == key)
      return &v;
  return nullptr;
}

void Value::set(const std::string &key, Value value) const {
  if (Value *existing = find(key))
    *existing = std::move(value);
  else
    dict_->emplace_back(key, std::move(value));
}

namespace {

/// Spends `n` steps from `steps` (when given); whether any are left.
bool spend(int64_t *steps, int64_t n) {
  if (!steps)
    return true;
  *steps -= n;
  return *steps >= 0;
}

/// The steps of `bytes` bytes of text.
int64_t stepsOf(size_t bytes) {
  return static_cast<int64_t>(bytes) / kBytesPerStep + 1;
}

} // namespace

bool Value::equals(const Value &other, int64_t *steps) const {
  if (!spend(steps, 1))
    return false;
  if (isNumber() && other.isNumber()) {
    if (kind_ == Kind::kInt && other.kind_ == Kind::kInt)
      return i_ == other.i_;
    return asDouble() == other.asDouble();
  }
  if (kind_ == Kind::kBool && other.isNumber())
    return Value::integer(b_).equals(other);
  if (isNumber() && other.kind_ == Kind::kBool)
    return equals(Value::integer(other.b_));
  if (kind_ != other.kind_)
    return false;
  switch (kind_) {
  case Kind::kUndefined:
  case Kind::kNone:
    return true;
  case Kind::kBool:
    return b_ == other.b_;
  case Kind::kString:
    if (s_ == other.s_)
      return true;
    return s_->size() == other.s_->size() &&
           spend(steps, stepsOf(s_->size())) && *s_ == *other.s_;
  case Kind::kList:
    if (list_ == other.list_)
      return true;
    if (list_->size() != other.list_->size())
      return false;
    for (size_t i = 0; i < list_->size(); ++i)
      if (!(*list_)[i].equals((*other.list_)[i], steps))
        return false;
    return true;
  case Kind::kDict:
    if (dict_ == other.dict_)
      return true;
    if (dict_->size() != other.dict_->size())
      return false;
    for (const auto &[k, v] : *dict_) {
      // find() reads the other dict's keys in order.
      if (!spend(steps, static_cast<int64_t>(other.dict_->size())))
        return false;
      const Value *o = other.find(k);
      if (!o || !v.equals(*o, steps))
        return false;
    }
    return true;
  default:
    return fn_ == other.fn_;
  }
}

namespace {

/// Python's repr of a float: the shortest text that reads back the same.
std::string floatText(double f) {
  if (std::isnan(f))
    return "nan";
  if (std::isinf(f))
    return f > 0 ? "inf" : "-inf";
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, f);
    if (std::strtod(buf, nullptr) == f)
      break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos)
    s += ".0";
  return s;
}

/// Appends Python's repr of string `s`.
void quote(std::string &out, const std::string &s) {
  // Python prefers single quotes unless the text has one and no double.
  const bool useDouble =
      s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = useDouble ? '"' : '\'';
  out += q;
  for (char c : s) {
    switch (c) {
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (c == q)
        out += '\\';
      out += c;
    }
  }
  out += q;
}

void jsonString(std::string &out, const std::string &s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  out += '"';
}

/// Appends `piece` unless `out` would pass `limit`; whether it did.
bool append(std::string &out, const std::string &piece, size_t limit) {
  if (piece.size() > limit - std::min(limit, out.size()))
    return false;
  out += piece;
  return true;
}

/// Appends the text `write` produces for string `s` (at most 6 bytes per
/// byte of `s`, plus quotes) unless `out` would pass `limit`.
template <typename Write>
bool appendText(std::string &out, const std::string &s, size_t limit,
                Write write) {
  if (s.size() > (limit - std::min(limit, out.size())) / 6) {
    std::string piece;
    write(piece, s);
    return append(out, piece, limit);
  }
  write(out, s);
  return out.size() <= limit;
}

} // namespace

bool Value::print(std::string &out, bool quoted, size_t limit,
                  int64_t *steps) const {
  if (!spend(steps, 1))
    return false;
  switch (kind_) {
  case Kind::kUndefined:
    return true;
  case Kind::kNone:
    return append(out, "None", limit);
  case Kind::kBool:
    return append(out, b_ ? "True" : "False", limit);
  case Kind::kInt:
    return append(out, std::to_string(i_), limit);
  case Kind::kFloat:
    return append(out, floatText(f_), limit);
  case Kind::kString:
    if (!spend(steps, stepsOf(s_->size())))
      return false;
    if (!quoted)
      return append(out, *s_, limit);
    return appendText(
        out, *s_, limit,
        [](std::string &o, const std::string &t) { quote(o, t); });
  case Kind::kList: {
    if (!append(out, "[", limit))
      return false;
    for (size_t i = 0; i < list_->size(); ++i)
      if ((i && !append(out, ", ", limit)) ||
          !(*list_)[i].print(out, true, limit, steps))
        return false;
    return append(out, "]", limit);
  }
  case Kind::kDict: {
    if (!append(out, namespace_ ? "<Namespace {" : "{", limit))
      return false;
    bool first = true;
    for (const auto &[k, v] : *dict_) {
      if (!spend(steps, stepsOf(k.size())) ||
          (!first && !append(out, ", ", limit)) ||
          !appendText(
              out, k, limit,
              [](std::string &o, const std::string &t) { quote(o, t); }) ||
          !append(out, ": ", limit) || !v.print(out, true, limit, steps))
        return false;
      first = false;
    }
    return append(out, namespace_ ? "}>" : "}", limit);
  }
  case Kind::kFunction:
    return append(out, "<function>", limit);
  }
  return true;
}

std::string Value::str() const {
  std::string out;
  print(out, false, std::string::npos);
  return out;
}

std::string Value::repr() const {
  std::string out;
  print(out, true, std::string::npos);
  return out;
}

const char *Value::typeName() const {
  switch (kind_) {
  case Kind::kUndefined:
    return "undefined";
  case Kind::kNone:
    return "NoneType";
  case Kind::kBool:
    return "bool";
  case Kind::kInt:
    return "int";
  case Kind::kFloat:
    return "float";
  case Kind::kString:
    return "str";
  case Kind::kList:
    return "list";
  case Kind::kDict:
    return namespace_ ? "Namespace" : "dict";
  case Kind::kFunction:
    return "function";
  }
  return "?";
}

Status Value::toJson(std::string &out, int indent, size_t limit, int64_t *steps,
                     int depth) const {
  const Status tooLong = resourceExhausted("the JSON text is too long");
  if (!spend(steps, 1))
    return tooLong;
  auto put = [&](const std::string &piece) {
    return append(out, piece, limit) ? Status::ok() : tooLong;
  };
  // Before an item: a newline and the indent of its level (indent >= 0).
  auto newline = [&](int level) {
    if (indent < 0)
      return Status::ok();
    const size_t width =
        static_cast<size_t>(indent) * static_cast<size_t>(level);
    if (width + 1 > limit - std::min(limit, out.size()) ||
        !spend(steps, stepsOf(width)))
      return tooLong;
    out += '\n';
    out.append(width, ' ');
    return Status::ok();
  };
  const std::string comma = indent >= 0 ? "," : ", ";
  switch (kind_) {
  case Kind::kUndefined:
    return invalidArgument("tojson of an undefined value");
  case Kind::kNone:
    return put("null");
  case Kind::kBool:
    return put(b_ ? "true" : "false");
  case Kind::kInt:
    return put(std::to_string(i_));
  case Kind::kFloat:
    return put(std::isfinite(f_) ? floatText(f_)
               : std::isnan(f_)  ? "NaN"
               : f_ > 0          ? "Infinity"
                                 : "-Infinity");
  case Kind::kString:
    if (!spend(steps, stepsOf(s_->size())) ||
        !appendText(out, *s_, limit, jsonString))
      return tooLong;
    return Status::ok();
  case Kind::kList: {
    if (list_->empty())
      return put("[]");
    INFER_RETURN_IF_ERROR(put("["));
    for (size_t i = 0; i < list_->size(); ++i) {
      if (i)
        INFER_RETURN_IF_ERROR(put(comma));
      INFER_RETURN_IF_ERROR(newline(depth + 1));
      INFER_RETURN_IF_ERROR(
          (*list_)[i].toJson(out, indent, limit, steps, depth + 1));
    }
    INFER_RETURN_IF_ERROR(newline(depth));
    return put("]");
  }
  case Kind::kDict: {
    if (dict_->empty())
      return put("{}");
    INFER_RETURN_IF_ERROR(put("{"));
    bool first = true;
    for (const auto &[k, v] : *dict_) {
      if (!first)
        INFER_RETURN_IF_ERROR(put(comma));
      INFER_RETURN_IF_ERROR(newline(depth + 1));
      if (!spend(steps, stepsOf(k.size())) ||
          !appendText(out, k, limit, jsonString))
        return tooLong;
      INFER_RETURN_IF_ERROR(put(": "));
      INFER_RETURN_IF_ERROR(v.toJson(out, indent, limit, steps, depth + 1));
      first = false;
    }
    INFER_RETURN_IF_ERROR(newline(depth));
    return put("}");
  }
  case Kind::kFunction:
    return invalidArgument("tojson of a function");
  }
  return Status::ok();
}

} // namespace infer::serving::jinja
