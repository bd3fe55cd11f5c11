//===- ServeBench.h - `infer bench --base-url`, a serving client -*- C++
//-*-===//
//
// vLLM's `bench serve`: the workload of `infer bench` (random prompts of
// --input-len tokens, exactly --output-len tokens each) sent as streaming
// completions to any OpenAI-compatible endpoint, with Poisson arrivals
// (--request-rate) and/or a bound on requests in flight
// (--max-concurrency), reporting the same metrics as the offline bench
// plus goodput under --goodput SLOs.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_TOOLS_INFER_SERVEBENCH_H
#define INFER_TOOLS_INFER_SERVEBENCH_H

#include "tools/infer/Args.h"

namespace infer::tool {

Status runServeBench(const ParsedArgs &args);

} // namespace infer::tool

#endif // INFER_TOOLS_INFER_SERVEBENCH_H
