// libFuzzer target: compiles the input as a chat template and renders it with a small fixed
// context under tight limits. Whatever the input, this must neither crash, hang, leak nor run out
// of memory: syntax errors, runtime errors and exceeded limits are all Status values.
//
// Run: scripts/fuzz.sh (seeds: src/serve/testdata/fuzz_chat_template/, links to real templates;
// dictionary: src/serve/testdata/fuzz_chat_template.dict).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "serve/chat_template.h"

namespace {

const nlohmann::ordered_json& Context() {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi <b>\"there\"</b> 🌍"},
      {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!", "reasoning_content": null,
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2.5, true]}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"t\": 18}"},
      {"role": "user", "content": [{"type": "text", "text": "parts"}, "tail"]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "add_generation_prompt": true,
    "enable_thinking": false,
    "bos_token": "<s>",
    "eos_token": "</s>"
  })");
  return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16 * 1024) return 0;
  std::string_view source(reinterpret_cast<const char*>(data), size);
  auto compiled = gyre::ChatTemplate::Compile(source);
  if (!compiled.ok()) return 0;
  gyre::ChatTemplate::RenderOptions options;
  options.now = std::tm{};
  options.max_steps = 200'000;
  options.max_output_bytes = 1 << 20;
  options.max_list_length = 10'000;
  options.max_call_depth = 32;
  auto rendered = (*compiled)->Render(Context(), options);
  (void)rendered;
  options.python_str = true;
  rendered = (*compiled)->Render(Context(), options);
  return 0;
}
