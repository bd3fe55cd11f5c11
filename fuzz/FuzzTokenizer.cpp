//===- FuzzTokenizer.cpp - libFuzzer: tokenizer.json and encode/decode ----===//
//
// The first byte picks what the rest is:
//   even  a tokenizer.json: load it, then encode and decode a fixed text
//         (a hostile file must cost bounded time and memory);
//   odd   text for the fixture tokenizer (INFER_FUZZ_TOKENIZER, tiny-pycode):
//         encode it, decode the ids, and decode the bytes as ids.
//
//===----------------------------------------------------------------------===//

#include "runtime/tokenizer/Tokenizer.h"

#include <cstring>
#include <memory>

namespace {

const infer::Tokenizer *fixtureTokenizer() {
  static std::unique_ptr<infer::Tokenizer> tokenizer = [] {
    auto t = infer::Tokenizer::fromFile(INFER_FUZZ_TOKENIZER);
    return t.isOk() ? std::move(t).value() : nullptr;
  }();
  return tokenizer.get();
}

void exercise(const infer::Tokenizer &tokenizer, std::string_view text) {
  auto ids = tokenizer.tryEncode(text, /*addSpecialTokens=*/true);
  if (ids.isOk()) {
    (void)tokenizer.decode(*ids, /*skipSpecialTokens=*/false);
    infer::DetokenizerState state;
    (void)tokenizer.decodeIncremental(*ids, state, true);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  std::string_view rest(reinterpret_cast<const char *>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    auto tokenizer = infer::Tokenizer::fromJson(rest);
    if (tokenizer.isOk())
      exercise(**tokenizer, "Hello world! def f(x):\n    return x  # 42");
    return 0;
  }
  const infer::Tokenizer *tokenizer = fixtureTokenizer();
  if (!tokenizer)
    return 0;
  exercise(*tokenizer, rest);
  std::vector<int32_t> ids(rest.size() / 4);
  if (!ids.empty())
    std::memcpy(ids.data(), rest.data(), ids.size() * 4);
  (void)tokenizer->decode(ids, false);
  return 0;
}
