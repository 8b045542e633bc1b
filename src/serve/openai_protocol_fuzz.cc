// libFuzzer target: the request bodies of POST /v1/chat/completions, /v1/completions and
// /v1/responses.
//
// Each input is parsed by ParseChatRequest, ParseCompletionRequest (openai_protocol.h) and
// ParseResponsesRequest (responses_protocol.h: its chat request is held to the chat rules), as
// the server does with the body of each route. Whatever the bytes, neither may crash, hang,
// throw or break its contract (trap on violation):
//   * a refusal is InvalidArgument, and its OpenAI error object (ApiError::FromStatus → 400,
//     Body) and the SSE form of a request build without throwing;
//   * an accepted request holds only validated values: temperature in [0, 2], top_p in (0, 1],
//     min_p in [0, 1], top_k >= 0, max_tokens >= 1, top_logprobs in [0, 20] and only with
//     logprobs, non-empty stop strings, non-negative stop token ids;
//   * chat: messages is a non-empty array of objects whose role is system, user, assistant or
//     tool and whose content is a string or null; tool call arguments are objects; tools is null
//     or an array; chat_template_kwargs is an object; continue_final_message excludes
//     add_generation_prompt;
//   * completions: the prompt is non-empty text or non-empty non-negative ids.
//
// Run: scripts/fuzz.sh (seeds: src/serve/testdata/fuzz_openai_protocol/).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "serve/openai_protocol.h"
#include "serve/responses_protocol.h"

namespace {

using gyre::serve::Json;

void CheckRefusal(const gyre::Status& s) {
  if (s.code() != gyre::StatusCode::kInvalidArgument) __builtin_trap();
  const gyre::serve::ApiError e = gyre::serve::ApiError::FromStatus(s);
  if (e.status != 400) __builtin_trap();
  (void)e.Body();
  (void)gyre::serve::SseData(e.ToJson());
}

void CheckGeneration(const gyre::serve::GenerationRequest& g) {
  if (!(g.temperature >= 0 && g.temperature <= 2)) __builtin_trap();
  if (!(g.top_p > 0 && g.top_p <= 1)) __builtin_trap();
  if (!(g.min_p >= 0 && g.min_p <= 1)) __builtin_trap();
  if (g.top_k < 0) __builtin_trap();
  if (g.max_tokens && *g.max_tokens < 1) __builtin_trap();
  if (g.top_logprobs < 0 || g.top_logprobs > 20 || (g.top_logprobs > 0 && !g.logprobs)) __builtin_trap();
  if (g.include_usage && !g.stream) __builtin_trap();
  for (const auto& s : g.stop) {
    if (s.empty()) __builtin_trap();
  }
  for (int32_t id : g.stop_token_ids) {
    if (id < 0) __builtin_trap();
  }
}

void CheckChat(const gyre::serve::ChatRequest& r) {
  CheckGeneration(r.gen);
  if (!r.messages.is_array() || r.messages.empty()) __builtin_trap();
  for (const Json& m : r.messages) {
    if (!m.is_object() || !m.contains("role")) __builtin_trap();
    const Json& role = m.at("role");
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") __builtin_trap();
    if (m.contains("content") && !m.at("content").is_string() && !m.at("content").is_null()) __builtin_trap();
    if (m.contains("tool_calls") && !m.at("tool_calls").is_null()) {
      for (const Json& call : m.at("tool_calls")) {
        if (!call.contains("function") || !call.at("function").contains("arguments") ||
            !call.at("function").at("arguments").is_object()) {
          __builtin_trap();
        }
      }
    }
  }
  if (!r.tools.is_null() && !r.tools.is_array()) __builtin_trap();
  if (!r.chat_template_kwargs.is_object()) __builtin_trap();
  if (r.continue_final_message && r.add_generation_prompt) __builtin_trap();
  (void)gyre::serve::DumpJson(r.messages);
}

void CheckCompletion(const gyre::serve::CompletionRequest& r) {
  CheckGeneration(r.gen);
  if (r.prompt_is_ids) {
    if (r.prompt_ids.empty()) __builtin_trap();
    for (int32_t id : r.prompt_ids) {
      if (id < 0) __builtin_trap();
    }
  } else if (r.prompt_text.empty()) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  if (auto chat = gyre::serve::ParseChatRequest(body); chat.ok()) {
    CheckChat(*chat);
  } else {
    CheckRefusal(chat.error());
  }
  if (auto completion = gyre::serve::ParseCompletionRequest(body); completion.ok()) {
    CheckCompletion(*completion);
  } else {
    CheckRefusal(completion.error());
  }
  if (auto responses = gyre::serve::ParseResponsesRequest(body); responses.ok()) {
    CheckChat(responses->chat);
    if (!responses->echo.is_object()) __builtin_trap();
  } else {
    CheckRefusal(responses.error());
  }
  return 0;
}
