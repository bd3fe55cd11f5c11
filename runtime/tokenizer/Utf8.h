//===- Utf8.h - UTF-8 and byte-level helpers for the tokenizer --*- C++ -*-===//
//
// Small UTF-8 utilities shared by the tokenizer components: decoding one code
// point, lossy repair of invalid byte sequences (with the same replacement
// rules as Rust's String::from_utf8_lossy, which Hugging Face tokenizers use),
// and the GPT-2 byte <-> printable character table of byte-level BPE.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_TOKENIZER_UTF8_H
#define INFER_RUNTIME_TOKENIZER_UTF8_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace infer::tokenizer {

/// The replacement character U+FFFD, UTF-8 encoded.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

/// Length in bytes of the valid UTF-8 sequence at `text[pos]`, or 0 if the
/// bytes there do not start a complete, well-formed sequence.
size_t validSequenceLength(std::string_view text, size_t pos);

/// Length of the character at `pos` of text known to be valid UTF-8.
size_t charLength(std::string_view text, size_t pos);

/// Decodes the character at `pos` of valid UTF-8 text.
uint32_t decodeChar(std::string_view text, size_t pos);

/// Appends the UTF-8 encoding of `codePoint`.
void appendUtf8(std::string &out, uint32_t codePoint);

/// Copies `bytes`, replacing each maximal invalid subsequence by U+FFFD.
std::string toValidUtf8Lossy(std::string_view bytes);

/// Unicode White_Space (the definition of Rust's char::is_whitespace).
bool isUnicodeWhitespace(uint32_t codePoint);

/// The printable character GPT-2 byte-level BPE uses for `byte`, UTF-8.
std::string_view byteToUnicode(uint8_t byte);

/// The byte a byte-level character stands for, if it is one.
std::optional<uint8_t> unicodeToByte(uint32_t codePoint);

} // namespace infer::tokenizer

#endif // INFER_RUNTIME_TOKENIZER_UTF8_H
