// Chat messages and tools: the validation and normalisation ParseChatRequest applies before the
// chat template sees them. Every error is InvalidArgument naming the field ("'messages[2].role'
// ...", "'tools[0].function.name' ...").
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "serve/openai_protocol.h"

namespace gyre::serve {

// Roles: system, user, assistant and tool reach the template as sent; developer (OpenAI's newer
// name for system) becomes system, as vLLM and OpenAI treat it; any other role is refused with
// its index. Content becomes a string (text parts joined by "\n") or null. An assistant
// message's tool_calls must be function calls; arguments sent as JSON text (OpenAI's form) are
// parsed to an object ("" to {}), the form chat templates iterate over, as vLLM does.
// Image parts ({"type": "image_url", "image_url": {"url": ...}}) of user messages are accepted
// when `images` is not null: each becomes kImageSentinel in the content text and an entry of
// `images` (url, the field that names it); the URL is not fetched here (serve/image_inputs.h).
// REQUIRES: `messages` is a non-empty array.
Status NormaliseMessages(Json& messages, std::vector<ImageInput>* images = nullptr);

// `tools` must be an array of {"type": "function", "function": {"name": non-empty string,
// "description": string, "parameters": object, "strict": false}} ("type" may be omitted; strict
// true is refused: it needs constrained decoding).
Status CheckTools(const Json& tools);

// Applies tool_choice (`choice` may be null: absent) to the validated `tools` (null when absent):
// "none" withholds the tools from the template (so the model is not offered them), "auto" keeps
// them, "required" and a named function keep them and force calls: `*forced` becomes "" for
// "required" (one call or more, of any tool) or the function's name (exactly one call of it),
// which the caller turns into a constraint (serve/tool_call_grammar.h). A named function that
// is not in `tools` is refused. Any choice but "none" needs tools. `forced` is left empty
// (nullopt) when no call is forced.
Status ApplyToolChoice(const Json* choice, Json* tools, std::optional<std::string>* forced);

}  // namespace gyre::serve
