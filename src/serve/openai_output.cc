#include "serve/openai_output.h"

#include <algorithm>
#include <cmath>

namespace gyre::serve {

// ---- StopMatcher ------------------------------------------------------------------------------

size_t PartialTagAtEnd(std::string_view text, std::string_view tag) {
  if (tag.empty()) return 0;
  for (size_t k = std::min(tag.size() - 1, text.size()); k > 0; --k) {
    if (text.substr(text.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t PartialTagWithSpaceAtEnd(std::string_view text, std::string_view tag) {
  size_t keep = PartialTagAtEnd(text, tag);
  while (keep < text.size() && IsAsciiSpace(text[text.size() - keep - 1])) ++keep;
  return keep;
}

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop)
    : stops_(std::move(stops)), include_stop_(include_stop) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopMatcher::Released StopMatcher::Push(std::string_view text, bool may_stop) {
  Released r;
  held_.append(text);
  if (stops_.empty()) {
    r.text.swap(held_);
    return r;
  }
  if (!may_stop) {
    unarmed_ = held_.size();
  } else {
    // Earliest full match among all stops that ends in armed text (the longest of those that
    // start there).
    size_t best = std::string::npos, best_len = 0;
    for (const std::string& s : stops_) {
      const size_t from = unarmed_ >= s.size() ? unarmed_ - s.size() + 1 : 0;
      const size_t at = held_.find(s, from);
      if (at < best || (at == best && at != std::string::npos && s.size() > best_len)) best = at, best_len = s.size();
    }
    unarmed_ = 0;
    if (best != std::string::npos) {
      r.text = held_.substr(0, include_stop_ ? best + best_len : best);
      held_.clear();
      stopped_ = true;
      r.stopped = true;
      return r;
    }
  }
  // Hold back the longest tail that is a proper prefix of a stop. It starts at a UTF-8 character
  // boundary because it equals the start of a (valid UTF-8) stop sequence.
  size_t keep = 0;
  for (const std::string& s : stops_) keep = std::max(keep, PartialTagAtEnd(held_, s));
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  unarmed_ = std::min(unarmed_, held_.size());
  return r;
}

std::string StopMatcher::Flush() {
  std::string out;
  out.swap(held_);
  return out;
}

// ---- UTF-8 ------------------------------------------------------------------------------------

std::string LossyUtf8(std::string_view b) {
  std::string out;
  out.reserve(b.size());
  size_t i = 0;
  while (i < b.size()) {
    const unsigned char c = static_cast<unsigned char>(b[i]);
    size_t len = 0;
    uint32_t min = 0;
    if (c < 0x80) len = 1;
    else if ((c & 0xE0) == 0xC0) len = 2, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, min = 0x10000;
    bool ok = len > 0 && i + len <= b.size();
    uint32_t cp = len == 1 ? c : (len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07);
    for (size_t k = 1; ok && k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(b[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (ok && len > 1 && (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
    if (ok) {
      out.append(b.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

// ---- TextOutput -------------------------------------------------------------------------------

TextOutput::TextOutput(const Tokenizer& tokenizer, OutputOptions options)
    : tok_(tokenizer),
      opts_(std::move(options)),
      decoder_(tokenizer, opts_.skip_special),
      matcher_(opts_.stop, opts_.include_stop_str) {
  if (opts_.logprobs) all_logprobs_ = EmptyLogprobs();
}

Json TextOutput::EmptyLogprobs() const {
  if (opts_.chat) return Json{{"content", Json::array()}};
  return Json{{"tokens", Json::array()}, {"token_logprobs", Json::array()}, {"top_logprobs", Json::array()},
              {"text_offset", Json::array()}};
}

std::string TextOutput::TokenText(int32_t id) const { return LossyUtf8(tok_.TokenBytes(id)); }

std::string TextOutput::Piece(int32_t id) {
  const auto& ids = opts_.stop_token_ids;
  // vLLM: the token a request stops on is not detokenized unless include_stop_str_in_output.
  if (!opts_.include_stop_str && std::find(ids.begin(), ids.end(), id) != ids.end()) return "";
  std::string piece = decoder_.Push(id);
  if (piece.empty() && opts_.skip_special && tok_.IsSpecial(id)) {
    const std::string bytes = tok_.TokenBytes(id);
    auto listed = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), bytes) != v.end(); };
    if (listed(opts_.stop) || listed(opts_.keep_special)) piece = bytes;
  }
  return piece;
}

namespace {
// JSON has no -inf: a logprob of -inf (probability 0) is reported as a very large negative number.
double FiniteLogprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

Json Bytes(const std::string& raw) {
  Json b = Json::array();
  for (unsigned char c : raw) b.push_back(static_cast<int>(c));
  return b;
}
}  // namespace

void TextOutput::AppendLogprobs(Json& into, const TokenEvent& ev, size_t text_offset) const {
  if (opts_.chat) {
    Json top = Json::array();
    for (const auto& [id, lp] : ev.top) {
      top.push_back({{"token", TokenText(id)}, {"logprob", FiniteLogprob(lp)}, {"bytes", Bytes(tok_.TokenBytes(id))}});
    }
    into["content"].push_back({{"token", TokenText(ev.id)},
                               {"logprob", FiniteLogprob(ev.logprob)},
                               {"bytes", Bytes(tok_.TokenBytes(ev.id))},
                               {"top_logprobs", std::move(top)}});
    return;
  }
  Json top = Json::object();
  for (const auto& [id, lp] : ev.top) {
    const std::string t = TokenText(id);
    if (!top.contains(t)) top[t] = FiniteLogprob(lp);
  }
  into["tokens"].push_back(TokenText(ev.id));
  into["token_logprobs"].push_back(FiniteLogprob(ev.logprob));
  into["top_logprobs"].push_back(opts_.top_logprobs > 0 ? std::move(top) : Json(nullptr));
  into["text_offset"].push_back(text_offset);
}

TextOutput::Delta TextOutput::OnToken(const TokenEvent& ev) {
  Delta d;
  ++num_tokens_;
  const size_t offset = decoded_bytes_;
  const std::string piece = Piece(ev.id);
  decoded_bytes_ += piece.size();
  if (opts_.logprobs) {
    d.logprobs = EmptyLogprobs();
    AppendLogprobs(d.logprobs, ev, offset);
    AppendLogprobs(all_logprobs_, ev, offset);
  }
  StopMatcher::Released r = matcher_.Push(piece, num_tokens_ >= opts_.min_tokens);
  d.text = std::move(r.text);
  d.stopped = r.stopped;
  text_ += d.text;
  return d;
}

TextOutput::Delta TextOutput::Finish() {
  Delta d;
  if (matcher_.stopped()) return d;
  StopMatcher::Released r = matcher_.Push(decoder_.Flush(), num_tokens_ >= opts_.min_tokens);
  d.text = std::move(r.text);
  if (!r.stopped) d.text += matcher_.Flush();
  d.stopped = r.stopped;
  text_ += d.text;
  return d;
}

// ---- ChatOutputParser -------------------------------------------------------------------------

std::vector<std::string> ChatMarkupTokens() {
  return {"<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
          "</arg_value>"};
}

ChatOutputParser::ChatOutputParser(const ChatParseOptions& options)
    : opts_(options), think_(options.reasoning_starts_inside), tools_(options.tools) {}

ChatOutputParser::Parsed ChatOutputParser::Route(ThinkSplitter::Split s, bool last) {
  Parsed p;
  p.reasoning = std::move(s.reasoning);
  reasoning_ += p.reasoning;
  if (opts_.parse_tool_calls) {
    p.events = tools_.Push(s.content);
    if (last) {
      for (ToolParseEvent& e : tools_.Finish()) p.events.push_back(std::move(e));
    }
  } else if (!s.content.empty()) {
    p.events.push_back(ToolParseEvent{.is_call = false, .content = std::move(s.content), .call = {}});
  }
  for (const ToolParseEvent& e : p.events) {
    if (e.is_call) calls_.push_back(e.call);
    else content_ += e.content;
  }
  return p;
}

ChatOutputParser::Parsed ChatOutputParser::Push(std::string_view text) {
  if (!opts_.split_reasoning) return Route(ThinkSplitter::Split{"", std::string(text)}, false);
  return Route(think_.Push(text), false);
}

ChatOutputParser::Parsed ChatOutputParser::Finish() {
  if (!opts_.split_reasoning) return Route(ThinkSplitter::Split{}, true);
  return Route(think_.Finish(), true);
}

}  // namespace gyre::serve
