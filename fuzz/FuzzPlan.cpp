//===- FuzzPlan.cpp - libFuzzer: plan.json and manifest.json --------------===//
//
// The first byte picks the reader: even parses (and so verifies) a plan,
// odd a manifest. A plan that parses is written back and must parse again:
// the writer only writes plans the verifier accepts.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  std::string_view text(reinterpret_cast<const char *>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    auto plan = infer::plan::parsePlanJson(text);
    if (!plan.isOk())
      return 0;
    auto again = infer::plan::parsePlanJson(infer::plan::planToJson(*plan));
    if (!again.isOk())
      std::abort();
    return 0;
  }
  auto manifest = infer::plan::parseManifestJson(text);
  if (manifest.isOk())
    (void)infer::plan::manifestToJson(*manifest);
  return 0;
}
