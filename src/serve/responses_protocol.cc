// Responses requests. Sections: helpers; input items → chat messages; tools, tool_choice and
// reasoning → their chat forms; the request parser.
#include "serve/responses_protocol.h"

#include <algorithm>
#include <initializer_list>
#include <limits>

#include "core/json_depth.h"
#include "serve/openai_fields.h"

namespace gyre::serve {

namespace {

// ---- helpers ----------------------------------------------------------------------------------

// The value of `key` in object `o`, or nullptr when absent or JSON null.
const Json* Member(const Json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

bool IsNonEmptyString(const Json* v) { return v && v->is_string() && !v->get_ref<const std::string&>().empty(); }

// InvalidArgument naming the first non-null key of object `o` that is not in `known`.
Status CheckKeys(const Json& o, const std::string& at, std::initializer_list<std::string_view> known,
                 std::string_view what) {
  for (const auto& [key, value] : o.items()) {
    if (value.is_null() || std::find(known.begin(), known.end(), key) != known.end()) continue;
    return FieldError(at + "." + key, "is not a field of " + std::string(what) + " gyre knows (refused, not ignored)");
  }
  return Status::Ok();
}

// A content value as text: a string, or text parts (input_text, output_text) joined by "\n" as
// the chat path joins them.
Result<std::string> ContentText(const Json& content, const std::string& at) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return FieldError(at, "must be a string or an array of content parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part_at = at + "[" + std::to_string(i) + "]";
    const Json& part = content[i];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return FieldError(part_at, "must be an object with a string 'type'");
    }
    const std::string& type = part["type"].get_ref<const std::string&>();
    if (type == "input_image" || type == "input_file" || type == "input_audio") {
      return FieldError(part_at + ".type", "'" + type + "' is not supported: gyre serves text only");
    }
    if (type != "input_text" && type != "output_text") {
      return FieldError(part_at + ".type", "'" + type + "' is not supported (input_text, output_text)");
    }
    // output_text parts of earlier answers carry annotations and logprobs: nothing to render.
    GYRE_RETURN_IF_ERROR(CheckKeys(part, part_at, {"type", "text", "annotations", "logprobs"}, "a text part"));
    const Json* t = Member(part, "text");
    if (!t || !t->is_string()) return FieldError(part_at + ".text", "must be a string");
    if (i > 0) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

// ---- input items → chat messages --------------------------------------------------------------

// Builds the chat messages item by item.
class MessageBuilder {
 public:
  Status Add(const Json& item, const std::string& at) {
    if (!item.is_object()) return FieldError(at, "must be an object");
    const Json* type = Member(item, "type");
    if (type && !type->is_string()) return FieldError(at + ".type", "must be a string");
    const std::string t = type ? type->get<std::string>() : "message";
    if (t == "message") return AddMessage(item, at);
    if (t == "function_call") return AddCall(item, at);
    if (t == "function_call_output") return AddOutput(item, at);
    if (t == "reasoning") return AddReasoning(item, at);
    if (t == "item_reference") {
      return FieldError(at + ".type", "'item_reference' is not supported: gyre keeps no items (store is false)");
    }
    return FieldError(at + ".type",
                      "'" + t + "' is not supported (message, function_call, function_call_output, reasoning)");
  }

  Json Finish() {
    FlushReasoning();
    return std::move(messages_);
  }

 private:
  Status AddMessage(const Json& item, const std::string& at) {
    GYRE_RETURN_IF_ERROR(CheckKeys(item, at, {"type", "role", "content", "id", "status", "phase"}, "a message item"));
    const Json* role = Member(item, "role");
    if (!role || !role->is_string()) return FieldError(at + ".role", "must be a string");
    const std::string r = role->get<std::string>();
    if (r != "user" && r != "system" && r != "developer" && r != "assistant") {
      return FieldError(at + ".role", "'" + r + "' is not supported (user, system, developer, assistant)");
    }
    const Json* content = Member(item, "content");
    if (!content) return FieldError(at + ".content", "is required");
    GYRE_ASSIGN_OR_RETURN(std::string text, ContentText(*content, at + ".content"));
    if (r != "assistant") FlushReasoning();
    Json msg = {{"role", r}, {"content", std::move(text)}};
    TakeReasoning(msg);
    messages_.push_back(std::move(msg));
    return Status::Ok();
  }

  Status AddCall(const Json& item, const std::string& at) {
    GYRE_RETURN_IF_ERROR(
        CheckKeys(item, at, {"type", "id", "call_id", "name", "arguments", "status"}, "a function_call item"));
    const Json* call_id = Member(item, "call_id");
    if (!IsNonEmptyString(call_id)) return FieldError(at + ".call_id", "must be a non-empty string");
    const Json* name = Member(item, "name");
    if (!IsNonEmptyString(name)) return FieldError(at + ".name", "must be a non-empty string");
    const Json* args = Member(item, "arguments");
    if (!args || !args->is_string()) return FieldError(at + ".arguments", "must be the text of a JSON object");
    Json parsed = Json::object();
    const std::string& text = args->get_ref<const std::string&>();
    if (!text.empty()) {
      if (!CheckJsonDepth(text, "arguments").ok()) return FieldError(at + ".arguments", "nests too deeply");
      parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded() || !parsed.is_object()) return FieldError(at + ".arguments", "must be the text of a JSON object");
    }
    Json call = {{"id", *call_id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", std::move(parsed)}}}};
    // The calls of one turn join the assistant message right before them (its text, its reasoning).
    if (!messages_.empty() && messages_.back()["role"] == "assistant" && pending_reasoning_.empty()) {
      Json& last = messages_.back();
      if (!last.contains("tool_calls")) last["tool_calls"] = Json::array();
      last["tool_calls"].push_back(std::move(call));
      return Status::Ok();
    }
    Json msg = {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", Json::array({std::move(call)})}};
    TakeReasoning(msg);
    messages_.push_back(std::move(msg));
    return Status::Ok();
  }

  Status AddOutput(const Json& item, const std::string& at) {
    GYRE_RETURN_IF_ERROR(
        CheckKeys(item, at, {"type", "id", "call_id", "output", "status"}, "a function_call_output item"));
    const Json* call_id = Member(item, "call_id");
    if (!IsNonEmptyString(call_id)) return FieldError(at + ".call_id", "must be a non-empty string");
    const Json* output = Member(item, "output");
    if (!output) return FieldError(at + ".output", "is required");
    GYRE_ASSIGN_OR_RETURN(std::string text, ContentText(*output, at + ".output"));
    FlushReasoning();
    messages_.push_back(Json{{"role", "tool"}, {"tool_call_id", *call_id}, {"content", std::move(text)}});
    return Status::Ok();
  }

  Status AddReasoning(const Json& item, const std::string& at) {
    GYRE_RETURN_IF_ERROR(CheckKeys(item, at, {"type", "id", "summary", "content", "encrypted_content", "status"},
                                   "a reasoning item"));
    if (Member(item, "encrypted_content")) {
      return FieldError(at + ".encrypted_content", "is not supported: gyre issues no encrypted reasoning");
    }
    // Its full text when it has one (gyre's own items do), else its summary.
    std::string text;
    for (const char* key : {"content", "summary"}) {
      const Json* parts = Member(item, key);
      if (!parts) continue;
      const std::string parts_at = at + "." + key;
      if (!parts->is_array()) return FieldError(parts_at, "must be an array");
      const char* want = std::string_view(key) == "content" ? "reasoning_text" : "summary_text";
      std::string joined;
      for (size_t i = 0; i < parts->size(); ++i) {
        const Json& p = (*parts)[i];
        const std::string p_at = parts_at + "[" + std::to_string(i) + "]";
        if (!p.is_object() || p.value("type", Json()) != want || !Member(p, "text") || !p["text"].is_string()) {
          return FieldError(p_at, std::string("must be {\"type\": \"") + want + "\", \"text\": string}");
        }
        if (i > 0) joined += "\n";
        joined += p["text"].get<std::string>();
      }
      if (text.empty()) text = std::move(joined);
    }
    if (!pending_reasoning_.empty() && !text.empty()) pending_reasoning_ += "\n";
    pending_reasoning_ += text;
    return Status::Ok();
  }

  // Reasoning waiting for its assistant message goes to `msg` when that is one.
  void TakeReasoning(Json& msg) {
    if (pending_reasoning_.empty() || msg["role"] != "assistant") return;
    msg["reasoning_content"] = std::move(pending_reasoning_);
    pending_reasoning_.clear();
  }
  // Reasoning that no assistant message followed: an assistant turn that was only reasoning.
  void FlushReasoning() {
    if (pending_reasoning_.empty()) return;
    Json msg = {{"role", "assistant"}, {"content", ""}};
    TakeReasoning(msg);
    messages_.push_back(std::move(msg));
  }

  Json messages_ = Json::array();
  std::string pending_reasoning_;
};

// ---- tools, tool_choice, reasoning ------------------------------------------------------------

// Responses function tools ({"type": "function", "name", "description", "parameters", "strict"})
// in chat form ({"type": "function", "function": {...}}).
Result<Json> ChatTools(const Json& tools) {
  if (!tools.is_array()) return FieldError("tools", "must be an array");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const Json& t = tools[i];
    if (!t.is_object()) return FieldError(at, "must be an object");
    const Json* type = Member(t, "type");
    if (!type || !type->is_string()) return FieldError(at + ".type", "must be a string");
    if (*type != "function") {
      return FieldError(at + ".type", "'" + type->get<std::string>() + "' is not supported: gyre offers function tools only");
    }
    GYRE_RETURN_IF_ERROR(CheckKeys(t, at, {"type", "name", "description", "parameters", "strict"}, "a function tool"));
    const Json* name = Member(t, "name");
    if (!IsNonEmptyString(name)) return FieldError(at + ".name", "must be a non-empty string");
    Json fn = {{"name", *name}};
    if (const Json* d = Member(t, "description")) {
      if (!d->is_string()) return FieldError(at + ".description", "must be a string");
      fn["description"] = *d;
    }
    if (const Json* p = Member(t, "parameters")) {
      if (!p->is_object()) return FieldError(at + ".parameters", "must be an object");
      fn["parameters"] = *p;
    }
    if (const Json* s = Member(t, "strict")) {
      if (!s->is_boolean()) return FieldError(at + ".strict", "must be a boolean");
      if (s->get<bool>()) return FieldError(at + ".strict", "true is not supported yet: it needs constrained decoding");
    }
    out.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// tool_choice in chat form: the strings as they are, {"type": "function", "name"} as
// {"type": "function", "function": {"name"}}; other tool types are refused.
Result<Json> ChatToolChoice(const Json& choice) {
  if (choice.is_string()) return choice;
  if (!choice.is_object() || !Member(choice, "type") || !choice["type"].is_string()) {
    return FieldError("tool_choice", "must be 'none', 'auto', 'required' or {\"type\": \"function\", \"name\": ...}");
  }
  if (choice["type"] != "function") {
    return FieldError("tool_choice", "of type '" + choice["type"].get<std::string>() + "' is not supported");
  }
  GYRE_RETURN_IF_ERROR(CheckKeys(choice, "tool_choice", {"type", "name"}, "a function tool choice"));
  Json fn = Json::object();
  if (const Json* n = Member(choice, "name")) fn["name"] = *n;
  return Json{{"type", "function"}, {"function", std::move(fn)}};
}

// reasoning: {"effort": "none"} turns thinking off (the template's enable_thinking false); no
// effort leaves the template's default. Other efforts and summaries are refused.
Status ReadReasoning(const Json& reasoning, Json* kwargs) {
  if (!reasoning.is_object()) return FieldError("reasoning", "must be an object");
  GYRE_RETURN_IF_ERROR(CheckKeys(reasoning, "reasoning", {"effort", "summary", "generate_summary"}, "reasoning"));
  if (const Json* e = Member(reasoning, "effort")) {
    if (!e->is_string()) return FieldError("reasoning.effort", "must be a string");
    if (*e != "none") {
      return FieldError("reasoning.effort", "'" + e->get<std::string>() +
                                                "' is not supported: the model has no effort levels ('none' turns "
                                                "thinking off)");
    }
    (*kwargs)["enable_thinking"] = false;
  }
  for (const char* key : {"summary", "generate_summary"}) {
    if (Member(reasoning, key)) {
      return FieldError(std::string("reasoning.") + key,
                        "is not supported: gyre writes no reasoning summaries (the reasoning comes back whole)");
    }
  }
  return Status::Ok();
}

// metadata: at most 16 keys of at most 64 characters, string values of at most 512 (OpenAI's limits).
Status CheckMetadata(const Json& m) {
  if (!m.is_object()) return FieldError("metadata", "must be an object");
  if (m.size() > 16) return FieldError("metadata", "must have at most 16 keys");
  for (const auto& [key, value] : m.items()) {
    if (key.size() > 64) return FieldError("metadata", "keys must be at most 64 characters");
    if (!value.is_string() || value.get_ref<const std::string&>().size() > 512) {
      return FieldError("metadata." + key, "must be a string of at most 512 characters");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Json> ResponsesInputToMessages(const Json& input, const Json* instructions) {
  MessageBuilder b;
  if (instructions) {
    if (!instructions->is_string()) return FieldError("instructions", "must be a string");
    GYRE_RETURN_IF_ERROR(b.Add(Json{{"role", "system"}, {"content", *instructions}}, "instructions"));
  }
  if (input.is_string()) {
    GYRE_RETURN_IF_ERROR(b.Add(Json{{"role", "user"}, {"content", input}}, "input"));
  } else if (input.is_array()) {
    if (input.empty()) return FieldError("input", "must not be empty");
    for (size_t k = 0; k < input.size(); ++k) GYRE_RETURN_IF_ERROR(b.Add(input[k], "input[" + std::to_string(k) + "]"));
  } else {
    return FieldError("input", "must be a string or an array of items");
  }
  return b.Finish();
}

Result<ResponsesRequest> ParseResponsesRequest(std::string_view body) {
  GYRE_ASSIGN_OR_RETURN(Json o, ParseRequestBody(body));
  GYRE_ASSIGN_OR_RETURN(BodyFields f, BodyFields::Open(o, Endpoint::kResponses));
  GYRE_RETURN_IF_ERROR(f.CheckTableFields());
  ResponsesRequest r;
  GenerationRequest& g = r.chat.gen;
  if (const Json* m = f.Get("model")) {
    if (!m->is_string()) return FieldError("model", "must be a string");
    g.model = m->get<std::string>();
  }
  GYRE_RETURN_IF_ERROR(ReadBoolField(f, "stream", &g.stream));
  std::optional<int64_t> max_tokens;
  GYRE_RETURN_IF_ERROR(ReadIntField(f, "max_output_tokens", 1, std::numeric_limits<int32_t>::max(), &max_tokens));
  g.max_tokens = max_tokens;
  GYRE_RETURN_IF_ERROR(ReadFloatField(f, "temperature", 0, 2, false, &g.temperature));
  GYRE_RETURN_IF_ERROR(ReadFloatField(f, "top_p", 0, 1, true, &g.top_p));

  const Json* instructions = f.Get("instructions");
  const Json* input = f.Get("input");
  if (!input) return FieldError("input", "is required");
  GYRE_ASSIGN_OR_RETURN(Json messages, ResponsesInputToMessages(*input, instructions));
  Json tools, choice, kwargs = Json::object();
  const Json* sent_tools = f.Get("tools");
  if (sent_tools) {
    GYRE_ASSIGN_OR_RETURN(tools, ChatTools(*sent_tools));
  }
  const Json* sent_choice = f.Get("tool_choice");
  if (sent_choice) {
    GYRE_ASSIGN_OR_RETURN(choice, ChatToolChoice(*sent_choice));
  }
  const Json* reasoning = f.Get("reasoning");
  if (reasoning) GYRE_RETURN_IF_ERROR(ReadReasoning(*reasoning, &kwargs));
  const Json* metadata = f.Get("metadata");
  if (metadata) GYRE_RETURN_IF_ERROR(CheckMetadata(*metadata));
  const Json* user = f.Get("user");
  if (user && !user->is_string()) return FieldError("user", "must be a string");

  ChatPromptFields prompt;
  prompt.messages = &messages;
  prompt.tools = sent_tools ? &tools : nullptr;
  prompt.tool_choice = sent_choice ? &choice : nullptr;
  prompt.chat_template_kwargs = &kwargs;
  GYRE_RETURN_IF_ERROR(ReadChatPrompt(prompt, &r.chat));
  GYRE_RETURN_IF_ERROR(f.CheckAllRead());

  Json& e = r.echo;
  e = Json::object();
  e["instructions"] = instructions ? *instructions : Json(nullptr);
  e["max_output_tokens"] = max_tokens ? Json(*max_tokens) : Json(nullptr);
  e["parallel_tool_calls"] = true;
  e["previous_response_id"] = nullptr;
  e["reasoning"] = {{"effort", reasoning && Member(*reasoning, "effort") ? (*reasoning)["effort"] : Json(nullptr)},
                    {"summary", nullptr}};
  e["store"] = false;
  e["temperature"] = Member(o, "temperature") ? o["temperature"] : Json(1.0);  // as sent, not rounded to float
  e["text"] = {{"format", {{"type", "text"}}}};
  e["tool_choice"] = sent_choice ? *sent_choice : Json("auto");
  e["tools"] = sent_tools ? *sent_tools : Json::array();
  e["top_p"] = Member(o, "top_p") ? o["top_p"] : Json(1.0);
  e["truncation"] = "disabled";
  if (user) e["user"] = *user;
  e["metadata"] = metadata ? *metadata : Json::object();
  return r;
}

}  // namespace gyre::serve
