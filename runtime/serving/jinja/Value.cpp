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

bool Value::equals(const Value &other) const {
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
    return s_ == other.s_ || *s_ == *other.s_;
  case Kind::kList:
    if (list_ == other.list_)
      return true;
    if (list_->size() != other.list_->size())
      return false;
    for (size_t i = 0; i < list_->size(); ++i)
      if (!(*list_)[i].equals((*other.list_)[i]))
        return false;
    return true;
  case Kind::kDict:
    if (dict_ == other.dict_)
      return true;
    if (dict_->size() != other.dict_->size())
      return false;
    for (const auto &[k, v] : *dict_) {
      const Value *o = other.find(k);
      if (!o || !v.equals(*o))
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

std::string quote(const std::string &s) {
  // Python prefers single quotes unless the text has one and no double.
  const bool useDouble =
      s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = useDouble ? '"' : '\'';
  std::string out(1, q);
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
  return out + q;
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

} // namespace

std::string Value::str() const {
  switch (kind_) {
  case Kind::kUndefined:
    return "";
  case Kind::kString:
    return *s_;
  default:
    return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
  case Kind::kUndefined:
    return "";
  case Kind::kNone:
    return "None";
  case Kind::kBool:
    return b_ ? "True" : "False";
  case Kind::kInt:
    return std::to_string(i_);
  case Kind::kFloat:
    return floatText(f_);
  case Kind::kString:
    return quote(*s_);
  case Kind::kList: {
    std::string out = "[";
    for (size_t i = 0; i < list_->size(); ++i)
      out += (i ? ", " : "") + (*list_)[i].repr();
    return out + "]";
  }
  case Kind::kDict: {
    std::string out = namespace_ ? "<Namespace {" : "{";
    bool first = true;
    for (const auto &[k, v] : *dict_) {
      out += (first ? "" : ", ") + quote(k) + ": " + v.repr();
      first = false;
    }
    return out + (namespace_ ? "}>" : "}");
  }
  case Kind::kFunction:
    return "<function>";
  }
  return "";
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

StatusOr<std::string> Value::toJson(int indent, int depth) const {
  std::string out;
  const std::string newline =
      indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) *
                                           static_cast<size_t>(depth + 1),
                                       ' ')
                  : "";
  const std::string closing =
      indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) *
                                           static_cast<size_t>(depth),
                                       ' ')
                  : "";
  const std::string comma = indent >= 0 ? "," : ", ";
  switch (kind_) {
  case Kind::kUndefined:
    return invalidArgument("tojson of an undefined value");
  case Kind::kNone:
    return std::string("null");
  case Kind::kBool:
    return std::string(b_ ? "true" : "false");
  case Kind::kInt:
    return std::to_string(i_);
  case Kind::kFloat:
    return std::isfinite(f_) ? floatText(f_)
                             : std::string(std::isnan(f_) ? "NaN"
                                           : f_ > 0       ? "Infinity"
                                                          : "-Infinity");
  case Kind::kString:
    jsonString(out, *s_);
    return out;
  case Kind::kList: {
    if (list_->empty())
      return std::string("[]");
    out = "[";
    for (size_t i = 0; i < list_->size(); ++i) {
      INFER_ASSIGN_OR_RETURN(std::string item,
                             (*list_)[i].toJson(indent, depth + 1));
      out += (i ? comma : "") + newline + item;
    }
    return out + closing + "]";
  }
  case Kind::kDict: {
    if (dict_->empty())
      return std::string("{}");
    out = "{";
    bool first = true;
    for (const auto &[k, v] : *dict_) {
      INFER_ASSIGN_OR_RETURN(std::string item, v.toJson(indent, depth + 1));
      out += (first ? "" : comma) + newline;
      jsonString(out, k);
      out += ": " + item;
      first = false;
    }
    return out + closing + "}";
  }
  case Kind::kFunction:
    return invalidArgument("tojson of a function");
  }
  return std::string();
}

} // namespace infer::serving::jinja
