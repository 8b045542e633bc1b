#include "serve/tokenization.h"

#include <algorithm>
#include <span>

namespace gyre::serve {

namespace {

constexpr std::string_view kPromptOnly[] = {"prompt"};
constexpr std::string_view kMessagesOnly[] = {"messages", "add_generation_prompt", "continue_final_message",
                                              "chat_template_kwargs", "tools"};
constexpr std::string_view kEither[] = {"model", "add_special_tokens", "return_token_strs"};
// vLLM fields of the messages form that gyre refuses, with why.
struct Refused {
  std::string_view name, why;
};
constexpr Refused kRefused[] = {
    {"chat_template", "is not supported: start the server with --chat-template"},
    {"mm_processor_kwargs", "is not supported: gyre serves text only"},
    {"media_io_kwargs", "is not supported: gyre serves text only"},
};

bool In(std::span<const std::string_view> list, std::string_view name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

const Json* Get(const Json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

Status ReadBool(const Json& body, const char* key, bool* out) {
  const Json* v = Get(body, key);
  if (!v) return Status::Ok();
  if (!v->is_boolean()) return FieldError(key, "must be a boolean");
  *out = v->get<bool>();
  return Status::Ok();
}

Status ReadModel(const Json& body, std::string* out) {
  const Json* m = Get(body, "model");
  if (!m) return Status::Ok();
  if (!m->is_string()) return FieldError("model", "must be a string");
  *out = m->get<std::string>();
  return Status::Ok();
}

// Every non-null key must be a field of `path` (and of the form in use, for /tokenize).
Status CheckKeys(const Json& body, std::string_view path, std::span<const std::string_view> allowed) {
  for (const auto& [key, value] : body.items()) {
    if (value.is_null() || In(allowed, key)) continue;
    return FieldError(key, "is not a field of " + std::string(path) + " (unknown fields are refused, not ignored)");
  }
  return Status::Ok();
}

}  // namespace

Result<TokenizeRequest> ParseTokenizeRequest(std::string_view body) {
  GYRE_ASSIGN_OR_RETURN(Json o, ParseRequestBody(body));
  TokenizeRequest r;
  const Json* prompt = Get(o, "prompt");
  const Json* messages = Get(o, "messages");
  if (prompt && messages) return FieldError("messages", "cannot be combined with 'prompt' (send one of them)");
  if (!prompt && !messages) return FieldError("prompt", "or 'messages' is required");
  r.chat = messages != nullptr;
  for (const auto& [key, value] : o.items()) {
    if (value.is_null() || In(kEither, key)) continue;
    for (const Refused& f : kRefused) {
      if (key == f.name) return FieldError(key, f.why);
    }
    using Names = std::span<const std::string_view>;
    const Names mine = r.chat ? Names(kMessagesOnly) : Names(kPromptOnly);
    const Names theirs = r.chat ? Names(kPromptOnly) : Names(kMessagesOnly);
    if (In(mine, key)) continue;
    if (In(theirs, key)) {
      return FieldError(key, std::string("is a field of the ") + (r.chat ? "prompt" : "messages") +
                                 " form of /tokenize, not of the " + (r.chat ? "messages" : "prompt") + " form");
    }
    return FieldError(key, "is not a field of /tokenize (unknown fields are refused, not ignored)");
  }
  GYRE_RETURN_IF_ERROR(ReadModel(o, &r.model));
  bool token_strs = false;
  GYRE_RETURN_IF_ERROR(ReadBool(o, "return_token_strs", &token_strs));
  if (token_strs) return FieldError("return_token_strs", "is not supported yet (only false)");
  if (!r.chat) {
    if (!prompt->is_string()) return FieldError("prompt", "must be a string");
    r.prompt = prompt->get<std::string>();
    GYRE_RETURN_IF_ERROR(ReadBool(o, "add_special_tokens", &r.add_special_tokens));
    return r;
  }
  ChatPromptFields f;
  f.messages = messages;
  f.tools = Get(o, "tools");
  f.chat_template_kwargs = Get(o, "chat_template_kwargs");
  f.add_generation_prompt = Get(o, "add_generation_prompt");
  f.continue_final_message = Get(o, "continue_final_message");
  GYRE_RETURN_IF_ERROR(ReadChatPrompt(f, &r.chat_request));
  r.chat_request.gen.add_special_tokens = false;  // vLLM's default for the messages form
  GYRE_RETURN_IF_ERROR(ReadBool(o, "add_special_tokens", &r.chat_request.gen.add_special_tokens));
  return r;
}

Result<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body, int64_t vocab_size) {
  GYRE_ASSIGN_OR_RETURN(Json o, ParseRequestBody(body));
  constexpr std::string_view kFields[] = {"model", "tokens"};
  GYRE_RETURN_IF_ERROR(CheckKeys(o, "/detokenize", kFields));
  DetokenizeRequest r;
  GYRE_RETURN_IF_ERROR(ReadModel(o, &r.model));
  const Json* tokens = Get(o, "tokens");
  if (!tokens) return FieldError("tokens", "is required");
  if (!tokens->is_array()) return FieldError("tokens", "must be an array of token ids");
  for (size_t i = 0; i < tokens->size(); ++i) {
    const Json& t = (*tokens)[i];
    const std::string name = "tokens[" + std::to_string(i) + "]";
    if (!t.is_number_integer()) return FieldError(name, "must be an integer token id");
    const bool negative = !t.is_number_unsigned() && t.get<int64_t>() < 0;
    if (negative || t.get<uint64_t>() >= static_cast<uint64_t>(vocab_size)) {
      return FieldError(name, t.dump() + " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
    r.tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return r;
}

Json TokenizeResponse(const std::vector<int32_t>& tokens, int64_t max_model_len) {
  return Json{{"count", static_cast<int64_t>(tokens.size())},
              {"max_model_len", max_model_len},
              {"tokens", tokens},
              {"token_strs", nullptr}};
}

Json DetokenizeResponse(const std::string& prompt) { return Json{{"prompt", prompt}}; }

}  // namespace gyre::serve
