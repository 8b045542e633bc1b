// ThinkSplitter: splits a thinking model's output into its reasoning, the <think>...</think>
// block at the start, and the content after it, for text that arrives in pieces.
//
// Two starts, as the chat templates leave them: a prompt that ends with "<think>" (GLM-4.7/5
// with thinking on) has the model start inside the block (a "<think>" it repeats is dropped);
// otherwise the block counts only if the output opens with it (leading whitespace allowed;
// GLM-4.5/4.6 and DeepSeek-R1 style). The
// whitespace inside the block's edges and right after </think> is layout and is dropped. Without
// </think> (the output was cut), everything after the opening is reasoning. An output that does
// not open with <think> is all content, verbatim. A tag split across pieces is held until known.
//
// Thread safety: none; one instance per response.
#pragma once

#include <string>
#include <string_view>

namespace gyre::serve {

class ThinkSplitter {
 public:
  // `starts_inside`: the prompt ended with "<think>" (see PromptOpensThinking).
  explicit ThinkSplitter(bool starts_inside);

  struct Split {
    std::string reasoning;
    std::string content;
  };
  // Adds generated text; returns what it released.
  Split Push(std::string_view text);
  // The end of the text: releases what is held.
  Split Finish();

 private:
  enum class State { kMaybeOpen, kReasoning, kContent };
  const bool starts_inside_;
  State state_ = State::kMaybeOpen;  // until the output is known to open with <think> or not
  bool reasoning_started_ = false;  // non-space reasoning was released (leading space is dropped)
  bool skip_space_ = false;         // right after </think>: leading whitespace is dropped
  std::string held_;
};

// True if `prompt` ends with "<think>" (trailing whitespace ignored): the model answers inside
// an open think block.
bool PromptOpensThinking(std::string_view prompt);

}  // namespace gyre::serve
