#include "serve/responses_output.h"

#include <utility>

namespace gyre::serve {

namespace {

Json TextPart(bool reasoning, const std::string& text) {
  if (reasoning) return Json{{"type", "reasoning_text"}, {"text", text}};
  return Json{{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}, {"logprobs", Json::array()}};
}

}  // namespace

ResponsesOutput::ResponsesOutput(ResponseMeta meta, Json echo) : meta_(std::move(meta)), echo_(std::move(echo)) {}

std::string ResponsesOutput::Event(const char* type, Json fields) {
  Json ev = {{"type", type}};
  for (auto& [k, v] : fields.items()) ev[k] = std::move(v);
  ev["sequence_number"] = seq_++;
  return std::string("event: ") + type + "\ndata: " + DumpJson(ev) + "\n\n";
}

Json ResponsesOutput::Response() const {
  Json j = {{"id", meta_.id},
            {"object", "response"},
            {"created_at", meta_.created},
            {"status", status_},
            {"background", false},
            {"error", error_},
            {"incomplete_details", incomplete_details_},
            {"instructions", echo_.value("instructions", Json())},
            {"max_output_tokens", echo_.value("max_output_tokens", Json())},
            {"model", meta_.model},
            {"output", output_}};
  for (const auto& [k, v] : echo_.items()) {
    if (k != "instructions" && k != "max_output_tokens") j[k] = v;
  }
  j["usage"] = usage_;
  return j;
}

std::string ResponsesOutput::Start() {
  std::string out = Event("response.created", {{"response", Response()}});
  out += Event("response.in_progress", {{"response", Response()}});
  return out;
}

std::string ResponsesOutput::OpenText(Open kind) {
  if (open_ == kind) return "";
  std::string out = CloseOpen("completed");
  const bool reasoning = kind == Open::kReasoning;
  Json item = reasoning ? Json{{"id", NewResponseId("rs_")}, {"type", "reasoning"}, {"summary", Json::array()},
                               {"content", Json::array()}, {"status", "in_progress"}}
                        : Json{{"id", NewResponseId("msg_")}, {"type", "message"}, {"status", "in_progress"},
                               {"content", Json::array()}, {"role", "assistant"}};
  const int64_t index = static_cast<int64_t>(output_.size());
  out += Event("response.output_item.added", {{"output_index", index}, {"item", item}});
  out += Event("response.content_part.added", {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0},
                                               {"part", TextPart(reasoning, "")}});
  output_.push_back(std::move(item));
  open_ = kind;
  open_text_.clear();
  return out;
}

std::string ResponsesOutput::AppendText(Open kind, const std::string& text) {
  if (text.empty()) return "";
  std::string out = OpenText(kind);
  open_text_ += text;
  const Json& item = output_.back();
  const int64_t index = static_cast<int64_t>(output_.size()) - 1;
  if (kind == Open::kReasoning) {
    out += Event("response.reasoning_text.delta",
                 {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"delta", text}});
  } else {
    out += Event("response.output_text.delta", {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0},
                                                {"delta", text}, {"logprobs", Json::array()}});
  }
  return out;
}

std::string ResponsesOutput::CloseOpen(const char* item_status) {
  if (open_ == Open::kNone) return "";
  const bool reasoning = open_ == Open::kReasoning;
  open_ = Open::kNone;
  Json& item = output_.back();
  const int64_t index = static_cast<int64_t>(output_.size()) - 1;
  const Json id = item["id"];
  std::string out;
  if (reasoning) {
    out += Event("response.reasoning_text.done",
                 {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", open_text_}});
  } else {
    out += Event("response.output_text.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0},
                                               {"text", open_text_}, {"logprobs", Json::array()}});
  }
  Json part = TextPart(reasoning, open_text_);
  out += Event("response.content_part.done",
               {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  item["content"] = Json::array({std::move(part)});
  item["status"] = item_status;
  out += Event("response.output_item.done", {{"output_index", index}, {"item", item}});
  open_text_.clear();
  return out;
}

std::string ResponsesOutput::AddCall(const ParsedToolCall& call) {
  std::string out = CloseOpen("completed");
  has_calls_ = true;
  Json item = {{"id", NewResponseId("fc_")}, {"type", "function_call"}, {"status", "in_progress"},
               {"arguments", ""},           {"call_id", NewResponseId("call_")}, {"name", call.name}};
  const int64_t index = static_cast<int64_t>(output_.size());
  const Json id = item["id"];
  out += Event("response.output_item.added", {{"output_index", index}, {"item", item}});
  out += Event("response.function_call_arguments.delta",
               {{"item_id", id}, {"output_index", index}, {"delta", call.arguments}});
  out += Event("response.function_call_arguments.done",
               {{"item_id", id}, {"output_index", index}, {"name", call.name}, {"arguments", call.arguments}});
  item["arguments"] = call.arguments;
  item["status"] = "completed";
  out += Event("response.output_item.done", {{"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
  return out;
}

std::string ResponsesOutput::Push(const ChatOutputParser::Parsed& parsed) {
  std::string out = AppendText(Open::kReasoning, parsed.reasoning);
  for (const ToolParseEvent& e : parsed.events) {
    out += e.is_call ? AddCall(e.call) : AppendText(Open::kMessage, e.content);
  }
  return out;
}

std::string ResponsesOutput::Finish(std::string_view finish_reason, int64_t input_tokens, int64_t output_tokens) {
  const bool cut = finish_reason == "length";
  const bool completed = finish_reason == "stop" || finish_reason == "tool_calls";
  std::string out = CloseOpen(cut ? "incomplete" : "completed");
  usage_ = {{"input_tokens", input_tokens},
            {"input_tokens_details", {{"cached_tokens", 0}}},
            {"output_tokens", output_tokens},
            {"output_tokens_details", {{"reasoning_tokens", 0}}},
            {"total_tokens", input_tokens + output_tokens}};
  if (completed) {
    status_ = "completed";
    out += Event("response.completed", {{"response", Response()}});
    return out;
  }
  if (cut) {
    status_ = "incomplete";
    incomplete_details_ = {{"reason", "max_output_tokens"}};
  } else {
    status_ = "cancelled";
  }
  out += Event("response.incomplete", {{"response", Response()}});
  return out;
}

std::string ResponsesOutput::Fail(const std::string& message) {
  std::string out = CloseOpen("incomplete");
  status_ = "failed";
  error_ = {{"code", "server_error"}, {"message", message}};
  out += Event("response.failed", {{"response", Response()}});
  return out;
}

}  // namespace gyre::serve
