//===- Utf8.cpp - UTF-8 and byte-level helpers for the tokenizer ----------===//
//
// Implements the helpers declared in Utf8.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/tokenizer/Utf8.h"

#include <array>

namespace infer::tokenizer {

namespace {

/// Range a continuation byte must lie in, for the byte after `lead` (the
/// second byte has tighter bounds to exclude overlongs and surrogates).
void secondByteRange(uint8_t lead, uint8_t &lo, uint8_t &hi) {
  lo = 0x80;
  hi = 0xBF;
  if (lead == 0xE0)
    lo = 0xA0;
  else if (lead == 0xED)
    hi = 0x9F;
  else if (lead == 0xF0)
    lo = 0x90;
  else if (lead == 0xF4)
    hi = 0x8F;
}

size_t sequenceWidth(uint8_t lead) {
  if (lead < 0x80)
    return 1;
  if (lead >= 0xC2 && lead <= 0xDF)
    return 2;
  if (lead >= 0xE0 && lead <= 0xEF)
    return 3;
  if (lead >= 0xF0 && lead <= 0xF4)
    return 4;
  return 0;
}

/// How many bytes at `pos` form a valid prefix of a sequence (at least 1),
/// and whether that prefix is a complete character.
size_t validPrefixLength(std::string_view text, size_t pos, bool &complete) {
  auto lead = static_cast<uint8_t>(text[pos]);
  size_t width = sequenceWidth(lead);
  complete = false;
  if (width == 0)
    return 1;
  size_t len = 1;
  while (len < width && pos + len < text.size()) {
    auto byte = static_cast<uint8_t>(text[pos + len]);
    uint8_t lo = 0x80, hi = 0xBF;
    if (len == 1)
      secondByteRange(lead, lo, hi);
    if (byte < lo || byte > hi)
      return len;
    ++len;
  }
  complete = len == width;
  return len;
}

struct ByteLevelTables {
  std::array<std::string, 256> byteToChar;
  std::array<int16_t, 512> charToByte;

  ByteLevelTables() {
    charToByte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                       (b >= 0xAE && b <= 0xFF);
      uint32_t codePoint = printable ? b : 256 + next++;
      appendUtf8(byteToChar[b], codePoint);
      charToByte[codePoint] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables &byteLevelTables() {
  static const ByteLevelTables tables;
  return tables;
}

} // namespace

size_t validSequenceLength(std::string_view text, size_t pos) {
  bool complete = false;
  size_t len = validPrefixLength(text, pos, complete);
  return complete ? len : 0;
}

size_t charLength(std::string_view text, size_t pos) {
  size_t width = sequenceWidth(static_cast<uint8_t>(text[pos]));
  if (width == 0 || pos + width > text.size())
    return 1;
  return width;
}

uint32_t decodeChar(std::string_view text, size_t pos) {
  auto lead = static_cast<uint8_t>(text[pos]);
  size_t width = charLength(text, pos);
  if (width == 1)
    return lead;
  uint32_t codePoint = lead & (0x7F >> width);
  for (size_t i = 1; i < width; ++i)
    codePoint = (codePoint << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3F);
  return codePoint;
}

void appendUtf8(std::string &out, uint32_t codePoint) {
  if (codePoint < 0x80) {
    out.push_back(static_cast<char>(codePoint));
  } else if (codePoint < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (codePoint >> 6)));
    out.push_back(static_cast<char>(0x80 | (codePoint & 0x3F)));
  } else if (codePoint < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (codePoint >> 12)));
    out.push_back(static_cast<char>(0x80 | ((codePoint >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (codePoint & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (codePoint >> 18)));
    out.push_back(static_cast<char>(0x80 | ((codePoint >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((codePoint >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (codePoint & 0x3F)));
  }
}

std::string toValidUtf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    bool complete = false;
    size_t len = validPrefixLength(bytes, pos, complete);
    if (complete)
      out.append(bytes.substr(pos, len));
    else
      out.append(kReplacementChar);
    pos += len;
  }
  return out;
}

bool isUnicodeWhitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string_view byteToUnicode(uint8_t byte) {
  return byteLevelTables().byteToChar[byte];
}

std::optional<uint8_t> unicodeToByte(uint32_t codePoint) {
  if (codePoint >= 512)
    return std::nullopt;
  int16_t byte = byteLevelTables().charToByte[codePoint];
  if (byte < 0)
    return std::nullopt;
  return static_cast<uint8_t>(byte);
}

} // namespace infer::tokenizer
