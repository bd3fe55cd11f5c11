//===- FixtureCases.cpp - HF reference cases of the fixture models --------===//

#include "tests/runtime/support/FixtureCases.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace infer::testing {

namespace fs = std::filesystem;
using nlohmann::json;

/// Fills `c`'s bf16 references from `projectFixtures`/bf16/NAME when they
/// cover its inputs.
static void addBf16References(FixtureCase &c,
                              const std::string &projectFixtures) {
  const fs::path dir = fs::path(projectFixtures) / "bf16" / c.name;
  std::ifstream in(dir / "expected_bf16.json");
  if (!in)
    return;
  json expected = json::parse(in);
  if (expected["inputs"].size() != c.inputs.size())
    return;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    if (expected["inputs"][k].get<std::vector<int32_t>>() != c.inputs[k])
      return;
  }
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    c.bf16Logits.emplace_back(
        (dir / "expected_bf16_logits.safetensors").string(),
        "logits_" + std::to_string(k));
    c.bf16Greedy.push_back(expected["greedy"][k].get<std::vector<int32_t>>());
  }
}

std::vector<FixtureCase> loadFixtureCases(const std::string &sharedFixtures,
                                          const std::string &projectFixtures) {
  std::vector<FixtureCase> cases;
  for (const std::string &root : {sharedFixtures + "/rand", projectFixtures}) {
    if (!fs::is_directory(root))
      continue;
    std::vector<fs::path> dirs;
    for (const auto &entry : fs::directory_iterator(root))
      if (fs::exists(entry.path() / "expected.json"))
        dirs.push_back(entry.path());
    std::sort(dirs.begin(), dirs.end());
    for (const fs::path &dir : dirs) {
      FixtureCase c;
      c.name = dir.filename().string();
      c.modelDir = dir.string();
      std::ifstream in(dir / "expected.json");
      json expected = json::parse(in);
      for (size_t k = 0; k < expected["inputs"].size(); ++k) {
        c.inputs.push_back(expected["inputs"][k].get<std::vector<int32_t>>());
        c.logits.emplace_back((dir / "expected_logits.safetensors").string(),
                              "logits_" + std::to_string(k));
        c.greedy.push_back(expected["greedy"][k].get<std::vector<int32_t>>());
      }
      addBf16References(c, projectFixtures);
      cases.push_back(std::move(c));
    }
  }
  const std::string golden = sharedFixtures + "/golden/tiny-pycode.json";
  if (!fs::exists(golden))
    return cases;
  std::ifstream in(golden);
  json all = json::parse(in);
  for (const std::string model : {"tiny-pycode-target", "tiny-pycode-draft"}) {
    FixtureCase c;
    c.name = model;
    c.modelDir = sharedFixtures + "/models/" + model;
    for (size_t k = 0; k < all[model].size(); ++k) {
      const std::string ref = sharedFixtures + "/golden/" + model + "-logits-" +
                              std::to_string(k) + ".safetensors";
      if (!fs::exists(ref))
        continue;
      c.inputs.push_back(
          all[model][k]["input_ids"].get<std::vector<int32_t>>());
      c.logits.emplace_back(ref, "logits");
      c.greedy.push_back(
          all[model][k]["greedy_fp32"].get<std::vector<int32_t>>());
    }
    // A case without reference logits has nothing to compare against.
    if (fs::is_directory(c.modelDir) && !c.inputs.empty()) {
      addBf16References(c, projectFixtures);
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<FixtureCase> loadFamilyCases(const std::string &projectFixtures) {
  std::vector<FixtureCase> cases = loadFixtureCases(
      projectFixtures + "/families/none", projectFixtures + "/families");
  for (FixtureCase &c : cases)
    addBf16References(c, projectFixtures);
  return cases;
}

std::vector<GreedyCase> loadTinyPycodeGreedy(const std::string &sharedFixtures,
                                             const std::string &model) {
  std::ifstream in(sharedFixtures + "/golden/tiny-pycode.json");
  if (!in)
    return {};
  json all = json::parse(in);
  std::vector<GreedyCase> cases;
  for (const json &c : all[model])
    cases.push_back({c["input_ids"].get<std::vector<int32_t>>(),
                     c["greedy_fp32"].get<std::vector<int32_t>>()});
  return cases;
}

} // namespace infer::testing
