//===- InferTool.cpp - Running the infer CLI from a test ------------------===//

#include "tests/runtime/support/InferTool.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace infer::testing {
namespace {

std::string quote(const std::string &s) {
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

} // namespace

ToolRun runTool(const std::string &tool, const std::vector<std::string> &args) {
  // ctest runs each test in its own process, several at once: one file each.
  static int calls = 0;
  const std::string errFile = ::testing::TempDir() + "/infer_tool_stderr." +
                              std::to_string(::getpid()) + "." +
                              std::to_string(calls++) + ".txt";
  std::string cmd = quote(tool);
  for (const std::string &a : args)
    cmd += " " + quote(a);
  cmd += " 2>" + quote(errFile);
  ToolRun run;
  FILE *pipe = ::popen(cmd.c_str(), "r");
  if (!pipe)
    return run;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0)
    run.out.append(buf, n);
  const int status = ::pclose(pipe);
  run.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(errFile);
  std::stringstream ss;
  ss << in.rdbuf();
  run.err = ss.str();
  std::remove(errFile.c_str());
  return run;
}

std::vector<nlohmann::json> jsonLines(const std::string &text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty())
      lines.push_back(nlohmann::json::parse(line));
  return lines;
}

} // namespace infer::testing
