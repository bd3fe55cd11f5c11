//===- PostProcessor.cpp - tokenizer.json post-processors -----------------===//
//
// Implements the post-processors declared in PostProcessor.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/tokenizer/PostProcessor.h"

#include <string>

namespace infer::tokenizer {

namespace {

/// Wraps the sequence: prefix ids, the sequence, suffix ids.
class WrapPostProcessor final : public PostProcessor {
public:
  WrapPostProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void process(std::vector<int32_t> &ids) const override {
    ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  }

private:
  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

class SequencePostProcessor final : public PostProcessor {
public:
  explicit SequencePostProcessor(
      std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  void process(std::vector<int32_t> &ids) const override {
    for (const auto &step : steps_)
      step->process(ids);
  }

private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

/// TemplateProcessing's "single" template: special tokens around $A.
StatusOr<std::unique_ptr<PostProcessor>>
createTemplateProcessing(const Json &config) {
  INFER_ASSIGN_OR_RETURN(const Json *pieces,
                         requireArray(config, "single", "TemplateProcessing"));
  auto specialIt = config.find("special_tokens");
  std::vector<int32_t> prefix, suffix;
  bool seenSequence = false;
  for (const Json &piece : *pieces) {
    if (piece.contains("Sequence")) {
      if (seenSequence)
        return invalidArgument(
            "TemplateProcessing: 'single' names more than one sequence");
      seenSequence = true;
      continue;
    }
    auto special = piece.find("SpecialToken");
    if (special == piece.end() || !special->is_object())
      return invalidArgument("TemplateProcessing: piece is neither "
                             "'Sequence' nor 'SpecialToken'");
    INFER_ASSIGN_OR_RETURN(std::string name,
                           requireString(*special, "id", "SpecialToken"));
    if (specialIt == config.end() || !specialIt->contains(name))
      return invalidArgument("TemplateProcessing: special token '" + name +
                             "' missing from 'special_tokens'");
    const Json &entry = (*specialIt)[name];
    INFER_ASSIGN_OR_RETURN(const Json *ids,
                           requireArray(entry, "ids", "special token " + name));
    for (const Json &id : *ids) {
      if (!id.is_number_integer())
        return invalidArgument("special token " + name + ": non-integer id");
      (seenSequence ? suffix : prefix).push_back(id.get<int32_t>());
    }
  }
  return std::unique_ptr<PostProcessor>(
      new WrapPostProcessor(std::move(prefix), std::move(suffix)));
}

/// BertProcessing / RobertaProcessing: "cls" and "sep" as [token, id].
StatusOr<std::unique_ptr<PostProcessor>> createClsSep(const Json &config,
                                                      const std::string &type) {
  auto readId = [&](const char *key) -> StatusOr<int32_t> {
    auto it = config.find(key);
    if (it == config.end() || !it->is_array() || it->size() != 2 ||
        !(*it)[1].is_number_integer())
      return invalidArgument(type + ": '" + key + "' must be [token, id]");
    return (*it)[1].get<int32_t>();
  };
  INFER_ASSIGN_OR_RETURN(int32_t cls, readId("cls"));
  INFER_ASSIGN_OR_RETURN(int32_t sep, readId("sep"));
  return std::unique_ptr<PostProcessor>(new WrapPostProcessor({cls}, {sep}));
}

} // namespace

StatusOr<std::unique_ptr<PostProcessor>>
createPostProcessor(const Json &config) {
  INFER_ASSIGN_OR_RETURN(std::string type,
                         componentType(config, "post_processor"));
  if (type == "TemplateProcessing")
    return createTemplateProcessing(config);
  if (type == "ByteLevel")
    return std::unique_ptr<PostProcessor>(new WrapPostProcessor({}, {}));
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return createClsSep(config, type);
  if (type == "Sequence") {
    INFER_ASSIGN_OR_RETURN(const Json *list,
                           requireArray(config, "processors", "Sequence"));
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const Json &step : *list) {
      INFER_ASSIGN_OR_RETURN(auto processor, createPostProcessor(step));
      steps.push_back(std::move(processor));
    }
    return std::unique_ptr<PostProcessor>(
        new SequencePostProcessor(std::move(steps)));
  }
  return unimplemented("unsupported post_processor type '" + type + "'");
}

} // namespace infer::tokenizer
