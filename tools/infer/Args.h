//===- Args.h - Command-line parsing for the infer tool ---------*- C++ -*-===//

#ifndef INFER_TOOLS_INFER_ARGS_H
#define INFER_TOOLS_INFER_ARGS_H

#include "runtime/support/Status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace infer::tool {

struct OptionSpec {
  std::string name; ///< "--max-new-tokens" or "-o"
  bool takesValue = true;
  /// Another spelling of the same option ("--output" for "-o"), or "".
  std::string alias;
};

/// Positional arguments and options in command-line order, so repeated
/// options (--prompt a --token-ids 1,2 --prompt b) keep their order.
struct ParsedArgs {
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> options;
  bool help = false;

  bool has(const std::string &name) const;
  /// The last value given for `name`.
  std::optional<std::string> get(const std::string &name) const;
  std::string get(const std::string &name, const std::string &fallback) const;
  StatusOr<int64_t> getInt(const std::string &name, int64_t fallback) const;
  StatusOr<double> getDouble(const std::string &name, double fallback) const;
};

/// Accepts "--name value", "--name=value" and flags; "-h"/"--help" set help.
StatusOr<ParsedArgs> parseArgs(const std::vector<std::string> &args,
                               const std::vector<OptionSpec> &specs);

/// "1,2,3" (spaces allowed) -> ids.
StatusOr<std::vector<int32_t>> parseIdList(const std::string &text);

} // namespace infer::tool

#endif // INFER_TOOLS_INFER_ARGS_H
