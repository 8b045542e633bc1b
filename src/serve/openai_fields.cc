// The field table (sections: OpenAI's fields, vLLM's sampling extensions, vLLM's other extensions,
// OpenAI's Responses fields), then BodyFields.
#include "serve/openai_fields.h"

#include <algorithm>

namespace gyre::serve {

namespace {

constexpr uint8_t kC = static_cast<uint8_t>(Endpoint::kChat);
constexpr uint8_t kP = static_cast<uint8_t>(Endpoint::kCompletions);
constexpr uint8_t kBoth = kC | kP;
constexpr uint8_t kR = static_cast<uint8_t>(Endpoint::kResponses);
constexpr FieldUse kHon = FieldUse::kHonoured, kDef = FieldUse::kDefaultOnly, kUnu = FieldUse::kUnused,
                   kRef = FieldUse::kRefused;

constexpr std::string_view kNeedsGrammar =
    "is not supported: structured output takes response_format, guided_json, guided_regex, guided_choice or "
    "structured_outputs (JSON schemas, regexes, choices; no grammars)";

constexpr RequestField kFields[] = {
    // ---- OpenAI ----
    {"model", kBoth, kHon, "", "must be the served model name (404 otherwise); may be omitted"},
    {"messages", kC, kHon, "", "the conversation, rendered by the chat template"},
    {"prompt", kP, kHon, "", "a string, token ids, or a one-element array of either"},
    {"stream", kBoth, kHon, "", "server-sent events"},
    {"stream_options", kBoth, kHon, "",
     "include_usage is honoured; continuous_usage_stats and include_obfuscation are refused when true"},
    {"max_tokens", kBoth, kHon, "", "completion length limit"},
    {"max_completion_tokens", kC, kHon, "", "completion length limit (wins over max_tokens)"},
    {"temperature", kBoth, kHon, "", "in [0, 2]; 0 is greedy"},
    {"top_p", kBoth, kHon, "", "in (0, 1]"},
    {"seed", kBoth, kHon, "", "a fixed seed gives the same text; absent: a random seed"},
    {"stop", kBoth, kHon, "", "stop strings, matched on the text (excluded unless include_stop_str_in_output)"},
    {"logprobs", kBoth, kHon, "", "chat: a boolean; completions: the number of alternatives (0 to 20)"},
    {"top_logprobs", kC, kHon, "", "alternatives per token (0 to 20); needs logprobs true"},
    {"echo", kBoth, kHon, "",
     "chat: the final assistant message is prepended to the answer; completions: the prompt is "
     "prepended (refused together with logprobs)"},
    {"tools", kC, kHon, "",
     "validated, given to the chat template (withheld when tool_choice is 'none'); calls in GLM markup come back "
     "as tool_calls"},
    {"tool_choice", kC, kHon, "",
     "'auto' (the default with tools), 'none', and 'required' and a named function, which force calls in GLM "
     "markup by constrained decoding (arguments valid for the tool's schema)"},
    {"n", kBoth, kHon, "",
     "1 to 128 choices, each its own engine request (seed + i with a seed; with prefix caching the prompt is "
     "prefilled once); streamed chunks carry their choice's index; usage counts the prompt once"},
    {"best_of", kBoth, kDef, "[1]", "is not supported yet (only 1): gyre does not rank extra candidates"},
    {"frequency_penalty", kBoth, kHon, "", "in [-2, 2]: minus penalty x the token's count in the output so far"},
    {"presence_penalty", kBoth, kHon, "", "in [-2, 2]: minus penalty for every token the output holds so far"},
    {"logit_bias", kBoth, kHon, "",
     "token id (a decimal string) to a bias in [-100, 100] added to its logit; ids outside the vocabulary are "
     "refused"},
    {"response_format", kBoth, kHon, "",
     "text, json_object and json_schema (strict or not: always enforced by constrained decoding; the JSON Schema "
     "subset in docs/serve.md, other keywords refused by name)"},
    {"suffix", kP, kDef, R"([""])", "is not supported (only \"\"): the models have no fill-in-the-middle format"},
    {"parallel_tool_calls", kC, kDef, "[true]",
     "is not supported yet (only true): gyre cannot limit the model to one tool call"},
    {"store", kC, kDef, "[false]", "is not supported (only false): gyre stores no completions"},
    {"service_tier", kC, kDef, R"(["auto", "default"])", "is not supported (only 'auto' or 'default'): gyre has one tier"},
    {"modalities", kC, kDef, R"([["text"]])", "is not supported (only [\"text\"])"},
    {"metadata", kC, kUnu, "object", "stored nowhere (gyre keeps no completions; the access log carries no request fields)"},
    {"user", kBoth, kUnu, "string", "recorded nowhere (the access log carries no request fields)"},
    {"safety_identifier", kC, kUnu, "string", "recorded nowhere (the access log carries no request fields)"},
    {"prompt_cache_key", kC, kUnu, "string", "a cache-routing hint; gyre has no prompt cache, so nothing to route"},
    {"prompt_cache_retention", kC, kUnu, "string", "gyre has no prompt cache, so it retains nothing"},
    {"prompt_cache_options", kC, kUnu, "object", "gyre has no prompt cache, so it has no breakpoints to place"},
    {"reasoning_effort", kC, kRef,  "",
     "is not supported: the model has no effort levels (chat_template_kwargs {\"enable_thinking\": false} turns "
     "thinking off)"},
    {"verbosity", kC, kRef, "", "is not supported: the model has no verbosity control"},
    {"audio", kC, kRef, "", "is not supported: gyre generates text only"},
    {"prediction", kC, kRef, "", "is not supported: gyre has no predicted-output decoding"},
    {"web_search_options", kC, kRef, "", "is not supported: gyre has no web search"},
    {"moderation", kC, kRef, "", "is not supported: gyre runs no moderation"},
    {"functions", kC, kRef, "", "is not supported (deprecated by OpenAI): use 'tools'"},
    {"function_call", kC, kRef, "", "is not supported (deprecated by OpenAI): use 'tool_choice'"},
    // ---- vLLM: sampling ----
    {"top_k", kBoth, kHon, "", "0 or -1 is off"},
    {"min_p", kBoth, kHon, "", "in [0, 1]"},
    {"stop_token_ids", kBoth, kHon, "", "token ids that end the completion (their text excluded unless "
     "include_stop_str_in_output)"},
    {"include_stop_str_in_output", kBoth, kHon, "", "the matched stop string (or stop token's text) stays in the text"},
    {"ignore_eos", kBoth, kHon, "", "EOS does not end the completion"},
    {"skip_special_tokens", kBoth, kHon, "", "special tokens add no text (default true)"},
    {"spaces_between_special_tokens", kBoth, kHon, "",
     "false joins special tokens without spaces (what gyre does); true is refused with skip_special_tokens false"},
    {"repetition_penalty", kBoth, kHon, "",
     "in (0, 2]: a token of the prompt or the output so far has a positive logit divided by it, another "
     "multiplied"},
    {"min_tokens", kBoth, kHon, "", "EOS and stop_token_ids cannot be drawn before this many tokens (<= max_tokens)"},
    {"use_beam_search", kBoth, kDef, "[false]", "is not supported (only false): gyre has no beam search"},
    {"length_penalty", kBoth, kDef, "[1]", "is not supported (only 1): it applies to beam search"},
    {"bad_words", kBoth, kDef, "[[]]", "is not supported yet (only []): it needs logit masking"},
    {"allowed_token_ids", kBoth, kRef, "", "is not supported yet: it needs logit masking"},
    {"truncate_prompt_tokens", kBoth, kRef, "", "is not supported yet"},
    {"prompt_logprobs", kBoth, kRef, "", "is not supported yet: the engine returns no prompt logprobs"},
    {"logits_processors", kBoth, kRef, "", "is not supported: gyre loads no logits processors"},
    // ---- vLLM: other extensions ----
    {"add_generation_prompt", kC, kHon, "", "end the prompt with an open assistant turn (default true)"},
    {"continue_final_message", kC, kHon, "",
     "the prompt ends inside the final message, which the model continues (refused with add_generation_prompt true)"},
    {"add_special_tokens", kBoth, kHon, "",
     "add the tokenizer's BOS (when its config asks for one); default false for chat, true for completions"},
    {"chat_template_kwargs", kC, kHon, "",
     "extra chat template variables (e.g. enable_thinking); messages, tools, add_generation_prompt, bos_token "
     "and eos_token are refused there"},
    {"request_id", kBoth, kHon, "", "the response id becomes chatcmpl-<id> / cmpl-<id>"},
    {"priority", kBoth, kDef, "[0]", "is not supported (only 0): gyre schedules first come, first served"},
    {"include_reasoning", kC, kDef, "[true]",
     "is not supported (only true): reasoning always comes back, in reasoning_content"},
    {"return_tokens_as_token_ids", kBoth, kDef, "[false]", "is not supported yet (only false)"},
    {"return_token_ids", kBoth, kDef, "[false]", "is not supported yet (only false)"},
    {"cache_salt", kBoth, kUnu, "string", "no effect yet: the prefix cache is shared across requests, not isolated by salt (a hit never changes an output)"},
    {"chat_template", kC, kRef, "", "is not supported: start the server with --chat-template"},
    {"documents", kC, kRef, "",
     "is not supported: the bundled template has no documents; pass them in chat_template_kwargs if yours does"},
    {"mm_processor_kwargs", kC, kRef, "", "is not supported: gyre serves text only"},
    {"media_io_kwargs", kC, kRef, "", "is not supported: gyre serves text only"},
    {"prompt_embeds", kP, kRef, "", "is not supported: prompts are text or token ids"},
    {"guided_json", kBoth, kHon, "", "a JSON schema (object or JSON text), enforced by constrained decoding"},
    {"guided_regex", kBoth, kHon, "", "the regex subset in docs/serve.md, enforced by constrained decoding"},
    {"guided_choice", kBoth, kHon, "", "the output is exactly one of the strings"},
    {"guided_grammar", kBoth, kRef, "", kNeedsGrammar},
    {"guided_decoding_backend", kBoth, kRef, "", kNeedsGrammar},
    {"guided_whitespace_pattern", kBoth, kRef, "", kNeedsGrammar},
    {"structural_tag", kBoth, kRef, "", kNeedsGrammar},
    {"structured_outputs", kBoth, kHon, "", "one of json, regex, choice, json_object (true)"},
    {"kv_transfer_params", kBoth, kRef, "", "is not supported: gyre serve runs no disaggregated prefill"},
    {"vllm_xargs", kBoth, kRef, "", "is not supported: gyre has no request extensions"},
    // ---- OpenAI Responses (/v1/responses; parsed in responses_protocol.cc) ----
    {"model", kR, kHon, "", "must be the served model name (404 otherwise); may be omitted"},
    {"input", kR, kHon, "",
     "a string (one user message) or a list of message, function_call, function_call_output and reasoning "
     "items, rendered by the chat template"},
    {"instructions", kR, kHon, "", "a system message put before the input; repeated in the response"},
    {"max_output_tokens", kR, kHon, "", "output length limit (reasoning included); a cut answer is 'incomplete'"},
    {"temperature", kR, kHon, "", "in [0, 2]; 0 is greedy"},
    {"top_p", kR, kHon, "", "in (0, 1]"},
    {"stream", kR, kHon, "", "typed server-sent events, response.created to response.completed"},
    {"tools", kR, kHon, "",
     "function tools, given to the chat template (withheld when tool_choice is 'none'); calls in GLM markup come "
     "back as function_call items"},
    {"tool_choice", kR, kHon, "",
     "'auto' (the default with tools), 'none', and 'required' and a named function, which force calls in GLM "
     "markup by constrained decoding (arguments valid for the tool's schema)"},
    {"reasoning", kR, kHon, "",
     "{\"effort\": \"none\"} turns the chat template's thinking off; other efforts and summaries are refused"},
    {"metadata", kR, kHon, "", "repeated in the response (at most 16 keys, string values)"},
    {"user", kR, kHon, "", "repeated in the response"},
    {"store", kR, kDef, "[false]",
     "is not supported (only false): gyre keeps no responses; send the whole conversation in 'input'"},
    {"previous_response_id", kR, kRef, "",
     "is not supported: gyre keeps no responses (store is false); send the whole conversation in 'input'"},
    {"conversation", kR, kRef, "",
     "is not supported: gyre keeps no conversations; send the whole conversation in 'input'"},
    {"background", kR, kDef, "[false]", "is not supported (only false): a response is answered in its request"},
    {"stream_options", kR, kDef, R"([{}, {"include_obfuscation": false}])",
     "is not supported (only include_obfuscation false): gyre adds no obfuscation"},
    {"parallel_tool_calls", kR, kDef, "[true]",
     "is not supported yet (only true): gyre cannot limit the model to one tool call"},
    {"include", kR, kDef, "[[]]", "is not supported yet (only []): gyre has no extra output data to include"},
    {"text", kR, kDef, R"([{"format": {"type": "text"}}])",
     "is not supported yet (only {\"format\": {\"type\": \"text\"}}): json_object and json_schema need "
     "constrained decoding, and the model has no verbosity control"},
    {"truncation", kR, kDef, R"(["disabled"])",
     "is not supported (only 'disabled'): an input longer than the context is refused, never cut"},
    {"top_logprobs", kR, kDef, "[0]", "is not supported yet (only 0)"},
    {"service_tier", kR, kDef, R"(["auto", "default"])", "is not supported (only 'auto' or 'default'): gyre has one tier"},
    {"safety_identifier", kR, kUnu, "string", "recorded nowhere (the access log carries no request fields)"},
    {"prompt_cache_key", kR, kUnu, "string", "a cache-routing hint; gyre has no prompt cache, so nothing to route"},
    {"prompt_cache_retention", kR, kUnu, "string", "gyre has no prompt cache, so it retains nothing"},
    {"prompt_cache_options", kR, kUnu, "object", "gyre has no prompt cache, so it has no breakpoints to place"},
    {"prompt", kR, kRef, "", "is not supported: gyre has no stored prompt templates (send 'input')"},
    {"context_management", kR, kRef, "", "is not supported: gyre does not compact contexts"},
    {"moderation", kR, kRef, "", "is not supported: gyre runs no moderation"},
};

bool Has(const RequestField& f, Endpoint e) { return (f.endpoints & static_cast<uint8_t>(e)) != 0; }

// kDefaultOnly rows' accepted values, parsed once (same order as kFields).
const std::vector<Json>& AcceptedValues() {
  static const std::vector<Json> values = [] {
    std::vector<Json> v;
    for (const RequestField& f : kFields) {
      if (f.use != kDef) {
        v.emplace_back();
        continue;
      }
      v.push_back(Json::parse(f.values, nullptr, /*allow_exceptions=*/false));
      GYRE_CHECK(v.back().is_array());  // a malformed row is a programming error
    }
    return v;
  }();
  return values;
}

bool HasType(const Json& v, std::string_view type) { return type == "string" ? v.is_string() : v.is_object(); }

}  // namespace

const char* EndpointPath(Endpoint e) {
  switch (e) {
    case Endpoint::kChat: return "/v1/chat/completions";
    case Endpoint::kCompletions: return "/v1/completions";
    case Endpoint::kResponses: return "/v1/responses";
  }
  return "?";
}

const char* FieldUseName(FieldUse u) {
  switch (u) {
    case FieldUse::kHonoured: return "honoured";
    case FieldUse::kDefaultOnly: return "default only";
    case FieldUse::kUnused: return "unused";
    case FieldUse::kRefused: return "refused";
  }
  return "?";
}

std::span<const RequestField> RequestFields() { return kFields; }

const RequestField* FindRequestField(std::string_view name, Endpoint e) {
  for (const RequestField& f : kFields) {
    if (f.name == name && Has(f, e)) return &f;
  }
  return nullptr;
}

// ---- BodyFields -------------------------------------------------------------------------------

Result<BodyFields> BodyFields::Open(const Json& body, Endpoint e) {
  GYRE_CHECK(body.is_object());
  for (const auto& [key, value] : body.items()) {
    if (value.is_null() || FindRequestField(key, e)) continue;
    for (Endpoint other : {Endpoint::kChat, Endpoint::kCompletions, Endpoint::kResponses}) {
      if (FindRequestField(key, other)) {
        return FieldError(key, std::string("is a field of ") + EndpointPath(other) + ", not of " + EndpointPath(e));
      }
    }
    return FieldError(key, "is not a request field gyre knows (unknown fields are refused, not ignored)");
  }
  return BodyFields(body, e);
}

const Json* BodyFields::Get(std::string_view name) {
  const RequestField* f = FindRequestField(name, endpoint_);
  GYRE_CHECK(f != nullptr);  // a field the parser reads must have a row in kFields
  if (std::find(read_.begin(), read_.end(), f->name) == read_.end()) read_.push_back(f->name);
  auto it = body_->find(std::string(name));
  if (it == body_->end() || it->is_null()) return nullptr;
  return &*it;
}

Status BodyFields::CheckTableFields() {
  const std::vector<Json>& accepted = AcceptedValues();
  for (size_t i = 0; i < std::size(kFields); ++i) {
    const RequestField& f = kFields[i];
    if (f.use == kHon || !Has(f, endpoint_)) continue;
    const Json* v = Get(f.name);
    if (!v) continue;
    if (f.use == kRef) return FieldError(f.name, f.note);
    if (f.use == kUnu && !HasType(*v, f.values)) {
      return FieldError(f.name, f.values == "object" ? "must be an object" : "must be a string");
    }
    if (f.use == kDef && std::find(accepted[i].begin(), accepted[i].end(), *v) == accepted[i].end()) {
      return FieldError(f.name, f.note);
    }
  }
  return Status::Ok();
}

Status BodyFields::CheckAllRead() const {
  for (const auto& [key, value] : body_->items()) {
    if (value.is_null()) continue;
    if (std::find(read_.begin(), read_.end(), key) == read_.end()) {
      return Status::Internal("the request field '" + key + "' is accepted but the parser never read it");
    }
  }
  return Status::Ok();
}

}  // namespace gyre::serve
