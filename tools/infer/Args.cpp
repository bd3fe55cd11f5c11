//===- Args.cpp - Command-line parsing for the infer tool -----------------===//

#include "tools/infer/Args.h"

#include <cerrno>
#include <cstdlib>

namespace infer::tool {

bool ParsedArgs::has(const std::string &name) const {
  for (const auto &[n, v] : options)
    if (n == name)
      return true;
  return false;
}

std::optional<std::string> ParsedArgs::get(const std::string &name) const {
  std::optional<std::string> value;
  for (const auto &[n, v] : options)
    if (n == name)
      value = v;
  return value;
}

std::string ParsedArgs::get(const std::string &name,
                            const std::string &fallback) const {
  return get(name).value_or(fallback);
}

static bool parseInt64(const std::string &text, int64_t &out) {
  if (text.empty())
    return false;
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0')
    return false;
  out = v;
  return true;
}

StatusOr<int64_t> ParsedArgs::getInt(const std::string &name,
                                     int64_t fallback) const {
  std::optional<std::string> text = get(name);
  if (!text)
    return fallback;
  int64_t v;
  if (!parseInt64(*text, v))
    return invalidArgument(name + " expects an integer, got '" + *text + "'");
  return v;
}

StatusOr<double> ParsedArgs::getDouble(const std::string &name,
                                       double fallback) const {
  std::optional<std::string> text = get(name);
  if (!text)
    return fallback;
  errno = 0;
  char *end = nullptr;
  double v = std::strtod(text->c_str(), &end);
  if (text->empty() || errno != 0 || *end != '\0')
    return invalidArgument(name + " expects a number, got '" + *text + "'");
  return v;
}

StatusOr<ParsedArgs> parseArgs(const std::vector<std::string> &args,
                               const std::vector<OptionSpec> &specs) {
  ParsedArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "-h" || arg == "--help") {
      parsed.help = true;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      parsed.positional.push_back(arg);
      continue;
    }
    std::string name = arg, value;
    bool hasInlineValue = false;
    if (size_t eq = arg.find('='); eq != std::string::npos && arg[1] == '-') {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      hasInlineValue = true;
    }
    const OptionSpec *spec = nullptr;
    for (const OptionSpec &s : specs)
      if (s.name == name || (!s.alias.empty() && s.alias == name))
        spec = &s;
    if (!spec)
      return invalidArgument("unknown option '" + name + "'");
    if (spec->takesValue && !hasInlineValue) {
      if (i + 1 >= args.size())
        return invalidArgument("option " + name + " needs a value");
      value = args[++i];
    } else if (!spec->takesValue && hasInlineValue) {
      return invalidArgument("option " + name + " takes no value");
    }
    parsed.options.emplace_back(spec->name, value);
  }
  return parsed;
}

StatusOr<std::vector<int32_t>> parseIdList(const std::string &text) {
  std::vector<int32_t> ids;
  std::string item;
  auto flush = [&]() -> Status {
    size_t b = item.find_first_not_of(" \t");
    size_t e = item.find_last_not_of(" \t");
    std::string trimmed =
        b == std::string::npos ? "" : item.substr(b, e - b + 1);
    item.clear();
    int64_t v;
    if (!parseInt64(trimmed, v) || v < 0 || v > INT32_MAX)
      return invalidArgument("bad token id '" + trimmed + "' in '" + text +
                             "' (expected a list like 1,2,3)");
    ids.push_back(static_cast<int32_t>(v));
    return Status::ok();
  };
  for (char c : text) {
    if (c == ',') {
      INFER_RETURN_IF_ERROR(flush());
    } else {
      item.push_back(c);
    }
  }
  INFER_RETURN_IF_ERROR(flush());
  return ids;
}

} // namespace infer::tool
