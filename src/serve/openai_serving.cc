// Generation endpoints. Sections: responses; GenerationRun (one request's life on its strand) and
// its engine sink; OpenAiServing (prompt building, validation, submit).
#include "serve/openai_serving.h"

#include <algorithm>
#include <ctime>
#include <random>

#include "model/config.h"
#include "serve/openai_output.h"
#include "serve/responses_output.h"
#include "serve/responses_protocol.h"
#include "serve/tokenization.h"
#include "structured/regex.h"

namespace gyre::serve {

// ---- responses --------------------------------------------------------------------------------

void RespondError(HttpExchange& ex, const ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = e.Body();
  if (e.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
  ex.Respond(std::move(r));
}

void RespondJson(HttpExchange& ex, const Json& body, int status) {
  HttpResponse r;
  r.status = status;
  r.body = DumpJson(body);
  ex.Respond(std::move(r));
}

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---- GenerationRun ----------------------------------------------------------------------------

class RunSink;

// One request after a successful Submit: n choices (n > 1: one engine request each), answered
// together. Every method runs on the exchange's strand.
class GenerationRun : public std::enable_shared_from_this<GenerationRun> {
 public:
  struct Setup {
    bool chat = true;
    bool stream = false;
    bool include_usage = false;
    int64_t n = 1;  // choices (1 for /v1/responses)
    ResponseMeta meta;
    int64_t prompt_tokens = 0;
    Clock::time_point arrival;
    OutputOptions output;
    std::string echo;  // sent before the generated text (of every choice)
    ChatParseOptions parse;  // chat: what the answer is parsed for
    std::shared_ptr<RequestRecord> record;  // may be null
    // /v1/responses: the answer in the Responses shapes (chat is true); null otherwise.
    std::shared_ptr<ResponsesOutput> responses;
    // n > 1 with prefix caching: the engine parameters of choices 1..n-1, submitted once choice 0
    // has its first token (its prompt blocks are cached by then, so theirs are hits). Empty: every
    // choice was submitted at once.
    std::vector<RequestParams> later;
  };

  GenerationRun(const ServingConfig& cfg, std::shared_ptr<HttpExchange> ex, Setup s)
      : cfg_(cfg), ex_(std::move(ex)), s_(std::move(s)) {
    for (int64_t i = 0; i < s_.n; ++i) choices_.push_back(std::make_unique<Choice>(*cfg.tokenizer, s_.output, s_.parse));
  }

  // Called right after the choices' Submits succeeded (ids[i]: choice i), still inside the
  // handler (so before any event).
  void Begin(const std::vector<RequestId>& ids) {
    for (size_t i = 0; i < ids.size(); ++i) {
      choices_[i]->id = ids[i];
      choices_[i]->submitted = true;
    }
    std::weak_ptr<GenerationRun> weak = weak_from_this();
    ex_->OnAbort([weak] {
      if (auto self = weak.lock()) self->OnClientGone();
    });
    if (!s_.stream) return;
    ex_->StartStream(200, "text/event-stream", {{"X-Request-Id", s_.meta.id}});
    if (s_.responses) {
      ex_->Write(s_.responses->Start());
      return;
    }
    for (int64_t c = 0; c < s_.n; ++c) {
      if (s_.chat) {
        Write(ChatChunk(s_.meta, Json{{"role", "assistant"}, {"content", ""}}, nullptr, "", s_.include_usage, c));
      }
      if (s_.echo.empty()) continue;
      if (s_.chat) {
        Write(ChatChunk(s_.meta, Json{{"content", s_.echo}}, nullptr, "", s_.include_usage, c));
      } else {
        SendDelta(*choices_[c], c, TextOutput::Delta{s_.echo, Json(), false});
      }
    }
  }

  // The request was answered with an error before Begin: events of choices already submitted
  // are dropped.
  void Abandon() { done_ = true; }

  void OnToken(int64_t c, const TokenEvent& ev) {
    Choice& ch = *choices_[c];
    if (done_ || ch.done) return;
    const auto now = Clock::now();
    if (!first_token_seen_) {
      first_token_seen_ = true;
      cfg_.metrics->ObserveTtft(Seconds(now - s_.arrival));
    } else if (ch.num_events > 0) {
      cfg_.metrics->ObserveItl(Seconds(now - ch.last_token));
    }
    ++ch.num_events;
    ch.last_token = now;
    if (c == 0) SubmitLater();
    if (done_) return;  // a later choice was refused
    TextOutput::Delta d = ch.out.OnToken(ev);
    SendDelta(ch, c, d);
    if (d.stopped) {
      cfg_.engine->Cancel(ch.id);  // the engine's kCancelled finish is ignored (ch.done)
      Complete(c, "stop");
    }
  }

  void OnFinish(int64_t c, FinishReason reason, const Status& status, const Usage& usage) {
    cfg_.metrics->ObserveEngineFinish(usage);  // also after a client left or a stop string ended it
    Choice& ch = *choices_[c];
    if (done_ || ch.done) return;
    if (reason == FinishReason::kError) {
      Fail(status);
      return;
    }
    if (c == 0) SubmitLater();  // (choice 0 ended without a token: cancelled)
    if (done_) return;
    TextOutput::Delta d = ch.out.Finish();
    SendDelta(ch, c, d);
    switch (reason) {
      case FinishReason::kStop: Complete(c, "stop"); break;
      case FinishReason::kLength: Complete(c, d.stopped ? "stop" : "length"); break;
      default: Complete(c, "abort"); break;  // cancelled by the server (shutdown)
    }
  }

 private:
  // One choice's output: its detokenizer and stop matcher, its parse, its engine request.
  struct Choice {
    Choice(const Tokenizer& tok, const OutputOptions& o, const ChatParseOptions& p) : out(tok, o), parser(p) {}
    TextOutput out;
    ChatOutputParser parser;
    std::vector<std::string> call_ids;  // of the tool calls so far, in order
    RequestId id = 0;
    bool submitted = false;  // to the engine (id is valid)
    bool done = false;
    std::string finish_reason;  // once done
    int64_t num_events = 0;
    Clock::time_point last_token;
  };

  void OnClientGone() {
    if (done_) return;
    done_ = true;
    RecordTokens();
    for (auto& ch : choices_)
      if (ch->submitted && !ch->done) cfg_.engine->Cancel(ch->id);
    cfg_.metrics->CountFinished("abort");
    cfg_.metrics->ObserveE2e(Seconds(Clock::now() - s_.arrival));
  }

  void Write(const Json& chunk) { ex_->Write(SseData(chunk)); }

  // Chat: parses the text (in both modes: tool call ids are given as calls close); a stream sends
  // what it released. Completions: streams the text.
  void SendDelta(Choice& ch, int64_t c, const TextOutput::Delta& d) {
    const bool has_lp = !d.logprobs.is_null();
    if (s_.chat) {
      SendParsed(ch, c, ch.parser.Push(d.text), d.logprobs);
    } else if (s_.stream && (!d.text.empty() || has_lp)) {
      Write(CompletionChunk(s_.meta, d.text, has_lp ? d.logprobs : Json(nullptr), "", s_.include_usage, c));
    }
  }

  // One chunk per reasoning text, content text and tool call, in order; `logprobs` (may be
  // null) go with the first (a chunk with empty content carries them when nothing else does).
  void SendParsed(Choice& ch, int64_t c, ChatOutputParser::Parsed p, Json logprobs) {
    if (s_.responses) {
      std::string events = s_.responses->Push(p);
      if (s_.stream && !events.empty()) ex_->Write(std::move(events));
      return;
    }
    std::vector<Json> deltas;
    if (!p.reasoning.empty()) deltas.push_back(Json{{"reasoning_content", std::move(p.reasoning)}});
    for (ToolParseEvent& e : p.events) {
      if (!e.is_call) {
        deltas.push_back(Json{{"content", std::move(e.content)}});
        continue;
      }
      ch.call_ids.push_back(NewResponseId("call_"));
      Json entry = {{"index", ch.call_ids.size() - 1}};
      entry.update(ToolCallJson(ch.call_ids.back(), e.call.name, e.call.arguments));
      deltas.push_back(Json{{"tool_calls", Json::array({std::move(entry)})}});
    }
    if (!s_.stream) return;
    if (deltas.empty() && !logprobs.is_null()) deltas.push_back(Json{{"content", ""}});
    for (size_t i = 0; i < deltas.size(); ++i) {
      Write(ChatChunk(s_.meta, std::move(deltas[i]), i == 0 ? std::move(logprobs) : Json(nullptr), "",
                      s_.include_usage, c));
    }
  }

  // A non-streamed chat answer's message.
  Json Message(const Choice& ch) const {
    Json calls = Json::array();
    for (size_t i = 0; i < ch.call_ids.size(); ++i) {
      const ParsedToolCall& c = ch.parser.calls()[i];
      calls.push_back(ToolCallJson(ch.call_ids[i], c.name, c.arguments));
    }
    return AssistantMessage(s_.echo + ch.parser.content(), ch.parser.reasoning(), std::move(calls));
  }

  int64_t CompletionTokens() const {
    int64_t n = 0;
    for (const auto& ch : choices_) n += ch->out.num_tokens();
    return n;
  }

  // Before the response completes: the access log reads the record then.
  void RecordTokens() {
    if (s_.record) s_.record->SetTokens(s_.prompt_tokens, CompletionTokens());
  }

  // Choice `c` is done; the answer completes with the last choice.
  void Complete(int64_t c, std::string_view engine_reason) {
    Choice& ch = *choices_[c];
    ch.done = true;
    if (s_.chat) SendParsed(ch, c, ch.parser.Finish(), nullptr);
    // OpenAI: an answer that ends in tool calls finishes with "tool_calls" (a cut one with "length").
    const bool calls = !ch.call_ids.empty() || (s_.responses && s_.responses->has_calls());
    ch.finish_reason = std::string(calls && engine_reason == "stop" ? "tool_calls" : engine_reason);
    if (s_.stream && !s_.responses) {
      if (s_.chat) {
        Write(ChatChunk(s_.meta, Json::object(), nullptr, ch.finish_reason, s_.include_usage, c));
      } else {
        Write(CompletionChunk(s_.meta, "", nullptr, ch.finish_reason, s_.include_usage, c));
      }
    }
    for (const auto& other : choices_)
      if (!other->done) return;
    done_ = true;
    RecordTokens();
    const int64_t completion = CompletionTokens();
    if (s_.responses) {
      std::string events = s_.responses->Finish(ch.finish_reason, s_.prompt_tokens, completion);
      if (s_.stream) {
        ex_->Write(std::move(events));
        ex_->EndStream();
      } else {
        RespondJson(*ex_, s_.responses->Response());
      }
    } else if (s_.stream) {
      if (s_.include_usage) {
        Write(s_.chat ? ChatUsageChunk(s_.meta, s_.prompt_tokens, completion)
                      : CompletionUsageChunk(s_.meta, s_.prompt_tokens, completion));
      }
      ex_->Write(std::string(kSseDone));
      ex_->EndStream();
    } else {
      const Choice& first = *choices_[0];
      Json j = s_.chat ? ChatResponse(s_.meta, Message(first), first.out.logprobs(), first.finish_reason,
                                      s_.prompt_tokens, completion)
                       : CompletionResponse(s_.meta, s_.echo + first.out.text(), first.out.logprobs(),
                                            first.finish_reason, s_.prompt_tokens, completion);
      for (int64_t i = 1; i < s_.n; ++i) {
        const Choice& o = *choices_[i];
        j["choices"].push_back(s_.chat ? ChatChoice(i, Message(o), o.out.logprobs(), o.finish_reason)
                                       : CompletionChoice(i, s_.echo + o.out.text(), o.out.logprobs(), o.finish_reason));
      }
      RespondJson(*ex_, j);
    }
    cfg_.metrics->CountFinished(choices_[0]->finish_reason == "tool_calls" ? "stop" : choices_[0]->finish_reason);
    cfg_.metrics->ObserveE2e(Seconds(Clock::now() - s_.arrival));
  }

  // An engine error in any choice fails the whole answer (the other choices are cancelled).
  void Fail(const Status& status) {
    done_ = true;
    RecordTokens();
    for (auto& ch : choices_)
      if (ch->submitted && !ch->done) cfg_.engine->Cancel(ch->id);
    ApiError e = ApiError::FromStatus(status);
    if (e.status < 500) e = ApiError::FromStatus(Status::Internal(status.message()));
    e.message = "generation failed: " + e.message;
    if (s_.responses && s_.stream) {
      ex_->Write(s_.responses->Fail(e.message));
      ex_->EndStream();
    } else if (s_.stream) {
      ex_->Write(SseData(e.ToJson()));
      ex_->Write(std::string(kSseDone));
      ex_->EndStream();
    } else {
      RespondError(*ex_, e);
    }
    cfg_.metrics->CountFinished("error");
    cfg_.metrics->ObserveE2e(Seconds(Clock::now() - s_.arrival));
  }

  // Submits Setup::later (once); a refused one fails the answer.
  void SubmitLater();

  const ServingConfig& cfg_;
  const std::shared_ptr<HttpExchange> ex_;
  Setup s_;  // (`later` is moved out by SubmitLater)
  std::vector<std::unique_ptr<Choice>> choices_;  // index = choice index
  bool done_ = false;  // the answer is complete, failed, or the client left
  bool first_token_seen_ = false;
};

// Engine thread → strand: never blocks, never touches the run's state directly. One per choice.
class RunSink final : public RequestSink {
 public:
  RunSink(std::shared_ptr<GenerationRun> run, std::shared_ptr<HttpExchange> ex, int64_t choice)
      : run_(std::move(run)), ex_(std::move(ex)), choice_(choice) {}
  void OnToken(const TokenEvent& ev) override {
    ex_->Post([run = run_, c = choice_, ev] { run->OnToken(c, ev); });
  }
  void OnFinish(FinishReason reason, const Status& status, const Usage& usage) override {
    ex_->Post([run = run_, c = choice_, reason, status, usage] { run->OnFinish(c, reason, status, usage); });
  }

 private:
  const std::shared_ptr<GenerationRun> run_;
  const std::shared_ptr<HttpExchange> ex_;
  const int64_t choice_;
};

void GenerationRun::SubmitLater() {
  std::vector<RequestParams> later = std::move(s_.later);
  s_.later.clear();
  for (size_t k = 0; k < later.size() && !done_; ++k) {
    const int64_t c = static_cast<int64_t>(k) + 1;
    auto id = cfg_.engine->Submit(std::move(later[k]), std::make_shared<RunSink>(shared_from_this(), ex_, c));
    if (!id.ok()) {
      Fail(id.error());
      return;
    }
    choices_[c]->id = *id;
    choices_[c]->submitted = true;
  }
}

uint64_t RandomSeed() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

}  // namespace

// ---- OpenAiServing ----------------------------------------------------------------------------

OpenAiServing::OpenAiServing(ServingConfig config) : cfg_(std::move(config)) {}

namespace {
// Image parts are taken by /v1/chat/completions only.
Status NoImages(const ChatRequest& r, const char* where) {
  if (r.images.empty()) return Status::Ok();
  return FieldError(r.images[0].field, std::string("image inputs are not supported by ") + where +
                                           " (send them to /v1/chat/completions)");
}
}  // namespace

Result<std::vector<int32_t>> OpenAiServing::ChatPromptIds(const ChatRequest& r) const {
  GYRE_ASSIGN_OR_RETURN(std::string text, ChatPromptText(r));
  if (r.images.empty()) return TextPromptIds(text, r.gen.add_special_tokens, "messages");
  // The ids a chat request with these images would run: each image's placeholder expanded to its
  // token count (the tower does not run).
  GYRE_ASSIGN_OR_RETURN(const std::vector<std::vector<uint8_t>> bytes, ImageBytes(r));
  std::vector<EncodedImage> counted;
  for (size_t i = 0; i < bytes.size(); ++i) {
    GYRE_ASSIGN_OR_RETURN(const int64_t n, ImageTokenCount(*cfg_.images, bytes[i], r.images[i].field));
    counted.push_back(EncodedImage{n, {}});
  }
  GYRE_ASSIGN_OR_RETURN(ImagePrompt p, ExpandImages(r, text, counted));
  return std::move(p.ids);
}

Result<std::vector<std::vector<uint8_t>>> OpenAiServing::ImageBytes(const ChatRequest& r) const {
  if (!cfg_.images) {
    return FieldError(r.images[0].field, "this server does not accept images: " +
                                             (cfg_.images_refused_reason.empty() ? std::string("no vision tower")
                                                                                 : cfg_.images_refused_reason));
  }
  const ImageInputOptions& o = cfg_.images->options;
  if (static_cast<int64_t>(r.images.size()) > o.max_images)
    return FieldError(r.images[o.max_images].field, "at most " + std::to_string(o.max_images) + " images per request");
  std::vector<std::vector<uint8_t>> bytes;
  for (const ImageInput& in : r.images) {
    GYRE_ASSIGN_OR_RETURN(std::vector<uint8_t> b, LoadImageUrl(in.url, in.field, o));
    bytes.push_back(std::move(b));
  }
  return bytes;
}

Result<ImagePrompt> OpenAiServing::ExpandImages(const ChatRequest& r, const std::string& text,
                                                const std::vector<EncodedImage>& images) const {
  const bool bos = r.gen.add_special_tokens;
  return BuildImagePrompt(text, images, cfg_.images->config, [&](const std::string& seg, bool first) {
    return EncodeText(seg, first && bos, "messages");
  });
}

Result<std::string> OpenAiServing::ChatPromptText(const ChatRequest& r) const {
  if (!cfg_.render_chat) return Status::Internal("the server has no chat template");
  Json ctx = Json::object();
  ctx["messages"] = r.messages;
  if (!r.tools.is_null()) ctx["tools"] = r.tools;
  ctx["add_generation_prompt"] = r.add_generation_prompt;  // false with continue_final_message
  const TokenizerConfig& tc = cfg_.tokenizer_config;
  ctx["bos_token"] = tc.bos_token ? Json(*tc.bos_token) : Json("");
  ctx["eos_token"] = tc.eos_token ? Json(*tc.eos_token) : Json("");
  for (const auto& [k, v] : r.chat_template_kwargs.items()) ctx[k] = v;  // reserved keys were refused
  auto text = cfg_.render_chat(ctx);
  if (!text.ok()) return Status::InvalidArgument("the chat template failed: " + text.error().message());
  if (r.continue_final_message) {
    GYRE_ASSIGN_OR_RETURN(*text, CutAfterFinalMessage(*text, r.messages.back()["content"].get<std::string>()));
  }
  return std::move(*text);
}

ChatParseOptions ChatParseOptionsFor(const ChatRequest& r, std::string_view prompt) {
  ChatParseOptions o;
  // The template's thinking switch: with enable_thinking false there is no think block to split.
  const Json* thinking = r.chat_template_kwargs.contains("enable_thinking") ? &r.chat_template_kwargs["enable_thinking"]
                                                                            : nullptr;
  o.split_reasoning = !(thinking && thinking->is_boolean() && !thinking->get<bool>());
  o.reasoning_starts_inside = o.split_reasoning && PromptOpensThinking(prompt);
  // Tools offered in GLM's markup (its templates describe <arg_key>): calls come back in it.
  o.parse_tool_calls = r.tools.is_array() && !r.tools.empty() && prompt.find("<arg_key>") != std::string_view::npos;
  if (o.parse_tool_calls) o.tools = r.tools;
  return o;
}

// Forced calls (tool_choice "required" or named) are constrained to GLM's markup: the template
// must offer the tools in it, or the model would be made to write a format it was not shown.
Status CheckForcedToolMarkup(const ChatRequest& r, const ChatParseOptions& parse) {
  if (!r.forced_tool || parse.parse_tool_calls) return Status::Ok();
  return FieldError("tool_choice",
                    "'required' and named functions force calls in GLM's tool-call markup (<tool_call>, "
                    "<arg_key>), and this model's chat template does not offer tools in it");
}

Result<ImagePrompt> OpenAiServing::ChatImagePrompt(const ChatRequest& r, const std::string& text,
                                                   const DisaggTicket* ticket) const {
  GYRE_ASSIGN_OR_RETURN(const std::vector<std::vector<uint8_t>> bytes, ImageBytes(r));
  const bool from_encoder = ticket && ticket->images_id != 0 && ticket->images_to.empty();
  if ((from_encoder || (ticket && !ticket->images_to.empty())) && !cfg_.disagg)
    return Status::InvalidArgument("X-Gyre-Images-Id / X-Gyre-Images-To are for disaggregated instances "
                                   "(gyre serve --role encode|prefill|decode)");
  std::vector<EncodedImage> encoded;
  if (from_encoder) {
    GYRE_ASSIGN_OR_RETURN(encoded, cfg_.disagg->TakeImages(ticket->images_id, bytes));
  } else {
    for (size_t i = 0; i < bytes.size(); ++i) {
      GYRE_ASSIGN_OR_RETURN(EncodedImage e, EncodeImage(*cfg_.images, bytes[i], r.images[i].field));
      encoded.push_back(std::move(e));
    }
  }
  if (ticket && !ticket->images_to.empty())
    GYRE_RETURN_IF_ERROR(cfg_.disagg->SendImages(ticket->images_id, ticket->images_to, bytes, encoded));
  return ExpandImages(r, text, encoded);
}

Result<std::vector<int32_t>> OpenAiServing::CompletionPromptIds(const CompletionRequest& r) const {
  if (r.prompt_is_ids) return r.prompt_ids;
  return TextPromptIds(r.prompt_text, r.gen.add_special_tokens, "prompt");
}

Result<std::vector<int32_t>> OpenAiServing::TextPromptIds(const std::string& text, bool add_bos,
                                                          const char* field) const {
  GYRE_ASSIGN_OR_RETURN(std::vector<int32_t> out, EncodeText(text, add_bos, field));
  if (out.empty()) return FieldError(field, "tokenizes to nothing");
  return out;
}

Result<std::vector<int32_t>> OpenAiServing::EncodeText(const std::string& text, bool add_bos,
                                                       const char* field) const {
  auto ids = cfg_.tokenizer->Encode(text, /*parse_special=*/true);
  if (!ids.ok()) return FieldError(field, "cannot be tokenized: " + ids.error().message());
  std::vector<int32_t> out;
  const TokenizerConfig& tc = cfg_.tokenizer_config;
  if (add_bos && tc.add_bos_token && tc.bos_token) {
    if (auto bos = cfg_.tokenizer->TokenToId(*tc.bos_token)) out.push_back(*bos);
  }
  out.insert(out.end(), ids->begin(), ids->end());
  return out;
}

Status OpenAiServing::CheckModel(const std::string& model) const {
  if (!model.empty() && model != cfg_.served_model_name) return ModelNotFound(model);
  return Status::Ok();
}

Result<Json> OpenAiServing::Tokenize(std::string_view body) const {
  GYRE_ASSIGN_OR_RETURN(TokenizeRequest r, ParseTokenizeRequest(body));
  GYRE_RETURN_IF_ERROR(CheckModel(r.model));
  std::vector<int32_t> ids;
  if (r.chat) {
    GYRE_ASSIGN_OR_RETURN(ids, ChatPromptIds(r.chat_request));
  } else {
    GYRE_ASSIGN_OR_RETURN(ids, EncodeText(r.prompt, r.add_special_tokens, "prompt"));
  }
  return TokenizeResponse(ids, cfg_.engine->Stats().max_model_len);
}

Result<Json> OpenAiServing::Detokenize(std::string_view body) const {
  GYRE_ASSIGN_OR_RETURN(DetokenizeRequest r, ParseDetokenizeRequest(body, cfg_.tokenizer->vocab_size()));
  GYRE_RETURN_IF_ERROR(CheckModel(r.model));
  auto text = cfg_.tokenizer->Decode(r.tokens);
  if (!text.ok()) return FieldError("tokens", text.error().message());
  return DetokenizeResponse(*text);
}

Result<std::string> CutAfterFinalMessage(const std::string& rendered, const std::string& content) {
  constexpr const char* kSpace = " \t\n\r\f\v";
  const size_t first = content.find_first_not_of(kSpace);
  const size_t last = content.find_last_not_of(kSpace);
  const std::string stripped = first == std::string::npos ? "" : content.substr(first, last - first + 1);
  const size_t at = rendered.rfind(stripped);
  if (at == std::string::npos) {
    return FieldError("continue_final_message",
                      "cannot be honoured: the chat template does not render the final message's text as sent");
  }
  const std::string lstripped = first == std::string::npos ? "" : content.substr(first);
  // As transformers: keep the message's trailing whitespace if the template kept it.
  const bool kept = rendered.compare(at, lstripped.size(), content) == 0;
  return rendered.substr(0, at + (kept ? lstripped.size() : stripped.size()));
}

std::shared_ptr<const structured::TokenTrie> OpenAiServing::Trie() const {
  std::call_once(trie_once_, [&] {
    trie_ = structured::TokenTrie::FromTokenizer(*cfg_.tokenizer, cfg_.engine->config().vocab_size,
                                                 cfg_.eos_token_ids);
  });
  return trie_;
}

Result<std::shared_ptr<structured::Grammar>> OpenAiServing::CompiledGrammar(
    const structured::ConstraintSpec& spec) const {
  GYRE_ASSIGN_OR_RETURN(std::string re, structured::SpecRegex(spec));
  {
    std::lock_guard<std::mutex> l(grammar_mu_);
    for (size_t i = 0; i < grammars_.size(); ++i) {
      if (grammars_[i].first != re) continue;
      std::rotate(grammars_.begin(), grammars_.begin() + static_cast<std::ptrdiff_t>(i),
                  grammars_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return grammars_.front().second;
    }
  }
  GYRE_ASSIGN_OR_RETURN(structured::ByteDfa dfa, structured::CompileRegex(re));  // outside the lock
  auto g = std::make_shared<structured::Grammar>(std::move(dfa), Trie());
  std::lock_guard<std::mutex> l(grammar_mu_);
  grammars_.insert(grammars_.begin(), {re, g});
  if (grammars_.size() > kGrammarCacheSize) grammars_.pop_back();
  return g;
}

Result<RequestParams> OpenAiServing::BuildParams(bool chat, const GenerationRequest& g,
                                                 std::vector<int32_t> prompt) const {
  RequestParams p;
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const int64_t max_len = cfg_.engine->Stats().max_model_len;  // 0 before the engine published
  const char* where = chat ? "messages" : "prompt";
  auto too_long = [&](int64_t completion) {
    return Status::InvalidArgument(
        "This model's maximum context length is " + std::to_string(max_len) + " tokens. However, you requested " +
        std::to_string(n_prompt + completion) + " tokens (" + std::to_string(n_prompt) + " in the " + where + ", " +
        std::to_string(completion) + " in the completion). Please reduce the length of the " + where +
        " or completion.");
  };
  if (g.max_tokens) {
    p.max_tokens = *g.max_tokens;
    if (max_len > 0 && n_prompt + p.max_tokens > max_len) return too_long(p.max_tokens);
  } else if (max_len > 0) {
    if (n_prompt >= max_len) return too_long(1);
    const int64_t room = max_len - n_prompt;
    p.max_tokens = chat ? room : std::min(cfg_.default_completion_max_tokens, room);
  } else {
    p.max_tokens = chat ? 4096 : cfg_.default_completion_max_tokens;
  }
  p.prompt = std::move(prompt);
  p.sampling.temperature = g.temperature;
  p.sampling.top_p = g.top_p;
  p.sampling.top_k = g.top_k;
  p.sampling.min_p = g.min_p;
  p.sampling.seed = g.seed ? *g.seed : RandomSeed();
  p.sampling.presence_penalty = g.presence_penalty;
  p.sampling.frequency_penalty = g.frequency_penalty;
  p.sampling.repetition_penalty = g.repetition_penalty;
  p.sampling.min_tokens = g.min_tokens;
  if (g.min_tokens > p.max_tokens) {
    return FieldError("min_tokens", "must be <= the completion's max_tokens (" + std::to_string(p.max_tokens) +
                                        "), got " + std::to_string(g.min_tokens));
  }
  const int64_t vocab = cfg_.engine->config().vocab_size;
  for (const ops::LogitBias& b : g.logit_bias) {
    if (b.id >= vocab) {
      return FieldError("logit_bias", "token id " + std::to_string(b.id) + " is outside the vocabulary [0, " +
                                          std::to_string(vocab) + ")");
    }
  }
  p.logit_bias = g.logit_bias;
  p.ignore_eos = g.ignore_eos;
  p.top_logprobs = g.logprobs ? g.top_logprobs : 0;
  p.stop_ids = g.stop_token_ids;
  // A stop sequence that is exactly one token also stops in the engine (needed for special tokens,
  // whose text is skipped; harmless for others, which the text matcher drops too).
  for (const std::string& s : g.stop) {
    auto ids = cfg_.tokenizer->Encode(s, /*parse_special=*/true);
    if (ids.ok() && ids->size() == 1) p.stop_ids.push_back((*ids)[0]);
  }
  if (g.constraint) {
    auto grammar = CompiledGrammar(*g.constraint);
    if (!grammar.ok()) return FieldError(g.constraint_field, grammar.status().message());
    p.constraint = std::make_shared<structured::GrammarConstraint>(*grammar);
  }
  return p;
}

void OpenAiServing::Submit(Prepared request, std::shared_ptr<HttpExchange> ex, Clock::time_point arrival,
                           std::shared_ptr<RequestRecord> record) const {
  const bool chat = request.chat;
  const GenerationRequest& g = request.gen;
  std::vector<int32_t>& prompt = request.prompt;
  if (Status m = CheckModel(g.model); !m.ok()) {
    RespondError(*ex, ApiError::FromStatus(m));
    return;
  }
  if (request.ticket && !request.ticket->images_to.empty()) {
    // An encode request: the rows went out in Prepare; nothing runs here.
    RespondJson(*ex, Json{{"object", "gyre.images_sent"},
                          {"images", request.images_sent},
                          {"image_tokens", request.embeds ? static_cast<int64_t>(request.embeds->positions.size()) : 0},
                          {"sent_to", request.ticket->images_to}});
    return;
  }
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const bool responses = !request.responses.is_null();
  const char* prompt_field = responses ? "input" : chat ? "messages" : "prompt";
  auto params = BuildParams(chat, g, std::move(prompt));
  if (params.ok()) params->prompt_embeds = std::move(request.embeds);
  if (!params.ok()) {
    ApiError e = ApiError::FromStatus(params.error());
    if (e.code == "context_length_exceeded") e.param = prompt_field;
    RespondError(*ex, e);
    return;
  }
  GenerationRun::Setup s;
  s.chat = chat;
  s.stream = g.stream;
  s.include_usage = g.include_usage;
  s.n = responses ? 1 : g.n;
  const char* prefix = responses ? "resp_" : chat ? "chatcmpl-" : "cmpl-";
  s.meta = ResponseMeta{g.request_id.empty() ? NewResponseId(prefix) : prefix + g.request_id,
                        static_cast<int64_t>(std::time(nullptr)), cfg_.served_model_name};
  s.prompt_tokens = n_prompt;
  s.arrival = arrival;
  s.output = OutputOptions{.chat = chat,
                           .logprobs = g.logprobs,
                           .top_logprobs = g.top_logprobs,
                           .skip_special = g.skip_special_tokens,
                           .stop = g.stop,
                           .include_stop_str = g.include_stop_str,
                           .stop_token_ids = g.stop_token_ids,
                           .min_tokens = g.min_tokens};
  if (!g.ignore_eos) {
    s.output.stop_token_ids.insert(s.output.stop_token_ids.end(), cfg_.eos_token_ids.begin(), cfg_.eos_token_ids.end());
  }
  s.echo = std::move(request.echo);
  s.parse = std::move(request.parse);
  if (g.constraint) {  // constrained from the first token: never reasoning; markup only when calls are forced
    s.parse.split_reasoning = false;
    s.parse.reasoning_starts_inside = false;
    s.parse.parse_tool_calls = g.constraint_field == "tool_choice";
  }
  if (s.parse.split_reasoning || s.parse.parse_tool_calls) s.output.keep_special = ChatMarkupTokens();
  if (responses) s.responses = std::make_shared<ResponsesOutput>(s.meta, std::move(request.responses));
  if (record) record->SetId(s.meta.id);
  s.record = std::move(record);
  // n choices: one engine request each, choice i seeded with seed + i (a random seed each without
  // one). With prefix caching, choices 1..n-1 are submitted when choice 0 has its first token, so
  // the prompt's full blocks are prefilled once and hit by the others; without it every choice is
  // submitted now and prefills the prompt. All or nothing: a refused Submit now cancels the
  // choices before it (a refused later one fails the answer).
  const int64_t n = s.n;
  std::vector<RequestParams> choice_params;
  for (int64_t i = 0; i < n; ++i) {
    RequestParams pi = i + 1 < n ? *params : std::move(*params);
    if (i > 0) pi.sampling.seed = g.seed ? *g.seed + static_cast<uint64_t>(i) : RandomSeed();
    if (i > 0 && g.constraint) {  // a constraint is a per-request state: each choice gets its own
      auto grammar = CompiledGrammar(*g.constraint);  // (compiled for choice 0: cached)
      if (grammar.ok()) pi.constraint = std::make_shared<structured::GrammarConstraint>(*grammar);
    }
    choice_params.push_back(std::move(pi));
  }
  if (request.ticket &&
      (n != 1 || !cfg_.disagg || (choice_params[0].prompt_embeds && request.ticket->images_id == 0))) {
    // Images need an encoder that sends their rows to both instances (docs/vision.md "Encode role"):
    // the decode instance needs them too, to recompute a preempted prompt.
    RespondError(*ex, ApiError::FromStatus(Status::InvalidArgument(
                          !cfg_.disagg ? "this instance is not a disaggregated one (gyre serve --role prefill|decode)"
                          : n != 1     ? "n > 1 is not supported with disaggregated prefill/decode"
                                       : "image inputs with disaggregated prefill/decode need an encode instance "
                                         "(gyre router --encode URL)")));
    return;
  }
  const bool stagger = n > 1 && cfg_.engine->Stats().prefix_caching;
  if (stagger) {
    s.later.assign(std::make_move_iterator(choice_params.begin() + 1), std::make_move_iterator(choice_params.end()));
    choice_params.resize(1);
  }
  auto run = std::make_shared<GenerationRun>(cfg_, ex, std::move(s));
  std::vector<RequestId> ids;
  for (size_t i = 0; i < choice_params.size(); ++i) {
    RequestParams& pi = choice_params[i];
    auto sink = std::make_shared<RunSink>(run, ex, static_cast<int64_t>(i));
    auto submitted = request.ticket ? cfg_.disagg->Submit(std::move(pi), std::move(sink), *request.ticket)
                                    : cfg_.engine->Submit(std::move(pi), std::move(sink));
    if (!submitted.ok()) {
      run->Abandon();  // the choices submitted before finish into nothing
      for (RequestId id : ids) cfg_.engine->Cancel(id);
      ApiError e = ApiError::FromStatus(submitted.error());
      if (e.code == "context_length_exceeded") e.param = prompt_field;
      RespondError(*ex, e);
      return;
    }
    ids.push_back(*submitted);
  }
  run->Begin(ids);
}

Result<OpenAiServing::Prepared> OpenAiServing::PrepareResponses(std::string_view body) const {
  GYRE_ASSIGN_OR_RETURN(ResponsesRequest r, ParseResponsesRequest(body));
  GYRE_RETURN_IF_ERROR(NoImages(r.chat, "/v1/responses"));
  GYRE_ASSIGN_OR_RETURN(const std::string text, ChatPromptText(r.chat));
  Prepared p;
  p.chat = true;
  GYRE_ASSIGN_OR_RETURN(p.prompt, TextPromptIds(text, r.chat.gen.add_special_tokens, "input"));
  p.parse = ChatParseOptionsFor(r.chat, text);
  GYRE_RETURN_IF_ERROR(CheckForcedToolMarkup(r.chat, p.parse));
  p.gen = std::move(r.chat.gen);
  p.responses = std::move(r.echo);
  return p;
}

Result<OpenAiServing::Prepared> OpenAiServing::Prepare(bool chat, std::string_view body,
                                                       const DisaggTicket* ticket) const {
  Prepared p;
  p.chat = chat;
  const bool encode_request = ticket && !ticket->images_to.empty();
  if (encode_request && (!chat || ticket->images_id == 0))
    return Status::InvalidArgument("X-Gyre-Images-To needs X-Gyre-Images-Id and a /v1/chat/completions request");
  if (chat) {
    GYRE_ASSIGN_OR_RETURN(ChatRequest r, ParseChatRequest(body));
    GYRE_ASSIGN_OR_RETURN(const std::string text, ChatPromptText(r));
    if (r.images.empty()) {
      if (encode_request) return Status::InvalidArgument("an encode request (X-Gyre-Images-To) has no images");
      GYRE_ASSIGN_OR_RETURN(p.prompt, TextPromptIds(text, r.gen.add_special_tokens, "messages"));
    } else {
      GYRE_ASSIGN_OR_RETURN(ImagePrompt ip, ChatImagePrompt(r, text, ticket));
      p.prompt = std::move(ip.ids);
      p.embeds = std::move(ip.embeds);
      if (encode_request) p.images_sent = static_cast<int64_t>(r.images.size());
    }
    p.parse = ChatParseOptionsFor(r, text);
    GYRE_RETURN_IF_ERROR(CheckForcedToolMarkup(r, p.parse));
    // vLLM's chat echo: the final message's content when it has the answer's role.
    const Json& last = r.messages.back();
    const Json content = last.value("content", Json());
    if (r.gen.echo && last["role"] == "assistant" && content.is_string()) p.echo = content;
    p.gen = std::move(r.gen);
  } else {
    GYRE_ASSIGN_OR_RETURN(CompletionRequest r, ParseCompletionRequest(body));
    GYRE_ASSIGN_OR_RETURN(p.prompt, CompletionPromptIds(r));
    if (r.gen.echo) {
      if (!r.prompt_is_ids) {
        p.echo = r.prompt_text;
      } else {
        auto text = cfg_.tokenizer->Decode(r.prompt_ids);
        if (!text.ok()) return FieldError("prompt", text.error().message());
        p.echo = std::move(*text);
      }
    }
    p.gen = std::move(r.gen);
  }
  return p;
}

}  // namespace gyre::serve
