//===- InferTool.h - Running the infer CLI from a test ----------*- C++ -*-===//

#ifndef INFER_TESTS_RUNTIME_SUPPORT_INFERTOOL_H
#define INFER_TESTS_RUNTIME_SUPPORT_INFERTOOL_H

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace infer::testing {

struct ToolRun {
  int exitCode = -1;
  std::string out;
  std::string err;
};

/// Runs `tool ARGS...` (arguments shell-quoted) and returns its exit status,
/// stdout and stderr. Safe when ctest runs several tests at once.
ToolRun runTool(const std::string &tool, const std::vector<std::string> &args);

/// One JSON value per non-empty line (`infer generate --json` and friends).
std::vector<nlohmann::json> jsonLines(const std::string &text);

} // namespace infer::testing

#endif // INFER_TESTS_RUNTIME_SUPPORT_INFERTOOL_H
