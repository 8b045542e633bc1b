// OpenAI wire format. Sections: errors; field readers; request parsers (common, chat,
// completions); response builders.
#include "serve/openai_protocol.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>

#include "core/json_depth.h"
#include "serve/openai_fields.h"
#include "serve/openai_messages.h"
#include "serve/tool_call_grammar.h"

namespace gyre::serve {

// ---- errors -----------------------------------------------------------------------------------

const char* ErrorTypeFor(int http_status) {
  switch (http_status) {
    case 400: case 404: case 405: case 409: case 413: case 431: return "invalid_request_error";
    case 401: return "authentication_error";
    case 429: return "rate_limit_error";
    case 501: return "not_implemented_error";
    case 503: return "service_unavailable_error";
    case 504: return "timeout_error";
    default: return "server_error";
  }
}

ApiError ApiError::FromStatus(const Status& s) {
  ApiError e;
  e.message = s.message();
  switch (s.code()) {
    case StatusCode::kInvalidArgument: e.status = 400; break;
    case StatusCode::kNotFound: e.status = 404; break;
    case StatusCode::kResourceExhausted: e.status = 429; e.retry_after_s = 1; e.code = "rate_limit_exceeded"; break;
    case StatusCode::kUnavailable: e.status = 503; break;
    case StatusCode::kDeadlineExceeded: e.status = 504; break;
    case StatusCode::kUnimplemented: e.status = 501; break;
    default: e.status = 500; break;
  }
  e.type = ErrorTypeFor(e.status);
  const std::string& m = e.message;
  if (m.size() > 2 && m[0] == '\'') {
    const size_t close = m.find('\'', 1);
    if (close != std::string::npos && close > 1) e.param = m.substr(1, close - 1);
  }
  if (e.status == 400 && m.rfind("This model's maximum context length", 0) == 0) e.code = "context_length_exceeded";
  if (e.status == 404 && m.rfind("The model `", 0) == 0) {
    e.code = "model_not_found";
    e.param = "model";
  }
  return e;
}

Json ApiError::ToJson() const {
  return Json{{"error",
               {{"message", message},
                {"type", type},
                {"param", param.empty() ? Json(nullptr) : Json(param)},
                {"code", code.empty() ? Json(nullptr) : Json(code)}}}};
}

// ---- field readers ----------------------------------------------------------------------------

Status FieldError(std::string_view field, std::string_view what) {
  return Status::InvalidArgument("'" + std::string(field) + "' " + std::string(what));
}

Status ModelNotFound(std::string_view name) {
  return Status::NotFound("The model `" + std::string(name) + "` does not exist.");
}

namespace {

Status ReadBool(const Json* v, std::string_view key, bool* out) {
  if (!v) return Status::Ok();
  if (!v->is_boolean()) return FieldError(key, "must be a boolean");
  *out = v->get<bool>();
  return Status::Ok();
}
Status ReadBool(BodyFields& f, const char* key, bool* out) { return ReadBool(f.Get(key), key, out); }

// An integer (a float with an integral value is accepted) in [lo, hi].
Status ReadInt(BodyFields& f, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  const Json* v = f.Get(key);
  if (!v) return Status::Ok();
  const std::string range = "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return FieldError(key, range);
    x = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e15) return FieldError(key, range);
    x = static_cast<int64_t>(d);
  } else {
    return FieldError(key, range);
  }
  if (x < lo || x > hi) return FieldError(key, range + ", got " + std::to_string(x));
  *out = x;
  return Status::Ok();
}

std::string FormatNumber(double d) { return Json(d).dump(); }

// A number in [lo, hi] (or (lo, hi] when lo_open).
Status ReadFloat(BodyFields& f, const char* key, double lo, double hi, bool lo_open, float* out) {
  const Json* v = f.Get(key);
  if (!v) return Status::Ok();
  const std::string range = std::string("must be a number in ") + (lo_open ? "(" : "[") + FormatNumber(lo) + ", " +
                            FormatNumber(hi) + "]";
  if (!v->is_number()) return FieldError(key, range);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo)) {
    return FieldError(key, range + ", got " + FormatNumber(d));
  }
  *out = static_cast<float>(d);
  return Status::Ok();
}

Status ReadStop(BodyFields& f, std::vector<std::string>* out) {
  const Json* v = f.Get("stop");
  if (!v) return Status::Ok();
  if (v->is_string()) {
    if (v->get_ref<const std::string&>().empty()) return FieldError("stop", "must not be an empty string");
    out->push_back(v->get<std::string>());
    return Status::Ok();
  }
  if (!v->is_array()) return FieldError("stop", "must be a string or an array of strings");
  for (const Json& s : *v) {
    if (!s.is_string()) return FieldError("stop", "must be a string or an array of strings");
    if (s.get_ref<const std::string&>().empty()) return FieldError("stop", "entries must not be empty strings");
    out->push_back(s.get<std::string>());
  }
  return Status::Ok();
}

Status ReadIdList(const Json& v, const char* key, std::vector<int32_t>* out) {
  if (!v.is_array()) return FieldError(key, "must be an array of token ids");
  for (const Json& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return FieldError(key, "must be an array of non-negative integer token ids");
    }
    out->push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return Status::Ok();
}

Result<Json> ParseJsonText(std::string_view text, std::string_view what) {
  GYRE_RETURN_IF_ERROR(CheckJsonDepth(text, what));
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument(std::string(what) + " is not valid JSON");
  return j;
}

// stream_options: include_usage is honoured; the two other keys OpenAI and vLLM define are
// accepted only when false.
Status ReadStreamOptions(BodyFields& f, GenerationRequest* g) {
  const Json* so = f.Get("stream_options");
  if (!so) return Status::Ok();
  if (!so->is_object()) return FieldError("stream_options", "must be an object");
  if (!g->stream) return FieldError("stream_options", "is only allowed when 'stream' is true");
  for (const auto& [key, value] : so->items()) {
    const std::string name = "stream_options." + key;
    bool on = false;
    GYRE_RETURN_IF_ERROR(ReadBool(value.is_null() ? nullptr : &value, name, &on));
    if (key == "include_usage") {
      g->include_usage = on;
    } else if (key == "continuous_usage_stats" || key == "include_obfuscation") {
      if (on) return FieldError(name, "is not supported yet (only false)");
    } else if (!value.is_null()) {
      return FieldError(name, "is not a stream option gyre knows (unknown fields are refused, not ignored)");
    }
  }
  return Status::Ok();
}

// The visible ASCII a request_id may use: it becomes part of the response id and a header.
bool IsPlainId(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// Structured output: the one constraint field present, if any.
Status ReadConstraint(BodyFields& f, GenerationRequest* g) {
  using structured::ConstraintSpec;
  auto set = [&](const char* field, ConstraintSpec spec) -> Status {
    if (g->constraint) {
      return FieldError(field, "cannot be combined with '" + g->constraint_field +
                                   "': give one structured-output constraint");
    }
    g->constraint = std::move(spec);
    g->constraint_field = field;
    return Status::Ok();
  };
  auto choice = [&](const char* field, const Json& v) -> Status {
    if (!v.is_array() || v.empty()) return FieldError(field, "must be a non-empty array of strings");
    ConstraintSpec spec;
    spec.kind = ConstraintSpec::Kind::kChoice;
    for (const Json& c : v) {
      if (!c.is_string()) return FieldError(field, "must be a non-empty array of strings");
      spec.choices.push_back(c.get<std::string>());
    }
    return set(field, std::move(spec));
  };
  auto regex = [&](const char* field, const Json& v) -> Status {
    if (!v.is_string()) return FieldError(field, "must be a string (a regular expression)");
    ConstraintSpec spec;
    spec.regex = v.get<std::string>();
    return set(field, std::move(spec));
  };
  auto schema = [&](const char* field, const Json& v) -> Status {
    Json sc = v;
    if (v.is_string()) {  // vLLM accepts the schema as JSON text too
      sc = Json::parse(v.get<std::string>(), nullptr, false);
      if (sc.is_discarded()) return FieldError(field, "is a string that is not JSON");
    }
    if (!sc.is_object() && !sc.is_boolean()) return FieldError(field, "must be a JSON schema (an object)");
    ConstraintSpec spec;
    spec.kind = ConstraintSpec::Kind::kJsonSchema;
    spec.schema = std::move(sc);
    return set(field, std::move(spec));
  };
  if (const Json* rf = f.Get("response_format")) {
    const char* k = "response_format";
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      return FieldError(k, "must be an object with a string 'type'");
    const std::string type = (*rf)["type"].get<std::string>();
    for (const auto& [key, val] : rf->items())
      if (key != "type" && !(type == "json_schema" && key == "json_schema"))
        return FieldError(k, "has an unknown member '" + key + "' for type '" + type + "'");
    if (type == "json_object") {
      ConstraintSpec spec;
      spec.kind = ConstraintSpec::Kind::kJsonObject;
      GYRE_RETURN_IF_ERROR(set(k, std::move(spec)));
    } else if (type == "json_schema") {
      const Json* js = rf->contains("json_schema") ? &(*rf)["json_schema"] : nullptr;
      if (!js || !js->is_object()) return FieldError(k, "of type json_schema needs a 'json_schema' object");
      for (const auto& [key, val] : js->items()) {
        if (key == "name" && !val.is_string()) return FieldError(k, "json_schema.name must be a string");
        if (key == "strict" && !val.is_boolean() && !val.is_null()) return FieldError(k, "json_schema.strict must be a boolean");
        if (key == "description" && !val.is_string()) return FieldError(k, "json_schema.description must be a string");
        if (key != "name" && key != "strict" && key != "description" && key != "schema")
          return FieldError(k, "json_schema has an unknown member '" + key + "'");
      }
      // Strict or not, the output is always constrained to the schema (strict only loosens
      // nothing here). No schema: any JSON value, as OpenAI.
      GYRE_RETURN_IF_ERROR(schema(k, js->contains("schema") ? (*js)["schema"] : Json::object()));
    } else if (type != "text") {
      return FieldError(k, "type must be 'text', 'json_object' or 'json_schema'");
    }
  }
  if (const Json* v = f.Get("guided_json")) GYRE_RETURN_IF_ERROR(schema("guided_json", *v));
  if (const Json* v = f.Get("guided_regex")) GYRE_RETURN_IF_ERROR(regex("guided_regex", *v));
  if (const Json* v = f.Get("guided_choice")) GYRE_RETURN_IF_ERROR(choice("guided_choice", *v));
  if (const Json* so = f.Get("structured_outputs")) {
    const char* k = "structured_outputs";
    if (!so->is_object()) return FieldError(k, "must be an object");
    for (const auto& [key, val] : so->items()) {
      if (val.is_null()) continue;
      if (key == "json") GYRE_RETURN_IF_ERROR(schema(k, val));
      else if (key == "regex") GYRE_RETURN_IF_ERROR(regex(k, val));
      else if (key == "choice") GYRE_RETURN_IF_ERROR(choice(k, val));
      else if (key == "json_object" && val.is_boolean()) {
        if (val.get<bool>()) {
          ConstraintSpec spec;
          spec.kind = ConstraintSpec::Kind::kJsonObject;
          GYRE_RETURN_IF_ERROR(set(k, std::move(spec)));
        }
      } else {
        return FieldError(k, "member '" + key + "' is not supported (json, regex, choice and json_object are)");
      }
    }
  }
  return Status::Ok();
}

// OpenAI's logit_bias: an object from token ids (decimal strings) to biases in [-100, 100]
// (ids are checked against the vocabulary when the request is built).
Status ReadLogitBias(BodyFields& f, std::vector<ops::LogitBias>* out) {
  const Json* v = f.Get("logit_bias");
  if (!v) return Status::Ok();
  if (!v->is_object()) return FieldError("logit_bias", "must be an object from token ids to biases");
  for (const auto& [key, bias] : v->items()) {
    const bool digits = !key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (!digits || std::stoll(key) > std::numeric_limits<int32_t>::max()) {
      return FieldError("logit_bias", "keys must be token ids (decimal integers), got '" + key + "'");
    }
    if (!bias.is_number() || !std::isfinite(bias.get<double>()) || bias.get<double>() < -100 ||
        bias.get<double>() > 100) {
      return FieldError("logit_bias", "values must be numbers in [-100, 100], got " + bias.dump() + " for '" + key +
                                          "'");
    }
    out->push_back({static_cast<int32_t>(std::stoll(key)), static_cast<float>(bias.get<double>())});
  }
  return Status::Ok();
}

// The logit processing fields (ops/penalties.h): OpenAI's penalties and logit_bias, vLLM's
// repetition_penalty and min_tokens.
Status ReadPenalties(BodyFields& f, GenerationRequest* g) {
  GYRE_RETURN_IF_ERROR(ReadFloat(f, "frequency_penalty", -2, 2, false, &g->frequency_penalty));
  GYRE_RETURN_IF_ERROR(ReadFloat(f, "presence_penalty", -2, 2, false, &g->presence_penalty));
  GYRE_RETURN_IF_ERROR(ReadFloat(f, "repetition_penalty", 0, 2, true, &g->repetition_penalty));
  std::optional<int64_t> i;
  GYRE_RETURN_IF_ERROR(ReadInt(f, "min_tokens", 0, std::numeric_limits<int32_t>::max(), &i));
  if (i) g->min_tokens = *i;
  if (g->max_tokens && g->min_tokens > *g->max_tokens) {
    return FieldError("min_tokens", "must be <= max_tokens (" + std::to_string(*g->max_tokens) + "), got " +
                                        std::to_string(g->min_tokens));
  }
  return ReadLogitBias(f, &g->logit_bias);
}

// Fields shared by chat and completions; then every kDefaultOnly/kUnused/kRefused row.
Status ParseCommon(BodyFields& f, GenerationRequest* g) {
  const bool chat = f.endpoint() == Endpoint::kChat;
  GYRE_RETURN_IF_ERROR(f.CheckTableFields());
  if (const Json* m = f.Get("model")) {
    if (!m->is_string()) return FieldError("model", "must be a string");
    g->model = m->get<std::string>();
  }
  GYRE_RETURN_IF_ERROR(ReadBool(f, "stream", &g->stream));
  GYRE_RETURN_IF_ERROR(ReadStreamOptions(f, g));
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  std::optional<int64_t> i;
  GYRE_RETURN_IF_ERROR(ReadInt(f, "max_tokens", 1, kMaxInt, &i));
  if (i) g->max_tokens = i;
  if (chat) {
    i.reset();
    GYRE_RETURN_IF_ERROR(ReadInt(f, "max_completion_tokens", 1, kMaxInt, &i));
    if (i) g->max_tokens = i;
  }
  GYRE_RETURN_IF_ERROR(ReadFloat(f, "temperature", 0, 2, false, &g->temperature));
  GYRE_RETURN_IF_ERROR(ReadFloat(f, "top_p", 0, 1, true, &g->top_p));
  GYRE_RETURN_IF_ERROR(ReadFloat(f, "min_p", 0, 1, false, &g->min_p));
  i.reset();
  GYRE_RETURN_IF_ERROR(ReadInt(f, "top_k", -1, kMaxInt, &i));
  if (i) g->top_k = std::max<int64_t>(0, *i);
  if (const Json* s = f.Get("seed")) {
    if (s->is_number_unsigned()) g->seed = s->get<uint64_t>();
    else if (s->is_number_integer()) g->seed = static_cast<uint64_t>(s->get<int64_t>());
    else return FieldError("seed", "must be an integer");
  }
  GYRE_RETURN_IF_ERROR(ReadStop(f, &g->stop));
  if (const Json* s = f.Get("stop_token_ids")) GYRE_RETURN_IF_ERROR(ReadIdList(*s, "stop_token_ids", &g->stop_token_ids));
  GYRE_RETURN_IF_ERROR(ReadBool(f, "include_stop_str_in_output", &g->include_stop_str));
  GYRE_RETURN_IF_ERROR(ReadBool(f, "ignore_eos", &g->ignore_eos));
  GYRE_RETURN_IF_ERROR(ReadBool(f, "skip_special_tokens", &g->skip_special_tokens));
  bool spaces = false;
  GYRE_RETURN_IF_ERROR(ReadBool(f, "spaces_between_special_tokens", &spaces));
  if (spaces && !g->skip_special_tokens) {
    return FieldError("spaces_between_special_tokens",
                      "is not supported with skip_special_tokens false (gyre joins special tokens without spaces)");
  }
  if (chat) {
    GYRE_RETURN_IF_ERROR(ReadBool(f, "logprobs", &g->logprobs));
    i.reset();
    GYRE_RETURN_IF_ERROR(ReadInt(f, "top_logprobs", 0, 20, &i));
    if (i) g->top_logprobs = static_cast<int32_t>(*i);
    if (g->top_logprobs > 0 && !g->logprobs) return FieldError("top_logprobs", "requires 'logprobs' to be true");
  } else {
    i.reset();
    GYRE_RETURN_IF_ERROR(ReadInt(f, "logprobs", 0, 20, &i));
    if (i) {
      g->logprobs = true;
      g->top_logprobs = static_cast<int32_t>(*i);
    }
  }
  GYRE_RETURN_IF_ERROR(ReadBool(f, "echo", &g->echo));
  g->add_special_tokens = !chat;
  GYRE_RETURN_IF_ERROR(ReadBool(f, "add_special_tokens", &g->add_special_tokens));
  if (const Json* id = f.Get("request_id")) {
    if (!id->is_string() || !IsPlainId(id->get<std::string>())) {
      return FieldError("request_id", "must be 1 to 128 visible ASCII characters");
    }
    g->request_id = id->get<std::string>();
  }
  GYRE_RETURN_IF_ERROR(ReadConstraint(f, g));
  GYRE_RETURN_IF_ERROR(ReadPenalties(f, g));
  i.reset();
  GYRE_RETURN_IF_ERROR(ReadInt(f, "n", 1, 128, &i));
  if (i) g->n = *i;
  return Status::Ok();
}

}  // namespace

Status ReadBoolField(BodyFields& f, const char* key, bool* out) { return ReadBool(f, key, out); }
Status ReadIntField(BodyFields& f, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  return ReadInt(f, key, lo, hi, out);
}
Status ReadFloatField(BodyFields& f, const char* key, double lo, double hi, bool lo_open, float* out) {
  return ReadFloat(f, key, lo, hi, lo_open, out);
}

// ---- request parsers --------------------------------------------------------------------------

Result<Json> ParseRequestBody(std::string_view body) {
  GYRE_ASSIGN_OR_RETURN(Json j, ParseJsonText(body, "the request body"));
  if (!j.is_object()) return Status::InvalidArgument("the request body must be a JSON object");
  return j;
}

Status ReadChatPrompt(const ChatPromptFields& in, ChatRequest* r) {
  const Json* msgs = in.messages;
  if (!msgs) return FieldError("messages", "is required");
  if (!msgs->is_array() || msgs->empty()) return FieldError("messages", "must be a non-empty array");
  r->messages = *msgs;
  GYRE_RETURN_IF_ERROR(NormaliseMessages(r->messages, &r->images));
  if (const Json* t = in.tools) {
    GYRE_RETURN_IF_ERROR(CheckTools(*t));
    r->tools = *t;
  }
  GYRE_RETURN_IF_ERROR(ApplyToolChoice(in.tool_choice, &r->tools, &r->forced_tool));
  if (r->forced_tool) {
    if (r->gen.constraint) {
      return FieldError("tool_choice", "'required' or a named function cannot be combined with '" +
                                           r->gen.constraint_field + "': both constrain the output");
    }
    GYRE_ASSIGN_OR_RETURN(std::string re, GlmToolCallsRegex(r->tools, *r->forced_tool));
    structured::ConstraintSpec spec;
    spec.kind = structured::ConstraintSpec::Kind::kRegex;
    spec.regex = std::move(re);
    r->gen.constraint = std::move(spec);
    r->gen.constraint_field = "tool_choice";
  }
  r->chat_template_kwargs = Json::object();
  if (const Json* k = in.chat_template_kwargs) {
    if (!k->is_object()) return FieldError("chat_template_kwargs", "must be an object");
    for (const char* reserved : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"}) {
      if (k->contains(reserved)) {
        return FieldError(std::string("chat_template_kwargs.") + reserved, "is set by the server (use the request's own field)");
      }
    }
    r->chat_template_kwargs = *k;
  }
  const Json* gen_prompt = in.add_generation_prompt;
  GYRE_RETURN_IF_ERROR(ReadBool(gen_prompt, "add_generation_prompt", &r->add_generation_prompt));
  GYRE_RETURN_IF_ERROR(ReadBool(in.continue_final_message, "continue_final_message", &r->continue_final_message));
  if (r->continue_final_message) {
    // As vLLM: an explicit add_generation_prompt true conflicts; its default gives way.
    if (gen_prompt && r->add_generation_prompt) {
      return FieldError("continue_final_message", "cannot be combined with 'add_generation_prompt' true");
    }
    r->add_generation_prompt = false;
    const Json last = r->messages.back().value("content", Json());
    if (!last.is_string() || last.get_ref<const std::string&>().empty()) {
      return FieldError("continue_final_message", "needs a final message with text content to continue");
    }
  }
  return Status::Ok();
}

Result<ChatRequest> ParseChatRequest(std::string_view body) {
  GYRE_ASSIGN_OR_RETURN(Json o, ParseRequestBody(body));
  GYRE_ASSIGN_OR_RETURN(BodyFields f, BodyFields::Open(o, Endpoint::kChat));
  ChatRequest r;
  GYRE_RETURN_IF_ERROR(ParseCommon(f, &r.gen));
  ChatPromptFields prompt;
  prompt.messages = f.Get("messages");
  prompt.tools = f.Get("tools");
  prompt.tool_choice = f.Get("tool_choice");
  prompt.chat_template_kwargs = f.Get("chat_template_kwargs");
  prompt.add_generation_prompt = f.Get("add_generation_prompt");
  prompt.continue_final_message = f.Get("continue_final_message");
  GYRE_RETURN_IF_ERROR(ReadChatPrompt(prompt, &r));
  GYRE_RETURN_IF_ERROR(f.CheckAllRead());
  return r;
}

Result<CompletionRequest> ParseCompletionRequest(std::string_view body) {
  GYRE_ASSIGN_OR_RETURN(Json o, ParseRequestBody(body));
  GYRE_ASSIGN_OR_RETURN(BodyFields f, BodyFields::Open(o, Endpoint::kCompletions));
  CompletionRequest r;
  GYRE_RETURN_IF_ERROR(ParseCommon(f, &r.gen));
  if (r.gen.echo && r.gen.logprobs) {
    return FieldError("echo", "with 'logprobs' is not supported yet (the engine returns no prompt logprobs)");
  }
  const Json* p = f.Get("prompt");
  if (!p) return FieldError("prompt", "is required");
  const char* kShape = "must be a string, an array of token ids, or a one-element array of either";
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array()) {
    if (p->empty()) return FieldError("prompt", "must not be empty");
    const Json& first = (*p)[0];
    if (first.is_number()) {
      r.prompt_is_ids = true;
      GYRE_RETURN_IF_ERROR(ReadIdList(*p, "prompt", &r.prompt_ids));
    } else if (p->size() != 1) {
      return FieldError("prompt", "with several prompts is not supported (send one request per prompt)");
    } else if (first.is_string()) {
      r.prompt_text = first.get<std::string>();
    } else if (first.is_array()) {
      r.prompt_is_ids = true;
      GYRE_RETURN_IF_ERROR(ReadIdList(first, "prompt", &r.prompt_ids));
    } else {
      return FieldError("prompt", kShape);
    }
  } else {
    return FieldError("prompt", kShape);
  }
  if (r.prompt_is_ids ? r.prompt_ids.empty() : r.prompt_text.empty()) return FieldError("prompt", "must not be empty");
  GYRE_RETURN_IF_ERROR(f.CheckAllRead());
  return r;
}

// ---- response builders ------------------------------------------------------------------------

std::string NewResponseId(std::string_view prefix) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

const char* SystemFingerprint() { return "fp_gyre_0.1"; }

Json UsageJson(int64_t prompt_tokens, int64_t completion_tokens) {
  return Json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {
Json Envelope(const ResponseMeta& m, const char* object) {
  return Json{{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model},
              {"system_fingerprint", SystemFingerprint()}};
}
Json FinishJson(std::string_view r) { return r.empty() ? Json(nullptr) : Json(std::string(r)); }
}  // namespace

Json ChatChunk(const ResponseMeta& m, Json delta, Json logprobs, std::string_view finish_reason, bool usage_null,
               int64_t index) {
  Json j = Envelope(m, "chat.completion.chunk");
  j["choices"] = Json::array({Json{{"index", index}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
                                   {"finish_reason", FinishJson(finish_reason)}}});
  if (usage_null) j["usage"] = nullptr;
  return j;
}

Json ChatUsageChunk(const ResponseMeta& m, int64_t prompt_tokens, int64_t completion_tokens) {
  Json j = Envelope(m, "chat.completion.chunk");
  j["choices"] = Json::array();
  j["usage"] = UsageJson(prompt_tokens, completion_tokens);
  return j;
}

Json ToolCallJson(const std::string& id, const std::string& name, const std::string& arguments) {
  return Json{{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

Json AssistantMessage(const std::string& content, const std::string& reasoning, Json tool_calls) {
  const bool calls = tool_calls.is_array() && !tool_calls.empty();
  Json msg = {{"role", "assistant"}, {"content", content.empty() && calls ? Json(nullptr) : Json(content)}};
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  if (calls) msg["tool_calls"] = std::move(tool_calls);
  return msg;
}

Json ChatChoice(int64_t index, Json message, Json logprobs, std::string_view finish_reason) {
  return Json{{"index", index},
              {"message", std::move(message)},
              {"logprobs", std::move(logprobs)},
              {"finish_reason", FinishJson(finish_reason)}};
}

Json ChatResponse(const ResponseMeta& m, Json message, Json logprobs, std::string_view finish_reason,
                  int64_t prompt_tokens, int64_t completion_tokens) {
  Json j = Envelope(m, "chat.completion");
  j["choices"] = Json::array({ChatChoice(0, std::move(message), std::move(logprobs), finish_reason)});
  j["usage"] = UsageJson(prompt_tokens, completion_tokens);
  return j;
}

Json CompletionChoice(int64_t index, const std::string& text, Json logprobs, std::string_view finish_reason) {
  return Json{{"index", index}, {"text", text}, {"logprobs", std::move(logprobs)},
              {"finish_reason", FinishJson(finish_reason)}};
}

Json CompletionChunk(const ResponseMeta& m, const std::string& text, Json logprobs, std::string_view finish_reason,
                     bool usage_null, int64_t index) {
  Json j = Envelope(m, "text_completion");
  j["choices"] = Json::array({CompletionChoice(index, text, std::move(logprobs), finish_reason)});
  if (usage_null) j["usage"] = nullptr;
  return j;
}

Json CompletionUsageChunk(const ResponseMeta& m, int64_t prompt_tokens, int64_t completion_tokens) {
  Json j = Envelope(m, "text_completion");
  j["choices"] = Json::array();
  j["usage"] = UsageJson(prompt_tokens, completion_tokens);
  return j;
}

Json CompletionResponse(const ResponseMeta& m, const std::string& text, Json logprobs, std::string_view finish_reason,
                        int64_t prompt_tokens, int64_t completion_tokens) {
  Json j = Envelope(m, "text_completion");
  j["choices"] = Json::array({CompletionChoice(0, text, std::move(logprobs), finish_reason)});
  j["usage"] = UsageJson(prompt_tokens, completion_tokens);
  return j;
}

std::string DumpJson(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string SseData(const Json& j) { return "data: " + DumpJson(j) + "\n\n"; }

}  // namespace gyre::serve
