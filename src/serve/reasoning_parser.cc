#include "serve/reasoning_parser.h"

#include <algorithm>

#include "serve/openai_output.h"

namespace gyre::serve {

namespace {
constexpr std::string_view kOpen = "<think>", kClose = "</think>";

size_t LeadingSpace(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && IsAsciiSpace(s[n])) ++n;
  return n;
}
}  // namespace

bool PromptOpensThinking(std::string_view prompt) {
  while (!prompt.empty() && IsAsciiSpace(prompt.back())) prompt.remove_suffix(1);
  return prompt.ends_with(kOpen);
}

ThinkSplitter::ThinkSplitter(bool starts_inside) : starts_inside_(starts_inside) {}

ThinkSplitter::Split ThinkSplitter::Push(std::string_view text) {
  Split out;
  held_.append(text);
  if (state_ == State::kMaybeOpen) {
    const std::string_view rest = std::string_view(held_).substr(LeadingSpace(held_));
    if (rest.starts_with(kOpen)) {
      held_.erase(0, held_.size() - rest.size() + kOpen.size());
      state_ = State::kReasoning;
    } else if (kOpen.starts_with(rest)) {
      return out;  // only whitespace, or the start of <think>, so far
    } else {
      state_ = starts_inside_ ? State::kReasoning : State::kContent;
    }
  }
  if (state_ == State::kReasoning) {
    if (!reasoning_started_) held_.erase(0, LeadingSpace(held_));
    const size_t at = held_.find(kClose);
    if (at == std::string::npos) {
      const size_t keep = PartialTagWithSpaceAtEnd(held_, kClose);
      out.reasoning = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      reasoning_started_ = reasoning_started_ || !out.reasoning.empty();
      return out;
    }
    size_t end = at;
    while (end > 0 && IsAsciiSpace(held_[end - 1])) --end;
    out.reasoning = held_.substr(0, end);
    held_.erase(0, at + kClose.size());
    state_ = State::kContent;
    skip_space_ = true;
  }
  if (skip_space_) {
    held_.erase(0, LeadingSpace(held_));
    skip_space_ = held_.empty();
  }
  out.content = std::move(held_);
  held_.clear();
  return out;
}

ThinkSplitter::Split ThinkSplitter::Finish() {
  Split out;
  if (state_ == State::kReasoning || (state_ == State::kMaybeOpen && starts_inside_)) {
    // No </think>: what is held (a cut-off tag, whitespace) is still reasoning.
    size_t end = held_.size();
    while (end > 0 && IsAsciiSpace(held_[end - 1])) --end;
    if (reasoning_started_ || end > 0) out.reasoning = held_.substr(0, end);
  } else {
    out.content = held_;  // kMaybeOpen: whitespace or a cut-off "<think"
  }
  held_.clear();
  return out;
}

}  // namespace gyre::serve
