// libFuzzer target: ChatOutputParser (ThinkSplitter, then GlmToolParser) on generated text.
//
// The first input byte picks the options (reasoning split, starting inside the block, tool-call
// parsing) and a piece length (1 to 32); the rest is the model's text. Fed whole and fed in
// pieces of that length, the parse must be the same (trap otherwise): the same reasoning, content
// and calls, every call with a non-empty name and arguments that are the text of a JSON object.
// With every option off, the content is the text itself.
//
// Run: scripts/fuzz.sh (seeds: src/serve/testdata/fuzz_chat_output/, the tool-call fixtures).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "serve/openai_output.h"

namespace {

using gyre::serve::ChatOutputParser;
using gyre::serve::ChatParseOptions;
using gyre::serve::Json;

struct Totals {
  std::string reasoning, content, calls;
};

Totals Parse(const ChatParseOptions& o, std::string_view text, size_t piece) {
  ChatOutputParser p(o);
  for (size_t at = 0; at < text.size(); at += piece) (void)p.Push(text.substr(at, piece));
  (void)p.Finish();
  Totals t{p.reasoning(), p.content(), ""};
  for (const auto& c : p.calls()) {
    if (c.name.empty()) __builtin_trap();
    const Json args = Json::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
    if (!args.is_object()) __builtin_trap();
    t.calls += c.name + '\0' + c.arguments + '\0';
  }
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 64 * 1024) return 0;
  const uint8_t mode = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  ChatParseOptions o;
  o.split_reasoning = mode & 1;
  o.reasoning_starts_inside = (mode & 2) && o.split_reasoning;
  o.parse_tool_calls = mode & 4;
  if (o.parse_tool_calls) {
    o.tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters":
        {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");
  }
  const size_t piece = (mode >> 3) + 1;
  const Totals whole = Parse(o, text, text.size() + 1);
  const Totals pieces = Parse(o, text, piece);
  if (whole.reasoning != pieces.reasoning || whole.content != pieces.content || whole.calls != pieces.calls) {
    __builtin_trap();
  }
  if (!o.split_reasoning && !o.parse_tool_calls && whole.content != text) __builtin_trap();
  return 0;
}
