// The OpenAI HTTP API's wire format: request parsing and validation, and the JSON of responses,
// stream chunks and errors. Pure functions: no engine, no I/O, no tokenizer.
//
// Requests: ParseChatRequest / ParseCompletionRequest read a body into typed records. Every
// field error is InvalidArgument whose message starts with the field name in single quotes
// ("'temperature' must be a number in [0, 2]"); ApiError::FromStatus turns that name into the
// error's `param`. Nothing is accepted and ignored: every field is honoured or refused, unknown
// fields included (the table of fields is in openai_fields.h, for users in docs/serve.md).
//
// Responses follow OpenAI's shapes exactly (chat.completion, chat.completion.chunk,
// text_completion) so official clients parse them; the shapes are documented beside each builder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

#include "ops/penalties.h"
#include "structured/grammar.h"

namespace gyre::serve {

using Json = nlohmann::ordered_json;  // keeps key order (tool schemas reach the template as sent)

// ---- errors -----------------------------------------------------------------------------------

// An error answer: the HTTP status and the OpenAI error object
// {"error": {"message", "type", "param", "code"}} (param/code null when empty).
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
  int retry_after_s = 0;  // > 0: send a Retry-After header (429)

  // InvalidArgument→400, NotFound→404, ResourceExhausted→429 (Retry-After: 1), Unavailable→503,
  // DeadlineExceeded→504, Unimplemented→501, anything else→500. `param` comes from a leading
  // quoted field name in the message, if any. ModelNotFound's status gets code "model_not_found"
  // and param "model".
  static ApiError FromStatus(const Status& s);
  Json ToJson() const;
  std::string Body() const { return ToJson().dump(); }
};

// The status code and OpenAI `type` for an HTTP status ("invalid_request_error", ...).
const char* ErrorTypeFor(int http_status);

// ---- requests ---------------------------------------------------------------------------------

// Fields common to chat and completions, after validation.
struct GenerationRequest {
  std::string model;                   // "" when absent
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  std::optional<int64_t> max_tokens;   // max_completion_tokens or max_tokens; >= 1
  float temperature = 1.0f;            // [0, 2]; 0 = greedy
  float top_p = 1.0f;                  // (0, 1]
  int64_t top_k = 0;                   // 0 = off (-1 is accepted as off)
  float min_p = 0.0f;                  // [0, 1]
  std::optional<uint64_t> seed;        // absent: a random seed per request
  std::vector<std::string> stop;       // stop sequences (non-empty strings)
  std::vector<int32_t> stop_token_ids; // vLLM extension
  bool include_stop_str = false;       // vLLM include_stop_str_in_output: the stop string or stop token's text stays
  bool logprobs = false;               // report the sampled token's logprob
  int32_t top_logprobs = 0;            // [0, 20] alternatives per token
  bool ignore_eos = false;             // vLLM extension: EOS does not stop generation
  bool skip_special_tokens = true;     // vLLM extension: drop special tokens from the text
  bool echo = false;                   // chat: prepend the final assistant message; completions: the prompt
  bool add_special_tokens = false;     // vLLM extension: add the tokenizer's BOS (chat default false, else true)
  std::string request_id;              // vLLM extension: the response id's suffix; "" = random
  // Structured output: response_format json_object / json_schema, vLLM's guided_json /
  // guided_regex / guided_choice or structured_outputs {json, regex, choice} (at most one of
  // them); compiled against the vocabulary when the request is built (errors name the field).
  std::optional<structured::ConstraintSpec> constraint;
  std::string constraint_field;        // the field it came from
  // Logit processing (ops/penalties.h).
  float frequency_penalty = 0.0f;      // [-2, 2]
  float presence_penalty = 0.0f;       // [-2, 2]
  float repetition_penalty = 1.0f;     // (0, 2], vLLM extension
  int64_t min_tokens = 0;              // vLLM extension; <= max_tokens
  std::vector<ops::LogitBias> logit_bias;  // biases in [-100, 100]; ids checked against the vocab later
  int64_t n = 1;                       // choices [1, 128]: one engine request each
};

// An image part of a chat message (docs/vision.md): its URL as sent and the field naming it
// ("messages[1].content[0].image_url"). The content text holds kImageSentinel where it was.
struct ImageInput {
  std::string url;
  std::string field;
};
inline constexpr const char* kImageSentinel = "\x1egyre:image\x1e";

struct ChatRequest {
  GenerationRequest gen;
  // Array; every content normalised to a string or null, "developer" roles renamed "system",
  // tool call arguments given as JSON text parsed to objects (as chat templates expect them).
  Json messages;
  Json tools;                 // null when absent or withheld (tool_choice "none")
  // tool_choice "required" ("") or a named function (its name): calls are forced, by the
  // constraint in gen (constraint_field "tool_choice"); nullopt otherwise.
  std::optional<std::string> forced_tool;
  Json chat_template_kwargs;  // object, possibly empty (e.g. {"enable_thinking": false})
  bool add_generation_prompt = true;
  // vLLM: the prompt ends inside the final message (its content is non-empty text), which the
  // model continues. REQUIRES then: !add_generation_prompt.
  bool continue_final_message = false;
  std::vector<ImageInput> images;  // image parts, in order (their sentinels are in `messages`)
};

struct CompletionRequest {
  GenerationRequest gen;
  bool prompt_is_ids = false;
  std::string prompt_text;          // when !prompt_is_ids
  std::vector<int32_t> prompt_ids;  // when prompt_is_ids (range checked later, against the vocab)
};

// InvalidArgument "'<field>' <what>": the convention every field error follows.
Status FieldError(std::string_view field, std::string_view what);
// NotFound "The model `<name>` does not exist." (OpenAI's words; a 404 with code model_not_found).
Status ModelNotFound(std::string_view name);

// A request body: JSON (nesting depth checked before parsing) that is an object.
// InvalidArgument otherwise.
Result<Json> ParseRequestBody(std::string_view body);

// The fields that shape a chat prompt, each null when absent (shared by /v1/chat/completions and
// the messages form of /tokenize).
struct ChatPromptFields {
  const Json* messages = nullptr;
  const Json* tools = nullptr;
  const Json* tool_choice = nullptr;
  const Json* chat_template_kwargs = nullptr;
  const Json* add_generation_prompt = nullptr;
  const Json* continue_final_message = nullptr;
};
// Validates them into `r`'s messages, tools, chat_template_kwargs, add_generation_prompt and
// continue_final_message (rules as in ParseChatRequest). InvalidArgument naming the field.
Status ReadChatPrompt(const ChatPromptFields& fields, ChatRequest* r);

// Errors: InvalidArgument (malformed JSON, a missing, mistyped or out-of-range field, or a
// feature gyre does not support); the message names the field.
Result<ChatRequest> ParseChatRequest(std::string_view body);
Result<CompletionRequest> ParseCompletionRequest(std::string_view body);

// ---- responses --------------------------------------------------------------------------------

// Identity shared by every chunk of one response.
struct ResponseMeta {
  std::string id;       // "chatcmpl-…" or "cmpl-…"
  int64_t created = 0;  // unix seconds
  std::string model;
};

// A fresh id: `prefix` + 24 random alphanumerics.
std::string NewResponseId(std::string_view prefix);
const char* SystemFingerprint();

Json UsageJson(int64_t prompt_tokens, int64_t completion_tokens);

// chat.completion.chunk: {"id","object","created","model","system_fingerprint","choices":[{"index",
// "delta":{...},"logprobs":...,"finish_reason":...}]} (+ "usage": null when include_usage).
// `finish_reason` empty → null; `logprobs` may be null; `index` is the choice's (n > 1).
Json ChatChunk(const ResponseMeta& m, Json delta, Json logprobs, std::string_view finish_reason, bool usage_null,
               int64_t index = 0);
// The final usage-only chunk of a stream with include_usage: "choices": [] and "usage": {...}.
Json ChatUsageChunk(const ResponseMeta& m, int64_t prompt_tokens, int64_t completion_tokens);
// One tool call as OpenAI writes it: {"id", "type": "function", "function": {"name",
// "arguments"}} (`arguments`: JSON text). A stream chunk's entry has "index" first.
Json ToolCallJson(const std::string& id, const std::string& name, const std::string& arguments);
// The answer's message: {"role": "assistant", "content"} (content null when it is empty and there
// are tool calls), with "reasoning_content" when `reasoning` is not empty and "tool_calls" when
// `tool_calls` (an array of ToolCallJson) is not empty.
Json AssistantMessage(const std::string& content, const std::string& reasoning = "", Json tool_calls = Json::array());
// One choice of a chat.completion: {"index","message","logprobs","finish_reason"}.
Json ChatChoice(int64_t index, Json message, Json logprobs, std::string_view finish_reason);
// chat.completion with one choice (ChatChoice 0) and usage; more choices (n > 1) are appended to
// its "choices" by the caller.
Json ChatResponse(const ResponseMeta& m, Json message, Json logprobs, std::string_view finish_reason,
                  int64_t prompt_tokens, int64_t completion_tokens);

// One choice of a text_completion: {"index","text","logprobs","finish_reason"}.
Json CompletionChoice(int64_t index, const std::string& text, Json logprobs, std::string_view finish_reason);
// text_completion chunk: "choices":[CompletionChoice]; CompletionResponse: choice 0 and usage
// (more choices appended by the caller, as for ChatResponse).
Json CompletionChunk(const ResponseMeta& m, const std::string& text, Json logprobs, std::string_view finish_reason,
                     bool usage_null, int64_t index = 0);
Json CompletionUsageChunk(const ResponseMeta& m, int64_t prompt_tokens, int64_t completion_tokens);
Json CompletionResponse(const ResponseMeta& m, const std::string& text, Json logprobs, std::string_view finish_reason,
                        int64_t prompt_tokens, int64_t completion_tokens);

// One server-sent event: "data: <compact json>\n\n" (invalid UTF-8 replaced by U+FFFD).
std::string SseData(const Json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
// Compact JSON text with invalid UTF-8 replaced (never throws).
std::string DumpJson(const Json& j);

}  // namespace gyre::serve
