#include "serve/glm_tool_parser.h"

#include <algorithm>

#include "core/json_depth.h"
#include "serve/openai_output.h"

namespace gyre::serve {

namespace {

constexpr std::string_view kCallOpen = "<tool_call>", kCallClose = "</tool_call>";
constexpr std::string_view kKeyOpen = "<arg_key>", kKeyClose = "</arg_key>";
constexpr std::string_view kValueOpen = "<arg_value>", kValueClose = "</arg_value>";
constexpr std::string_view kSpace = " \t\n\r";

std::string_view Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

// Reads `open` TEXT `close` at the start of `*rest` (after whitespace) into `*text` and consumes it.
bool ReadTagged(std::string_view* rest, std::string_view open, std::string_view close, std::string_view* text) {
  const size_t b = rest->find_first_not_of(kSpace);
  if (b == std::string_view::npos || rest->substr(b, open.size()) != open) return false;
  const size_t start = b + open.size();
  const size_t end = rest->find(close, start);
  if (end == std::string_view::npos) return false;
  *text = rest->substr(start, end - start);
  rest->remove_prefix(end + close.size());
  return true;
}

// Where to resume searching `held` for `tag` after `added` bytes were appended to it.
size_t ResumeAt(const std::string& held, size_t added, std::string_view tag) {
  const size_t before = held.size() - added;
  return before > tag.size() ? before - tag.size() : 0;
}

}  // namespace

GlmToolParser::GlmToolParser(Json tools) : tools_(std::move(tools)) {}

bool GlmToolParser::IsStringParameter(const std::string& name, const std::string& key) const {
  if (!tools_.is_array()) return false;
  for (const Json& t : tools_) {
    const Json* fn = t.contains("function") ? &t["function"] : nullptr;
    if (!fn || !fn->is_object() || fn->value("name", Json()) != name) continue;
    const Json params = fn->value("parameters", Json());
    if (!params.is_object() || !params.contains("properties") || !params["properties"].is_object()) return false;
    const Json prop = params["properties"].value(key, Json());
    if (!prop.is_object()) return false;
    const Json type = prop.value("type", Json());
    if (type == "string") return true;
    return type.is_array() && std::find(type.begin(), type.end(), Json("string")) != type.end();
  }
  return false;
}

bool GlmToolParser::ParseCall(std::string_view body, ParsedToolCall* out) const {
  const size_t first_key = body.find(kKeyOpen);
  const std::string_view name = Trim(body.substr(0, first_key));
  if (name.empty() || name.find_first_of("<>") != std::string_view::npos) return false;
  out->name = std::string(name);
  std::string_view rest = first_key == std::string_view::npos ? std::string_view() : body.substr(first_key);
  Json args = Json::object();
  while (!Trim(rest).empty()) {
    std::string_view key, value;
    if (!ReadTagged(&rest, kKeyOpen, kKeyClose, &key) || !ReadTagged(&rest, kValueOpen, kValueClose, &value)) {
      return false;
    }
    const std::string k(Trim(key));
    if (k.empty()) return false;
    Json v = std::string(value);
    if (!IsStringParameter(out->name, k) && CheckJsonDepth(value, "an argument").ok()) {
      Json parsed = Json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
      if (!parsed.is_discarded() && (parsed.is_number() || parsed.is_boolean() || parsed.is_structured())) {
        v = std::move(parsed);
      }
    }
    args[k] = std::move(v);
  }
  out->arguments = DumpJson(args);
  return true;
}

void GlmToolParser::EmitContent(std::vector<ToolParseEvent>& out, std::string text) const {
  if (text.empty()) return;
  if (!out.empty() && !out.back().is_call) {
    out.back().content += text;
    return;
  }
  ToolParseEvent e;
  e.content = std::move(text);
  out.push_back(std::move(e));
}

std::vector<ToolParseEvent> GlmToolParser::Push(std::string_view text) {
  std::vector<ToolParseEvent> out;
  held_.append(text);
  size_t added = text.size();  // of held_, the bytes not searched yet
  while (true) {
    if (!in_call_) {
      if (skip_space_) {
        const size_t b = std::min(held_.find_first_not_of(kSpace), held_.size());
        held_.erase(0, b);
        added = std::min(added, held_.size());
        skip_space_ = held_.empty();
      }
      const size_t at = held_.find(kCallOpen, ResumeAt(held_, added, kCallOpen));
      if (at == std::string::npos) {
        const size_t keep = PartialTagWithSpaceAtEnd(held_, kCallOpen);
        EmitContent(out, held_.substr(0, held_.size() - keep));
        held_.erase(0, held_.size() - keep);
        return out;
      }
      size_t text_end = at;
      while (text_end > 0 && IsAsciiSpace(held_[text_end - 1])) --text_end;
      EmitContent(out, held_.substr(0, text_end));
      space_before_ = held_.substr(text_end, at - text_end);
      held_.erase(0, at + kCallOpen.size());
    } else {
      const size_t at = held_.find(kCallClose, ResumeAt(held_, added, kCallClose));
      if (at == std::string::npos) return out;
      const std::string_view body = std::string_view(held_).substr(0, at);
      ToolParseEvent e;
      e.is_call = ParseCall(body, &e.call);
      if (e.is_call) {
        out.push_back(std::move(e));
        skip_space_ = true;
      } else {
        EmitContent(out, space_before_ + std::string(kCallOpen) + std::string(body) + std::string(kCallClose));
      }
      held_.erase(0, at + kCallClose.size());
    }
    in_call_ = !in_call_;
    added = held_.size();
  }
}

std::vector<ToolParseEvent> GlmToolParser::Finish() {
  std::vector<ToolParseEvent> out;
  if (in_call_) {
    EmitContent(out, space_before_ + std::string(kCallOpen) + held_);
  } else if (!skip_space_) {
    EmitContent(out, held_);
  }
  held_.clear();
  in_call_ = false;
  return out;
}

}  // namespace gyre::serve
