// OpenAI wire format. Sections: errors; field readers; request parsers (common, chat,
// completions); response builders.
#include "serve/openai_protocol.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <random>

#include "core/json_depth.h"

namespace gyre::serve {

// ---- errors -----------------------------------------------------------------------------------

const char* ErrorTypeFor(int http_status) {
  switch (http_status) {
    case 400: case 404: case 405: case 413: case 431: return "invalid_request_error";
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

namespace {

Status FieldError(std::string_view field, std::string_view what) {
  return Status::InvalidArgument("'" + std::string(field) + "' " + std::string(what));
}

// The value of `key`, or nullptr when absent or JSON null (OpenAI clients send null for "unset").
const Json* Get(const Json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

Status ReadBool(const Json& o, const char* key, bool* out) {
  const Json* v = Get(o, key);
  if (!v) return Status::Ok();
  if (!v->is_boolean()) return FieldError(key, "must be a boolean");
  *out = v->get<bool>();
  return Status::Ok();
}

// An integer (a float with an integral value is accepted) in [lo, hi].
Status ReadInt(const Json& o, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  const Json* v = Get(o, key);
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

std::string FormatNumber(double d) {
  std::string s = Json(d).dump();
  return s;
}

// A number in [lo, hi] (or (lo, hi] when lo_open).
Status ReadFloat(const Json& o, const char* key, double lo, double hi, bool lo_open, std::optional<double>* out) {
  const Json* v = Get(o, key);
  if (!v) return Status::Ok();
  const std::string range = std::string("must be a number in ") + (lo_open ? "(" : "[") + FormatNumber(lo) + ", " +
                            FormatNumber(hi) + "]";
  if (!v->is_number()) return FieldError(key, range);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo)) {
    return FieldError(key, range + ", got " + FormatNumber(d));
  }
  *out = d;
  return Status::Ok();
}

// A number that gyre only supports at its neutral value.
Status RequireNeutral(const Json& o, const char* key, double neutral) {
  const Json* v = Get(o, key);
  if (!v) return Status::Ok();
  if (!v->is_number()) return FieldError(key, "must be a number");
  if (v->get<double>() != neutral) return FieldError(key, "is not supported (only " + FormatNumber(neutral) + ")");
  return Status::Ok();
}

Status ReadStop(const Json& o, std::vector<std::string>* out) {
  const Json* v = Get(o, "stop");
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

Result<Json> ParseBody(std::string_view body) {
  GYRE_RETURN_IF_ERROR(CheckJsonDepth(body, "the request body"));
  Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("the request body is not valid JSON");
  if (!j.is_object()) return Status::InvalidArgument("the request body must be a JSON object");
  return j;
}

// Fields shared by chat and completions. `chat` selects the logprobs convention.
Status ParseCommon(const Json& o, bool chat, GenerationRequest* g) {
  if (const Json* m = Get(o, "model")) {
    if (!m->is_string()) return FieldError("model", "must be a string");
    g->model = m->get<std::string>();
  }
  GYRE_RETURN_IF_ERROR(ReadBool(o, "stream", &g->stream));
  if (const Json* so = Get(o, "stream_options")) {
    if (!so->is_object()) return FieldError("stream_options", "must be an object");
    if (!g->stream) return FieldError("stream_options", "is only allowed when 'stream' is true");
    GYRE_RETURN_IF_ERROR(ReadBool(*so, "include_usage", &g->include_usage));
  }
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  std::optional<int64_t> i;
  GYRE_RETURN_IF_ERROR(ReadInt(o, "max_tokens", 1, kMaxInt, &i));
  if (i) g->max_tokens = i;
  if (chat) {
    i.reset();
    GYRE_RETURN_IF_ERROR(ReadInt(o, "max_completion_tokens", 1, kMaxInt, &i));
    if (i) g->max_tokens = i;
  }
  std::optional<double> d;
  GYRE_RETURN_IF_ERROR(ReadFloat(o, "temperature", 0, 2, false, &d));
  if (d) g->temperature = static_cast<float>(*d);
  d.reset();
  GYRE_RETURN_IF_ERROR(ReadFloat(o, "top_p", 0, 1, true, &d));
  if (d) g->top_p = static_cast<float>(*d);
  d.reset();
  GYRE_RETURN_IF_ERROR(ReadFloat(o, "min_p", 0, 1, false, &d));
  if (d) g->min_p = static_cast<float>(*d);
  i.reset();
  GYRE_RETURN_IF_ERROR(ReadInt(o, "top_k", -1, kMaxInt, &i));
  if (i) g->top_k = std::max<int64_t>(0, *i);
  if (const Json* s = Get(o, "seed")) {
    if (s->is_number_unsigned()) g->seed = s->get<uint64_t>();
    else if (s->is_number_integer()) g->seed = static_cast<uint64_t>(s->get<int64_t>());
    else return FieldError("seed", "must be an integer");
  }
  GYRE_RETURN_IF_ERROR(ReadStop(o, &g->stop));
  if (const Json* s = Get(o, "stop_token_ids")) GYRE_RETURN_IF_ERROR(ReadIdList(*s, "stop_token_ids", &g->stop_token_ids));
  i.reset();
  GYRE_RETURN_IF_ERROR(ReadInt(o, "n", 1, 1, &i));
  i.reset();
  GYRE_RETURN_IF_ERROR(ReadInt(o, "best_of", 1, 1, &i));
  GYRE_RETURN_IF_ERROR(ReadBool(o, "ignore_eos", &g->ignore_eos));
  i.reset();
  GYRE_RETURN_IF_ERROR(ReadInt(o, "min_tokens", 0, kMaxInt, &i));
  if (i) g->min_tokens = *i;
  if (g->min_tokens > 0) return FieldError("min_tokens", "is not supported yet (use 'ignore_eos')");
  GYRE_RETURN_IF_ERROR(ReadBool(o, "skip_special_tokens", &g->skip_special_tokens));
  GYRE_RETURN_IF_ERROR(RequireNeutral(o, "frequency_penalty", 0));
  GYRE_RETURN_IF_ERROR(RequireNeutral(o, "presence_penalty", 0));
  GYRE_RETURN_IF_ERROR(RequireNeutral(o, "repetition_penalty", 1));
  if (const Json* lb = Get(o, "logit_bias")) {
    if (!lb->is_object()) return FieldError("logit_bias", "must be an object");
    if (!lb->empty()) return FieldError("logit_bias", "is not supported");
  }
  if (const Json* rf = Get(o, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string()) {
      return FieldError("response_format", "must be an object with a string 'type'");
    }
    if ((*rf)["type"] != "text") return FieldError("response_format", "type '" + (*rf)["type"].get<std::string>() + "' is not supported (only 'text')");
  }
  if (chat) {
    GYRE_RETURN_IF_ERROR(ReadBool(o, "logprobs", &g->logprobs));
    i.reset();
    GYRE_RETURN_IF_ERROR(ReadInt(o, "top_logprobs", 0, 20, &i));
    if (i) g->top_logprobs = static_cast<int32_t>(*i);
    if (g->top_logprobs > 0 && !g->logprobs) return FieldError("top_logprobs", "requires 'logprobs' to be true");
  } else {
    i.reset();
    GYRE_RETURN_IF_ERROR(ReadInt(o, "logprobs", 0, 20, &i));
    if (i) {
      g->logprobs = true;
      g->top_logprobs = static_cast<int32_t>(*i);
    }
  }
  return Status::Ok();
}

// Normalises one message's content to a string (text parts joined by "\n") or null.
Status NormaliseContent(Json& msg, size_t index) {
  const std::string field = "messages[" + std::to_string(index) + "].content";
  auto it = msg.find("content");
  if (it == msg.end() || it->is_null() || it->is_string()) return Status::Ok();
  if (!it->is_array()) return FieldError(field, "must be a string, null or an array of content parts");
  std::string text;
  bool first = true;
  for (const Json& part : *it) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return FieldError(field, "parts must be objects with a string 'type'");
    }
    const std::string& type = part["type"].get_ref<const std::string&>();
    if (type != "text") return FieldError(field, "part type '" + type + "' is not supported (text only)");
    if (!part.contains("text") || !part["text"].is_string()) return FieldError(field, "text parts need a string 'text'");
    if (!first) text += "\n";
    text += part["text"].get<std::string>();
    first = false;
  }
  *it = text;
  return Status::Ok();
}

}  // namespace

// ---- request parsers --------------------------------------------------------------------------

Result<ChatRequest> ParseChatRequest(std::string_view body) {
  GYRE_ASSIGN_OR_RETURN(Json o, ParseBody(body));
  ChatRequest r;
  GYRE_RETURN_IF_ERROR(ParseCommon(o, /*chat=*/true, &r.gen));
  const Json* msgs = Get(o, "messages");
  if (!msgs) return FieldError("messages", "is required");
  if (!msgs->is_array() || msgs->empty()) return FieldError("messages", "must be a non-empty array");
  r.messages = *msgs;
  for (size_t k = 0; k < r.messages.size(); ++k) {
    Json& m = r.messages[k];
    const std::string field = "messages[" + std::to_string(k) + "]";
    if (!m.is_object()) return FieldError(field, "must be an object");
    if (!m.contains("role") || !m["role"].is_string()) return FieldError(field + ".role", "must be a string");
    GYRE_RETURN_IF_ERROR(NormaliseContent(m, k));
  }
  if (const Json* t = Get(o, "tools")) {
    if (!t->is_array()) return FieldError("tools", "must be an array");
    r.tools = *t;
  }
  r.chat_template_kwargs = Json::object();
  if (const Json* k = Get(o, "chat_template_kwargs")) {
    if (!k->is_object()) return FieldError("chat_template_kwargs", "must be an object");
    r.chat_template_kwargs = *k;
  }
  GYRE_RETURN_IF_ERROR(ReadBool(o, "add_generation_prompt", &r.add_generation_prompt));
  return r;
}

Result<CompletionRequest> ParseCompletionRequest(std::string_view body) {
  GYRE_ASSIGN_OR_RETURN(Json o, ParseBody(body));
  CompletionRequest r;
  GYRE_RETURN_IF_ERROR(ParseCommon(o, /*chat=*/false, &r.gen));
  bool echo = false;
  GYRE_RETURN_IF_ERROR(ReadBool(o, "echo", &echo));
  if (echo) return FieldError("echo", "is not supported");
  if (const Json* s = Get(o, "suffix")) {
    if (!s->is_string() || !s->get_ref<const std::string&>().empty()) return FieldError("suffix", "is not supported");
  }
  const Json* p = Get(o, "prompt");
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

Json ChatChunk(const ResponseMeta& m, Json delta, Json logprobs, std::string_view finish_reason, bool usage_null) {
  Json j = Envelope(m, "chat.completion.chunk");
  j["choices"] = Json::array({Json{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
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

Json ChatResponse(const ResponseMeta& m, const std::string& content, Json logprobs, std::string_view finish_reason,
                  int64_t prompt_tokens, int64_t completion_tokens) {
  Json j = Envelope(m, "chat.completion");
  j["choices"] = Json::array({Json{{"index", 0},
                                   {"message", {{"role", "assistant"}, {"content", content}}},
                                   {"logprobs", std::move(logprobs)},
                                   {"finish_reason", FinishJson(finish_reason)}}});
  j["usage"] = UsageJson(prompt_tokens, completion_tokens);
  return j;
}

Json CompletionChunk(const ResponseMeta& m, const std::string& text, Json logprobs, std::string_view finish_reason,
                     bool usage_null) {
  Json j = Envelope(m, "text_completion");
  j["choices"] = Json::array({Json{{"index", 0}, {"text", text}, {"logprobs", std::move(logprobs)},
                                   {"finish_reason", FinishJson(finish_reason)}}});
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
  j["choices"] = Json::array({Json{{"index", 0}, {"text", text}, {"logprobs", std::move(logprobs)},
                                   {"finish_reason", FinishJson(finish_reason)}}});
  j["usage"] = UsageJson(prompt_tokens, completion_tokens);
  return j;
}

std::string DumpJson(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string SseData(const Json& j) { return "data: " + DumpJson(j) + "\n\n"; }

}  // namespace gyre::serve
