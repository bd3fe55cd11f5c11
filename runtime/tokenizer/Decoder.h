//===- Decoder.h - tokenizer.json decoders ----------------------*- C++ -*-===//
//
// A decoder turns the token strings of a sequence back into text. As in
// Hugging Face, each decoder maps a list of strings to a list of strings
// (a "chain") and the final text is their concatenation.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_TOKENIZER_DECODER_H
#define INFER_RUNTIME_TOKENIZER_DECODER_H

#include "runtime/support/Status.h"
#include "runtime/tokenizer/JsonUtil.h"

#include <memory>
#include <string>
#include <vector>

namespace infer::tokenizer {

/// One "decoder" of tokenizer.json.
class Decoder {
public:
  virtual ~Decoder() = default;
  virtual void decodeChain(std::vector<std::string> &tokens) const = 0;
};

/// Builds the decoder described by `config`. Supported types: ByteLevel,
/// Sequence, Replace, ByteFallback, Fuse, Strip, Metaspace.
StatusOr<std::unique_ptr<Decoder>> createDecoder(const Json &config);

} // namespace infer::tokenizer

#endif // INFER_RUNTIME_TOKENIZER_DECODER_H
