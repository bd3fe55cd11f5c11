//===- EncodeLimits.cpp - Cost bounds of one encode call ------------------===//

#include "runtime/tokenizer/EncodeLimits.h"

#include <limits>

namespace infer::tokenizer {

namespace {
thread_local EncodeScope *openScope = nullptr;
} // namespace

EncodeScope::EncodeScope(size_t inputBytes)
    : maxNormalizedBytes_(inputBytes * kMaxNormalizedGrowth +
                          kNormalizedSlackBytes),
      outer_(openScope) {
  openScope = this;
}

EncodeScope::~EncodeScope() { openScope = outer_; }

void recordEncodeError(Status error) {
  if (openScope && openScope->error_.isOk())
    openScope->error_ = std::move(error);
}

size_t maxNormalizedBytes() {
  return openScope ? openScope->maxNormalizedBytes_
                   : std::numeric_limits<size_t>::max();
}

} // namespace infer::tokenizer
