//===- Serve.h - `infer serve`, the OpenAI-compatible server ----*- C++ -*-===//

#ifndef INFER_TOOLS_INFER_SERVE_H
#define INFER_TOOLS_INFER_SERVE_H

#include "tools/infer/Args.h"

#include <vector>

namespace infer::tool {

extern const char *const kServeHelp;
std::vector<OptionSpec> serveOptions();
/// Serves until SIGINT or SIGTERM, then drains and returns ok.
Status runServe(const ParsedArgs &args);

} // namespace infer::tool

#endif // INFER_TOOLS_INFER_SERVE_H
