// GPT-2 byte-level alphabet: every byte maps to one printable code point (`bytes_to_unicode` in
// GPT-2's encoder.py; `bytes_char` in HF tokenizers), so BPE vocabularies never see raw bytes.
// Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF map to themselves; the other 68 bytes map, in
// order, to U+0100.. (so ' ' is U+0120 'Ġ' and '\n' is U+010A 'Ċ').
//
// Thread safety: pure functions over constant tables.
#pragma once

#include <string>
#include <string_view>

namespace gyre::tok {

// The code point for byte `b`.
char32_t ByteToChar(unsigned char b);
// The byte for code point `cp`, or -1 when `cp` is not in the alphabet.
int CharToByte(char32_t cp);

// Appends the byte-level form of `raw` (each byte becomes its code point, UTF-8 encoded).
void AppendByteLevel(std::string_view raw, std::string* out);

// Inverse for one token as HF's ByteLevel decoder does it: when every char of `token` is in the
// alphabet, the mapped bytes; otherwise `token` unchanged (that is how added tokens such as
// "<|im_end|>\n" survive). REQUIRES: `token` is valid UTF-8.
std::string ByteLevelDecodeToken(std::string_view token);

}  // namespace gyre::tok
