// ResponsesOutput: the answer of POST /v1/responses in OpenAI's shapes, built from what the chat
// path's ChatOutputParser releases (reasoning, content, tool calls, in order).
//
// The answer's output is a list of items, each opened when its first text arrives and closed
// when another kind of text follows or the answer ends:
//   reasoning      {"id": "rs_…", "type": "reasoning", "summary": [], "content": [{"type":
//                  "reasoning_text", "text"}], "status"}            (the <think> block)
//   message        {"id": "msg_…", "type": "message", "role": "assistant", "status", "content":
//                  [{"type": "output_text", "text", "annotations": [], "logprobs": []}]}
//   function_call  {"id": "fc_…", "type": "function_call", "call_id": "call_…", "name",
//                  "arguments", "status"}                           (one GLM tool call)
// A stream is a sequence of typed server-sent events ("event: TYPE\ndata: JSON\n\n", each with a
// sequence_number from 0): response.created, response.in_progress; per item
// response.output_item.added, then for text items response.content_part.added,
// response.output_text.delta / response.reasoning_text.delta..., response.output_text.done /
// response.reasoning_text.done, response.content_part.done, and for calls
// response.function_call_arguments.delta and .done (the whole arguments at once: a call is
// parsed whole); then response.output_item.done; last response.completed (status "completed"),
// response.incomplete (cut at max_output_tokens: status "incomplete", incomplete_details
// {"reason": "max_output_tokens"}; cancelled by a server shutdown: status "cancelled") or
// response.failed (status "failed", error {"code": "server_error", "message"}). No [DONE].
//
// usage: {"input_tokens", "input_tokens_details": {"cached_tokens": 0}, "output_tokens",
// "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens"}; reasoning tokens are not
// counted apart from the others (0; they are inside output_tokens).
//
// Thread safety: none; one per response, on its strand.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "serve/openai_output.h"
#include "serve/openai_protocol.h"

namespace gyre::serve {

class ResponsesOutput {
 public:
  // `meta.id` is the response id ("resp_…"); `echo` is ResponsesRequest::echo.
  ResponsesOutput(ResponseMeta meta, Json echo);

  // Each method returns the stream events it produced (empty when none); a non-streamed answer
  // drops them and sends Response() at the end.
  // The first events: response.created and response.in_progress.
  std::string Start();
  // Text and calls the chat parser released.
  std::string Push(const ChatOutputParser::Parsed& parsed);
  // The end: closes the open item. `finish_reason` is the chat path's: "stop" or "tool_calls"
  // (completed), "length" (incomplete), anything else (cancelled).
  std::string Finish(std::string_view finish_reason, int64_t input_tokens, int64_t output_tokens);
  // A generation that failed: response.failed with `message`.
  std::string Fail(const std::string& message);

  // The Response object as it stands (the final one after Finish or Fail).
  Json Response() const;
  bool has_calls() const { return has_calls_; }

 private:
  enum class Open { kNone, kReasoning, kMessage };
  std::string Event(const char* type, Json fields);
  // Opens a reasoning or message item unless one of that kind is open (closing another).
  std::string OpenText(Open kind);
  std::string AppendText(Open kind, const std::string& text);
  std::string CloseOpen(const char* item_status);
  std::string AddCall(const ParsedToolCall& call);

  const ResponseMeta meta_;
  const Json echo_;
  int64_t seq_ = 0;
  Json output_ = Json::array();  // items; the open one (last) in its in-progress form
  Open open_ = Open::kNone;
  std::string open_text_;        // the open item's text so far
  bool has_calls_ = false;
  std::string status_ = "in_progress";
  Json error_;                   // null, or {"code", "message"}
  Json incomplete_details_;      // null, or {"reason": "max_output_tokens"}
  Json usage_;                   // null until Finish
};

}  // namespace gyre::serve
