//===- Architectures.cpp - The Hugging Face architectures we import -------===//

#include "frontend/Architectures.h"

#include "llvm/ADT/STLExtras.h"

namespace infer::frontend {

static const Architecture kArchitectures[] = {
    // name alwaysQKVBias configurableBias slidingWindow fusedProjections qkNorm
    {"LlamaForCausalLM", false, true, SlidingWindowRule::kNone},
    {"MistralForCausalLM", false, false, SlidingWindowRule::kAllLayers},
    {"Qwen2ForCausalLM", true, false, SlidingWindowRule::kQwen2},
    {"Qwen3ForCausalLM", false, true, SlidingWindowRule::kQwen2, false, true},
    {"Phi3ForCausalLM", false, false, SlidingWindowRule::kAllLayers, true},
    {"Gemma2ForCausalLM", false, true, SlidingWindowRule::kGemma2, false, false,
     /*gemma=*/true},
    {"Gemma3ForCausalLM", false, true, SlidingWindowRule::kGemma3, false, true,
     /*gemma=*/true, /*slidingLayerRope=*/true},
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
