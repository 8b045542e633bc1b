// OpenAI's Responses API (POST /v1/responses) over the chat path: the request is read into a
// ChatRequest (its input items become chat messages, its function tools chat tools), so the
// prompt, the engine parameters and the parsing of the answer (reasoning, GLM tool calls) are the
// chat path's own (openai_serving.h); only the request's shape and the answer's shape differ.
// The answer's shape (the Response object and its stream events) is responses_output.h.
//
// Fields: every field of the openai client's ResponseCreateParams has a row in openai_fields.cc
// (endpoint kResponses) and is honoured or refused with a 400 naming it; docs/serve.md has the
// table. gyre keeps no responses: `store` is accepted only as false, and previous_response_id and
// conversation are refused (the client sends the whole conversation in `input`).
//
// Thread safety: pure functions.
#pragma once

#include <string_view>

#include "serve/openai_protocol.h"

namespace gyre::serve {

struct ResponsesRequest {
  // messages (instructions first, as a system message), tools in chat form (null when absent or
  // withheld by tool_choice "none"), chat_template_kwargs ({"enable_thinking": false} for
  // reasoning effort "none"), and the generation fields (max_tokens from max_output_tokens).
  ChatRequest chat;
  // What the Response object repeats of the request, in its order: instructions,
  // max_output_tokens, parallel_tool_calls, previous_response_id, reasoning, store, temperature,
  // text, tool_choice, tools (as sent), top_p, truncation, user (when sent), metadata.
  Json echo;
};

// Errors: InvalidArgument naming the field ('input[2].content[0].type', 'tools[0].name',
// 'previous_response_id', ...), as ParseChatRequest.
Result<ResponsesRequest> ParseResponsesRequest(std::string_view body);

// The input items as chat messages (exposed for tests): `input` a string (one user message) or an
// array of items. Message items (type "message" or absent; roles user, system, developer,
// assistant; content a string or input_text / output_text parts) become messages;
// function_call items become tool_calls of an assistant message (joined to the assistant message
// right before them, if any); function_call_output items become tool messages; a reasoning
// item's text becomes the reasoning_content of the assistant message that follows it. Any other
// item type or content part is refused by name. `instructions` (may be null) is put first as a
// system message.
Result<Json> ResponsesInputToMessages(const Json& input, const Json* instructions);

}  // namespace gyre::serve
