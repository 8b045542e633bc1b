// GlmToolParser: finds the tool calls of GLM-4.5+ models in generated text that arrives in
// pieces, as the GLM chat templates (testdata/chat_templates/glm5.jinja) write them:
//
//   <tool_call>NAME<arg_key>K1</arg_key><arg_value>V1</arg_value>...</tool_call>
//
// The models put a newline after NAME and after each closing tag (GLM-4.5/4.6); whitespace
// between the tags is ignored, NAME and keys are trimmed, values are kept verbatim. A value is
// JSON when the tool's parameter schema gives it a type other than "string" and the text parses
// as JSON; otherwise (a "string" parameter, an unknown one with text that is not a JSON number,
// boolean, object or array) it is a string. This mirrors the template, which writes strings as
// they are and everything else as JSON.
//
// Text outside calls is content, except the whitespace right before <tool_call> and right after
// </tool_call> (the templates' layout, not the model's answer). A tag split across pieces is held
// until it is known; a call is reported when its </tool_call> arrives, whole. A call that is
// malformed, or still open when the text ends, comes back as content, byte for byte (with the
// whitespace before it): nothing is lost.
//
// Thread safety: none; one instance per response.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "serve/openai_protocol.h"

namespace gyre::serve {

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // the text of a JSON object (compact), "{}" without arguments
};

// What one piece of text released, in order: content, then calls, then content, ...
struct ToolParseEvent {
  bool is_call = false;
  std::string content;  // when !is_call (never empty)
  ParsedToolCall call;  // when is_call
};

class GlmToolParser {
 public:
  // `tools`: the request's validated tools (an array, or null); their parameter schemas decide
  // which values stay strings.
  explicit GlmToolParser(Json tools = Json());

  // Adds generated text; returns what it released.
  std::vector<ToolParseEvent> Push(std::string_view text);
  // The end of the text: releases what is held (an open call as content).
  std::vector<ToolParseEvent> Finish();

  // The body of one call, between <tool_call> and </tool_call>, as a call; false if malformed.
  bool ParseCall(std::string_view body, ParsedToolCall* out) const;

 private:
  void EmitContent(std::vector<ToolParseEvent>& out, std::string text) const;
  // True if parameter `key` of tool `name` is declared with type "string" (or a list holding it).
  bool IsStringParameter(const std::string& name, const std::string& key) const;

  const Json tools_;
  bool in_call_ = false;
  std::string held_;         // text: a possible start of <tool_call>; in a call: the body so far
  std::string space_before_; // in a call: the whitespace dropped before its <tool_call>
  bool skip_space_ = false;  // text right after </tool_call>: leading whitespace is dropped
};

}  // namespace gyre::serve
