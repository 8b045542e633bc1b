#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "tokenizer/unicode.h"

namespace gyre::tok {
namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 324> char_to_byte{};  // code points in the alphabet are all < 0x144

  Tables() {
    char_to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable(b) ? static_cast<char32_t>(b) : 0x100 + next++;
      byte_to_char[b] = cp;
      AppendUtf8(cp, &byte_to_utf8[b]);
      char_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

char32_t ByteToChar(unsigned char b) { return GetTables().byte_to_char[b]; }

int CharToByte(char32_t cp) {
  const Tables& t = GetTables();
  return cp < t.char_to_byte.size() ? t.char_to_byte[cp] : -1;
}

void AppendByteLevel(std::string_view raw, std::string* out) {
  const Tables& t = GetTables();
  for (char c : raw) out->append(t.byte_to_utf8[static_cast<unsigned char>(c)]);
}

std::string ByteLevelDecodeToken(std::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    const int b = CharToByte(DecodeUtf8(token, &i));
    if (b < 0) return std::string(token);
    bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

}  // namespace gyre::tok
