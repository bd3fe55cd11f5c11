//===- Architectures.cpp - The Hugging Face architectures we import -------===//

#include "frontend/Architectures.h"

#include "llvm/ADT/STLExtras.h"

namespace infer::frontend {

static const Architecture kArchitectures[] = {
    // name                   alwaysQKVBias configurableBias slidingWindow
    {"LlamaForCausalLM", false, true, SlidingWindowRule::kNone},
    {"MistralForCausalLM", false, false, SlidingWindowRule::kAllLayers},
    {"Qwen2ForCausalLM", true, false, SlidingWindowRule::kQwen2},
};

llvm::ArrayRef<Architecture> supportedArchitectures() { return kArchitectures; }

const Architecture *lookupArchitecture(llvm::StringRef name) {
  const auto *it = llvm::find_if(
      kArchitectures, [&](const Architecture &a) { return a.name == name; });
  return it == std::end(kArchitectures) ? nullptr : it;
}

std::string supportedArchitectureList() {
  std::string list;
  for (const Architecture &arch : kArchitectures) {
    if (!list.empty())
      list += ", ";
    list += arch.name.str();
  }
  return list;
}

} // namespace infer::frontend
