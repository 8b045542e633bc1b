// The request bodies of vLLM's POST /tokenize and POST /detokenize, parsed and validated. Pure
// functions: no tokenizer, no engine (OpenAiServing::Tokenize / Detokenize run them).
//
//   /tokenize, prompt form:    {"model"?, "prompt": string, "add_special_tokens"? (default true),
//                               "return_token_strs"?}
//   /tokenize, messages form:  {"model"?, "messages": [...], "add_generation_prompt"? (true),
//                               "continue_final_message"? (false), "add_special_tokens"? (false),
//                               "chat_template_kwargs"?, "tools"?, "return_token_strs"?}
//   answer:                    {"count": N, "max_model_len": M, "tokens": [ids], "token_strs": null}
//   /detokenize:               {"model"?, "tokens": [ids]}  →  {"prompt": text}
//
// The ids are exactly those the generation endpoints would feed the engine for the same prompt
// (/v1/completions for the prompt form, /v1/chat/completions for the messages form). As for those
// endpoints nothing is accepted and ignored: an unknown field, a field of the other form, and the
// vLLM fields gyre cannot honour (return_token_strs true, chat_template, mm_processor_kwargs,
// media_io_kwargs) are refused with InvalidArgument naming the field. null means unset.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "serve/openai_protocol.h"

namespace gyre::serve {

struct TokenizeRequest {
  std::string model;  // "" when absent
  bool chat = false;  // the messages form
  // Prompt form: the text, tokenized as /v1/completions does (special tokens parsed, the
  // tokenizer's BOS first when add_special_tokens and its config asks for one).
  std::string prompt;
  bool add_special_tokens = true;
  // Messages form: messages, tools, chat_template_kwargs, add_generation_prompt,
  // continue_final_message and gen.add_special_tokens are set; the rest of `gen` is unused.
  ChatRequest chat_request;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;  // each in [0, vocab_size)
};

// Errors: InvalidArgument naming the field.
Result<TokenizeRequest> ParseTokenizeRequest(std::string_view body);
// `vocab_size`: ids at or above it are refused ('tokens[i]').
Result<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body, int64_t vocab_size);

Json TokenizeResponse(const std::vector<int32_t>& tokens, int64_t max_model_len);
Json DetokenizeResponse(const std::string& prompt);

}  // namespace gyre::serve
