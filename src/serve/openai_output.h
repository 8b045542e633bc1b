// Per-request output shaping: incremental detokenization, stop-sequence matching on the text,
// and OpenAI logprobs, token by token. No I/O: the serving layer turns deltas into chunks.
//
// Thread safety: none; one instance per request, used on that request's strand.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "serve/glm_tool_parser.h"
#include "serve/openai_protocol.h"
#include "serve/reasoning_parser.h"
#include "tokenizer/tokenizer.h"

namespace gyre::serve {

// The length of the longest tail of `text` that is a proper prefix of `tag` (0 if none): what a
// streaming matcher must hold back because `tag` may be completed by the next piece.
size_t PartialTagAtEnd(std::string_view text, std::string_view tag);
// PartialTagAtEnd, extended over the whitespace before that tail: what a parser that drops the
// whitespace next to its markup holds back.
size_t PartialTagWithSpaceAtEnd(std::string_view text, std::string_view tag);
// ASCII whitespace (space, tab, newline, carriage return).
bool IsAsciiSpace(char c);

// Finds stop sequences in text that arrives in pieces. Text is released as soon as it cannot be
// the start of a stop sequence: only the longest tail that is a proper prefix of some stop is
// held back. When a stop matches, the text before its first occurrence is released (with
// `include_stop`, up to the end of the match: of the stops found at that position, the longest)
// and the matcher is done; everything after is dropped.
// Arming (min_tokens, as vLLM: stop strings are not checked before the request has min_tokens
// output tokens): text pushed with `may_stop` false never matches, and a later armed push matches
// only a stop that ends in text pushed armed — one that started earlier may still complete there.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops, bool include_stop = false);

  struct Released {
    std::string text;
    bool stopped = false;
  };
  // REQUIRES: !stopped().
  Released Push(std::string_view text, bool may_stop = true);
  // Everything still held (call at the end when no stop matched).
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  bool include_stop_;
  std::string held_;
  size_t unarmed_ = 0;  // leading bytes of held_ pushed while not armed: no match may end in them
  bool stopped_ = false;
};

struct OutputOptions {
  bool chat = true;             // logprobs in chat format, else the legacy completions format
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool skip_special = true;     // special tokens add no text (they still count and get logprobs)
  // Stop strings. A special token whose text is one of them matches it even when skip_special
  // hides its text (the engine stops on such single-token stops too).
  std::vector<std::string> stop;
  // include_stop_str_in_output: a matched stop string stays in the text, and so does the text of
  // a token in stop_token_ids. Without it (vLLM's default) such a token adds no text.
  bool include_stop_str = false;
  std::vector<int32_t> stop_token_ids;  // ids the engine finishes on: the request's stop ids and EOS
  // min_tokens: stop strings match only from the min_tokens-th output token on (vLLM's rule; the
  // engine masks EOS and stop_token_ids before then).
  int64_t min_tokens = 0;
  // Special tokens whose text stays even with skip_special: the markup a ChatOutputParser reads
  // (<think>, </think>, ... in tokenizers that mark them special).
  std::vector<std::string> keep_special;
};

class TextOutput {
 public:
  // `tokenizer` must outlive this object.
  TextOutput(const Tokenizer& tokenizer, OutputOptions options);

  struct Delta {
    std::string text;      // newly released text (may be empty)
    Json logprobs;         // null without logprobs; chat: {"content": [...]}; legacy: {tokens, ...}
    bool stopped = false;  // a stop sequence matched: nothing follows
  };
  // Adds one generated token. REQUIRES: !stopped().
  Delta OnToken(const TokenEvent& ev);
  // Releases what is held (decoder tail, text held for stop matching). No logprobs.
  Delta Finish();

  bool stopped() const { return matcher_.stopped(); }
  int64_t num_tokens() const { return num_tokens_; }
  const std::string& text() const { return text_; }  // all text released so far
  // All logprobs so far, for a non-streamed response (null without logprobs).
  const Json& logprobs() const { return all_logprobs_; }

 private:
  Json EmptyLogprobs() const;
  void AppendLogprobs(Json& into, const TokenEvent& ev, size_t text_offset) const;
  // The token's text for logprobs: its bytes, with invalid UTF-8 replaced by U+FFFD.
  std::string TokenText(int32_t id) const;
  // The text token `id` adds before stop matching (see OutputOptions).
  std::string Piece(int32_t id);

  const Tokenizer& tok_;
  const OutputOptions opts_;
  StreamDecoder decoder_;
  StopMatcher matcher_;
  int64_t num_tokens_ = 0;
  size_t decoded_bytes_ = 0;  // bytes the decoder produced so far (legacy text_offset)
  std::string text_;
  Json all_logprobs_;
};

// What a chat answer's text is parsed for (see ChatOutputParser).
struct ChatParseOptions {
  bool split_reasoning = false;          // a leading <think>...</think> becomes reasoning
  bool reasoning_starts_inside = false;  // the prompt opened the think block (PromptOpensThinking)
  bool parse_tool_calls = false;         // GLM tool-call markup becomes tool calls
  Json tools;                            // the request's tools, for GlmToolParser
};

// The markup ChatOutputParser may read, for OutputOptions::keep_special.
std::vector<std::string> ChatMarkupTokens();

// Splits a chat answer's released text into reasoning, content and tool calls: ThinkSplitter,
// then GlmToolParser on the content, each only when its option is on (otherwise all is content).
// Keeps the totals for a non-streamed answer. Thread safety: none; one per response.
class ChatOutputParser {
 public:
  explicit ChatOutputParser(const ChatParseOptions& options);

  struct Parsed {
    std::string reasoning;              // comes before `events`
    std::vector<ToolParseEvent> events;  // content and calls, in order
  };
  Parsed Push(std::string_view text);
  // The end of the answer: what is held, an open tool call as content.
  Parsed Finish();

  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ParsedToolCall>& calls() const { return calls_; }

 private:
  Parsed Route(ThinkSplitter::Split s, bool last);

  const ChatParseOptions opts_;
  ThinkSplitter think_;
  GlmToolParser tools_;
  std::string reasoning_, content_;
  std::vector<ParsedToolCall> calls_;
};

// Valid UTF-8 copy of `bytes` (invalid sequences become U+FFFD).
std::string LossyUtf8(std::string_view bytes);

}  // namespace gyre::serve
