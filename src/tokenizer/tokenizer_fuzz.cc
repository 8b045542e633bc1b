// libFuzzer target: Tokenizer::FromJson, Encode, Decode and StreamDecoder must never crash, hang
// or break their contracts, whatever the bytes.
//
// Input: a tokenizer.json, optionally followed by a NUL byte and a text to encode (raw bytes,
// possibly invalid UTF-8). Without the NUL, a fixed mixed-script text is encoded. When the JSON
// loads, the checks below trap on any contract violation:
//   * Encode's ids are inside [0, vocab_size());
//   * Decode's output is valid UTF-8 and equals the concatenated StreamDecoder output;
//   * Decode of ids drawn from the input bytes succeeds (they are in range).
//
// Run: scripts/fuzz.sh. Seeds (src/tokenizer/testdata/fuzz_tokenizer/): small byte-level
// tokenizer.json files (GPT-2 ByteLevel regex; Split + ByteLevel; added tokens with lstrip/rstrip;
// NFC), shaped like the ones tokenizer_test.cc builds with MakeJson(), one followed by a text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

constexpr std::string_view kDefaultText =
    "Hello world! I'm 12345 <|endoftext|> caf\xC3\xA9 cafe\xCC\x81 \xE4\xBD\xA0\xE5\xA5\xBD "
    "\xF0\x9F\x98\x80\n\n\t  x";

std::string Decoded(const gyre::Tokenizer& t, const std::vector<int32_t>& ids, bool skip) {
  auto s = t.Decode(ids, skip);
  if (!s.ok()) __builtin_trap();  // every id is in range here
  if (!gyre::tok::IsValidUtf8(*s)) __builtin_trap();
  gyre::StreamDecoder stream(t, skip);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = stream.Push(id);
    if (!gyre::tok::IsValidUtf8(piece)) __builtin_trap();
    streamed += piece;
  }
  streamed += stream.Flush();
  if (streamed != *s) __builtin_trap();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view text =
      nul == std::string_view::npos ? kDefaultText : input.substr(nul + 1);

  auto t = gyre::Tokenizer::FromJson(json);
  if (!t.ok()) return 0;
  const gyre::Tokenizer& tok = **t;
  const int32_t vocab_size = tok.vocab_size();

  for (bool parse_special : {true, false}) {
    auto ids = tok.Encode(text, parse_special);
    if (!ids.ok()) continue;
    for (int32_t id : *ids) {
      if (id < 0 || id >= vocab_size) __builtin_trap();
    }
    Decoded(tok, *ids, /*skip=*/false);
    Decoded(tok, *ids, /*skip=*/true);
  }

  // Ids made from the input bytes exercise lossy decoding of arbitrary byte sequences.
  if (vocab_size > 0) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < json.size() && ids.size() < 64; i += 7) {
      ids.push_back(static_cast<int32_t>(static_cast<unsigned char>(json[i]) * 131 % vocab_size));
    }
    Decoded(tok, ids, /*skip=*/false);
  }
  if (tok.Decode(std::vector<int32_t>{vocab_size}).ok()) __builtin_trap();
  if (!tok.TokenBytes(-1).empty() || !tok.TokenBytes(vocab_size).empty()) __builtin_trap();
  (void)tok.TokenToId(json.substr(0, 16));
  return 0;
}
