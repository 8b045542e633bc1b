// Chat messages (roles, content, tool calls), then tools and tool_choice.
#include "serve/openai_messages.h"

#include "core/json_depth.h"

namespace gyre::serve {

namespace {

bool IsNonEmptyString(const Json* v) { return v && v->is_string() && !v->get_ref<const std::string&>().empty(); }

// The value of `key` in object `o`, or nullptr when absent or JSON null.
const Json* Member(const Json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

// Normalises one message's content to a string (text parts joined by "\n") or null. Image parts
// become kImageSentinel in the text (no separator) and are listed in `images` (null: refused).
Status NormaliseContent(Json& msg, const std::string& field, std::vector<ImageInput>* images) {
  auto it = msg.find("content");
  if (it == msg.end() || it->is_null() || it->is_string()) return Status::Ok();
  if (!it->is_array()) return FieldError(field, "must be a string, null or an array of content parts");
  std::string text;
  bool first = true;
  for (size_t j = 0; j < it->size(); ++j) {
    const Json& part = (*it)[j];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return FieldError(field, "parts must be objects with a string 'type'");
    }
    const std::string& type = part["type"].get_ref<const std::string&>();
    if (type == "image_url" && images) {
      const std::string at = field + "[" + std::to_string(j) + "].image_url";
      auto u = part.find("image_url");
      const Json* url = u == part.end() ? nullptr : u->is_object() ? Member(*u, "url") : &*u;
      if (!url || !url->is_string() || url->get_ref<const std::string&>().empty())
        return FieldError(at, "must be an object with a non-empty string 'url'");
      images->push_back(ImageInput{url->get<std::string>(), at});
      text += kImageSentinel;
      continue;
    }
    if (type != "text") {
      return FieldError(field, "part type '" + type + "' is not supported (" +
                                   (images ? "text and image_url only" : "text only; images go in user messages of /v1/chat/completions") + ")");
    }
    if (!part.contains("text") || !part["text"].is_string()) return FieldError(field, "text parts need a string 'text'");
    if (part["text"].get_ref<const std::string&>().find(kImageSentinel) != std::string::npos)
      return FieldError(field, "text holds a reserved control sequence");
    if (!first) text += "\n";
    text += part["text"].get<std::string>();
    first = false;
  }
  *it = text;
  return Status::Ok();
}

// Checks an assistant message's tool_calls and parses their JSON-text arguments.
Status NormaliseToolCalls(Json& calls, const std::string& field) {
  if (!calls.is_array()) return FieldError(field, "must be an array");
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string at = field + "[" + std::to_string(j) + "]";
    Json& call = calls[j];
    if (!call.is_object()) return FieldError(at, "must be an object");
    const Json* type = Member(call, "type");
    if (type && *type != "function") return FieldError(at + ".type", "must be 'function'");
    auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object()) return FieldError(at + ".function", "must be an object");
    if (!IsNonEmptyString(Member(*fn, "name"))) return FieldError(at + ".function.name", "must be a non-empty string");
    auto args = fn->find("arguments");
    if (args == fn->end() || args->is_null()) {
      (*fn)["arguments"] = Json::object();
      continue;
    }
    if (args->is_object()) continue;
    const std::string where = at + ".function.arguments";
    if (!args->is_string()) return FieldError(where, "must be a JSON object or its text");
    const std::string& text = args->get_ref<const std::string&>();
    if (text.empty()) {
      *args = Json::object();
      continue;
    }
    if (Status s = CheckJsonDepth(text, where); !s.ok()) return FieldError(where, "nests too deeply");
    Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !parsed.is_object()) return FieldError(where, "must be the text of a JSON object");
    *args = std::move(parsed);
  }
  return Status::Ok();
}

}  // namespace

Status NormaliseMessages(Json& messages, std::vector<ImageInput>* images) {
  for (size_t k = 0; k < messages.size(); ++k) {
    Json& m = messages[k];
    const std::string field = "messages[" + std::to_string(k) + "]";
    if (!m.is_object()) return FieldError(field, "must be an object");
    if (!m.contains("role") || !m["role"].is_string()) return FieldError(field + ".role", "must be a string");
    const std::string role = m["role"].get<std::string>();
    if (role == "developer") {
      m["role"] = "system";
    } else if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return FieldError(field + ".role", "'" + role + "' is not supported (system, developer, user, assistant, tool)");
    }
    GYRE_RETURN_IF_ERROR(NormaliseContent(m, field + ".content", role == "user" ? images : nullptr));
    auto calls = m.find("tool_calls");
    if (calls == m.end() || calls->is_null()) continue;
    if (role != "assistant") return FieldError(field + ".tool_calls", "is only allowed on assistant messages");
    GYRE_RETURN_IF_ERROR(NormaliseToolCalls(*calls, field + ".tool_calls"));
  }
  return Status::Ok();
}

Status CheckTools(const Json& tools) {
  if (!tools.is_array()) return FieldError("tools", "must be an array");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const Json& t = tools[i];
    if (!t.is_object()) return FieldError(at, "must be an object");
    const Json* type = Member(t, "type");
    if (type && *type != "function") return FieldError(at + ".type", "must be 'function' (the only tool type gyre offers)");
    const Json* fn = Member(t, "function");
    if (!fn || !fn->is_object()) return FieldError(at + ".function", "must be an object");
    if (!IsNonEmptyString(Member(*fn, "name"))) return FieldError(at + ".function.name", "must be a non-empty string");
    const Json* desc = Member(*fn, "description");
    if (desc && !desc->is_string()) return FieldError(at + ".function.description", "must be a string");
    const Json* params = Member(*fn, "parameters");
    if (params && !params->is_object()) return FieldError(at + ".function.parameters", "must be an object");
    const Json* strict = Member(*fn, "strict");
    if (strict && !strict->is_boolean()) return FieldError(at + ".function.strict", "must be a boolean");
    if (strict && strict->get<bool>()) {
      return FieldError(at + ".function.strict", "true is not supported yet: it needs constrained decoding");
    }
  }
  return Status::Ok();
}

Status ApplyToolChoice(const Json* choice, Json* tools, std::optional<std::string>* forced) {
  forced->reset();
  if (!choice) return Status::Ok();
  const bool have_tools = tools->is_array() && !tools->empty();
  if (*choice == "none") {
    *tools = Json();
    return Status::Ok();
  }
  const char* kShape = "must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}";
  const bool named = choice->is_object() && Member(*choice, "type") && (*choice)["type"] == "function";
  if (!(*choice == "auto" || *choice == "required" || named)) {
    if (choice->is_object() && Member(*choice, "type") && (*choice)["type"].is_string()) {
      return FieldError("tool_choice", "of type '" + (*choice)["type"].get<std::string>() + "' is not supported");
    }
    return FieldError("tool_choice", kShape);
  }
  if (!have_tools) return FieldError("tool_choice", "needs 'tools'");
  if (*choice == "auto") return Status::Ok();
  if (*choice == "required") {
    *forced = std::string();
    return Status::Ok();
  }
  const Json* fn = Member(*choice, "function");
  const Json* name = fn && fn->is_object() ? Member(*fn, "name") : nullptr;
  if (!IsNonEmptyString(name)) return FieldError("tool_choice", kShape);
  bool found = false;
  for (const Json& t : *tools) found = found || t["function"]["name"] == *name;
  if (!found) return FieldError("tool_choice", "names the function '" + name->get<std::string>() + "', which is not in 'tools'");
  *forced = name->get<std::string>();
  return Status::Ok();
}

}  // namespace gyre::serve
