//===- PostProcessor.h - tokenizer.json post-processors ---------*- C++ -*-===//
//
// A post-processor adds the special tokens a model expects around an encoded
// sequence (BOS for Llama, [CLS] ... [SEP] for BERT). It runs only when the
// caller asks for special tokens.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_TOKENIZER_POSTPROCESSOR_H
#define INFER_RUNTIME_TOKENIZER_POSTPROCESSOR_H

#include "runtime/support/Status.h"
#include "runtime/tokenizer/JsonUtil.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace infer::tokenizer {

/// One "post_processor" of tokenizer.json (single-sequence case).
class PostProcessor {
public:
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<int32_t> &ids) const = 0;
};

/// Builds the post-processor described by `config`. Supported types:
/// TemplateProcessing, ByteLevel (no change to ids), Sequence,
/// BertProcessing, RobertaProcessing.
StatusOr<std::unique_ptr<PostProcessor>>
createPostProcessor(const Json &config);

} // namespace infer::tokenizer

#endif // INFER_RUNTIME_TOKENIZER_POSTPROCESSOR_H
