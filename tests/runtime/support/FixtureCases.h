//===- FixtureCases.h - HF reference cases of the fixture -------*- C++ -*-===//

#ifndef INFER_TESTS_RUNTIME_SUPPORT_FIXTURECASES_H
#define INFER_TESTS_RUNTIME_SUPPORT_FIXTURECASES_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace infer::testing {

/// One fixture model with Hugging Face reference outputs.
struct FixtureCase {
  std::string name;
  std::string modelDir;
  std::vector<std::vector<int32_t>> inputs;
  /// safetensors file and tensor name of each input's HF fp32 logits.
  std::vector<std::pair<std::string, std::string>> logits;
  /// HF greedy tokens of each input.
  std::vector<std::vector<int32_t>> greedy;
  /// HF's own bf16 run of the same inputs (`projectFixtures`/bf16/NAME),
  /// the yardstick of DESIGN.md's bf16 rule; empty where it is missing.
  std::vector<std::pair<std::string, std::string>> bf16Logits;
  std::vector<std::vector<int32_t>> bf16Greedy;
};

/// The random-weight models under `sharedFixtures`/rand and
/// `projectFixtures` (expected.json + expected_logits.safetensors), then the
/// tiny-pycode pair's golden cases that have logits; models whose directory
/// is missing, or none of whose golden cases has logits, are left out.
std::vector<FixtureCase> loadFixtureCases(const std::string &sharedFixtures,
                                          const std::string &projectFixtures);

/// The model-family fixtures (`projectFixtures`/families, made by
/// make_families.sh: Qwen3, Gemma 2/3, Phi-3, rope and activation variants),
/// with HF's bf16 references from `projectFixtures`/bf16 where present.
/// Kept apart from loadFixtureCases: the hand-built Llama plans of the
/// runtime tests do not describe these families, only the compiler does.
std::vector<FixtureCase> loadFamilyCases(const std::string &projectFixtures);

/// Every golden case of a tiny-pycode model (`model` is
/// "tiny-pycode-target" or "tiny-pycode-draft"), with or without reference
/// logits: its prompt ids and HF's greedy tokens. Empty when
/// `sharedFixtures`/golden/tiny-pycode.json is missing.
struct GreedyCase {
  std::vector<int32_t> inputIds;
  std::vector<int32_t> greedy;
};
std::vector<GreedyCase> loadTinyPycodeGreedy(const std::string &sharedFixtures,
                                             const std::string &model);

} // namespace infer::testing

#endif // INFER_TESTS_RUNTIME_SUPPORT_FIXTURECASES_H
